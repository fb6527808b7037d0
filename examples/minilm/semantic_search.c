/*
 * The main job: the real all-MiniLM-L6-v2 sentence-embedding model sharded
 * over the ranks of the job (tensor parallelism: 12 attention heads split by
 * heads, MLPs by columns then rows, the vocabulary by rows), a small semantic
 * search over a handful of sentences, and two checks printed with it:
 *   - agreement with the unsharded model (rank 0 also loads it on its own),
 *   - agreement with sentence-transformers' embeddings of the same sentences
 *     (reference.txt, computed by sentence-transformers in Python).
 *
 *   oslo-run --nproc-per-node 2 semantic_search MODEL_DIR reference.txt
 *
 * Exits 0 when every embedding matches both references (cosine >= 0.9999).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "oslo.h"

#define MAX_SENT 32
#define MAX_LEN 4096

static int rank = 0;

static void check(oslo_status st, const char *what) {
  if (st != OSLO_OK) {
    fprintf(stderr, "[rank %d] %s: %s: %s\n", rank, what, oslo_status_string(st),
            oslo_last_error());
    exit(1);
  }
}

/* Sentences and sentence-transformers' embeddings from reference.txt. */
static int read_reference(const char *path, char sent[][MAX_LEN], float **emb, int *dim) {
  FILE *f = fopen(path, "r");
  if (!f) {
    perror(path);
    exit(1);
  }
  char line[MAX_LEN];
  int n = 0;
  do {
    if (!fgets(line, sizeof line, f)) exit(1);
  } while (line[0] == '#');
  if (sscanf(line, "%d %d", &n, dim) != 2 || n < 1 || n > MAX_SENT || *dim < 1) exit(1);
  *emb = malloc(sizeof(float) * (size_t)n * (size_t)*dim);
  for (int i = 0; i < n; ++i) {
    if (!fgets(sent[i], MAX_LEN, f)) exit(1);
    sent[i][strcspn(sent[i], "\n")] = 0;
    for (int k = 0; k < *dim; ++k)
      if (fscanf(f, "%f", &(*emb)[(size_t)i * (size_t)*dim + (size_t)k]) != 1) exit(1);
    fgets(line, sizeof line, f); /* rest of the line */
  }
  fclose(f);
  return n;
}

static double cosine(const float *a, const float *b, int n) {
  double d = 0, na = 0, nb = 0;
  for (int i = 0; i < n; ++i) {
    d += (double)a[i] * b[i];
    na += (double)a[i] * a[i];
    nb += (double)b[i] * b[i];
  }
  return d / sqrt(na * nb);
}

/* Tokenizes the sentences ([CLS] ... [SEP], right padded) and embeds them. */
static void embed(oslo_model *m, oslo_tokenizer *tok, char sent[][MAX_LEN], int n, int dim,
                  float *out) {
  if (n < 1 || n > MAX_SENT) exit(1);
  int64_t *ids[MAX_SENT];
  size_t len[MAX_SENT], longest = 1;
  for (int i = 0; i < n; ++i) {
    check(oslo_tokenizer_encode(tok, sent[i], strlen(sent[i]), 1, NULL, 0, &len[i]), "encode");
    ids[i] = malloc(sizeof(int64_t) * (len[i] + 1));
    check(oslo_tokenizer_encode(tok, sent[i], strlen(sent[i]), 1, ids[i], len[i], &len[i]),
          "encode");
    if (len[i] > longest) longest = len[i];
  }
  if (longest > MAX_LEN) exit(1);
  const size_t cells = (size_t)n * longest;
  int64_t *flat = calloc(cells, sizeof(int64_t));
  int64_t *mask = calloc(cells, sizeof(int64_t));
  for (int i = 0; i < n; ++i) {
    for (size_t t = 0; t < len[i]; ++t) {
      flat[(size_t)i * longest + t] = ids[i][t];
      mask[(size_t)i * longest + t] = 1;
    }
    free(ids[i]);
  }
  check(oslo_model_embed(m, flat, mask, n, (int64_t)longest, 1, out, (size_t)n * (size_t)dim),
        "embed");
  free(flat);
  free(mask);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s MODEL_DIR reference.txt\n", argv[0]);
    return 2;
  }
  static char sent[MAX_SENT][MAX_LEN];
  float *st = NULL;
  int dim = 0;
  const int n = read_reference(argv[2], sent, &st, &dim);

  /* One context over the job's ranks (oslo-run's environment): all of them
     form the tensor-parallel group. */
  const char *ws = getenv("WORLD_SIZE");
  char cfg[256];
  snprintf(cfg, sizeof cfg, "{\"tensor_parallel_size\": %d, \"timeout_seconds\": 120}",
           ws ? atoi(ws) : 1);
  oslo_context *ctx = NULL;
  check(oslo_context_create(ws ? cfg : NULL, &ctx), "context");
  int tp = 1;
  check(oslo_context_rank(ctx, OSLO_GROUP_WORLD, &rank), "rank");
  check(oslo_context_size(ctx, OSLO_GROUP_TENSOR, &tp), "size");

  oslo_model *model = NULL;
  check(oslo_model_load(ctx, argv[1], NULL, &model), "load");
  oslo_tokenizer *tok = NULL;
  check(oslo_tokenizer_load(argv[1], &tok), "tokenizer");
  oslo_model_info info;
  check(oslo_model_get_info(model, &info, NULL), "info");
  if (info.hidden_size != dim) {
    fprintf(stderr, "reference has %d values per sentence, the model %lld\n", dim,
            (long long)info.hidden_size);
    return 1;
  }
  float *e = malloc(sizeof(float) * (size_t)n * (size_t)dim);
  embed(model, tok, sent, n, dim, e);

  int ok = 1;
  if (rank == 0) {
    /* The unsharded model, on rank 0 alone (a context of its own). */
    char store[256], one[512];
    snprintf(store, sizeof store, "/tmp/oslo-semantic-search-%d", (int)getpid());
    snprintf(one, sizeof one, "{\"rank\": 0, \"world_size\": 1, \"init_method\": \"file://%s\"}",
             store);
    oslo_context *solo = NULL;
    check(oslo_context_create(one, &solo), "unsharded context");
    oslo_model *full = NULL;
    check(oslo_model_load(solo, argv[1], NULL, &full), "unsharded load");
    float *u = malloc(sizeof(float) * (size_t)n * (size_t)dim);
    embed(full, tok, sent, n, dim, u);
    oslo_model_destroy(full);
    oslo_context_destroy(solo);
    remove(store);

    printf("all-MiniLM-L6-v2 split over %d ranks (tensor parallel)\n\n", tp);
    printf("query: \"%s\"\n", sent[0]);
    int order[MAX_SENT];
    for (int i = 1; i < n; ++i) order[i - 1] = i;
    for (int i = 0; i < n - 1; ++i) /* rank the others by similarity */
      for (int j = i + 1; j < n - 1; ++j)
        if (cosine(e, e + order[j] * dim, dim) > cosine(e, e + order[i] * dim, dim)) {
          const int t = order[i];
          order[i] = order[j];
          order[j] = t;
        }
    for (int i = 0; i < n - 1; ++i)
      printf("  %.4f  \"%s\"\n", cosine(e, e + order[i] * dim, dim), sent[order[i]]);

    printf("\ncosine similarity (TP=%d)\n     ", tp);
    for (int j = 0; j < n; ++j) printf("  [%d] ", j);
    printf("\n");
    for (int i = 0; i < n; ++i) {
      printf("[%d] ", i);
      for (int j = 0; j < n; ++j) printf(" %5.2f ", cosine(e + i * dim, e + j * dim, dim));
      printf("  %.40s\n", sent[i]);
    }

    double worst_st = 1, worst_u = 1, max_diff = 0;
    for (int i = 0; i < n; ++i) {
      const double cs = cosine(e + i * dim, st + i * dim, dim);
      const double cu = cosine(e + i * dim, u + i * dim, dim);
      if (cs < worst_st) worst_st = cs;
      if (cu < worst_u) worst_u = cu;
      for (int k = 0; k < dim; ++k) {
        const double d = fabs((double)e[i * dim + k] - u[i * dim + k]);
        if (d > max_diff) max_diff = d;
      }
    }
    ok = worst_st >= 0.9999 && worst_u >= 0.9999;
    printf("\nagreement of the TP=%d embeddings (%d sentences x %d values):\n", tp, n, dim);
    printf("  vs the unsharded model (TP=1):  min cosine %.7f, max |diff| %.2e\n", worst_u,
           max_diff);
    printf("  vs sentence-transformers:       min cosine %.7f\n", worst_st);
    printf("%s\n", ok ? "MATCH" : "MISMATCH");
    free(u);
  }
  free(e);
  free(st);
  oslo_tokenizer_destroy(tok);
  oslo_model_destroy(model);
  /* Every rank exits with rank 0's verdict. */
  int32_t verdict = ok;
  oslo_tensor *t = NULL;
  const int64_t one_elem = 1;
  check(oslo_tensor_create(ctx, OSLO_DTYPE_I32, 1, &one_elem, &t), "tensor");
  check(oslo_tensor_copy_from_host(t, &verdict, sizeof verdict), "copy");
  check(oslo_context_broadcast(ctx, OSLO_GROUP_WORLD, 0, t), "broadcast");
  check(oslo_tensor_copy_to_host(t, &verdict, sizeof verdict), "copy");
  oslo_tensor_destroy(t);
  oslo_context_destroy(ctx);
  return verdict ? 0 : 1;
}
