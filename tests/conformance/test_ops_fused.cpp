// conf_ops, fused ops (oslo_backend.h): attention, residual_norm, rope,
// argmax, norm_backward and adamw.
#include "ops_common.hpp"

using namespace oslo;

namespace conf {

// ---- fused ops (oslo_backend.h: attention, residual_norm, rope) -------------
// Each runs twice: through the backend's fused entry where it offers one for
// the dtype, and composed from the required ops (the core's reference,
// set_fused_enabled(false)); both against f64 here, and against each other.

void test_attention_case(const std::shared_ptr<Backend>& be, oslo_dtype dt, int64_t B, int64_t Hq,
                         int64_t Hkv, int64_t S, int64_t T, int64_t D, bool causal, int64_t off,
                         bool with_mask) {
  // q lives inside a wider [B * S, Hq * D + 8] buffer (a strided view, as
  // the model's fused QKV columns); k and v are [B, Hkv, Tmax, D] caches of
  // which the first T positions are used; out is [B, S, Hq, D] seen as
  // [B, Hq, S, D].
  const int64_t Tmax = T + 3, qrow = Hq * D + 8;
  Dev qb(be, dt, {B * S, qrow}), kb(be, dt, {B, Hkv, Tmax, D}), vb(be, dt, {B, Hkv, Tmax, D});
  Dev ob(be, OSLO_DTYPE_F32, {B, S, Hq, D}), oc(be, OSLO_DTYPE_F32, {B, S, Hq, D});
  Dev mb(be, OSLO_DTYPE_F32, {B, T});
  auto hq = random_in(static_cast<size_t>(B * S * qrow), dt, 2.0);
  auto hk = random_in(static_cast<size_t>(B * Hkv * Tmax * D), dt, 2.0);
  auto hv = random_in(static_cast<size_t>(B * Hkv * Tmax * D), dt);
  std::vector<double> hm(static_cast<size_t>(B * T), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      double& m = hm[static_cast<size_t>(b * T + t)];
      if (b == 1 && t < 3) m = -INFINITY;  // left padding of row 1
      if (t % 7 == 5) m = -0.75;
    }
  qb.upload(hq);
  kb.upload(hk);
  vb.upload(hv);
  mb.upload(hm);
  const View q = strided_view(qb.p, dt, {B, Hq, S, D}, {S * qrow, D, qrow, 1});
  const View k = strided_view(kb.p, dt, {B, Hkv, T, D}, {Hkv * Tmax * D, Tmax * D, D, 1});
  const View v = strided_view(vb.p, dt, {B, Hkv, T, D}, {Hkv * Tmax * D, Tmax * D, D, 1});
  auto out_view = [&](void* p) {
    return strided_view(p, OSLO_DTYPE_F32, {B, Hq, S, D}, {S * Hq * D, D, Hq * D, 1});
  };
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // f64 reference.
  const AttnCase ac{B, Hq, Hkv, S, T, D, causal, off, with_mask};
  const std::vector<double> ref = attention_f64(
      ac, static_cast<double>(scale),
      [&](int64_t b, int64_t h, int64_t i, int64_t d) {
        return hq[static_cast<size_t>((b * S + i) * qrow + h * D + d)];
      },
      [&](int64_t b, int64_t kh, int64_t j, int64_t d) {
        return hk[static_cast<size_t>(((b * Hkv + kh) * Tmax + j) * D + d)];
      },
      [&](int64_t b, int64_t kh, int64_t j, int64_t d) {
        return hv[static_cast<size_t>(((b * Hkv + kh) * Tmax + j) * D + d)];
      },
      [&](int64_t b, int64_t j) { return with_mask ? hm[static_cast<size_t>(b * T + j)] : 0.0; });
  const double t = std::max(tol(dt), 2e-5);
  {
    FusedToggle f(*be, true);
    be->attention(out_view(ob.p), q, k, v, with_mask ? &mb.v : nullptr, scale, causal, off);
  }
  {
    FusedToggle f(*be, false);
    be->attention(out_view(oc.p), q, k, v, with_mask ? &mb.v : nullptr, scale, causal, off);
  }
  double e1 = 0, e2 = 0, e3 = 0;
  const auto got = ob.download(), comp = oc.download();
  if (std::getenv("CONF_DEBUG"))
    for (size_t i = 0; i < got.size(); ++i)
      if (!(std::fabs(got[i] - ref[i]) < 1e-3) || !(std::fabs(comp[i] - ref[i]) < 1e-3))
        std::fprintf(stderr, "  [%zu] got %g comp %g ref %g\n", i, got[i], comp[i], ref[i]);
  {
    const bool ok_ = close(got, ref, t, &e1);
    check(ok_, fmt("fused err %g", e1));
  }
  {
    const bool ok_ = close(comp, ref, t, &e2);
    check(ok_, fmt("composed err %g", e2));
  }
  {
    const bool ok_ = close(got, comp, 2e-5, &e3);
    check(ok_, fmt("fused vs composed %g", e3));
  }
}

// argmax: per row the largest of the first `valid` elements, lowest index on
// ties, the first NaN when there is one, -1 / -inf for an empty row.
void test_argmax(const std::shared_ptr<Backend>& be) {
  const int64_t rows = 6, n = 300, ld = 310;
  for (oslo_dtype dt : kFloats)
    for (int64_t valid : {int64_t(-1), int64_t(250), int64_t(1), int64_t(0)}) {
      g_case = fmt("argmax %s valid %lld", dtype_name(dt), (long long)valid);
      Dev x(be, dt, {rows, ld});
      auto hx = random_in(static_cast<size_t>(rows * ld), dt, 4.0);
      const double inf = std::numeric_limits<double>::infinity();
      hx[1 * ld + 17] = 9;  // row 1: a tie at 17 and 90
      hx[1 * ld + 90] = 9;
      hx[2 * ld + 7] = std::nan("");  // row 2: NaN at 7 and 120, a larger value before
      hx[2 * ld + 120] = std::nan("");
      hx[2 * ld + 3] = 50;
      for (int64_t j = 0; j < ld; ++j) hx[3 * ld + j] = -inf;  // row 3: all -inf
      hx[4 * ld + 299] = 20;  // row 4: the largest is past valid=250
      x.upload(hx);
      const View xv = strided_view(x.p, dt, {rows, n}, {ld, 1});
      std::vector<double> ri(rows), rv(rows);
      const int64_t m = valid < 0 ? n : valid;
      for (int64_t r = 0; r < rows; ++r) {
        int64_t best = m > 0 ? 0 : -1;
        double bv = m > 0 ? hx[r * ld] : -inf;
        for (int64_t j = 1; j < m && !std::isnan(bv); ++j)
          if (std::isnan(hx[r * ld + j]) || hx[r * ld + j] > bv) {
            best = j;
            bv = hx[r * ld + j];
          }
        ri[r] = static_cast<double>(best);
        rv[r] = bv;
      }
      for (bool fused : {true, false}) {
        FusedToggle f(*be, fused);
        Dev idx(be, OSLO_DTYPE_I64, {rows}), val(be, OSLO_DTYPE_F32, {rows});
        be->fill(idx.v, 77);
        be->argmax(idx.v, val.v, xv, valid);
        const auto gi = idx.download(), gv = val.download();
        bool ok = true;
        for (int64_t r = 0; r < rows; ++r)
          ok = ok && gi[r] == ri[r] && (gv[r] == rv[r] || (std::isnan(gv[r]) && std::isnan(rv[r])));
        check(ok, fmt("%s: row 0 %g/%g, 1 %g, 2 %g, 3 %g, 4 %g", fused ? "fused" : "composed",
                      gi[0], ri[0], gi[1], gi[2], gi[3], gi[4]));
      }
    }
  g_case = "argmax errors";
  {
    Dev x(be, OSLO_DTYPE_F32, {3, 9}), i32(be, OSLO_DTYPE_I32, {3}), i64(be, OSLO_DTYPE_I64, {3}),
        v(be, OSLO_DTYPE_F32, {3}), v2(be, OSLO_DTYPE_F32, {2});
    for (bool fused : {true, false}) {
      FusedToggle f(*be, fused);
      auto refused = [&](const char* what, oslo_status want, auto fn) {
        expect_refused(fused, what, want, fn);
      };
      refused("i32 indices", OSLO_ERR_SHAPE, [&] { be->argmax(i32.v, v.v, x.v, -1); });
      refused("2 values for 3 rows", OSLO_ERR_SHAPE, [&] { be->argmax(i64.v, v2.v, x.v, -1); });
      refused("10 valid of 9", OSLO_ERR_INVALID_ARGUMENT, [&] { be->argmax(i64.v, v.v, x.v, 10); });
    }
  }
}

// norm_backward against the f64 formula: layer and RMS norm, with and
// without gamma, grad_x separate (x's dtype) or written over dy (f32), the
// parameter gradients accumulated onto what they held.
void test_norm_backward(const std::shared_ptr<Backend>& be) {
  for (oslo_dtype dt : kFloats)
    for (int rms = 0; rms < 2; ++rms)
      for (int64_t H : {int64_t(72), int64_t(300)})
        for (int variant = 0; variant < 3; ++variant) {  // 0: gamma, 1: no gamma, 2: in place
          const int64_t R = 7;
          const bool has_gamma = variant != 1, in_place = variant == 2;
          g_case = fmt("norm_backward %s rms %d H %lld variant %d", dtype_name(dt), rms,
                       (long long)H, variant);
          Dev x(be, dt, {R, H}), dy(be, OSLO_DTYPE_F32, {R, H}), gx(be, dt, {R, H}),
              gam(be, OSLO_DTYPE_F32, {H}), gg(be, OSLO_DTYPE_F32, {H}),
              gb(be, OSLO_DTYPE_F32, {H});
          auto hx = random_in(static_cast<size_t>(R * H), dt, 3.0);
          for (int64_t i = 0; i < H; ++i)
            hx[static_cast<size_t>(2 * H + i)] =
                quant(hx[static_cast<size_t>(2 * H + i)] + 1.5, dt);
          auto hdy = random_in(static_cast<size_t>(R * H), OSLO_DTYPE_F32);
          auto hg = random_in(static_cast<size_t>(H), OSLO_DTYPE_F32, 2.0);
          auto hgg0 = random_in(static_cast<size_t>(H), OSLO_DTYPE_F32);
          auto hgb0 = random_in(static_cast<size_t>(H), OSLO_DTYPE_F32);
          std::vector<double> rgx(hx.size()), rgg = hgg0, rgb = hgb0;
          const double eps = 1e-5;
          for (int64_t r = 0; r < R; ++r) {
            double m = 0, v = 0;
            if (!rms) {
              for (int64_t i = 0; i < H; ++i) m += hx[r * H + i];
              m /= H;
            }
            for (int64_t i = 0; i < H; ++i) v += (hx[r * H + i] - m) * (hx[r * H + i] - m);
            const double rs = 1 / std::sqrt(v / H + eps);
            double s1 = 0, s2 = 0;
            for (int64_t i = 0; i < H; ++i) {
              const double xh = (hx[r * H + i] - m) * rs,
                           gi = hdy[r * H + i] * (has_gamma ? hg[i] : 1);
              s1 += gi;
              s2 += gi * xh;
              rgg[i] += hdy[r * H + i] * xh;
              rgb[i] += hdy[r * H + i];
            }
            for (int64_t i = 0; i < H; ++i) {
              const double xh = (hx[r * H + i] - m) * rs,
                           gi = hdy[r * H + i] * (has_gamma ? hg[i] : 1);
              rgx[r * H + i] = rs * (gi - (rms ? 0 : s1 / H) - xh * s2 / H);
            }
          }
          for (bool fused : {true, false}) {
            FusedToggle f(*be, fused);
            x.upload(hx);
            dy.upload(hdy);
            gam.upload(hg);
            gg.upload(hgg0);
            gb.upload(hgb0);
            be->fill(gx.v, std::nan(""));
            const View& out = in_place ? dy.v : gx.v;
            be->norm_backward(out, &gg.v, &gb.v, x.v, has_gamma ? &gam.v : nullptr, dy.v, 1e-5f,
                              rms != 0);
            double e;
            const auto got = in_place ? dy.download() : gx.download();
            const double t = in_place ? 2e-5 : std::max(tol(dt), 2e-5);
            const char* path = fused ? "fused" : "composed";
            {
              const bool ok_ = close(got, rgx, t, &e);
              check(ok_, fmt("%s grad_x err %g", path, e));
            }
            {
              const bool ok_ = close(gg.download(), rgg, 2e-5, &e);
              check(ok_, fmt("%s grad_gamma err %g", path, e));
            }
            if (rms)
              check(gb.download() == hgb0, fmt("%s rms leaves grad_beta alone", path));
            else {
              const bool ok_ = close(gb.download(), rgb, 2e-5, &e);
              check(ok_, fmt("%s grad_beta err %g", path, e));
            }
          }
        }
  g_case = "norm_backward errors";
  {
    Dev x(be, OSLO_DTYPE_F32, {3, 8}), dy(be, OSLO_DTYPE_F32, {3, 7}),
        gx(be, OSLO_DTYPE_F32, {3, 8}), g16(be, OSLO_DTYPE_BF16, {8});
    for (bool fused : {true, false}) {
      FusedToggle f(*be, fused);
      auto refused = [&](const char* what, oslo_status want, auto fn) {
        expect_refused(fused, what, want, fn);
      };
      refused("dy [3, 7] for x [3, 8]", OSLO_ERR_SHAPE,
              [&] { be->norm_backward(gx.v, nullptr, nullptr, x.v, nullptr, dy.v, 1e-5f, false); });
      refused("a bf16 gamma gradient", OSLO_ERR_DTYPE,
              [&] { be->norm_backward(gx.v, &g16.v, nullptr, x.v, nullptr, gx.v, 1e-5f, true); });
    }
  }
}

// adamw: three steps of torch.optim.AdamW's update against f64, fused and
// composed, with and without decoupled weight decay; 70001 elements (not a
// multiple of any vector or chunk width).
void test_adamw(const std::shared_ptr<Backend>& be) {
  const int64_t n = 70001;
  for (int decayed = 0; decayed < 2; ++decayed) {
    g_case = fmt("adamw decay %d", decayed);
    auto hp = random_in(static_cast<size_t>(n), OSLO_DTYPE_F32, 2.0);
    std::vector<double> rp = hp, rm(hp.size(), 0.0), rv(hp.size(), 0.0);
    std::vector<std::vector<double>> gs;
    for (int t = 0; t < 3; ++t) gs.push_back(random_in(static_cast<size_t>(n), OSLO_DTYPE_F32));
    const double lr = 1e-2, wd = decayed ? 0.1 : 0.0, b1 = 0.9, b2 = 0.999, eps = 1e-8;
    for (int t = 1; t <= 3; ++t) {
      const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
      for (int64_t i = 0; i < n; ++i) {
        const double g = gs[t - 1][i];
        rp[i] *= 1 - lr * wd;
        rm[i] = b1 * rm[i] + (1 - b1) * g;
        rv[i] = b2 * rv[i] + (1 - b2) * g * g;
        rp[i] -= lr / bc1 * rm[i] / (std::sqrt(rv[i]) / std::sqrt(bc2) + eps);
      }
    }
    std::vector<std::vector<double>> got;
    for (bool fused : {true, false}) {
      FusedToggle f(*be, fused);
      Dev p(be, OSLO_DTYPE_F32, {n}), g(be, OSLO_DTYPE_F32, {n}), m(be, OSLO_DTYPE_F32, {n}),
          v(be, OSLO_DTYPE_F32, {n});
      p.upload(hp);
      be->fill(m.v, 0.0);
      be->fill(v.v, 0.0);
      for (int t = 1; t <= 3; ++t) {
        g.upload(gs[t - 1]);
        const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
        be->adamw(p.v, g.v, m.v, v.v, static_cast<float>(lr * wd), static_cast<float>(b1),
                  static_cast<float>(b2), static_cast<float>(lr / bc1),
                  static_cast<float>(std::sqrt(bc2)), static_cast<float>(eps));
      }
      got.push_back(p.download());
      double e;
      const bool ok = close(got.back(), rp, 1e-6, &e);
      check(ok, fmt("%s parameters err %g", fused ? "fused" : "composed", e));
      const bool okm = close(m.download(), rm, 1e-6, &e);
      check(okm, fmt("%s first moment err %g", fused ? "fused" : "composed", e));
    }
    double e;
    const bool same = close(got[0], got[1], 1e-6, &e);
    check(same, fmt("fused vs composed %g", e));
  }
  g_case = "adamw errors";
  {
    Dev p(be, OSLO_DTYPE_F32, {8}), p16(be, OSLO_DTYPE_BF16, {8}), g7(be, OSLO_DTYPE_F32, {7});
    for (bool fused : {true, false}) {
      FusedToggle f(*be, fused);
      auto refused = [&](const char* what, oslo_status want, auto fn) {
        expect_refused(fused, what, want, fn);
      };
      refused("a bf16 parameter", OSLO_ERR_DTYPE,
              [&] { be->adamw(p16.v, p.v, p.v, p.v, 0.f, .9f, .999f, 1e-3f, 1.f, 1e-8f); });
      refused("7 gradients for 8 parameters", OSLO_ERR_SHAPE,
              [&] { be->adamw(p.v, g7.v, p.v, p.v, 0.f, .9f, .999f, 1e-3f, 1.f, 1e-8f); });
    }
  }
}

void test_fused(const std::shared_ptr<Backend>& be) {
  for (oslo_bk_op op :
       {OSLO_BK_OP_ATTENTION, OSLO_BK_OP_RESIDUAL_NORM, OSLO_BK_OP_ROPE, OSLO_BK_OP_MATMUL_ACT,
        OSLO_BK_OP_ARGMAX, OSLO_BK_OP_NORM_BACKWARD, OSLO_BK_OP_ADAMW})
    std::printf("  fused op %d on %s: %s\n", static_cast<int>(op), be->name(),
                be->uses_fused(op, OSLO_DTYPE_F32) ? "the backend's entry" : "composed");
  const AttnCase cases[] = {
      {2, 4, 4, 5, 9, 16, true, 4, true},      // prefill after 4 cached, MHA
      {2, 6, 2, 7, 7, 24, true, 0, true},      // prefill from 0, GQA 3, D not a multiple of 8
      {1, 8, 1, 1, 300, 32, true, 299, true},  // decode, MQA, long cache: split over keys
      {2, 4, 2, 1, 130, 64, true, 129, false},
      {1, 2, 2, 3, 5, 8, true, -2, false},    // queries with no key: 0
      {2, 4, 2, 6, 6, 16, false, 0, true},    // encoder: no causal mask
      {1, 4, 4, 1, 0, 16, true, -1, false},   // no key at all
      {2, 4, 2, 40, 45, 16, true, 5, true},   // prefill tiles (16+ queries), GQA
      {1, 6, 2, 70, 70, 24, true, 0, true},   // two tiles of queries, the second partial
      {2, 2, 2, 20, 20, 8, false, 0, true},   // encoder prefill
      {1, 2, 1, 17, 20, 8, true, -5, false},  // tiles with queries that see no key
  };
  for (oslo_dtype dt : kFloats)
    for (const AttnCase& c : cases) {
      g_case = attn_case_name("attention", dt, c);
      test_attention_case(be, dt, c.B, c.Hq, c.Hkv, c.S, c.T, c.D, c.causal, c.off, c.mask);
    }
  g_case = "attention errors";
  {
    Dev q(be, OSLO_DTYPE_F32, {1, 3, 2, 8}), k(be, OSLO_DTYPE_F32, {1, 2, 4, 8}),
        o(be, OSLO_DTYPE_F32, {1, 3, 2, 8}), k16(be, OSLO_DTYPE_BF16, {1, 3, 4, 8}),
        m(be, OSLO_DTYPE_F32, {1, 5});
    for (bool fused : {true, false}) {
      FusedToggle f(*be, fused);
      auto refused = [&](const char* what, oslo_status want, auto fn) {
        expect_refused(fused, what, want, fn);
      };
      refused("3 query heads over 2 key heads", OSLO_ERR_SHAPE,
              [&] { be->attention(o.v, q.v, k.v, k.v, nullptr, 1.f, true, 0); });
      Dev q4(be, OSLO_DTYPE_F32, {1, 3, 2, 8});
      refused("bf16 keys with f32 queries", OSLO_ERR_DTYPE,
              [&] { be->attention(o.v, q4.v, k16.v, k16.v, nullptr, 1.f, true, 0); });
      Dev k3(be, OSLO_DTYPE_F32, {1, 3, 4, 8});
      refused("a mask of 5 keys over 4", OSLO_ERR_SHAPE,
              [&] { be->attention(o.v, q4.v, k3.v, k3.v, &m.v, 1.f, true, 0); });
    }
  }

  for (oslo_dtype dt : kFloats)
    for (int rms = 0; rms < 2; ++rms)
      for (int variant = 0; variant < 4; ++variant) {  // y and bias each present or not
        const bool has_y = variant & 1, has_b = variant & 2;
        g_case = fmt("residual_norm %s rms %d y %d bias %d", dtype_name(dt), rms, has_y, has_b);
        const int64_t R = 5, H = 72;
        Dev x1(be, dt, {R, H}), x2(be, dt, {R, H}), y(be, OSLO_DTYPE_F32, {R, H}),
            bias(be, dt, {H}), gm(be, OSLO_DTYPE_F32, {H}), bt(be, OSLO_DTYPE_F32, {H}),
            o1(be, dt, {R, H}), o2(be, dt, {R, H});
        auto hx = random_in(static_cast<size_t>(R * H), dt, 3.0);
        auto hy = random_in(static_cast<size_t>(R * H), OSLO_DTYPE_F32, 2.0);
        auto hb = random_in(static_cast<size_t>(H), dt);
        auto hg = random_in(static_cast<size_t>(H), OSLO_DTYPE_F32);
        auto hbt = random_in(static_cast<size_t>(H), OSLO_DTYPE_F32);
        x1.upload(hx);
        x2.upload(hx);
        y.upload(hy);
        bias.upload(hb);
        gm.upload(hg);
        bt.upload(hbt);
        const float eps = 1e-5f;
        {
          FusedToggle f(*be, true);
          be->residual_norm(o1.v, x1.v, has_y ? &y.v : nullptr, has_b ? &bias.v : nullptr, &gm.v,
                            rms ? nullptr : &bt.v, eps, rms != 0);
        }
        {
          FusedToggle f(*be, false);
          be->residual_norm(o2.v, x2.v, has_y ? &y.v : nullptr, has_b ? &bias.v : nullptr, &gm.v,
                            rms ? nullptr : &bt.v, eps, rms != 0);
        }
        std::vector<double> rx(hx.size()), ro(hx.size());
        for (int64_t r = 0; r < R; ++r) {
          for (int64_t i = 0; i < H; ++i) {
            const size_t at = static_cast<size_t>(r * H + i);
            rx[at] = quant(hx[at] + (has_y ? hy[at] : 0.0) + (has_b ? hb[i] : 0.0), dt);
          }
          double mean = 0, var = 0;
          if (!rms) {
            for (int64_t i = 0; i < H; ++i) mean += rx[r * H + i];
            mean /= H;
          }
          for (int64_t i = 0; i < H; ++i) var += (rx[r * H + i] - mean) * (rx[r * H + i] - mean);
          var /= H;
          for (int64_t i = 0; i < H; ++i)
            ro[r * H + i] =
                (rx[r * H + i] - mean) / std::sqrt(var + eps) * hg[i] + (rms ? 0 : hbt[i]);
        }
        double e;
        const auto gx1 = x1.download(), gx2 = x2.download(), go1 = o1.download(),
                   go2 = o2.download();
        {
          const bool ok_ = close(gx1, rx, tol(dt), &e);
          check(ok_, fmt("fused x err %g", e));
        }
        {
          const bool ok_ = close(gx2, rx, tol(dt), &e);
          check(ok_, fmt("composed x err %g", e));
        }
        {
          const bool ok_ = close(go1, ro, tol(dt) * 2, &e);
          check(ok_, fmt("fused out err %g", e));
        }
        {
          const bool ok_ = close(go2, ro, tol(dt) * 2, &e);
          check(ok_, fmt("composed out err %g", e));
        }
        {
          const bool ok_ = close(go1, go2, dt == OSLO_DTYPE_F32 ? 1e-6 : tol(dt), &e);
          check(ok_, fmt("fused vs composed out %g", e));
        }
      }

  for (oslo_dtype dt : kFloats) {
    g_case = fmt("rope %s", dtype_name(dt));
    // x [rows, heads, D] inside rows of a wider buffer; 2R < D (partial
    // rotary: the last dimensions pass).
    const int64_t rows = 6, heads = 3, D = 20, R = 8, ld = heads * D + 5;
    Dev a(be, dt, {rows, ld}), b(be, dt, {rows, ld}), c(be, OSLO_DTYPE_F32, {rows, R}),
        sn(be, OSLO_DTYPE_F32, {rows, R});
    auto hx = random_in(static_cast<size_t>(rows * ld), dt, 2.0);
    std::vector<double> hc(static_cast<size_t>(rows * R)), hs(hc.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < R; ++i) {
        const double ang = (r + 1) * std::pow(100.0, -static_cast<double>(i) / R);
        hc[r * R + i] = static_cast<float>(std::cos(ang));
        hs[r * R + i] = static_cast<float>(std::sin(ang));
      }
    a.upload(hx);
    b.upload(hx);
    c.upload(hc);
    sn.upload(hs);
    const View xa = strided_view(a.p, dt, {rows, heads, D}, {ld, D, 1});
    const View xb = strided_view(b.p, dt, {rows, heads, D}, {ld, D, 1});
    {
      FusedToggle f(*be, true);
      be->rope(xa, c.v, sn.v);
    }
    {
      FusedToggle f(*be, false);
      be->rope(xb, c.v, sn.v);
    }
    std::vector<double> ref = hx;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < R; ++i) {
          const size_t p1 = static_cast<size_t>(r * ld + h * D + i), p2 = p1 + R;
          const double x1 = hx[p1], x2 = hx[p2], co = hc[r * R + i], si = hs[r * R + i];
          ref[p1] = x1 * co - x2 * si;
          ref[p2] = x2 * co + x1 * si;
        }
    double e;
    const auto ga = a.download(), gb = b.download();
    {
      const bool ok_ = close(ga, ref, tol(dt) * 2, &e);
      check(ok_, fmt("fused err %g", e));
    }
    {
      const bool ok_ = close(gb, ref, tol(dt) * 2, &e);
      check(ok_, fmt("composed err %g", e));
    }
    check(ga == gb, "fused and composed are bit-identical");
  }
  test_matmul_act(be);
  test_packed_matmul(be);
  test_matmul_mixed(be);
  test_argmax(be);
  test_norm_backward(be);
  test_adamw(be);
}

}  // namespace conf
