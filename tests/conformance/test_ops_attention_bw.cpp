// conf_ops, the fused attention backward (oslo_backend.h's
// attention_backward): the backend's entry where it offers one and the
// composition (core/backend/fused_attention.cpp, the reference), each
// against an f64 backward written here, and against each other.
#include "ops_common.hpp"

using namespace oslo;

namespace conf {
namespace {

void attention_bw_case(const std::shared_ptr<Backend>& be, oslo_dtype dt, int64_t B, int64_t Hq,
                       int64_t Hkv, int64_t S, int64_t T, int64_t D, bool causal, int64_t off,
                       bool with_mask) {
  // q and dq live inside wider [B * S, Hq * D + 8] rows (the model's fused
  // QKV columns); k, v, dout, dk and dv are contiguous [B, H, seq, D].
  const int64_t qrow = Hq * D + 8, g = Hq / Hkv;
  Dev qb(be, dt, {B * S, qrow}), kb(be, dt, {B, Hkv, T, D}), vb(be, dt, {B, Hkv, T, D});
  Dev ob(be, dt, {B, Hq, S, D}), mb(be, OSLO_DTYPE_F32, {B, T});
  auto hq = random_in(static_cast<size_t>(B * S * qrow), dt, 2.0);
  auto hk = random_in(static_cast<size_t>(B * Hkv * T * D), dt, 2.0);
  auto hv = random_in(static_cast<size_t>(B * Hkv * T * D), dt);
  auto ho = random_in(static_cast<size_t>(B * Hq * S * D), dt);
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
  ob.upload(ho);
  mb.upload(hm);
  const View q = strided_view(qb.p, dt, {B, Hq, S, D}, {S * qrow, D, qrow, 1});
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  auto qi = [&](int64_t b, int64_t h, int64_t i, int64_t d) {
    return static_cast<size_t>((b * S + i) * qrow + h * D + d);
  };
  auto ki = [&](int64_t b, int64_t h, int64_t j, int64_t d) {
    return static_cast<size_t>(((b * Hkv + h) * T + j) * D + d);
  };
  auto oi = [&](int64_t b, int64_t h, int64_t i, int64_t d) {
    return static_cast<size_t>(((b * Hq + h) * S + i) * D + d);
  };
  // f64 reference: p recomputed, dp = dO . v, ds = scale p (dp - sum p dp).
  std::vector<double> rq(static_cast<size_t>(B * S * qrow), 0.0);
  std::vector<double> rk(hk.size(), 0.0), rv(hv.size(), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t kh = h / g;
        std::vector<double> p(static_cast<size_t>(T), 0.0), dp(static_cast<size_t>(T), 0.0);
        double mx = -INFINITY;
        for (int64_t j = 0; j < T; ++j) {
          p[j] = -INFINITY;
          if (causal && j > i + off) continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += hq[qi(b, h, i, d)] * hk[ki(b, kh, j, d)];
          p[j] = static_cast<double>(scale) * dot + (with_mask ? hm[b * T + j] : 0.0);
          mx = std::max(mx, p[j]);
        }
        if (mx == -INFINITY) continue;  // no key: p = 0, no gradient
        double sum = 0;
        for (auto& e : p) sum += (e = std::exp(e - mx));
        double pdp = 0;
        for (int64_t j = 0; j < T; ++j) {
          p[j] /= sum;
          for (int64_t d = 0; d < D; ++d) dp[j] += ho[oi(b, h, i, d)] * hv[ki(b, kh, j, d)];
          pdp += p[j] * dp[j];
        }
        for (int64_t j = 0; j < T; ++j) {
          const double ds = static_cast<double>(scale) * p[j] * (dp[j] - pdp);
          for (int64_t d = 0; d < D; ++d) {
            rq[qi(b, h, i, d)] += ds * hk[ki(b, kh, j, d)];
            rk[ki(b, kh, j, d)] += ds * hq[qi(b, h, i, d)];
            rv[ki(b, kh, j, d)] += p[j] * ho[oi(b, h, i, d)];
          }
        }
      }
  std::vector<double> got[2][3];
  for (int fused = 0; fused < 2; ++fused) {
    // Gradients in f32, dq strided as q (its padding columns must stay 0).
    Dev dqb(be, OSLO_DTYPE_F32, {B * S, qrow}), dkb(be, OSLO_DTYPE_F32, {B, Hkv, T, D}),
        dvb(be, OSLO_DTYPE_F32, {B, Hkv, T, D});
    dqb.upload(std::vector<double>(static_cast<size_t>(B * S * qrow), 0.0));
    dkb.upload(std::vector<double>(hk.size(), 7.0));  // overwritten, not accumulated
    dvb.upload(std::vector<double>(hv.size(), 7.0));
    const View dq = strided_view(dqb.p, OSLO_DTYPE_F32, {B, Hq, S, D}, {S * qrow, D, qrow, 1});
    {
      FusedToggle f(*be, fused == 1);
      be->attention_backward(dq, dkb.v, dvb.v, q, kb.v, vb.v, ob.v, with_mask ? &mb.v : nullptr,
                             scale, causal, off);
    }
    got[fused][0] = dqb.download();
    got[fused][1] = dkb.download();
    got[fused][2] = dvb.download();
    const std::vector<double>* ref[3] = {&rq, &rk, &rv};
    const char* names[3] = {"dq", "dk", "dv"};
    for (int x = 0; x < 3; ++x) {
      double e = 0;
      const bool ok_ = close(got[fused][x], *ref[x], 1e-4, &e);
      check(ok_, fmt("%s %s err %g", fused ? "fused" : "composed", names[x], e));
    }
  }
  for (int x = 0; x < 3; ++x) {
    double e = 0;
    const bool ok_ = close(got[1][x], got[0][x], 2e-5, &e);
    check(ok_, fmt("fused vs composed (gradient %d) %g", x, e));
  }
}

}  // namespace

void test_attention_backward(const std::shared_ptr<Backend>& be) {
  std::printf("  fused op %d on %s: %s\n", static_cast<int>(OSLO_BK_OP_ATTENTION_BACKWARD),
              be->name(),
              be->uses_fused(OSLO_BK_OP_ATTENTION_BACKWARD, OSLO_DTYPE_F32) ? "the backend's entry"
                                                                            : "composed");
  const AttnCase cases[] = {
      {2, 4, 4, 9, 9, 16, true, 0, true},     // training: MHA, causal, padding mask
      {2, 6, 2, 7, 7, 24, true, 0, true},     // GQA 3, D not a multiple of 8
      {1, 6, 2, 70, 70, 24, true, 0, true},   // two tiles of queries, the second partial
      {2, 4, 2, 6, 6, 16, false, 0, true},    // encoder: no causal mask
      {2, 2, 2, 5, 9, 16, true, 4, false},    // queries after 4 cached keys
      {1, 2, 1, 17, 20, 8, true, -5, false},  // queries that see no key: no gradient
      {1, 2, 2, 3, 0, 8, true, 0, false},     // no key at all
      {1, 2, 2, 0, 4, 8, false, 0, false},    // no query: dk = dv = 0
  };
  for (oslo_dtype dt : kFloats)
    for (const AttnCase& c : cases) {
      g_case = attn_case_name("attention_backward", dt, c);
      attention_bw_case(be, dt, c.B, c.Hq, c.Hkv, c.S, c.T, c.D, c.causal, c.off, c.mask);
    }
  g_case = "attention_backward errors";
  {
    Dev q(be, OSLO_DTYPE_F32, {1, 3, 2, 8}), k(be, OSLO_DTYPE_F32, {1, 2, 4, 8}),
        k3(be, OSLO_DTYPE_F32, {1, 3, 4, 8}), k16(be, OSLO_DTYPE_BF16, {1, 3, 4, 8}),
        m(be, OSLO_DTYPE_F32, {1, 5});
    for (bool fused : {true, false}) {
      FusedToggle f(*be, fused);
      auto refused = [&](const char* what, oslo_status want, auto fn) {
        expect_refused(fused, what, want, fn);
      };
      refused("3 query heads over 2 key heads", OSLO_ERR_SHAPE, [&] {
        be->attention_backward(q.v, k.v, k.v, q.v, k.v, k.v, q.v, nullptr, 1.f, true, 0);
      });
      refused("bf16 keys with f32 queries", OSLO_ERR_DTYPE, [&] {
        be->attention_backward(q.v, k3.v, k3.v, q.v, k16.v, k16.v, q.v, nullptr, 1.f, true, 0);
      });
      refused("a mask of 5 keys for 4", OSLO_ERR_SHAPE, [&] {
        be->attention_backward(q.v, k3.v, k3.v, q.v, k3.v, k3.v, q.v, &m.v, 1.f, true, 0);
      });
    }
  }
}

}  // namespace conf
