/*
 * Multi-rank tests through the public C ABI (rank_test): this file starts the
 * ranks and runs one mode; the modes are in test_layers.c,
 * test_collectives.c and test_param_ckpt.c (rank_test.h lists them). Every
 * parallel result is compared with the unsharded single-rank computation
 * done in plain C (double).
 *
 * Usage:
 *   rank_test MODE [--tp T] [--threads N] [--dir D] [--bad-rank R]
 * MODE: layers | collectives | topology | ckpt-save | ckpt-load | ckpt-load-bad
 * (ckpt-load-bad: loading the checkpoint in --dir must fail with the same
 * status on every rank, naming world rank --bad-rank as the one that failed)
 * Without --threads the ranks are processes (run it under oslo-run); with
 * --threads N it starts N threads that each create their own context.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rank_test.h"

oslo_dtype g_dt = OSLO_DTYPE_F32;
double g_tol = TOL;

typedef struct {
  int rank, world, tp;
  char config[512];
  const char *mode;
  const char *dir;
  int bad_rank;
  th_state st;
} rank_args;

static void *rank_main(void *arg) {
  rank_args *a = (rank_args *)arg;
  th_state *s = &a->st;
  oslo_context *ctx = NULL;
  oslo_status st = oslo_context_create(a->config, &ctx);
  TH_CHECK(s, st == OSLO_OK, "context_create: %s (%s)", oslo_status_string(st), oslo_last_error());
  if (st != OSLO_OK) return NULL;
  int rank = -1, tr = -1, tp = -1;
  oslo_context_rank(ctx, OSLO_GROUP_WORLD, &rank);
  oslo_context_rank(ctx, OSLO_GROUP_TENSOR, &tr);
  oslo_context_size(ctx, OSLO_GROUP_TENSOR, &tp);
  s->rank = rank;
  if (strcmp(a->mode, "layers") == 0)
    run_layers(s, ctx, tp, tr);
  else if (strcmp(a->mode, "collectives") == 0)
    run_collectives(s, ctx);
  else if (strcmp(a->mode, "topology") == 0)
    run_topology(s, ctx, tp);
  else if (strcmp(a->mode, "ckpt-save") == 0 || strcmp(a->mode, "ckpt-load") == 0)
    run_ckpt(s, ctx, tp, tr, a->dir, strcmp(a->mode, "ckpt-save") == 0, -1);
  else if (strcmp(a->mode, "ckpt-load-bad") == 0)
    run_ckpt(s, ctx, tp, tr, a->dir, 0, a->bad_rank);
  else
    TH_CHECK(s, 0, "unknown mode %s", a->mode);
  /* Leave together so no rank tears down shared memory under a slow peer. */
  TH_OK(s, oslo_context_barrier(ctx, OSLO_GROUP_WORLD));
  oslo_context_destroy(ctx);
  return NULL;
}

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
    perror("free_port");
    exit(2);
  }
  int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr,
            "usage: %s MODE [--tp T] [--threads N] [--dir D] [--backend B] [--dtype D] "
            "[--bad-rank R] [--backend-options JSON]\n",
            argv[0]);
    return 2;
  }
  /* --backend, else OSLO_TEST_BACKEND, else cpu; OSLO_TEST_COMMUNICATOR picks
   * the communicator (tests/common/test_backend.hpp). */
  const char *env_backend = getenv("OSLO_TEST_BACKEND"),
             *env_comm = getenv("OSLO_TEST_COMMUNICATOR");
  const char *mode = argv[1], *dir = "",
             *backend = env_backend && *env_backend ? env_backend : "cpu", *backend_options = "{}",
             *communicator = env_comm && *env_comm ? env_comm : "auto";
  int tp = 1, threads = 0, bad_rank = -1;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--tp") == 0)
      tp = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--threads") == 0)
      threads = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--dir") == 0)
      dir = argv[i + 1];
    else if (strcmp(argv[i], "--backend") == 0)
      backend = argv[i + 1];
    else if (strcmp(argv[i], "--backend-options") == 0)
      backend_options = argv[i + 1];
    else if (strcmp(argv[i], "--dtype") == 0) {
      g_dt = strcmp(argv[i + 1], "bf16") == 0  ? OSLO_DTYPE_BF16
             : strcmp(argv[i + 1], "f16") == 0 ? OSLO_DTYPE_F16
                                               : OSLO_DTYPE_F32;
      g_tol = g_dt == OSLO_DTYPE_BF16 ? 2e-2 : g_dt == OSLO_DTYPE_F16 ? 3e-3 : TOL;
    } else if (strcmp(argv[i], "--bad-rank") == 0)
      bad_rank = atoi(argv[i + 1]);
  }
  char label[128];
  snprintf(label, sizeof label, "rank_test %s tp=%d %s backend=%s", mode, tp,
           threads ? "threads" : "process", backend);
  if (threads > 0) {
    int port = free_port();
    rank_args *args = calloc((size_t)threads, sizeof *args);
    pthread_t *tids = calloc((size_t)threads, sizeof *tids);
    for (int r = 0; r < threads; ++r) {
      args[r].mode = mode;
      args[r].dir = dir;
      args[r].bad_rank = bad_rank;
      args[r].st.rank = r;
      snprintf(args[r].config, sizeof args[r].config,
               "{\"rank\": %d, \"world_size\": %d, \"tensor_parallel_size\": %d, "
               "\"init_method\": \"tcp://127.0.0.1:%d\", \"timeout_seconds\": 60, "
               "\"num_threads\": 1, \"backend\": \"%s\", \"backend_options\": %s, "
               "\"communicator\": \"%s\"}",
               r, threads, tp, port, backend, backend_options, communicator);
      pthread_create(&tids[r], NULL, rank_main, &args[r]);
    }
    for (int r = 0; r < threads; ++r) {
      pthread_join(tids[r], NULL);
      th_add_totals(&args[r].st);
    }
    free(args);
    free(tids);
  } else {
    rank_args a;
    memset(&a, 0, sizeof a);
    a.mode = mode;
    a.dir = dir;
    a.bad_rank = bad_rank;
    snprintf(a.config, sizeof a.config,
             "{\"tensor_parallel_size\": %d, \"timeout_seconds\": 60, \"backend\": \"%s\", "
             "\"backend_options\": %s, \"communicator\": \"%s\"}",
             tp, backend, backend_options, communicator);
    rank_main(&a);
    th_add_totals(&a.st);
  }
  return th_finish(label);
}
