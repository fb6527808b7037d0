/* The backend loader through the C ABI: a plugin built as its own shared
 * library loads and computes; broken plugins and bad names fail with a status
 * and a message naming the reason, never a crash. OSLO_BACKEND_PATH points at
 * the folder holding the test plugins (see CMakeLists.txt). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oslo.h"

static int passed, failed;

static void check(int ok, const char *what) {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    fprintf(stderr, "FAIL: %s (last error: %s)\n", what, oslo_last_error());
  }
}

/* Creating a context with this backend fails with `want` and a message
 * holding `needle`. */
static void expect_failure(const char *backend, oslo_status want, const char *needle) {
  char cfg[512];
  snprintf(cfg, sizeof cfg, "{\"backend\": \"%s\"}", backend);
  oslo_context *ctx = (oslo_context *)1;
  oslo_status st = oslo_context_create(cfg, &ctx);
  char what[256];
  snprintf(what, sizeof what, "backend '%.40s': status %d (want %d), message names '%s'", backend,
           (int)st, (int)want, needle);
  check(st == want && ctx == NULL && strstr(oslo_last_error(), needle) != NULL, what);
  if (st == OSLO_OK) oslo_context_destroy(ctx);
}

/* A real plugin: a 2x3 column linear forward equals x W^T + b. */
static void linear_on(const char *backend) {
  char cfg[128], what[160];
  snprintf(cfg, sizeof cfg, "{\"backend\": \"%s\"}", backend);
  oslo_context *ctx = NULL;
  oslo_status st = oslo_context_create(cfg, &ctx);
  snprintf(what, sizeof what, "the %s plugin loads", backend);
  check(st == OSLO_OK, what);
  if (st == OSLO_OK) {
    const char *name = NULL;
    oslo_context_backend(ctx, OSLO_GROUP_WORLD, &name, NULL);
    check(name && strcmp(name, backend) == 0, "the context reports the plugin's name");
    oslo_parallel_linear_options o;
    oslo_parallel_linear_options_init(&o, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION);
    o.in_features = 3;
    o.out_features = 2;
    oslo_parallel_linear *l = NULL;
    check(oslo_parallel_linear_create(ctx, &o, &l) == OSLO_OK, "linear on the plugin");
    float w[6] = {1, 2, 3, 4, 5, 6}, b[2] = {0.5f, -1}, x[3] = {1, -1, 2}, y[2] = {0, 0};
    int64_t ws[2] = {2, 3}, bs[1] = {2}, xs[2] = {1, 3}, ys[2] = {1, 2};
    oslo_tensor *tw = NULL, *tb = NULL, *tx = NULL, *ty = NULL;
    oslo_tensor_wrap(ctx, w, OSLO_DTYPE_F32, 2, ws, &tw);
    oslo_tensor_wrap(ctx, b, OSLO_DTYPE_F32, 1, bs, &tb);
    oslo_tensor_wrap(ctx, x, OSLO_DTYPE_F32, 2, xs, &tx);
    oslo_tensor_wrap(ctx, y, OSLO_DTYPE_F32, 2, ys, &ty);
    check(oslo_parallel_linear_load_full(l, tw, tb) == OSLO_OK, "load on the plugin");
    check(oslo_parallel_linear_forward(l, tx, ty) == OSLO_OK, "forward on the plugin");
    check(y[0] == 1 - 2 + 6 + 0.5f && y[1] == 4 - 5 + 12 - 1, "plugin forward values");
    oslo_tensor_destroy(tw);
    oslo_tensor_destroy(tb);
    oslo_tensor_destroy(tx);
    oslo_tensor_destroy(ty);
    oslo_parallel_linear_destroy(l);
    oslo_context_destroy(ctx);
  }
}

int main(void) {
  oslo_status st;
  linear_on("cpu_plugin");
  /* Backend ABI v1: a table of v1's size, exported as oslo_backend_plugin_v1. */
  linear_on("cpu_v1");
  expect_failure("half_events", OSLO_ERR_BACKEND_UNAVAILABLE, "lacks 'event_wait'");
  expect_failure("short_v2", OSLO_ERR_BACKEND_UNAVAILABLE, "fewer than v2's");
  /* "cuda" without its plugin in this build: unavailable, with the hint. */
  {
    const char *dir = getenv("OSLO_BACKEND_PATH");
    char path[1024];
    snprintf(path, sizeof path, "%s/liboslo_backend_cuda.so", dir ? dir : ".");
    FILE *f = fopen(path, "rb");
    if (f) {
      fclose(f); /* built here: it refuses without a GPU, or loads with one */
    } else {
      expect_failure("cuda", OSLO_ERR_BACKEND_UNAVAILABLE, "liboslo_backend_cuda.so");
      expect_failure("cuda", OSLO_ERR_BACKEND_UNAVAILABLE, "CUDA toolkit");
    }
  }
  expect_failure("bad_version", OSLO_ERR_BACKEND_UNAVAILABLE, "ABI v99");
  expect_failure("missing_entry", OSLO_ERR_BACKEND_UNAVAILABLE, "'matmul'");
  expect_failure("create_fails", OSLO_ERR_BACKEND_UNAVAILABLE, "always refuses");
  expect_failure("no_such_backend", OSLO_ERR_BACKEND_UNAVAILABLE,
                 "liboslo_backend_no_such_backend.so");
  expect_failure("bad/name", OSLO_ERR_CONFIG, "not a backend name");
  expect_failure("", OSLO_ERR_CONFIG, "backend");
  /* A name far longer than a path: refused before dlopen ever sees it. */
  size_t n = 1 << 20;
  char *cfg = malloc(n + 64);
  strcpy(cfg, "{\"backend\": \"");
  memset(cfg + strlen(cfg), 'a', n);
  strcpy(cfg + 13 + n, "\"}");
  oslo_context *c2 = (oslo_context *)1;
  st = oslo_context_create(cfg, &c2);
  check(st == OSLO_ERR_CONFIG && c2 == NULL, "a 1 MiB backend name is a config error");
  check(strlen(oslo_last_error()) < 4096, "the message does not echo the whole name");
  free(cfg);
  printf("backend loader: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
