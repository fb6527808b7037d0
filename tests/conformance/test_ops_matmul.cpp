// conf_ops, products: matmul (f64 reference, transposed / strided / broadcast
// operands, bias, alpha and beta), the mixed f32 x 16-bit product, matmul_act
// (activation and gate fused into the product) and prepacked weights.
#include "ops_common.hpp"

using namespace oslo;

namespace conf {

// c = alpha * a @ b + bias + beta * c on f64.
void ref_matmul(int64_t M, int64_t N, int64_t K, const std::vector<double>& a,
                const std::vector<double>& b, bool b_is_w, const std::vector<double>* bias,
                double alpha, double beta, std::vector<double>* c) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += a[i * K + k] * (b_is_w ? b[j * K + k] : b[k * N + j]);
      double prev = beta != 0 ? (*c)[i * N + j] : 0;
      (*c)[i * N + j] = alpha * s + (bias ? (*bias)[j] : 0) + beta * prev;
    }
}

// The second operand [K, N] of a product: b itself, or (w_layout) b held
// as nn.Linear's weight [N, K] and seen transposed.
View operand_b(const Dev& b, bool w_layout) {
  View v = b.v;
  if (w_layout) {
    std::swap(v.shape[0], v.shape[1]);
    std::swap(v.strides[0], v.strides[1]);
  }
  return v;
}

void test_matmul(const std::shared_ptr<Backend>& be) {
  struct Shape {
    int64_t M, N, K;
  };
  const Shape shapes[] = {{1, 64, 48}, {3, 33, 17}, {8, 40, 100}, {37, 64, 80}, {65, 96, 130}};
  for (oslo_dtype dt : kFloats)
    for (oslo_dtype cdt : {OSLO_DTYPE_F32, dt})
      for (const Shape& s : shapes)
        for (bool w_layout : {true, false})
          for (int epi = 0; epi < 2; ++epi) {
            g_case = fmt("matmul %s->%s M%lld N%lld K%lld %s%s", dtype_name(dt), dtype_name(cdt),
                         static_cast<long long>(s.M), static_cast<long long>(s.N),
                         static_cast<long long>(s.K), w_layout ? "W^T" : "plain",
                         epi ? " bias alpha beta" : "");
            Dev a(be, dt, {s.M, s.K});
            auto ha = random_in(static_cast<size_t>(s.M * s.K), dt);
            a.upload(ha);
            Dev b(be, dt,
                  w_layout ? std::vector<int64_t>{s.N, s.K} : std::vector<int64_t>{s.K, s.N});
            auto hb = random_in(static_cast<size_t>(s.N * s.K), dt);
            b.upload(hb);
            const View bv = operand_b(b, w_layout);
            Dev c(be, cdt, {s.M, s.N});
            auto hc = random_in(static_cast<size_t>(s.M * s.N), cdt);
            if (epi)
              c.upload(hc);
            else
              be->fill(c.v, std::nan(""));  // beta == 0 must ignore NaN in c
            Dev bias(be, OSLO_DTYPE_F32, {s.N});
            auto hbias = random_in(static_cast<size_t>(s.N), OSLO_DTYPE_F32);
            bias.upload(hbias);
            const float alpha = epi ? 0.5f : 1.f, beta = epi ? -2.f : 0.f;
            be->matmul(c.v, a.v, bv, epi ? &bias.v : nullptr, alpha, beta);
            std::vector<double> ref = hc;
            ref_matmul(s.M, s.N, s.K, ha, hb, w_layout, epi ? &hbias : nullptr, alpha, beta, &ref);
            double e;
            double t = std::max(tol(cdt), 1e-5 * std::sqrt(static_cast<double>(s.K)));
            {
              const bool ok_ = close(c.download(), ref, t, &e);
              check(ok_, fmt("err %g (tol %g)", e, t));
            }
          }
  // Batched, with the second operand shared (batch stride 0).
  for (oslo_dtype dt : kFloats) {
    g_case = fmt("matmul batched %s", dtype_name(dt));
    const int64_t B = 3, M = 4, N = 5, K = 6;
    Dev a(be, dt, {B, M, K});
    auto ha = random_in(static_cast<size_t>(B * M * K), dt);
    a.upload(ha);
    Dev b(be, dt, {1, K, N});
    auto hb = random_in(static_cast<size_t>(K * N), dt);
    b.upload(hb);
    Dev c(be, OSLO_DTYPE_F32, {B, M, N});
    be->matmul(c.v, a.v, b.v);
    std::vector<double> ref(static_cast<size_t>(B * M * N));
    for (int64_t bi = 0; bi < B; ++bi) {
      std::vector<double> ab(ha.begin() + bi * M * K, ha.begin() + (bi + 1) * M * K);
      std::vector<double> r(static_cast<size_t>(M * N));
      ref_matmul(M, N, K, ab, hb, false, nullptr, 1, 0, &r);
      std::copy(r.begin(), r.end(), ref.begin() + bi * M * N);
    }
    check(close(c.download(), ref, std::max(tol(dt), 1e-5)), "batched values");
  }
  g_case = "matmul K=0";
  {
    Dev a(be, OSLO_DTYPE_F32, {2, 0}), b(be, OSLO_DTYPE_F32, {0, 3}), c(be, OSLO_DTYPE_F32, {2, 3});
    be->fill(c.v, 7);
    be->matmul(c.v, a.v, b.v);
    check(c.download() == std::vector<double>(6, 0.0), "empty product is zero");
  }
  g_case = "matmul errors";
  {
    // A 16-bit a with an f32 b is never accepted; an f32 a with a 16-bit b
    // is what OSLO_BK_OP_MATMUL_MIXED claims (checked here and below).
    Dev a(be, OSLO_DTYPE_F32, {2, 3}), b(be, OSLO_DTYPE_BF16, {3, 4}),
        c(be, OSLO_DTYPE_F32, {2, 4}), a16(be, OSLO_DTYPE_BF16, {2, 3}),
        b32(be, OSLO_DTYPE_F32, {3, 4});
    oslo_status st = OSLO_OK;
    try {
      be->matmul(c.v, a16.v, b32.v);
    } catch (const Error& e) {
      st = e.status();
    }
    check(st == OSLO_ERR_DTYPE, "a bf16 a with an f32 b refused");
    {
      // f32 a with bf16 b: what OSLO_BK_OP_MATMUL_MIXED promises when
      // claimed (its results are tested below). A backend that does not
      // claim it never gets such operands from the core, so it may refuse
      // them (OSLO_ERR_DTYPE) or compute them (the CPU backend built as a
      // v1 plugin, which cannot claim it, computes them): anything else fails.
      be->fill(a.v, 0.5);
      be->fill(b.v, 2.0);
      st = OSLO_OK;
      try {
        be->matmul(c.v, a.v, b.v);
      } catch (const Error& e) {
        st = e.status();
      }
      const bool claimed = be->op_supported(OSLO_BK_OP_MATMUL_MIXED, OSLO_DTYPE_BF16);
      bool right = st == OSLO_OK;
      if (right)
        for (double x : c.download()) right = right && x == 3.0;
      check(right || (!claimed && st == OSLO_ERR_DTYPE),
            fmt("mixed a/b dtypes: status %d, claimed %d", static_cast<int>(st), claimed));
    }
    Dev b2(be, OSLO_DTYPE_F32, {4, 4});
    st = OSLO_OK;
    try {
      be->matmul(c.v, a.v, b2.v);
    } catch (const Error& e) {
      st = e.status();
    }
    check(st == OSLO_ERR_SHAPE, "inner dimension mismatch refused");
  }
}

// OSLO_BK_OP_MATMUL_MIXED: where the backend claims it, an f32 a times a
// 16-bit b equals converting a to b's dtype first and multiplying (the
// core's path otherwise), and both the f64 product of the rounded a.
void test_matmul_mixed(const std::shared_ptr<Backend>& be) {
  struct Shape {
    int64_t M, N, K;
  };
  const Shape shapes[] = {{1, 64, 48}, {3, 33, 17}, {8, 40, 96}, {37, 64, 80}};
  for (oslo_dtype dt : {OSLO_DTYPE_BF16, OSLO_DTYPE_F16}) {
    if (!be->op_supported(OSLO_BK_OP_MATMUL_MIXED, dt)) {
      std::printf("  matmul f32 x %s: not claimed by %s\n", dtype_name(dt), be->name());
      continue;
    }
    for (const Shape& s : shapes)
      for (bool w_layout : {true, false})
        for (int epi = 0; epi < 2; ++epi) {
          g_case = fmt("matmul f32 x %s M%lld N%lld K%lld %s%s", dtype_name(dt),
                       static_cast<long long>(s.M), static_cast<long long>(s.N),
                       static_cast<long long>(s.K), w_layout ? "W^T" : "plain",
                       epi ? " bias alpha beta" : "");
          Dev a(be, OSLO_DTYPE_F32, {s.M, s.K}), a16(be, dt, {s.M, s.K});
          auto ha = random_in(static_cast<size_t>(s.M * s.K), OSLO_DTYPE_F32);
          a.upload(ha);
          be->convert(a16.v, a.v);
          std::vector<double> hq = ha;  // a rounded to dt
          for (double& v : hq) v = quant(v, dt);
          Dev b(be, dt, w_layout ? std::vector<int64_t>{s.N, s.K} : std::vector<int64_t>{s.K, s.N});
          auto hb = random_in(static_cast<size_t>(s.N * s.K), dt);
          b.upload(hb);
          const View bv = operand_b(b, w_layout);
          Dev c1(be, OSLO_DTYPE_F32, {s.M, s.N}), c2(be, OSLO_DTYPE_F32, {s.M, s.N});
          auto hc = random_in(static_cast<size_t>(s.M * s.N), OSLO_DTYPE_F32);
          c1.upload(hc);
          c2.upload(hc);
          Dev bias(be, OSLO_DTYPE_F32, {s.N});
          auto hbias = random_in(static_cast<size_t>(s.N), OSLO_DTYPE_F32);
          bias.upload(hbias);
          const float alpha = epi ? 0.5f : 1.f, beta = epi ? -2.f : 0.f;
          be->matmul(c1.v, a.v, bv, epi ? &bias.v : nullptr, alpha, beta);
          be->matmul(c2.v, a16.v, bv, epi ? &bias.v : nullptr, alpha, beta);
          std::vector<double> ref = hc;
          ref_matmul(s.M, s.N, s.K, hq, hb, w_layout, epi ? &hbias : nullptr, alpha, beta, &ref);
          const double t =
              std::max(tol(OSLO_DTYPE_F32), 1e-5 * std::sqrt(static_cast<double>(s.K)));
          double e;
          const auto g1 = c1.download(), g2 = c2.download();
          {
            const bool ok_ = close(g1, ref, t, &e);
            check(ok_, fmt("mixed err %g (tol %g)", e, t));
          }
          {
            const bool ok_ = close(g1, g2, 1e-6, &e);
            check(ok_, fmt("mixed vs converted first %g", e));
          }
        }
  }
}

double ref_act(oslo_bk_unary act, double x) {
  switch (act) {
    case OSLO_BK_GELU: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case OSLO_BK_GELU_TANH:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case OSLO_BK_SILU: return x / (1 + std::exp(-x));
    case OSLO_BK_RELU: return x > 0 ? x : 0;
    default: return std::tanh(x);
  }
}

// matmul_act: c = act(a @ b + bias) * gate, gate absent, separate, or c itself.
void test_matmul_act(const std::shared_ptr<Backend>& be) {
  struct Shape {
    int64_t M, N, K;
  };
  const Shape shapes[] = {{1, 96, 72}, {5, 40, 33}, {40, 96, 72}};
  const oslo_bk_unary acts[] = {OSLO_BK_GELU, OSLO_BK_GELU_TANH, OSLO_BK_SILU, OSLO_BK_RELU,
                                OSLO_BK_TANH};
  for (oslo_dtype dt : kFloats)
    for (oslo_dtype cdt : {OSLO_DTYPE_F32, dt})
      for (const Shape& s : shapes)
        for (oslo_bk_unary act : acts)
          for (int gmode = 0; gmode < 3; ++gmode) {  // none, separate f32, c itself
            const bool w_layout = s.M != 5, with_bias = gmode != 1;
            g_case = fmt("matmul_act %s->%s M%lld N%lld K%lld act %d gate %d", dtype_name(dt),
                         dtype_name(cdt), (long long)s.M, (long long)s.N, (long long)s.K,
                         static_cast<int>(act), gmode);
            Dev a(be, dt, {s.M, s.K});
            auto ha = random_in(static_cast<size_t>(s.M * s.K), dt, 2.0);
            a.upload(ha);
            Dev b(be, dt,
                  w_layout ? std::vector<int64_t>{s.N, s.K} : std::vector<int64_t>{s.K, s.N});
            auto hb = random_in(static_cast<size_t>(s.N * s.K), dt);
            b.upload(hb);
            const View bv = operand_b(b, w_layout);
            Dev bias(be, dt, {s.N});
            auto hbias = random_in(static_cast<size_t>(s.N), dt);
            bias.upload(hbias);
            const oslo_dtype gdt = gmode == 2 ? cdt : OSLO_DTYPE_F32;
            auto hg = random_in(static_cast<size_t>(s.M * s.N), gdt, 1.5);
            Dev g(be, gdt, {s.M, s.N}), c1(be, cdt, {s.M, s.N}), c2(be, cdt, {s.M, s.N});
            g.upload(hg);
            if (gmode == 2) {
              c1.upload(hg);
              c2.upload(hg);
            } else {
              be->fill(c1.v, std::nan(""));  // c is write-only unless it is the gate
              be->fill(c2.v, std::nan(""));
            }
            auto run = [&](Dev& c, bool fused) {
              FusedToggle f(*be, fused);
              const View* gate = gmode == 0 ? nullptr : gmode == 1 ? &g.v : &c.v;
              be->matmul_act(c.v, a.v, bv, with_bias ? &bias.v : nullptr, act, gate);
            };
            run(c1, true);
            run(c2, false);
            std::vector<double> ref(static_cast<size_t>(s.M * s.N));
            ref_matmul(s.M, s.N, s.K, ha, hb, w_layout, with_bias ? &hbias : nullptr, 1, 0, &ref);
            for (size_t i = 0; i < ref.size(); ++i) {
              ref[i] = ref_act(act, ref[i]);
              if (gmode) ref[i] *= hg[i];
            }
            // The composition rounds to c's dtype after the product, the
            // activation and the gate: up to three roundings.
            const double t = std::max(tol(cdt) * 3, 2e-5 * std::sqrt(static_cast<double>(s.K)));
            double e;
            const auto g1 = c1.download(), g2 = c2.download();
            {
              const bool ok_ = close(g1, ref, t, &e);
              check(ok_, fmt("fused err %g (tol %g)", e, t));
            }
            {
              const bool ok_ = close(g2, ref, t, &e);
              check(ok_, fmt("composed err %g (tol %g)", e, t));
            }
            {
              const bool ok_ = close(g1, g2, t, &e);
              check(ok_, fmt("fused vs composed %g", e));
            }
          }
  g_case = "matmul_act errors";
  {
    Dev a(be, OSLO_DTYPE_F32, {3, 8}), b(be, OSLO_DTYPE_F32, {8, 6}), c(be, OSLO_DTYPE_F32, {3, 6}),
        g(be, OSLO_DTYPE_F32, {3, 5}), wide(be, OSLO_DTYPE_F32, {3, 7});
    for (bool fused : {true, false}) {
      FusedToggle f(*be, fused);
      auto refused = [&](const char* what, oslo_status want, auto fn) {
        expect_refused(fused, what, want, fn);
      };
      refused("EXP is not an activation", OSLO_ERR_INVALID_ARGUMENT,
              [&] { be->matmul_act(c.v, a.v, b.v, nullptr, OSLO_BK_EXP, nullptr); });
      refused("a [3, 5] gate for [3, 6]", OSLO_ERR_SHAPE,
              [&] { be->matmul_act(c.v, a.v, b.v, nullptr, OSLO_BK_SILU, &g.v); });
      // c is columns 0..5 of a [3, 7] buffer, the gate columns 1..6: overlap.
      View cv = wide.v, gv = wide.v;
      cv.shape[1] = 6;
      gv.shape[1] = 6;
      gv.data = static_cast<float*>(wide.p) + 1;
      refused("a gate overlapping c", OSLO_ERR_INVALID_ARGUMENT,
              [&] { be->matmul_act(cv, a.v, b.v, nullptr, OSLO_BK_SILU, &gv); });
      refused("inner dimensions 8 and 6", OSLO_ERR_SHAPE,
              [&] { be->matmul_act(c.v, a.v, c.v, nullptr, OSLO_BK_RELU, nullptr); });
    }
  }
}

// Prepacked weights (pack_weight / matmul_packed / packed_free): where the
// backend packs a dtype, products through the packed copy equal the f64
// reference and the plain product, with and without an activation and gate,
// for row counts on both sides of the backend's few-rows path; the copy is
// refused for a weight it was not made from and does not follow a write to
// the weight until packed again. Where it does not pack, pack_weight says so
// (nullptr) and op_supported agrees.
void test_packed_matmul(const std::shared_ptr<Backend>& be) {
  struct Shape {
    int64_t M, N, K;
  };
  const Shape shapes[] = {{1, 96, 72}, {5, 40, 33}, {40, 96, 72}, {300, 130, 200}};
  for (oslo_dtype dt : kFloats) {
    g_case = fmt("packed matmul %s support", dtype_name(dt));
    Dev probe(be, dt, {8, 16});
    be->fill(probe.v, 0.5);
    const bool offered = be->op_supported(OSLO_BK_OP_PACKED_MATMUL, dt);
    {
      auto p = Backend::pack_weight(be, operand_b(probe, true));
      check(static_cast<bool>(p) == offered,
            fmt("pack_weight %s while op_supported says %d", p ? "packed" : "declined", offered));
      if (!offered) continue;
      check(p->bytes() >= 8 * 16 * dtype_size(dt), fmt("packed bytes %zu", p->bytes()));
    }
    for (const Shape& sh : shapes)
      for (int mode = 0; mode < 4; ++mode) {  // plain, bias, gelu_tanh + bias, silu * gate (c)
        g_case = fmt("packed matmul %s M%lld N%lld K%lld mode %d", dtype_name(dt), (long long)sh.M,
                     (long long)sh.N, (long long)sh.K, mode);
        Dev a(be, dt, {sh.M, sh.K}), w(be, dt, {sh.N, sh.K}), bias(be, dt, {sh.N});
        auto ha = random_in(static_cast<size_t>(sh.M * sh.K), dt, 2.0);
        auto hw = random_in(static_cast<size_t>(sh.N * sh.K), dt);
        auto hb = random_in(static_cast<size_t>(sh.N), dt);
        a.upload(ha);
        w.upload(hw);
        bias.upload(hb);
        const View wv = operand_b(w, true);  // [K, N]: an nn.Linear weight transposed
        auto packed = Backend::pack_weight(be, wv);
        check(static_cast<bool>(packed), "pack_weight declined a shape");
        if (!packed) continue;
        // A copy that does not hold the whole weight cannot stand for it.
        if (!packed->whole())
          expect_refused(true, "plain_released on a copy that is not whole", OSLO_ERR_INTERNAL,
                         [&] { packed->plain_released(); });
        auto hg = random_in(static_cast<size_t>(sh.M * sh.N), OSLO_DTYPE_F32, 1.5);
        Dev c1(be, OSLO_DTYPE_F32, {sh.M, sh.N}), c2(be, OSLO_DTYPE_F32, {sh.M, sh.N});
        const oslo_bk_unary act = mode == 2 ? OSLO_BK_GELU_TANH : OSLO_BK_SILU;
        const bool with_act = mode >= 2, with_bias = mode == 1 || mode == 2;
        if (mode == 3) {
          c1.upload(hg);
          c2.upload(hg);
        } else {
          be->fill(c1.v, std::nan(""));
          be->fill(c2.v, std::nan(""));
        }
        be->matmul_packed(c1.v, a.v, wv, *packed, with_bias ? &bias.v : nullptr,
                          with_act ? &act : nullptr, mode == 3 ? &c1.v : nullptr);
        if (with_act)
          be->matmul_act(c2.v, a.v, wv, with_bias ? &bias.v : nullptr, act,
                         mode == 3 ? &c2.v : nullptr);
        else
          be->matmul(c2.v, a.v, wv, with_bias ? &bias.v : nullptr);
        std::vector<double> ref(static_cast<size_t>(sh.M * sh.N));
        ref_matmul(sh.M, sh.N, sh.K, ha, hw, true, with_bias ? &hb : nullptr, 1, 0, &ref);
        for (size_t i = 0; i < ref.size(); ++i) {
          if (with_act) ref[i] = ref_act(act, ref[i]);
          if (mode == 3) ref[i] *= hg[i];
        }
        const double t = std::max(1e-5 * 3, 2e-5 * std::sqrt(static_cast<double>(sh.K)));
        double e;
        const auto g1 = c1.download(), g2 = c2.download();
        {
          const bool ok_ = close(g1, ref, t, &e);
          check(ok_, fmt("packed err %g (tol %g)", e, t));
        }
        {
          const bool ok_ = close(g1, g2, t, &e);
          check(ok_, fmt("packed vs plain %g", e));
        }
        // A write to the weight is not seen through the old copy's rows
        // (M > few) until it is packed again; a new pack sees it.
        if (mode == 0 && sh.M >= 40) {
          be->fill(w.v, 0.0);
          auto fresh = Backend::pack_weight(be, wv);
          be->matmul_packed(c1.v, a.v, wv, *fresh, nullptr, nullptr, nullptr);
          double mx = 0;
          for (double x : c1.download()) mx = std::max(mx, std::fabs(x));
          check(mx == 0, fmt("repacked zero weight gives %g", mx));
        }
      }
    g_case = fmt("packed matmul %s errors", dtype_name(dt));
    Dev a(be, dt, {40, 16}), w(be, dt, {8, 16}), other(be, dt, {8, 16}),
        c(be, OSLO_DTYPE_F32, {40, 8});
    be->fill(w.v, 1.0);
    be->fill(other.v, 1.0);
    be->fill(a.v, 1.0);
    auto p = Backend::pack_weight(be, operand_b(w, true));
    expect_refused(true, "a packed copy of another weight", OSLO_ERR_INVALID_ARGUMENT, [&] {
      be->matmul_packed(c.v, a.v, operand_b(other, true), *p, nullptr, nullptr, nullptr);
    });
    expect_refused(true, "a gate without an activation", OSLO_ERR_INVALID_ARGUMENT, [&] {
      be->matmul_packed(c.v, a.v, operand_b(w, true), *p, nullptr, nullptr, &c.v);
    });
    expect_refused(true, "inner dimensions 16 and 8", OSLO_ERR_SHAPE, [&] {
      Dev a8(be, dt, {40, 8});
      be->matmul_packed(c.v, a8.v, operand_b(w, true), *p, nullptr, nullptr, nullptr);
    });
  }
}

}  // namespace conf
