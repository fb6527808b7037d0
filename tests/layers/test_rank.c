/*
 * Multi-rank tests through the public C ABI. Every parallel result is compared
 * with the unsharded single-rank computation done here in plain C (double).
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

#include "../common/harness.h"

#define TOL 1e-5

/* The dtype of the linear layers' parameters and activations (--dtype) and
 * its tolerance against the f64 reference: inputs are generated already
 * representable in it (rt_fill), so only rounding of results and
 * intermediates counts. Weight gradients are f32 whatever the dtype. */
static oslo_dtype g_dt = OSLO_DTYPE_F32;
static double g_tol = TOL;
typedef struct {
  int rank, world, tp;
  char config[512];
  const char *mode;
  const char *dir;
  int bad_rank;
  th_state st;
} rank_args;

/* ------------------------------------------------------------------------ */
/* Reference math (double)                                                    */
/* ------------------------------------------------------------------------ */

/* y[r,o] = sum_i x[r,i] w[o,i] + b[o] */
static void ref_linear(double *y, const float *x, const float *w, const float *b, int rows, int in,
                       int out) {
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < out; ++o) {
      double s = b ? b[o] : 0;
      for (int i = 0; i < in; ++i) s += (double)x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
}

/* dx = dy w ; dw = dy^T x ; db = colsum dy */
static void ref_linear_backward(double *dx, double *dw, double *db, const float *x, const float *w,
                                const float *dy, int rows, int in, int out) {
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
static void slice_cols_d(double *dst, const double *src, int rows, int cols, int c0, int nc) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < nc; ++c) dst[r * nc + c] = src[r * cols + c0 + c];
}
static void slice_cols_f(float *dst, const float *src, int rows, int cols, int c0, int nc) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < nc; ++c) dst[r * nc + c] = src[r * cols + c0 + c];
}

static oslo_tensor *mk(th_state *s, oslo_context *ctx, oslo_dtype dt, int ndim, int64_t a,
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

static float rt_round(float f, oslo_dtype dt) {
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
static void rt_fill(float *p, size_t n, uint64_t seed) {
  th_fill(p, n, seed);
  for (size_t i = 0; i < n; ++i) p[i] = rt_round(p[i], g_dt);
}

static uint16_t to_half_bits(float f, oslo_dtype dt) {
  uint32_t u;
  f = rt_round(f, dt);
  memcpy(&u, &f, 4);
  if (dt == OSLO_DTYPE_BF16) return (uint16_t)(u >> 16);
  /* f16 from a rounded normal f32 (|f| in [2^-14, 65504]) or zero. */
  uint32_t sign = (u >> 16) & 0x8000u, exp = (u >> 23) & 0xffu, man = (u >> 13) & 0x3ffu;
  if (exp == 0) return (uint16_t)sign;
  return (uint16_t)(sign | ((exp - 127 + 15) << 10) | man);
}

static float from_half_bits(uint16_t h, oslo_dtype dt) {
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
static oslo_tensor *mka(th_state *s, oslo_context *ctx, int ndim, int64_t a, int64_t b, int64_t c,
                        const float *data) {
  if (g_dt == OSLO_DTYPE_F32 || !data) return mk(s, ctx, g_dt, ndim, a, b, c, data);
  int64_t n = a * (ndim > 1 ? b : 1) * (ndim > 2 ? c : 1);
  uint16_t *h = malloc((size_t)n * 2 + 2);
  for (int64_t i = 0; i < n; ++i) h[i] = to_half_bits(data[i], g_dt);
  oslo_tensor *t = mk(s, ctx, g_dt, ndim, a, b, c, h);
  free(h);
  return t;
}

/* Copies n elements of a float tensor of any dtype to dst as f32. */
static void get_f32(th_state *s, float *dst, size_t n, const oslo_tensor *t) {
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

/* ------------------------------------------------------------------------ */
/* Layers                                                                     */
/* ------------------------------------------------------------------------ */

enum { ROWS_A = 2, ROWS_B = 3, ROWS = ROWS_A * ROWS_B, IN = 8, OUT = 12 };

static void test_column(th_state *s, oslo_context *ctx, int tp, int tr, int gather) {
  float w[OUT * IN], b[OUT], x[ROWS * IN], dyf[ROWS * OUT];
  rt_fill(w, OUT * IN, 1);
  rt_fill(b, OUT, 2);
  rt_fill(x, ROWS * IN, 3);
  rt_fill(dyf, ROWS * OUT, 4);
  double y[ROWS * OUT], dx[ROWS * IN], dw[OUT * IN], db[OUT];
  ref_linear(y, x, w, b, ROWS, IN, OUT);
  ref_linear_backward(dx, dw, db, x, w, dyf, ROWS, IN, OUT);
  const int ol = OUT / tp, out_cols = gather ? OUT : ol;

  oslo_parallel_linear_options o;
  oslo_parallel_linear_options_init(&o, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION);
  o.dtype = g_dt;
  o.kind = OSLO_LINEAR_COLUMN;
  o.in_features = IN;
  o.out_features = OUT;
  o.gather_output = gather;
  oslo_parallel_linear *l = NULL;
  TH_OK(s, oslo_parallel_linear_create(ctx, &o, &l));
  oslo_tensor *tw = mka(s, ctx, 2, OUT, IN, 0, w), *tb = mka(s, ctx, 1, OUT, 0, 0, b);
  TH_OK(s, oslo_parallel_linear_load_full(l, tw, tb));
  oslo_tensor *tx = mka(s, ctx, 3, ROWS_A, ROWS_B, IN, x);
  oslo_tensor *ty = mka(s, ctx, 3, ROWS_A, ROWS_B, out_cols, NULL);
  TH_OK(s, oslo_parallel_linear_forward(l, tx, ty));
  float got[ROWS * OUT];
  double want[ROWS * OUT];
  get_f32(s, got, ROWS * out_cols, ty);
  if (gather)
    memcpy(want, y, sizeof y);
  else
    slice_cols_d(want, y, ROWS, OUT, tr * ol, ol);
  CLOSE(s, got, want, ROWS * out_cols, gather ? "column(gather) forward" : "column forward");

  /* backward: grad_output is the full dY (gather) or this rank's slice */
  float dyl[ROWS * OUT];
  if (gather)
    memcpy(dyl, dyf, sizeof dyf);
  else
    slice_cols_f(dyl, dyf, ROWS, OUT, tr * ol, ol);
  oslo_tensor *tdy = mka(s, ctx, 3, ROWS_A, ROWS_B, out_cols, dyl);
  oslo_tensor *tdx = mka(s, ctx, 3, ROWS_A, ROWS_B, IN, NULL);
  TH_OK(s, oslo_parallel_linear_backward(l, tx, tdy, tdx));
  float gdx[ROWS * IN];
  get_f32(s, gdx, ROWS * IN, tdx);
  CLOSE(s, gdx, dx, ROWS * IN, "column grad_input");
  oslo_tensor *gw = NULL, *gb = NULL;
  TH_OK(s, oslo_parallel_linear_params(l, NULL, NULL, &gw, &gb));
  float ggw[OUT * IN], ggb[OUT];
  get_f32(s, ggw, ol * IN, gw);
  get_f32(s, ggb, ol, gb);
  CLOSE(s, ggw, dw + tr * ol * IN, ol * IN, "column grad_weight");
  CLOSE(s, ggb, db + tr * ol, ol, "column grad_bias");

  /* A second backward accumulates; zero_grad clears. */
  TH_OK(s, oslo_parallel_linear_backward(l, tx, tdy, NULL));
  get_f32(s, ggw, ol * IN, gw);
  double dw2[OUT * IN];
  for (int i = 0; i < ol * IN; ++i) dw2[i] = 2 * dw[tr * ol * IN + i];
  CLOSE(s, ggw, dw2, ol * IN, "column grad_weight accumulates");
  TH_OK(s, oslo_parallel_linear_zero_grad(l));
  get_f32(s, ggw, ol * IN, gw);
  int zero = 1;
  for (int i = 0; i < ol * IN; ++i) zero &= ggw[i] == 0.f;
  TH_CHECK(s, zero, "zero_grad leaves non-zero gradients");

  oslo_tensor_destroy(tw);
  oslo_tensor_destroy(tb);
  oslo_tensor_destroy(tx);
  oslo_tensor_destroy(ty);
  oslo_tensor_destroy(tdy);
  oslo_tensor_destroy(tdx);
  oslo_parallel_linear_destroy(l);
}

static void test_row(th_state *s, oslo_context *ctx, int tp, int tr, int input_is_parallel) {
  float w[OUT * IN], b[OUT], x[ROWS * IN], dy[ROWS * OUT];
  rt_fill(w, OUT * IN, 11);
  rt_fill(b, OUT, 12);
  rt_fill(x, ROWS * IN, 13);
  rt_fill(dy, ROWS * OUT, 14);
  double y[ROWS * OUT], dx[ROWS * IN], dw[OUT * IN], db[OUT];
  ref_linear(y, x, w, b, ROWS, IN, OUT);
  ref_linear_backward(dx, dw, db, x, w, dy, ROWS, IN, OUT);
  const int il = IN / tp, in_cols = input_is_parallel ? il : IN;

  oslo_parallel_linear_options o;
  oslo_parallel_linear_options_init(&o, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION);
  o.dtype = g_dt;
  o.kind = OSLO_LINEAR_ROW;
  o.in_features = IN;
  o.out_features = OUT;
  o.input_is_parallel = input_is_parallel;
  oslo_parallel_linear *l = NULL;
  TH_OK(s, oslo_parallel_linear_create(ctx, &o, &l));
  /* Load the shard directly this time: columns [tr*il, (tr+1)*il) of W. */
  float wl[OUT * IN];
  slice_cols_f(wl, w, OUT, IN, tr * il, il);
  oslo_tensor *tw = mka(s, ctx, 2, OUT, il, 0, wl), *tb = mka(s, ctx, 1, OUT, 0, 0, b);
  TH_OK(s, oslo_parallel_linear_load_shard(l, tw, tb));

  float xin[ROWS * IN];
  if (input_is_parallel)
    slice_cols_f(xin, x, ROWS, IN, tr * il, il);
  else
    memcpy(xin, x, sizeof x);
  oslo_tensor *tx32 = mka(s, ctx, 2, ROWS, in_cols, 0, xin);
  oslo_tensor *ty = mka(s, ctx, 2, ROWS, OUT, 0, NULL);
  TH_OK(s, oslo_parallel_linear_forward(l, tx32, ty));
  float got[ROWS * OUT];
  get_f32(s, got, ROWS * OUT, ty);
  CLOSE(s, got, y, ROWS * OUT, input_is_parallel ? "row forward" : "row(split input) forward");

  oslo_tensor *tdy = mka(s, ctx, 2, ROWS, OUT, 0, dy);
  oslo_tensor *tdx = mka(s, ctx, 2, ROWS, in_cols, 0, NULL);
  TH_OK(s, oslo_parallel_linear_backward(l, tx32, tdy, tdx));
  float gdx[ROWS * IN];
  double wdx[ROWS * IN];
  get_f32(s, gdx, ROWS * in_cols, tdx);
  if (input_is_parallel)
    slice_cols_d(wdx, dx, ROWS, IN, tr * il, il);
  else
    memcpy(wdx, dx, sizeof dx);
  CLOSE(s, gdx, wdx, ROWS * in_cols, "row grad_input");
  oslo_tensor *gw = NULL, *gb = NULL;
  TH_OK(s, oslo_parallel_linear_params(l, NULL, NULL, &gw, &gb));
  float ggw[OUT * IN], ggb[OUT];
  double wdw[OUT * IN];
  get_f32(s, ggw, OUT * il, gw);
  get_f32(s, ggb, OUT, gb);
  slice_cols_d(wdw, dw, OUT, IN, tr * il, il);
  CLOSE(s, ggw, wdw, OUT * il, "row grad_weight");
  CLOSE(s, ggb, db, OUT, "row grad_bias");
  oslo_tensor_destroy(tw);
  oslo_tensor_destroy(tb);
  oslo_tensor_destroy(tx32);
  oslo_tensor_destroy(ty);
  oslo_tensor_destroy(tdy);
  oslo_tensor_destroy(tdx);
  oslo_parallel_linear_destroy(l);
}

/* The MLP block of a transformer: column (no gather) -> ReLU -> row (parallel input). */
enum { HID = 8, FF = 16 };
static void test_mlp(th_state *s, oslo_context *ctx, int tp, int tr) {
  float w1[FF * HID], b1[FF], w2[HID * FF], b2[HID], x[ROWS * HID], dy[ROWS * HID];
  rt_fill(w1, FF * HID, 21);
  rt_fill(b1, FF, 22);
  rt_fill(w2, HID * FF, 23);
  rt_fill(b2, HID, 24);
  rt_fill(x, ROWS * HID, 25);
  rt_fill(dy, ROWS * HID, 26);
  /* reference */
  double h[ROWS * FF], y[ROWS * HID];
  ref_linear(h, x, w1, b1, ROWS, HID, FF);
  float hr[ROWS * FF];
  for (int i = 0; i < ROWS * FF; ++i) hr[i] = h[i] > 0 ? (float)h[i] : 0.f;
  ref_linear(y, hr, w2, b2, ROWS, FF, HID);
  double dh[ROWS * FF], dw2[HID * FF], db2[HID], dx[ROWS * HID], dw1[FF * HID], db1[FF];
  ref_linear_backward(dh, dw2, db2, hr, w2, dy, ROWS, FF, HID);
  float dhr[ROWS * FF];
  for (int i = 0; i < ROWS * FF; ++i) dhr[i] = h[i] > 0 ? (float)dh[i] : 0.f;
  ref_linear_backward(dx, dw1, db1, x, w1, dhr, ROWS, HID, FF);

  const int fl = FF / tp;
  oslo_parallel_linear_options o1, o2;
  oslo_parallel_linear_options_init(&o1, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION);
  oslo_parallel_linear_options_init(&o2, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION);
  o1.kind = OSLO_LINEAR_COLUMN;
  o1.in_features = HID;
  o1.out_features = FF;
  o2.kind = OSLO_LINEAR_ROW;
  o2.in_features = FF;
  o2.out_features = HID;
  o1.dtype = o2.dtype = g_dt;
  oslo_parallel_linear *l1 = NULL, *l2 = NULL;
  TH_OK(s, oslo_parallel_linear_create(ctx, &o1, &l1));
  TH_OK(s, oslo_parallel_linear_create(ctx, &o2, &l2));
  oslo_tensor *tw1 = mka(s, ctx, 2, FF, HID, 0, w1), *tb1 = mka(s, ctx, 1, FF, 0, 0, b1);
  oslo_tensor *tw2 = mka(s, ctx, 2, HID, FF, 0, w2), *tb2 = mka(s, ctx, 1, HID, 0, 0, b2);
  TH_OK(s, oslo_parallel_linear_load_full(l1, tw1, tb1));
  TH_OK(s, oslo_parallel_linear_load_full(l2, tw2, tb2));
  oslo_tensor *tx = mka(s, ctx, 2, ROWS, HID, 0, x);
  /* The hidden activations stay f32 (ReLU is applied on the host): the
   * layers also take and produce a dtype other than their parameters'. */
  oslo_tensor *th = mk(s, ctx, OSLO_DTYPE_F32, 2, ROWS, fl, 0, NULL);
  oslo_tensor *thr = mk(s, ctx, OSLO_DTYPE_F32, 2, ROWS, fl, 0, NULL);
  oslo_tensor *ty = mka(s, ctx, 2, ROWS, HID, 0, NULL);
  TH_OK(s, oslo_parallel_linear_forward(l1, tx, th));
  float hl[ROWS * FF];
  get_f32(s, hl, ROWS * fl, th);
  for (int i = 0; i < ROWS * fl; ++i) hl[i] = hl[i] > 0 ? hl[i] : 0.f;
  TH_OK(s, oslo_tensor_copy_from_host(thr, hl, ROWS * fl * sizeof(float)));
  TH_OK(s, oslo_parallel_linear_forward(l2, thr, ty));
  float got[ROWS * HID];
  get_f32(s, got, ROWS * HID, ty);
  CLOSE(s, got, y, ROWS * HID, "mlp forward");

  oslo_tensor *tdy = mka(s, ctx, 2, ROWS, HID, 0, dy);
  oslo_tensor *tdh = mk(s, ctx, OSLO_DTYPE_F32, 2, ROWS, fl, 0, NULL);
  oslo_tensor *tdx = mka(s, ctx, 2, ROWS, HID, 0, NULL);
  TH_OK(s, oslo_parallel_linear_backward(l2, thr, tdy, tdh));
  float dhl[ROWS * FF], hpre[ROWS * FF];
  get_f32(s, dhl, ROWS * fl, tdh);
  get_f32(s, hpre, ROWS * fl, th);
  for (int i = 0; i < ROWS * fl; ++i) dhl[i] = hpre[i] > 0 ? dhl[i] : 0.f;
  TH_OK(s, oslo_tensor_copy_from_host(tdh, dhl, ROWS * fl * sizeof(float)));
  TH_OK(s, oslo_parallel_linear_backward(l1, tx, tdh, tdx));
  float gdx[ROWS * HID];
  get_f32(s, gdx, ROWS * HID, tdx);
  CLOSE(s, gdx, dx, ROWS * HID, "mlp grad_input");
  oslo_tensor *g1 = NULL, *g2 = NULL;
  TH_OK(s, oslo_parallel_linear_params(l1, NULL, NULL, &g1, NULL));
  TH_OK(s, oslo_parallel_linear_params(l2, NULL, NULL, &g2, NULL));
  float gg1[FF * HID], gg2[HID * FF];
  double w2l[HID * FF];
  get_f32(s, gg1, fl * HID, g1);
  get_f32(s, gg2, HID * fl, g2);
  CLOSE(s, gg1, dw1 + tr * fl * HID, fl * HID, "mlp up grad_weight");
  slice_cols_d(w2l, dw2, HID, FF, tr * fl, fl);
  CLOSE(s, gg2, w2l, HID * fl, "mlp down grad_weight");

  /* Global grad norm of the whole block equals the unsharded one. */
  oslo_param_set *ps = NULL;
  TH_OK(s, oslo_param_set_create(ctx, &ps));
  TH_OK(s, oslo_param_set_add_linear(ps, "mlp.up", l1));
  TH_OK(s, oslo_param_set_add_linear(ps, "mlp.down", l2));
  double sq = 0;
  for (int i = 0; i < FF * HID; ++i) sq += dw1[i] * dw1[i] + dw2[i] * dw2[i];
  for (int i = 0; i < FF; ++i) sq += db1[i] * db1[i];
  for (int i = 0; i < HID; ++i) sq += db2[i] * db2[i];
  double want = sqrt(sq), got_norm = -1;
  TH_OK(s, oslo_param_set_clip_grad_norm(ps, 0.0, 2.0, &got_norm));
  TH_CHECK(s, fabs(got_norm - want) <= g_tol * want, "grad norm %.9g, unsharded %.9g", got_norm,
           want);
  double maxabs = 0;
  for (int i = 0; i < FF * HID; ++i) {
    if (fabs(dw1[i]) > maxabs) maxabs = fabs(dw1[i]);
    if (fabs(dw2[i]) > maxabs) maxabs = fabs(dw2[i]);
  }
  for (int i = 0; i < FF; ++i)
    if (fabs(db1[i]) > maxabs) maxabs = fabs(db1[i]);
  for (int i = 0; i < HID; ++i)
    if (fabs(db2[i]) > maxabs) maxabs = fabs(db2[i]);
  double inf_norm = -1;
  TH_OK(s, oslo_param_set_clip_grad_norm(ps, 0.0, INFINITY, &inf_norm));
  TH_CHECK(s, fabs(inf_norm - maxabs) <= (g_dt == OSLO_DTYPE_F32 ? 1e-6 : g_tol) * maxabs,
           "inf norm %.9g, unsharded %.9g", inf_norm, maxabs);
  /* Clip to half: gradients scale by max_norm / (norm + 1e-6). */
  double max_norm = want / 2, n2 = -1;
  TH_OK(s, oslo_param_set_clip_grad_norm(ps, max_norm, 2.0, &n2));
  get_f32(s, gg1, fl * HID, g1);
  double scaled[FF * HID];
  for (int i = 0; i < fl * HID; ++i)
    scaled[i] = dw1[tr * fl * HID + i] * (max_norm / (want + 1e-6));
  CLOSE(s, gg1, scaled, fl * HID, "clipped grad_weight");
  double n3 = -1;
  TH_OK(s, oslo_param_set_clip_grad_norm(ps, 0.0, 2.0, &n3));
  TH_CHECK(s, fabs(n3 - max_norm) <= g_tol * max_norm, "norm after clipping %.9g, want %.9g", n3,
           max_norm);
  oslo_param_set_destroy(ps);

  oslo_tensor *ts[] = {tw1, tb1, tw2, tb2, tx, th, thr, ty, tdy, tdh, tdx};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) oslo_tensor_destroy(ts[i]);
  oslo_parallel_linear_destroy(l1);
  oslo_parallel_linear_destroy(l2);
}

/* Vocabulary 13 is not divisible by 2 or 4: the last rank holds padding. */
enum { VOCAB = 13, EH = 5, NTOK = 7 };

static void test_embedding(th_state *s, oslo_context *ctx, int tp, int tr) {
  float w[VOCAB * EH], dy[NTOK * EH];
  th_fill(w, VOCAB * EH, 31);
  th_fill(dy, NTOK * EH, 32);
  int64_t ids[NTOK] = {0, 12, 5, 12, 6, 7, 3};
  oslo_parallel_embedding *e = NULL;
  oslo_parallel_embedding_options eo;
  oslo_parallel_embedding_options_init(&eo, OSLO_PARALLEL_EMBEDDING_OPTIONS_VERSION);
  eo.vocab_size = VOCAB;
  eo.hidden_size = EH;
  TH_OK(s, oslo_parallel_embedding_create(ctx, &eo, &e));
  int64_t start = -1, end = -1, local = -1;
  TH_OK(s, oslo_parallel_embedding_vocab_range(e, &start, &end, &local));
  int64_t per = (VOCAB + tp - 1) / tp;
  TH_CHECK(
      s, local == per && start == per * tr && end == (start + per < VOCAB ? start + per : VOCAB),
      "vocab range [%lld, %lld) local %lld", (long long)start, (long long)end, (long long)local);
  oslo_tensor *tw = mk(s, ctx, OSLO_DTYPE_F32, 2, VOCAB, EH, 0, w);
  TH_OK(s, oslo_parallel_embedding_load_full(e, tw));
  oslo_tensor *tid = mk(s, ctx, OSLO_DTYPE_I64, 1, NTOK, 0, 0, ids);
  oslo_tensor *ty = mk(s, ctx, OSLO_DTYPE_F32, 2, NTOK, EH, 0, NULL);
  TH_OK(s, oslo_parallel_embedding_forward(e, tid, ty));
  float got[NTOK * EH];
  double want[NTOK * EH];
  get_f32(s, got, NTOK * EH, ty);
  for (int t = 0; t < NTOK; ++t)
    for (int h = 0; h < EH; ++h) want[t * EH + h] = w[ids[t] * EH + h];
  CLOSE(s, got, want, NTOK * EH, "embedding forward");

  oslo_tensor *tdy = mk(s, ctx, OSLO_DTYPE_F32, 2, NTOK, EH, 0, dy);
  TH_OK(s, oslo_parallel_embedding_backward(e, tid, tdy));
  oslo_tensor *gw = NULL;
  TH_OK(s, oslo_parallel_embedding_params(e, NULL, &gw));
  float ggw[VOCAB * EH + 4 * EH];
  double wgw[VOCAB * EH + 4 * EH];
  get_f32(s, ggw, local * EH, gw);
  for (int64_t r = 0; r < local; ++r)
    for (int h = 0; h < EH; ++h) {
      double acc = 0;
      for (int t = 0; t < NTOK; ++t)
        if (ids[t] == start + r) acc += dy[t * EH + h];
      wgw[r * EH + h] = acc; /* padding rows (start + r >= VOCAB) must stay 0 */
    }
  CLOSE(s, ggw, wgw, local * EH, "embedding grad_weight");

  /* An id outside the vocabulary is an error naming it, on every rank. */
  int64_t bad[NTOK] = {0, 1, 2, 13, 4, 5, 6};
  TH_OK(s, oslo_tensor_copy_from_host(tid, bad, sizeof bad));
  oslo_status st = oslo_parallel_embedding_forward(e, tid, ty);
  TH_CHECK(s, st == OSLO_ERR_INVALID_ARGUMENT && strstr(oslo_last_error(), "13"),
           "bad id gave %s: %s", oslo_status_string(st), oslo_last_error());
  oslo_tensor_destroy(tw);
  oslo_tensor_destroy(tid);
  oslo_tensor_destroy(ty);
  oslo_tensor_destroy(tdy);
  oslo_parallel_embedding_destroy(e);
}

static void test_cross_entropy(th_state *s, oslo_context *ctx, int tp, int tr) {
  float logits[NTOK * VOCAB];
  th_fill(logits, NTOK * VOCAB, 41);
  for (int i = 0; i < NTOK * VOCAB; ++i) logits[i] *= 4;
  int32_t labels[NTOK] = {0, 12, -100, 6, 7, 3, 12};
  /* reference */
  double loss[NTOK], grad[NTOK * VOCAB], mean = 0;
  int counted = 0;
  for (int t = 0; t < NTOK; ++t)
    if (labels[t] != -100) counted++;
  for (int t = 0; t < NTOK; ++t) {
    double m = -1e300, se = 0;
    for (int v = 0; v < VOCAB; ++v) m = fmax(m, logits[t * VOCAB + v]);
    for (int v = 0; v < VOCAB; ++v) se += exp(logits[t * VOCAB + v] - m);
    if (labels[t] == -100) {
      loss[t] = 0;
      for (int v = 0; v < VOCAB; ++v) grad[t * VOCAB + v] = 0;
      continue;
    }
    loss[t] = log(se) + m - logits[t * VOCAB + labels[t]];
    mean += loss[t] / counted;
    for (int v = 0; v < VOCAB; ++v)
      grad[t * VOCAB + v] = (exp(logits[t * VOCAB + v] - m) / se - (v == labels[t])) / counted;
  }
  const int per = (VOCAB + tp - 1) / tp, start = per * tr;
  float local[NTOK * VOCAB];
  double wgrad[NTOK * VOCAB];
  for (int t = 0; t < NTOK; ++t)
    for (int c = 0; c < per; ++c) {
      int v = start + c;
      /* Padding columns hold a huge logit: it must never win. */
      local[t * per + c] = v < VOCAB ? logits[t * VOCAB + v] : 1e4f;
      wgrad[t * per + c] = v < VOCAB ? grad[t * VOCAB + v] : 0;
    }
  oslo_tensor *tl = mk(s, ctx, OSLO_DTYPE_F32, 2, NTOK, per, 0, local);
  oslo_tensor *tlab = mk(s, ctx, OSLO_DTYPE_I32, 1, NTOK, 0, 0, labels);
  oslo_tensor *tloss = mk(s, ctx, OSLO_DTYPE_F32, 1, NTOK, 0, 0, NULL);
  oslo_tensor *tg = mk(s, ctx, OSLO_DTYPE_F32, 2, NTOK, per, 0, NULL);
  float mean_got = -1;
  oslo_vocab_parallel_cross_entropy_options xo;
  oslo_vocab_parallel_cross_entropy_options_init(&xo,
                                                 OSLO_VOCAB_PARALLEL_CROSS_ENTROPY_OPTIONS_VERSION);
  xo.vocab_size = VOCAB;
  TH_OK(s, oslo_context_vocab_parallel_cross_entropy(ctx, tl, tlab, &xo, tloss, tg, &mean_got));
  float gl[NTOK], gg[NTOK * VOCAB];
  get_f32(s, gl, NTOK, tloss);
  get_f32(s, gg, NTOK * per, tg);
  CLOSE(s, gl, loss, NTOK, "cross-entropy losses");
  TH_CHECK(s, fabs(mean_got - mean) <= TOL * fabs(mean), "mean loss %.8g, unsharded %.8g", mean_got,
           mean);
  CLOSE(s, gg, wgrad, NTOK * per, "cross-entropy grad");
  /* A label outside the vocabulary (and not ignore_index) is an error. */
  int32_t bad[NTOK] = {0, 1, 2, 3, 4, 5, 13};
  TH_OK(s, oslo_tensor_copy_from_host(tlab, bad, sizeof bad));
  oslo_status st =
      oslo_context_vocab_parallel_cross_entropy(ctx, tl, tlab, &xo, NULL, NULL, &mean_got);
  TH_CHECK(s, st == OSLO_ERR_INVALID_ARGUMENT, "bad label gave %s", oslo_status_string(st));
  oslo_tensor_destroy(tl);
  oslo_tensor_destroy(tlab);
  oslo_tensor_destroy(tloss);
  oslo_tensor_destroy(tg);
}

static void run_layers(th_state *s, oslo_context *ctx, int tp, int tr) {
  test_column(s, ctx, tp, tr, 0);
  test_column(s, ctx, tp, tr, 1);
  test_row(s, ctx, tp, tr, 1);
  test_row(s, ctx, tp, tr, 0);
  test_mlp(s, ctx, tp, tr);
  test_embedding(s, ctx, tp, tr);
  test_cross_entropy(s, ctx, tp, tr);
}

/* ------------------------------------------------------------------------ */
/* Collectives: inputs are formulas of the rank, results exactly predictable  */
/* ------------------------------------------------------------------------ */

static void run_collectives(th_state *s, oslo_context *ctx) {
  oslo_group groups[] = {OSLO_GROUP_WORLD, OSLO_GROUP_TENSOR, OSLO_GROUP_DATA, OSLO_GROUP_PIPELINE};
  for (size_t gi = 0; gi < 4; ++gi) {
    oslo_group g = groups[gi];
    int r = -1, n = -1;
    TH_OK(s, oslo_context_rank(ctx, g, &r));
    TH_OK(s, oslo_context_size(ctx, g, &n));
    enum { N = 1000 };
    static __thread float buf[N * 8], out[N * 8];
    oslo_reduce_op ops[] = {OSLO_REDUCE_SUM, OSLO_REDUCE_AVG, OSLO_REDUCE_MAX, OSLO_REDUCE_MIN};
    for (int oi = 0; oi < 4; ++oi) {
      for (int i = 0; i < N; ++i) buf[i] = (float)((r + 1) * (i % 7 + 1));
      oslo_tensor *t = mk(s, ctx, OSLO_DTYPE_F32, 1, N, 0, 0, buf);
      TH_OK(s, oslo_context_all_reduce(ctx, g, ops[oi], t));
      get_f32(s, out, N, t);
      int ok = 1;
      for (int i = 0; i < N; ++i) {
        double k = i % 7 + 1, want;
        double sum = k * n * (n + 1) / 2.0;
        switch (ops[oi]) {
          case OSLO_REDUCE_SUM: want = sum; break;
          case OSLO_REDUCE_AVG: want = sum / n; break;
          case OSLO_REDUCE_MAX: want = k * n; break;
          default: want = k; break;
        }
        ok &= fabs(out[i] - want) <= 1e-6 * want;
      }
      TH_CHECK(s, ok, "all_reduce op %d on group %d", ops[oi], g);
      oslo_tensor_destroy(t);
    }
    /* Integer AVG truncates toward zero (documented): -7 / 2 is -3, not -4. */
    int32_t iv[3] = {-7, 7, -1}, iz[3] = {0, 0, 0}, igot[3];
    oslo_tensor *ti = mk(s, ctx, OSLO_DTYPE_I32, 1, 3, 0, 0, r == 0 ? iv : iz);
    TH_OK(s, oslo_context_all_reduce(ctx, g, OSLO_REDUCE_AVG, ti));
    TH_OK(s, oslo_tensor_copy_to_host(ti, igot, sizeof igot));
    TH_CHECK(s, igot[0] == -7 / n && igot[1] == 7 / n && igot[2] == -1 / n,
             "i32 avg on group %d of %d: got %d %d %d", g, n, igot[0], igot[1], igot[2]);
    oslo_tensor_destroy(ti);
    /* all_gather: rank r contributes r*100 + i */
    for (int i = 0; i < N; ++i) buf[i] = (float)(r * 100 + i % 100);
    oslo_tensor *in = mk(s, ctx, OSLO_DTYPE_F32, 1, N, 0, 0, buf);
    oslo_tensor *go = mk(s, ctx, OSLO_DTYPE_F32, 2, n, N, 0, NULL);
    TH_OK(s, oslo_context_all_gather(ctx, g, in, go));
    get_f32(s, out, (size_t)n * N, go);
    int ok = 1;
    for (int q = 0; q < n; ++q)
      for (int i = 0; i < N; ++i) ok &= out[q * N + i] == (float)(q * 100 + i % 100);
    TH_CHECK(s, ok, "all_gather on group %d", g);
    /* reduce_scatter: input block q of rank r = r + q; output = sum_r (r + rank) */
    for (int q = 0; q < n; ++q)
      for (int i = 0; i < N; ++i) buf[q * N + i] = (float)(r + q);
    oslo_tensor *rin = mk(s, ctx, OSLO_DTYPE_F32, 1, (int64_t)n * N, 0, 0, buf);
    oslo_tensor *rout = mk(s, ctx, OSLO_DTYPE_F32, 1, N, 0, 0, NULL);
    TH_OK(s, oslo_context_reduce_scatter(ctx, g, OSLO_REDUCE_SUM, rin, rout));
    get_f32(s, out, N, rout);
    ok = 1;
    for (int i = 0; i < N; ++i) ok &= out[i] == (float)(n * (n - 1) / 2 + n * r);
    TH_CHECK(s, ok, "reduce_scatter on group %d", g);
    /* broadcast from the last rank */
    for (int i = 0; i < N; ++i) buf[i] = (float)(r == n - 1 ? i : -1);
    oslo_tensor *bt = mk(s, ctx, OSLO_DTYPE_F32, 1, N, 0, 0, buf);
    TH_OK(s, oslo_context_broadcast(ctx, g, n - 1, bt));
    get_f32(s, out, N, bt);
    ok = 1;
    for (int i = 0; i < N; ++i) ok &= out[i] == (float)i;
    TH_CHECK(s, ok, "broadcast on group %d", g);
    /* send/recv around a ring */
    if (n > 1) {
      for (int i = 0; i < N; ++i) buf[i] = (float)(r * 1000 + i);
      oslo_tensor *st = mk(s, ctx, OSLO_DTYPE_F32, 1, N, 0, 0, buf);
      oslo_tensor *rt = mk(s, ctx, OSLO_DTYPE_F32, 1, N, 0, 0, NULL);
      int next = (r + 1) % n, prev = (r + n - 1) % n;
      if (r % 2 == 0) {
        TH_OK(s, oslo_context_send(ctx, g, next, st));
        TH_OK(s, oslo_context_recv(ctx, g, prev, rt));
      } else {
        TH_OK(s, oslo_context_recv(ctx, g, prev, rt));
        TH_OK(s, oslo_context_send(ctx, g, next, st));
      }
      get_f32(s, out, N, rt);
      ok = 1;
      for (int i = 0; i < N; ++i) ok &= out[i] == (float)(prev * 1000 + i);
      TH_CHECK(s, ok, "send/recv ring on group %d", g);
      oslo_status bad = oslo_context_send(ctx, g, r, st);
      TH_CHECK(s, bad == OSLO_ERR_INVALID_ARGUMENT, "send to self gave %s",
               oslo_status_string(bad));
      oslo_tensor_destroy(st);
      oslo_tensor_destroy(rt);
    }
    TH_OK(s, oslo_context_barrier(ctx, g));
    /* integer and bf16 all-reduce */
    int32_t ib[N];
    for (int i = 0; i < N; ++i) ib[i] = r * i;
    oslo_tensor *it = mk(s, ctx, OSLO_DTYPE_I32, 1, N, 0, 0, ib);
    TH_OK(s, oslo_context_all_reduce(ctx, g, OSLO_REDUCE_SUM, it));
    TH_OK(s, oslo_tensor_copy_to_host(it, ib, sizeof ib));
    ok = 1;
    for (int i = 0; i < N; ++i) ok &= ib[i] == i * n * (n - 1) / 2;
    TH_CHECK(s, ok, "i32 all_reduce on group %d", g);
    uint16_t hb[N];
    for (int i = 0; i < N; ++i) hb[i] = 0x3f80; /* bf16 1.0 */
    oslo_tensor *bft = mk(s, ctx, OSLO_DTYPE_BF16, 1, N, 0, 0, hb);
    TH_OK(s, oslo_context_all_reduce(ctx, g, OSLO_REDUCE_SUM, bft));
    TH_OK(s, oslo_tensor_copy_to_host(bft, hb, sizeof hb));
    float want_bf = (float)n;
    uint32_t bits;
    memcpy(&bits, &want_bf, 4);
    ok = 1;
    for (int i = 0; i < N; ++i) ok &= hb[i] == (uint16_t)(bits >> 16);
    TH_CHECK(s, ok, "bf16 all_reduce on group %d", g);
    oslo_tensor *ts[] = {in, go, rin, rout, bt, it, bft};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; ++i) oslo_tensor_destroy(ts[i]);
  }
}

static void run_topology(th_state *s, oslo_context *ctx, int tp) {
  int world = 0, rank = 0, t = 0, d = 0, p = 0, ts = 0, ds = 0, ps = 0;
  TH_OK(s, oslo_context_size(ctx, OSLO_GROUP_WORLD, &world));
  TH_OK(s, oslo_context_rank(ctx, OSLO_GROUP_WORLD, &rank));
  TH_OK(s, oslo_context_rank(ctx, OSLO_GROUP_TENSOR, &t));
  TH_OK(s, oslo_context_rank(ctx, OSLO_GROUP_DATA, &d));
  TH_OK(s, oslo_context_rank(ctx, OSLO_GROUP_PIPELINE, &p));
  TH_OK(s, oslo_context_size(ctx, OSLO_GROUP_TENSOR, &ts));
  TH_OK(s, oslo_context_size(ctx, OSLO_GROUP_DATA, &ds));
  TH_OK(s, oslo_context_size(ctx, OSLO_GROUP_PIPELINE, &ps));
  TH_CHECK(s, ts == tp && ts * ds * ps == world, "sizes tp %d dp %d pp %d world %d", ts, ds, ps,
           world);
  TH_CHECK(s, rank == p * ds * ts + d * ts + t, "rank %d is not pp %d * %d + dp %d * %d + tp %d",
           rank, p, ds * ts, d, ts, t);
  /* The tensor group's members are consecutive ranks: a SUM of global ranks proves it. */
  int32_t v = rank;
  oslo_tensor *x = mk(s, ctx, OSLO_DTYPE_I32, 1, 1, 0, 0, &v);
  TH_OK(s, oslo_context_all_reduce(ctx, OSLO_GROUP_TENSOR, OSLO_REDUCE_SUM, x));
  TH_OK(s, oslo_tensor_copy_to_host(x, &v, 4));
  int base = rank - t;
  TH_CHECK(s, v == base * ts + ts * (ts - 1) / 2, "tensor group sum %d", v);
  oslo_tensor_destroy(x);
  const char *backend = NULL, *transport = NULL;
  TH_OK(s, oslo_context_backend(ctx, OSLO_GROUP_WORLD, &backend, &transport));
  TH_CHECK(s, backend && strcmp(backend, "cpu") == 0, "backend %s", backend ? backend : "(null)");
  TH_CHECK(s, transport && strcmp(transport, world > 1 ? "shm" : "self") == 0,
           "world transport is %s", transport ? transport : "(null)");
}

/* ------------------------------------------------------------------------ */
/* Checkpoints: save at one TP size, load at another                          */
/* ------------------------------------------------------------------------ */

enum { CK_IN = 12, CK_OUT = 12, CK_VOCAB = 13, CK_H = 4, CK_REP = 6 };

static void ckpt_full(float *col_w, float *col_b, float *row_w, float *row_b, float *emb,
                      float *rep) {
  th_fill(col_w, CK_OUT * CK_IN, 51);
  th_fill(col_b, CK_OUT, 52);
  th_fill(row_w, CK_OUT * CK_IN, 53);
  th_fill(row_b, CK_OUT, 54);
  th_fill(emb, CK_VOCAB * CK_H, 55);
  th_fill(rep, CK_REP, 56);
}

/* A load that fails on one rank fails on all, with the same status, and
 * every rank's message names the rank that failed. */
static void check_load_fails_everywhere(th_state *s, oslo_context *ctx, oslo_param_set *ps,
                                        const char *dir, int bad_rank) {
  oslo_status st = oslo_param_set_load_checkpoint(ps, dir);
  char msg[1024], want[64];
  snprintf(msg, sizeof msg, "%s", oslo_last_error());
  snprintf(want, sizeof want, "failed on world rank %d", bad_rank);
  TH_CHECK(s, st == OSLO_ERR_FORMAT, "load of a corrupt checkpoint gave %s (%s)",
           oslo_status_string(st), msg);
  TH_CHECK(s, strstr(msg, want) != NULL, "message does not say \"%s\": %s", want, msg);
  int world = 0;
  TH_OK(s, oslo_context_size(ctx, OSLO_GROUP_WORLD, &world));
  int32_t mine = (int32_t)st, all[64];
  oslo_tensor *in = mk(s, ctx, OSLO_DTYPE_I32, 1, 1, 0, 0, &mine);
  oslo_tensor *out = mk(s, ctx, OSLO_DTYPE_I32, 1, world, 0, 0, NULL);
  TH_OK(s, oslo_context_all_gather(ctx, OSLO_GROUP_WORLD, in, out));
  TH_OK(s, oslo_tensor_copy_to_host(out, all, (size_t)world * 4));
  for (int r = 0; r < world && r < 64; ++r)
    TH_CHECK(s, all[r] == mine, "rank %d got %s but this rank got %s", r,
             oslo_status_string((oslo_status)all[r]), oslo_status_string(st));
  oslo_tensor_destroy(in);
  oslo_tensor_destroy(out);
}

static void run_ckpt(th_state *s, oslo_context *ctx, int tp, int tr, const char *dir, int save,
                     int bad_rank) {
  float cw[CK_OUT * CK_IN], cb[CK_OUT], rw[CK_OUT * CK_IN], rb[CK_OUT], ew[CK_VOCAB * CK_H],
      rep[CK_REP];
  ckpt_full(cw, cb, rw, rb, ew, rep);
  oslo_parallel_linear_options oc, orw;
  oslo_parallel_linear_options_init(&oc, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION);
  oslo_parallel_linear_options_init(&orw, OSLO_PARALLEL_LINEAR_OPTIONS_VERSION);
  oc.kind = OSLO_LINEAR_COLUMN;
  oc.in_features = CK_IN;
  oc.out_features = CK_OUT;
  orw.kind = OSLO_LINEAR_ROW;
  orw.in_features = CK_IN;
  orw.out_features = CK_OUT;
  oslo_parallel_linear *col = NULL, *row = NULL;
  oslo_parallel_embedding *emb = NULL;
  TH_OK(s, oslo_parallel_linear_create(ctx, &oc, &col));
  TH_OK(s, oslo_parallel_linear_create(ctx, &orw, &row));
  oslo_parallel_embedding_options eo;
  oslo_parallel_embedding_options_init(&eo, OSLO_PARALLEL_EMBEDDING_OPTIONS_VERSION);
  eo.vocab_size = CK_VOCAB;
  eo.hidden_size = CK_H;
  TH_OK(s, oslo_parallel_embedding_create(ctx, &eo, &emb));
  oslo_tensor *trep = mk(s, ctx, OSLO_DTYPE_F32, 1, CK_REP, 0, 0, save ? rep : NULL);
  if (save) {
    oslo_tensor *a = mk(s, ctx, OSLO_DTYPE_F32, 2, CK_OUT, CK_IN, 0, cw),
                *b = mk(s, ctx, OSLO_DTYPE_F32, 1, CK_OUT, 0, 0, cb);
    TH_OK(s, oslo_parallel_linear_load_full(col, a, b));
    TH_OK(s, oslo_tensor_copy_from_host(a, rw, sizeof rw));
    TH_OK(s, oslo_tensor_copy_from_host(b, rb, sizeof rb));
    TH_OK(s, oslo_parallel_linear_load_full(row, a, b));
    oslo_tensor *e = mk(s, ctx, OSLO_DTYPE_F32, 2, CK_VOCAB, CK_H, 0, ew);
    TH_OK(s, oslo_parallel_embedding_load_full(emb, e));
    oslo_tensor_destroy(a);
    oslo_tensor_destroy(b);
    oslo_tensor_destroy(e);
  }
  oslo_param_set *ps = NULL;
  TH_OK(s, oslo_param_set_create(ctx, &ps));
  TH_OK(s, oslo_param_set_add_linear(ps, "col", col));
  TH_OK(s, oslo_param_set_add_linear(ps, "row", row));
  TH_OK(s, oslo_param_set_add_embedding(ps, "emb", emb));
  TH_OK(s, oslo_param_set_add(ps, "rep", trep, NULL, -1));
  oslo_status dup = oslo_param_set_add(ps, "rep", trep, NULL, -1);
  TH_CHECK(s, dup == OSLO_ERR_INVALID_ARGUMENT, "duplicate name gave %s", oslo_status_string(dup));
  size_t count = 0;
  TH_OK(s, oslo_param_set_count(ps, &count));
  TH_CHECK(s, count == 6, "param count %zu", count);
  if (save) {
    TH_OK(s, oslo_param_set_save_checkpoint(ps, dir));
  } else if (bad_rank >= 0) {
    check_load_fails_everywhere(s, ctx, ps, dir, bad_rank);
  } else {
    TH_OK(s, oslo_param_set_load_checkpoint(ps, dir));
    const int ol = CK_OUT / tp, il = CK_IN / tp, per = (CK_VOCAB + tp - 1) / tp;
    oslo_tensor *w = NULL, *b = NULL;
    float got[CK_OUT * CK_IN + 64];
    TH_OK(s, oslo_parallel_linear_params(col, &w, &b, NULL, NULL));
    get_f32(s, got, ol * CK_IN, w);
    TH_CHECK(s, memcmp(got, cw + tr * ol * CK_IN, ol * CK_IN * 4) == 0, "column weight after load");
    get_f32(s, got, ol, b);
    TH_CHECK(s, memcmp(got, cb + tr * ol, ol * 4) == 0, "column bias after load");
    TH_OK(s, oslo_parallel_linear_params(row, &w, &b, NULL, NULL));
    get_f32(s, got, CK_OUT * il, w);
    float want[CK_OUT * CK_IN];
    slice_cols_f(want, rw, CK_OUT, CK_IN, tr * il, il);
    TH_CHECK(s, memcmp(got, want, CK_OUT * il * 4) == 0, "row weight after load");
    get_f32(s, got, CK_OUT, b);
    TH_CHECK(s, memcmp(got, rb, sizeof rb) == 0, "row bias after load");
    oslo_tensor *e = NULL;
    TH_OK(s, oslo_parallel_embedding_params(emb, &e, NULL));
    get_f32(s, got, per * CK_H, e);
    int ok = 1;
    for (int r = 0; r < per; ++r)
      for (int h = 0; h < CK_H; ++h) {
        int v = tr * per + r;
        float expect = v < CK_VOCAB ? ew[v * CK_H + h] : 0.f;
        ok &= got[r * CK_H + h] == expect;
      }
    TH_CHECK(s, ok, "embedding after load (padding rows zero)");
    get_f32(s, got, CK_REP, trep);
    TH_CHECK(s, memcmp(got, rep, sizeof rep) == 0, "replicated tensor after load");
  }
  oslo_param_set_destroy(ps);
  oslo_tensor_destroy(trep);
  oslo_parallel_linear_destroy(col);
  oslo_parallel_linear_destroy(row);
  oslo_parallel_embedding_destroy(emb);
}

/* ------------------------------------------------------------------------ */

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
