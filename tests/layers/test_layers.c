/*
 * rank_test layers: column- and row-parallel linear layers (forward and
 * backward, with and without gather / parallel input), the MLP block, the
 * vocabulary-parallel embedding and cross-entropy, at the tensor-parallel
 * size of the run, against the unsharded f64 reference.
 */
#include "rank_test.h"

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

void run_layers(th_state *s, oslo_context *ctx, int tp, int tr) {
  test_column(s, ctx, tp, tr, 0);
  test_column(s, ctx, tp, tr, 1);
  test_row(s, ctx, tp, tr, 1);
  test_row(s, ctx, tp, tr, 0);
  test_mlp(s, ctx, tp, tr);
  test_embedding(s, ctx, tp, tr);
  test_cross_entropy(s, ctx, tp, tr);
}
