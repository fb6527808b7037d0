/* Regression test: a SentencePiece .model tokenizer and the torch backend
 * plugin in ONE process. libsentencepiece carries its own protobuf-lite and
 * libtorch brings libprotobuf; when liboslo linked libsentencepiece, loading
 * the torch plugin crashed in libprotobuf's static initialisers. liboslo now
 * reaches libsentencepiece through liboslo_sentencepiece.so, loaded with
 * RTLD_LOCAL, so the two never meet.
 * Usage: test_tokenizer_torch MODEL_DIR tokenizer_first|torch_first|no_torch
 * (no_torch: the plugin was not built; exits 77, skipped). */
#include <oslo.h>
#include <stdio.h>
#include <string.h>

static int failed = 0;

#define CHECK(cond, ...)                                     \
  do {                                                       \
    if (!(cond)) {                                           \
      fprintf(stderr, "FAILED %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                          \
      fprintf(stderr, " (%s)\n", oslo_last_error());         \
      failed = 1;                                            \
      return 1;                                              \
    }                                                        \
  } while (0)

static const char kText[] = "Hello world, the quick brown fox: \xC3\xA9t\xC3\xA9 <s> 123";

/* Encodes kText and decodes it back. */
static int roundtrip(oslo_tokenizer *tok, int64_t *ids, size_t cap, size_t *n) {
  CHECK(oslo_tokenizer_encode(tok, kText, strlen(kText), 1, ids, cap, n) == OSLO_OK, "encode");
  CHECK(*n > 3 && *n <= cap, "encode gave %zu ids", *n);
  char out[512];
  size_t len = 0;
  CHECK(oslo_tokenizer_decode(tok, ids, *n, 1, out, sizeof out, &len) == OSLO_OK, "decode");
  /* The "<s>" written in the text is a special token: skipped on decode. */
  CHECK(strstr(out, "Hello world, the quick brown fox") == out, "decoded '%s'", out);
  return 0;
}

/* Creates a torch context and runs one op on it. */
static int use_torch(oslo_context **ctx, oslo_tensor **t) {
  CHECK(oslo_context_create("{\"backend\": \"torch\"}", ctx) == OSLO_OK, "torch context");
  int64_t shape[2] = {4, 8};
  CHECK(oslo_tensor_create(*ctx, OSLO_DTYPE_F32, 2, shape, t) == OSLO_OK, "torch tensor");
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s MODEL_DIR tokenizer_first|torch_first|no_torch\n", argv[0]);
    return 2;
  }
  if (strcmp(argv[2], "no_torch") == 0) {
    printf("torch backend plugin not built: skipped\n");
    return 77;
  }
  const int tok_first = strcmp(argv[2], "tokenizer_first") == 0;
  char path[1024];
  snprintf(path, sizeof path, "%s/tokenizer.model", argv[1]);
  oslo_tokenizer *tok = NULL;
  oslo_context *ctx = NULL;
  oslo_tensor *t = NULL;
  int64_t before[256], after[256];
  size_t nb = 0, na = 0;
  if (tok_first) {
    if (oslo_tokenizer_load(path, &tok) != OSLO_OK) CHECK(0, "load %s", path);
    if (roundtrip(tok, before, 256, &nb)) return 1;
    if (use_torch(&ctx, &t)) return 1;
  } else {
    if (use_torch(&ctx, &t)) return 1;
    if (oslo_tokenizer_load(path, &tok) != OSLO_OK) CHECK(0, "load %s", path);
    if (roundtrip(tok, before, 256, &nb)) return 1;
  }
  /* Both live: the tokenizer still encodes, the same ids. */
  if (roundtrip(tok, after, 256, &na)) return 1;
  CHECK(na == nb && memcmp(before, after, na * sizeof(int64_t)) == 0, "ids changed");
  oslo_tokenizer *tok2 = NULL;
  if (oslo_tokenizer_load(path, &tok2) != OSLO_OK) CHECK(0, "second load");
  if (roundtrip(tok2, after, 256, &na)) return 1;
  CHECK(na == nb && memcmp(before, after, na * sizeof(int64_t)) == 0, "second tokenizer differs");
  oslo_tokenizer_destroy(tok2);
  oslo_tensor_destroy(t);
  oslo_context_destroy(ctx);
  oslo_tokenizer_destroy(tok);
  printf("%s: %zu ids, torch context created\n1 passed, %d failed\n", argv[2], nb, failed);
  return failed;
}
