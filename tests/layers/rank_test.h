/*
 * Shared by the parts of rank_test (the multi-rank tests through the public
 * C ABI): the f64 reference math of the parallel layers, tensor helpers that
 * convert to and from the layer dtype, and the entry of each mode. Every
 * parallel result is compared with the unsharded single-rank computation
 * done in plain C (double).
 *
 *   test_rank.c         main: ranks as processes or threads, mode dispatch
 *   test_layers.c       mode layers: column/row parallel linear, MLP,
 *                       vocabulary-parallel embedding and cross-entropy
 *   test_collectives.c  modes collectives and topology
 *   test_param_ckpt.c   modes ckpt-save, ckpt-load, ckpt-load-bad
 */
#ifndef OSLO_TESTS_LAYERS_RANK_TEST_H
#define OSLO_TESTS_LAYERS_RANK_TEST_H

#include "../common/harness.h"

#define TOL 1e-5

/* The dtype of the linear layers' parameters and activations (--dtype) and
 * its tolerance against the f64 reference: inputs are generated already
 * representable in it (rt_fill), so only rounding of results and
 * intermediates counts. Weight gradients are f32 whatever the dtype.
 * Defined in test_rank.c. */
extern oslo_dtype g_dt;
extern double g_tol;

/* ------------------------------------------------------------------------ */
/* Reference math (double)                                                    */
/* ------------------------------------------------------------------------ */

/* y[r,o] = sum_i x[r,i] w[o,i] + b[o] */
static inline void ref_linear(double *y, const float *x, const float *w, const float *b, int rows,
                              int in, int out) {
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < out; ++o) {
      double s = b ? b[o] : 0;
      for (int i = 0; i < in; ++i) s += (double)x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
}

/* dx = dy w ; dw = dy^T x ; db = colsum dy */
static inline void ref_linear_backward(double *dx, double *dw, double *db, const float *x,
                                       const float *w, const float *dy, int rows, int in, int out) {
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < in; ++i) {
      double s = 0;
      for (int o = 0; o < out; ++o) s += (double)dy[r * out + o] * w[o * in + i];
      dx[r * in + i] = s;
    }
  for (int o = 0; o < out; ++o)
    for (int i = 0; i < in; ++i) {
      double s = 0;
      for (int r = 0; r < rows; ++r) s += (double)dy[r * out + o] * x[r * in + i];
      dw[o * in + i] = s;
    }
  for (int o = 0; o < out; ++o) {
    double s = 0;
    for (int r = 0; r < rows; ++r) s += dy[r * out + o];
    db[o] = s;
  }
}

/* Columns [c0, c0+nc) of a rows x cols matrix. */
static inline void slice_cols_d(double *dst, const double *src, int rows, int cols, int c0,
                                int nc) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < nc; ++c) dst[r * nc + c] = src[r * cols + c0 + c];
}
static inline void slice_cols_f(float *dst, const float *src, int rows, int cols, int c0, int nc) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < nc; ++c) dst[r * nc + c] = src[r * cols + c0 + c];
}

static inline oslo_tensor *mk(th_state *s, oslo_context *ctx, oslo_dtype dt, int ndim, int64_t a,
                              int64_t b, int64_t c, const void *data) {
  int64_t shape[3] = {a, b, c};
  oslo_tensor *t = NULL;
  TH_OK(s, oslo_tensor_create(ctx, dt, ndim, shape, &t));
  if (t && data) {
    int64_t n = 0;
    oslo_tensor_numel(t, &n);
    size_t es = (dt == OSLO_DTYPE_F32 || dt == OSLO_DTYPE_I32) ? 4 : dt == OSLO_DTYPE_I64 ? 8 : 2;
    TH_OK(s, oslo_tensor_copy_from_host(t, data, (size_t)n * es));
  }
  return t;
}

static inline float rt_round(float f, oslo_dtype dt) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (dt == OSLO_DTYPE_BF16) {
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
  } else if (dt == OSLO_DTYPE_F16) {
    /* Round to 10 mantissa bits (values here are normal f16 numbers). */
    u += 0xfffu + ((u >> 13) & 1u);
    u &= 0xffffe000u;
  }
  memcpy(&f, &u, 4);
  return f;
}

/* th_fill, with values representable in the layer dtype. */
static inline void rt_fill(float *p, size_t n, uint64_t seed) {
  th_fill(p, n, seed);
  for (size_t i = 0; i < n; ++i) p[i] = rt_round(p[i], g_dt);
}

static inline uint16_t to_half_bits(float f, oslo_dtype dt) {
  uint32_t u;
  f = rt_round(f, dt);
  memcpy(&u, &f, 4);
  if (dt == OSLO_DTYPE_BF16) return (uint16_t)(u >> 16);
  /* f16 from a rounded normal f32 (|f| in [2^-14, 65504]) or zero. */
  uint32_t sign = (u >> 16) & 0x8000u, exp = (u >> 23) & 0xffu, man = (u >> 13) & 0x3ffu;
  if (exp == 0) return (uint16_t)sign;
  return (uint16_t)(sign | ((exp - 127 + 15) << 10) | man);
}

static inline float from_half_bits(uint16_t h, oslo_dtype dt) {
  uint32_t u;
  if (dt == OSLO_DTYPE_BF16) {
    u = (uint32_t)h << 16;
  } else {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0 && man == 0)
      u = sign;
    else if (exp == 0) { /* subnormal */
      float f = ldexpf((float)man, -24);
      return (h & 0x8000u) ? -f : f;
    } else if (exp == 31)
      u = sign | 0x7f800000u | (man << 13);
    else
      u = sign | ((exp - 15 + 127) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* A tensor of the layer dtype holding float data (converted on the host). */
static inline oslo_tensor *mka(th_state *s, oslo_context *ctx, int ndim, int64_t a, int64_t b,
                               int64_t c, const float *data) {
  if (g_dt == OSLO_DTYPE_F32 || !data) return mk(s, ctx, g_dt, ndim, a, b, c, data);
  int64_t n = a * (ndim > 1 ? b : 1) * (ndim > 2 ? c : 1);
  uint16_t *h = malloc((size_t)n * 2 + 2);
  for (int64_t i = 0; i < n; ++i) h[i] = to_half_bits(data[i], g_dt);
  oslo_tensor *t = mk(s, ctx, g_dt, ndim, a, b, c, h);
  free(h);
  return t;
}

/* Copies n elements of a float tensor of any dtype to dst as f32. */
static inline void get_f32(th_state *s, float *dst, size_t n, const oslo_tensor *t) {
  oslo_dtype dt = OSLO_DTYPE_F32;
  TH_OK(s, oslo_tensor_dtype(t, &dt));
  if (dt == OSLO_DTYPE_F32) {
    TH_OK(s, oslo_tensor_copy_to_host(t, dst, n * sizeof(float)));
    return;
  }
  uint16_t *h = malloc(n * 2 + 2);
  TH_OK(s, oslo_tensor_copy_to_host(t, h, n * 2));
  for (size_t i = 0; i < n; ++i) dst[i] = from_half_bits(h[i], dt);
  free(h);
}

#define CLOSE(s, got, ref, n, what)                                      \
  do {                                                                   \
    double e_ = 0;                                                       \
    int ok_ = th_close(got, ref, n, g_tol, &e_);                         \
    TH_CHECK(s, ok_, "%s: relative error %.3g > %.1g", what, e_, g_tol); \
  } while (0)

/* The modes (each rank runs one; tp is the tensor-parallel size, tr this
 * rank's index in the tensor group). */
void run_layers(th_state *s, oslo_context *ctx, int tp, int tr);
void run_collectives(th_state *s, oslo_context *ctx);
void run_topology(th_state *s, oslo_context *ctx, int tp);
/* save: 1 saves to dir, 0 loads and checks; bad_rank >= 0: the load must
 * fail on every rank, naming that world rank. */
void run_ckpt(th_state *s, oslo_context *ctx, int tp, int tr, const char *dir, int save,
              int bad_rank);

#endif
