/*
 * rank_test collectives and topology: every collective on every group with
 * inputs that are formulas of the rank (results exactly predictable), and
 * the layout of the groups over the world ranks.
 */
#include "rank_test.h"

/* ------------------------------------------------------------------------ */
/* Collectives: inputs are formulas of the rank, results exactly predictable  */
/* ------------------------------------------------------------------------ */

void run_collectives(th_state *s, oslo_context *ctx) {
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

void run_topology(th_state *s, oslo_context *ctx, int tp) {
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
