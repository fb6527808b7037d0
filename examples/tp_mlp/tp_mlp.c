/*
 * tp_mlp: a tensor-parallel MLP block (the FFN of a transformer layer),
 * forward and backward, checked against the unsharded computation.
 *
 *   up   = column-parallel linear hidden -> ffn   (each rank: ffn/tp columns)
 *   act  = GELU on the local slice (no communication)
 *   down = row-parallel linear ffn -> hidden      (one all-reduce)
 *   loss = 0.5 * sum(y^2), so dL/dy = y
 *
 * Run:  oslo-run --nproc-per-node 2 ./tp_mlp [TP]   (TP defaults to the world size)
 * Each rank checks its results against a plain-C single-rank reference and
 * prints the largest relative error; the exit status is 0 only if all match.
 * Build outside the tree:  cc tp_mlp.c $(pkg-config --cflags --libs oslo) -lm
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oslo.h"

static const double kPi = 3.14159265358979323846; /* M_PI is not C99 */

enum { TOKENS = 32, HIDDEN = 128, FFN = 512 };

#define CHECK(call)                                                                              \
  do {                                                                                           \
    oslo_status st_ = (call);                                                                    \
    if (st_ != OSLO_OK) {                                                                        \
      fprintf(stderr, "%s failed: %s: %s\n", #call, oslo_status_string(st_), oslo_last_error()); \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

static float value(unsigned seed, unsigned i) { /* deterministic, in [-0.5, 0.5) */
  unsigned x = (i + 1) * 2654435761u ^ (seed * 40503u);
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return (float)(x % 10000) / 10000.0f - 0.5f;
}

static double gelu(double x) {
  return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
}
static double gelu_grad(double x) {
  return 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2.0 * kPi);
}

static oslo_tensor *tensor(oslo_context *ctx, int64_t rows, int64_t cols, const float *data) {
  int64_t shape[2] = {rows, cols};
  oslo_tensor *t = NULL;
  CHECK(oslo_tensor_create(ctx, OSLO_DTYPE_F32, cols ? 2 : 1, shape, &t));
  if (data) CHECK(oslo_tensor_copy_from_host(t, data, sizeof(float) * rows * (cols ? cols : 1)));
  return t;
}

static double max_rel_err(const float *got, const double *want, size_t n) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    err = fmax(err, fabs(got[i] - want[i]));
    scale = fmax(scale, fabs(want[i]));
  }
  return err / (scale > 0 ? scale : 1);
}

int main(int argc, char **argv) {
  /* World size and rank come from oslo-run (RANK, WORLD_SIZE, MASTER_ADDR...);
     the tensor-parallel size is argv[1], by default the whole world. */
  const char *world = getenv("WORLD_SIZE");
  int want_tp = argc > 1 ? atoi(argv[1]) : (world ? atoi(world) : 1);
  char config[128];
  snprintf(config, sizeof config, "{\"model_parallelism\": {\"tensor_parallel_size\": %d}}",
           want_tp);
  oslo_context *ctx = NULL;
  CHECK(oslo_context_create(config, &ctx));
  int rank, tp, tp_rank;
  CHECK(oslo_context_rank(ctx, OSLO_GROUP_WORLD, &rank));
  CHECK(oslo_context_size(ctx, OSLO_GROUP_TENSOR, &tp));
  CHECK(oslo_context_rank(ctx, OSLO_GROUP_TENSOR, &tp_rank));
  const int fl = FFN / tp; /* this rank's slice of the FFN dimension */

  static float w1[FFN * HIDDEN], b1[FFN], w2[HIDDEN * FFN], b2[HIDDEN], x[TOKENS * HIDDEN];
  for (unsigned i = 0; i < FFN * HIDDEN; ++i) w1[i] = value(1, i) / 8, w2[i] = value(2, i) / 16;
  for (unsigned i = 0; i < FFN; ++i) b1[i] = value(3, i);
  for (unsigned i = 0; i < HIDDEN; ++i) b2[i] = value(4, i);
  for (unsigned i = 0; i < TOKENS * HIDDEN; ++i) x[i] = value(5, i);

  /* --- the parallel block --- */
  oslo_parallel_linear_options up_o, down_o;
  CHECK(oslo_parallel_linear_options_init(&up_o, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION));
  CHECK(oslo_parallel_linear_options_init(&down_o, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION));
  up_o.kind = OSLO_LINEAR_COLUMN;
  up_o.in_features = HIDDEN;
  up_o.out_features = FFN;
  down_o.kind = OSLO_LINEAR_ROW;
  down_o.in_features = FFN;
  down_o.out_features = HIDDEN;
  down_o.input_is_parallel = 1;
  oslo_parallel_linear *up = NULL, *down = NULL;
  CHECK(oslo_parallel_linear_create(ctx, &up_o, &up));
  CHECK(oslo_parallel_linear_create(ctx, &down_o, &down));
  oslo_tensor *tw1 = tensor(ctx, FFN, HIDDEN, w1), *tb1 = tensor(ctx, FFN, 0, b1);
  oslo_tensor *tw2 = tensor(ctx, HIDDEN, FFN, w2), *tb2 = tensor(ctx, HIDDEN, 0, b2);
  CHECK(oslo_parallel_linear_load_full(up, tw1, tb1)); /* each rank keeps its slice */
  CHECK(oslo_parallel_linear_load_full(down, tw2, tb2));

  oslo_tensor *tx = tensor(ctx, TOKENS, HIDDEN, x), *th = tensor(ctx, TOKENS, fl, NULL);
  oslo_tensor *ta = tensor(ctx, TOKENS, fl, NULL), *ty = tensor(ctx, TOKENS, HIDDEN, NULL);
  CHECK(oslo_parallel_linear_forward(up, tx, th));
  float *h, *a, *y;
  CHECK(oslo_tensor_data(th, (void **)&h)); /* CPU tensors live in host memory */
  CHECK(oslo_tensor_data(ta, (void **)&a));
  for (int i = 0; i < TOKENS * fl; ++i) a[i] = (float)gelu(h[i]);
  CHECK(oslo_parallel_linear_forward(down, ta, ty));
  CHECK(oslo_tensor_data(ty, (void **)&y));

  /* backward of loss = 0.5 * sum(y^2): dy = y */
  oslo_tensor *tdy = tensor(ctx, TOKENS, HIDDEN, y), *tda = tensor(ctx, TOKENS, fl, NULL);
  oslo_tensor *tdx = tensor(ctx, TOKENS, HIDDEN, NULL);
  CHECK(oslo_parallel_linear_backward(down, ta, tdy, tda));
  float *da;
  CHECK(oslo_tensor_data(tda, (void **)&da));
  for (int i = 0; i < TOKENS * fl; ++i) da[i] *= (float)gelu_grad(h[i]);
  CHECK(oslo_parallel_linear_backward(up, tx, tda, tdx));
  oslo_param_set *params = NULL;
  CHECK(oslo_param_set_create(ctx, &params));
  CHECK(oslo_param_set_add_linear(params, "mlp.up", up));
  CHECK(oslo_param_set_add_linear(params, "mlp.down", down));
  double norm = 0;
  CHECK(oslo_param_set_clip_grad_norm(params, 0.0, 2.0, &norm));

  /* --- the unsharded reference, in plain C --- */
  static double rh[TOKENS * FFN], ry[TOKENS * HIDDEN], rda[TOKENS * FFN], rdx[TOKENS * HIDDEN];
  static double rdw1[FFN * HIDDEN], rdw2[HIDDEN * FFN];
  for (int t = 0; t < TOKENS; ++t)
    for (int f = 0; f < FFN; ++f) {
      double s = b1[f];
      for (int i = 0; i < HIDDEN; ++i) s += (double)x[t * HIDDEN + i] * w1[f * HIDDEN + i];
      rh[t * FFN + f] = s;
    }
  for (int t = 0; t < TOKENS; ++t)
    for (int o = 0; o < HIDDEN; ++o) {
      double s = b2[o];
      for (int f = 0; f < FFN; ++f) s += gelu(rh[t * FFN + f]) * w2[o * FFN + f];
      ry[t * HIDDEN + o] = s;
    }
  for (int t = 0; t < TOKENS; ++t)
    for (int f = 0; f < FFN; ++f) {
      double s = 0;
      for (int o = 0; o < HIDDEN; ++o) s += ry[t * HIDDEN + o] * w2[o * FFN + f];
      rda[t * FFN + f] = s * gelu_grad(rh[t * FFN + f]);
    }
  for (int t = 0; t < TOKENS; ++t)
    for (int i = 0; i < HIDDEN; ++i) {
      double s = 0;
      for (int f = 0; f < FFN; ++f) s += rda[t * FFN + f] * w1[f * HIDDEN + i];
      rdx[t * HIDDEN + i] = s;
    }
  double rnorm2 = 0;
  for (int f = 0; f < FFN; ++f)
    for (int i = 0; i < HIDDEN; ++i) {
      double s1 = 0, s2 = 0;
      for (int t = 0; t < TOKENS; ++t) {
        s1 += rda[t * FFN + f] * x[t * HIDDEN + i];
        s2 += ry[t * HIDDEN + i] * gelu(rh[t * FFN + f]);
      }
      rdw1[f * HIDDEN + i] = s1;
      rdw2[i * FFN + f] = s2;
      rnorm2 += s1 * s1 + s2 * s2;
    }
  for (int f = 0; f < FFN; ++f) {
    double s = 0;
    for (int t = 0; t < TOKENS; ++t) s += rda[t * FFN + f];
    rnorm2 += s * s;
  }
  for (int o = 0; o < HIDDEN; ++o) {
    double s = 0;
    for (int t = 0; t < TOKENS; ++t) s += ry[t * HIDDEN + o];
    rnorm2 += s * s;
  }

  /* --- compare --- */
  static float got[FFN * HIDDEN];
  static double want[FFN * HIDDEN];
  double e_y = max_rel_err(y, ry, TOKENS * HIDDEN);
  CHECK(oslo_tensor_copy_to_host(tdx, got, sizeof(float) * TOKENS * HIDDEN));
  double e_dx = max_rel_err(got, rdx, TOKENS * HIDDEN);
  oslo_tensor *gw1 = NULL, *gw2 = NULL;
  CHECK(oslo_parallel_linear_params(up, NULL, NULL, &gw1, NULL));
  CHECK(oslo_parallel_linear_params(down, NULL, NULL, &gw2, NULL));
  CHECK(oslo_tensor_copy_to_host(gw1, got, sizeof(float) * fl * HIDDEN));
  double e_dw1 = max_rel_err(got, rdw1 + tp_rank * fl * HIDDEN, (size_t)fl * HIDDEN);
  CHECK(oslo_tensor_copy_to_host(gw2, got, sizeof(float) * HIDDEN * fl));
  for (int o = 0; o < HIDDEN; ++o)
    for (int f = 0; f < fl; ++f) want[o * fl + f] = rdw2[o * FFN + tp_rank * fl + f];
  double e_dw2 = max_rel_err(got, want, (size_t)HIDDEN * fl);
  double e_norm = fabs(norm - sqrt(rnorm2)) / sqrt(rnorm2);

  const double tol = 1e-5;
  int ok = e_y <= tol && e_dx <= tol && e_dw1 <= tol && e_dw2 <= tol && e_norm <= tol;
  printf(
      "[rank %d] tp=%d  max relative error vs unsharded: output %.2e  grad_input %.2e  "
      "grad_up %.2e  grad_down %.2e  grad_norm %.2e  -> %s\n",
      rank, tp, e_y, e_dx, e_dw1, e_dw2, e_norm, ok ? "MATCH" : "MISMATCH");

  oslo_tensor *all[] = {tw1, tb1, tw2, tb2, tx, th, ta, ty, tdy, tda, tdx};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) oslo_tensor_destroy(all[i]);
  oslo_param_set_destroy(params);
  oslo_parallel_linear_destroy(up);
  oslo_parallel_linear_destroy(down);
  oslo_context_destroy(ctx);
  return ok ? 0 : 1;
}
