/* Benchmark 8, the C column: the per-call cost of a small forward through
 * the C ABI, the reference the Python, Java and Go bindings' same call is
 * measured against (bench/bindings/run.sh runs them all in one run).
 *
 * A world of one rank (its own file:// store), a column-parallel linear
 * 64 -> 64 with bias (f32), input [1, 64] and output [1, 64] created once;
 * timed: oslo_parallel_linear_forward(layer, x, y). 2000 warm-up calls, then
 * 7 repetitions of CALLS calls; prints the median:
 *   BENCH lang=c case=forward_1x64x64 ns_per_call=... calls=... reps=7
 */
#define _POSIX_C_SOURCE 200809L
#include <oslo.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void check(oslo_status st, const char *what) {
  if (st != OSLO_OK) {
    fprintf(stderr, "%s: %s: %s\n", what, oslo_status_string(st), oslo_last_error());
    exit(1);
  }
}

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  const long calls = argc > 1 ? atol(argv[1]) : 20000;
  if (calls < 1) return 2;
  char dir[] = "/tmp/oslo-bench-c-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char cfg[256];
  snprintf(
      cfg, sizeof cfg,
      "{\"rank\": 0, \"world_size\": 1, \"num_threads\": 1, \"init_method\": \"file://%s/store\"}",
      dir);
  oslo_context *ctx = NULL;
  check(oslo_context_create(cfg, &ctx), "context");
  oslo_parallel_linear_options o;
  check(oslo_parallel_linear_options_init(&o, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION), "options");
  o.in_features = 64;
  o.out_features = 64;
  oslo_parallel_linear *lin = NULL;
  check(oslo_parallel_linear_create(ctx, &o, &lin), "linear");
  const int64_t shape[2] = {1, 64};
  oslo_tensor *x = NULL, *y = NULL;
  check(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 2, shape, &x), "x");
  check(oslo_tensor_create(ctx, OSLO_DTYPE_F32, 2, shape, &y), "y");
  for (long i = 0; i < 2000; ++i) check(oslo_parallel_linear_forward(lin, x, y), "forward");
  double per[7];
  for (int r = 0; r < 7; ++r) {
    const double t0 = now_ns();
    for (long i = 0; i < calls; ++i) check(oslo_parallel_linear_forward(lin, x, y), "forward");
    per[r] = (now_ns() - t0) / (double)calls;
  }
  qsort(per, 7, sizeof per[0], cmp);
  printf("BENCH lang=c case=forward_1x64x64 ns_per_call=%.1f calls=%ld reps=7\n", per[3], calls);
  oslo_tensor_destroy(x);
  oslo_tensor_destroy(y);
  oslo_parallel_linear_destroy(lin);
  oslo_context_destroy(ctx);
  char store[300];
  snprintf(store, sizeof store, "%s/store", dir);
  unlink(store);
  rmdir(dir);
  return 0;
}
