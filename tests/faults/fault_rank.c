/*
 * One rank of the fault tests. Creates a context with an explicit rank and
 * world size over tcp://127.0.0.1:PORT and then, depending on MODE:
 *   loop    all-reduce 1 MB over the world forever (until an error)
 *   join    only create the context (rendezvous tests)
 *   abort   (world 2, threads) rank 0 waits in an all-reduce that rank 1
 *           never joins; a watchdog thread aborts rank 0's context
 * Prints "READY" after the first successful all-reduce and
 * "RESULT <status> <seconds> <message>" when a call fails; exits with the
 * status code (0 only if everything succeeded).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "oslo.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int report(oslo_status st, double t0) {
  printf("RESULT %d %.3f %s (%s)\n", (int)st, now() - t0, oslo_last_error(),
         oslo_status_string(st));
  fflush(stdout);
  return (int)st;
}

static void *watchdog(void *arg) {
  usleep(500 * 1000);
  oslo_context_abort((oslo_context *)arg);
  return NULL;
}

struct thread_rank {
  char config[256];
  oslo_context *ctx;
  oslo_status st;
};

static void *make_ctx(void *arg) {
  struct thread_rank *r = (struct thread_rank *)arg;
  r->st = oslo_context_create(r->config, &r->ctx);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s RANK WORLD PORT TIMEOUT MODE\n", argv[0]);
    return 100;
  }
  int rank = atoi(argv[1]), world = atoi(argv[2]), port = atoi(argv[3]);
  double timeout = atof(argv[4]);
  const char *mode = argv[5];
  setvbuf(stdout, NULL, _IOLBF, 0);

  if (strcmp(mode, "abort") == 0) {
    /* Two ranks as threads; rank 1 joins but never calls the all-reduce. */
    struct thread_rank r[2];
    pthread_t t[2];
    for (int i = 0; i < 2; ++i) {
      snprintf(r[i].config, sizeof r[i].config,
               "{\"rank\": %d, \"world_size\": 2, \"init_method\": \"tcp://127.0.0.1:%d\", "
               "\"timeout_seconds\": %g}",
               i, port, timeout);
      pthread_create(&t[i], NULL, make_ctx, &r[i]);
    }
    for (int i = 0; i < 2; ++i) pthread_join(t[i], NULL);
    if (r[0].st || r[1].st) return report(r[0].st ? r[0].st : r[1].st, now());
    int64_t n = 1024;
    oslo_tensor *x = NULL;
    oslo_tensor_create(r[0].ctx, OSLO_DTYPE_F32, 1, &n, &x);
    pthread_t w;
    pthread_create(&w, NULL, watchdog, r[0].ctx);
    double t0 = now();
    oslo_status st = oslo_context_all_reduce(r[0].ctx, OSLO_GROUP_WORLD, OSLO_REDUCE_SUM, x);
    pthread_join(w, NULL);
    int code = report(st, t0);
    oslo_tensor_destroy(x);
    oslo_context_abort(r[1].ctx);
    oslo_context_destroy(r[0].ctx);
    oslo_context_destroy(r[1].ctx);
    return code;
  }

  char config[256];
  snprintf(config, sizeof config,
           "{\"rank\": %d, \"world_size\": %d, \"init_method\": \"tcp://127.0.0.1:%d\", "
           "\"timeout_seconds\": %g}",
           rank, world, port, timeout);
  double t0 = now();
  oslo_context *ctx = NULL;
  oslo_status st = oslo_context_create(config, &ctx);
  if (st != OSLO_OK) return report(st, t0);
  if (strcmp(mode, "join") == 0) {
    printf("JOINED\n");
    oslo_context_destroy(ctx);
    return 0;
  }
  int64_t n = 256 * 1024;
  oslo_tensor *x = NULL;
  oslo_tensor_create(ctx, OSLO_DTYPE_F32, 1, &n, &x);
  for (long i = 0;; ++i) {
    t0 = now();
    st = oslo_context_all_reduce(ctx, OSLO_GROUP_WORLD, OSLO_REDUCE_SUM, x);
    if (st != OSLO_OK) break;
    if (i == 0) printf("READY\n");
  }
  int code = report(st, t0);
  oslo_tensor_destroy(x);
  oslo_context_destroy(ctx);
  return code;
}
