// conf_ops, elementwise ops: the unary ops and their gradients, binary ops
// with broadcast and strided views, against f64.
#include "ops_common.hpp"

using namespace oslo;

namespace conf {

double ref_unary(oslo_bk_unary op, double x, double alpha) {
  switch (op) {
    case OSLO_BK_SCALE: return alpha * x;
    case OSLO_BK_EXP: return std::exp(x);
    case OSLO_BK_GELU: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case OSLO_BK_GELU_TANH:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case OSLO_BK_SILU: return x / (1 + std::exp(-x));
    case OSLO_BK_RELU: return x > 0 ? x : 0;
    case OSLO_BK_TANH: return std::tanh(x);
    case OSLO_BK_SQUARE: return x * x;
    case OSLO_BK_ABS_POW: return std::pow(std::fabs(x), alpha);
    case OSLO_BK_ABS: return std::fabs(x);
    case OSLO_BK_LOG: return std::log(std::fabs(x) + 0.5);
    case OSLO_BK_RSQRT: return 1 / std::sqrt(std::fabs(x) + 0.5);
    default: break;
  }
  return NAN;
}

double ref_unary_grad(oslo_bk_unary op, double x, double alpha) {
  const double h = 1e-6;
  if (op == OSLO_BK_RELU) return x > 0 ? 1 : 0;
  return (ref_unary(op, x + h, alpha) - ref_unary(op, x - h, alpha)) / (2 * h);
}

void test_elementwise(const std::shared_ptr<Backend>& be) {
  const oslo_bk_binary bins[] = {OSLO_BK_ADD, OSLO_BK_SUB,     OSLO_BK_MUL,
                                 OSLO_BK_DIV, OSLO_BK_MAXIMUM, OSLO_BK_MINIMUM};
  for (oslo_dtype dt : kFloats)
    for (oslo_bk_binary op : bins)
      for (int bc = 0; bc < 3; ++bc) {  // b full, a row vector, a column vector
        g_case = fmt("binary %d %s broadcast %d", static_cast<int>(op), dtype_name(dt), bc);
        const int64_t R = 9, C = 700;
        Dev a(be, dt, {R, C});
        auto ha = random_in(static_cast<size_t>(R * C), dt, 2.0);
        a.upload(ha);
        std::vector<int64_t> bshape = bc == 0   ? std::vector<int64_t>{R, C}
                                      : bc == 1 ? std::vector<int64_t>{C}
                                                : std::vector<int64_t>{R, 1};
        Dev b(be, dt, bshape);
        auto hb = random_in(static_cast<size_t>(b.v.numel()), dt, 2.0);
        for (auto& x : hb)
          if (op == OSLO_BK_DIV) x = quant(x >= 0 ? x + 0.5 : x - 0.5, dt);
        b.upload(hb);
        Dev o(be, dt, {R, C});
        be->binary(op, o.v, a.v, b.v);
        std::vector<double> ref(ha.size());
        for (int64_t r = 0; r < R; ++r)
          for (int64_t c = 0; c < C; ++c) {
            double x = ha[r * C + c];
            double y = bc == 0 ? hb[r * C + c] : bc == 1 ? hb[c] : hb[r];
            double v = op == OSLO_BK_ADD       ? x + y
                       : op == OSLO_BK_SUB     ? x - y
                       : op == OSLO_BK_MUL     ? x * y
                       : op == OSLO_BK_DIV     ? x / y
                       : op == OSLO_BK_MAXIMUM ? std::max(x, y)
                                               : std::min(x, y);
            ref[r * C + c] = v;
          }
        double e;
        {
          const bool ok_ = close(o.download(), ref, tol(dt), &e);
          check(ok_, fmt("err %g", e));
        }
      }
  const oslo_bk_unary uns[] = {OSLO_BK_SCALE,   OSLO_BK_EXP,  OSLO_BK_GELU, OSLO_BK_GELU_TANH,
                               OSLO_BK_SILU,    OSLO_BK_RELU, OSLO_BK_TANH, OSLO_BK_SQUARE,
                               OSLO_BK_ABS_POW, OSLO_BK_ABS,  OSLO_BK_LOG,  OSLO_BK_RSQRT};
  for (oslo_dtype dt : kFloats)
    for (oslo_bk_unary op : uns) {
      g_case = fmt("unary %d %s", static_cast<int>(op), dtype_name(dt));
      const int64_t n = 3 * 4096 + 5;
      Dev x(be, dt, {n});
      auto hx = random_in(static_cast<size_t>(n), dt, 3.0);
      if (op == OSLO_BK_LOG || op == OSLO_BK_RSQRT)
        for (auto& v : hx) v = quant(std::fabs(v) + 0.5, dt);
      x.upload(hx);
      Dev o(be, dt, {n});
      const float alpha = op == OSLO_BK_ABS_POW ? 1.5f : -0.75f;
      be->unary(op, o.v, x.v, alpha);
      std::vector<double> ref(hx.size());
      for (size_t i = 0; i < hx.size(); ++i) {
        double v = hx[i];
        if (op == OSLO_BK_LOG)
          v = std::log(v);
        else if (op == OSLO_BK_RSQRT)
          v = 1 / std::sqrt(v);
        else
          v = ref_unary(op, v, alpha);
        ref[i] = v;
      }
      double e;
      {
        const bool ok_ = close(o.download(), ref, std::max(tol(dt), 2e-6), &e);
        check(ok_, fmt("err %g", e));
      }
    }
  // The activations over their whole range, element by element: the tails,
  // where exp overflows or underflows, and the specials. The reference is
  // the stable form in f64 (x * sigmoid(z), erfc); a value may be off by
  // 1e-5 of itself or 2e-7 of |x| (what an f32 evaluation of x * g(x),
  // g in [0, 1], delivers; PyTorch's own formulas cancel to 0 in the tails).
  for (oslo_bk_unary op : {OSLO_BK_GELU_TANH, OSLO_BK_SILU, OSLO_BK_GELU}) {
    g_case = fmt("unary %d f32 wide range", static_cast<int>(op));
    std::vector<double> hx = {0.0,   -0.0,  1e-30,    -1e-30,    1e-4,   -1e-4, 88.0,
                              -88.0, 89.0,  -89.0,    100.0,     -100.0, 1e4,   -1e4,
                              1e30,  -1e30, INFINITY, -INFINITY, NAN};
    for (int i = 0; i < 2001; ++i) hx.push_back(quant(-60.0 + 0.06 * i, OSLO_DTYPE_F32));
    const int64_t n = static_cast<int64_t>(hx.size());
    Dev x(be, OSLO_DTYPE_F32, {n}), o(be, OSLO_DTYPE_F32, {n});
    x.upload(hx);
    be->unary(op, o.v, x.v, 0.f);
    const auto got = o.download();
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double xi = hx[i];
      const double z =
          op == OSLO_BK_GELU_TANH ? 2 * std::sqrt(2 / M_PI) * (xi + 0.044715 * xi * xi * xi) : xi;
      const double r = xi == -INFINITY      ? NAN
                       : op == OSLO_BK_GELU ? 0.5 * xi * std::erfc(-xi / std::sqrt(2.0))
                       : std::isinf(xi)     ? xi
                                            : xi / (1 + std::exp(-z));
      const bool ok = std::isnan(r)
                          ? std::isnan(got[i])
                          : got[i] == r || std::fabs(got[i] - r) <=
                                               1e-5 * std::fabs(r) + 2e-7 * std::fabs(xi) + 1e-30;
      if (!ok && bad++ < 5) check(false, fmt("x %g: got %.9g, want %.9g", hx[i], got[i], r));
    }
    check(bad == 0, fmt("%d of %lld values off", bad, static_cast<long long>(n)));
  }
  // exp over f32's whole range, element by element: overflow to inf above
  // ln(FLT_MAX), the denormals below -87.3 and 0 below -103.97, the
  // specials. A value may be off by 1e-6 of itself (a few ulp) or 1e-44 (a
  // denormal's last place). The length (2020 + 12) is no multiple of 8 or
  // 16: the tail of a vector path is covered.
  {
    g_case = "unary exp f32 wide range";
    std::vector<double> hx = {0.0,       -0.0,   1e-30, -1e-30, 1.0,  -1.0,  88.5,
                              88.7,      88.8,   1e4,   -1e4,   NAN,  -87.5, INFINITY,
                              -INFINITY, -103.9, -104,  -105,   -150, -1e30, 1e30};
    for (int i = 0; i < 2011; ++i) hx.push_back(quant(-110.0 + 0.0995 * i, OSLO_DTYPE_F32));
    const int64_t n = static_cast<int64_t>(hx.size());
    Dev x(be, OSLO_DTYPE_F32, {n}), o(be, OSLO_DTYPE_F32, {n});
    x.upload(hx);
    be->unary(OSLO_BK_EXP, o.v, x.v, 0.f);
    const auto got = o.download();
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double xi = static_cast<float>(hx[static_cast<size_t>(i)]);
      const double r = static_cast<float>(std::exp(xi));  // inf where f32 overflows
      const double g = got[static_cast<size_t>(i)];
      const bool ok = std::isnan(r)   ? std::isnan(g)
                      : std::isinf(r) ? g == r
                                      : std::fabs(g - r) <= 1e-6 * r + 1e-44;
      if (!ok && bad++ < 5) check(false, fmt("x %g: got %.9g, want %.9g", xi, g, r));
    }
    check(bad == 0, fmt("%d of %lld values off", bad, static_cast<long long>(n)));
  }
  const oslo_bk_unary grads[] = {OSLO_BK_SCALE, OSLO_BK_GELU, OSLO_BK_GELU_TANH,
                                 OSLO_BK_SILU,  OSLO_BK_RELU, OSLO_BK_TANH};
  for (oslo_dtype dt : kFloats)
    for (oslo_bk_unary op : grads) {
      g_case = fmt("unary_backward %d %s", static_cast<int>(op), dtype_name(dt));
      const int64_t n = 1000;
      Dev x(be, dt, {n}), gy(be, dt, {n}), gx(be, dt, {n});
      auto hx = random_in(static_cast<size_t>(n), dt, 3.0);
      auto hg = random_in(static_cast<size_t>(n), dt);
      x.upload(hx);
      gy.upload(hg);
      be->unary_backward(op, gx.v, x.v, gy.v, 0.75f);
      std::vector<double> ref(hx.size());
      for (size_t i = 0; i < hx.size(); ++i) ref[i] = hg[i] * ref_unary_grad(op, hx[i], 0.75);
      double e;
      {
        const bool ok_ = close(gx.download(), ref, std::max(tol(dt), 1e-5), &e);
        check(ok_, fmt("err %g", e));
      }
    }
  // Wide-range inputs of the sigmoid-based gradients (the CPU backend's
  // vector path: saturated exponentials, both tails) and NaN staying NaN.
  for (oslo_bk_unary op : {OSLO_BK_GELU_TANH, OSLO_BK_SILU}) {
    g_case = fmt("unary_backward %d wide range", static_cast<int>(op));
    std::vector<double> hx;
    for (double v = -120; v <= 120; v += 0.37) hx.push_back(v);
    hx.push_back(NAN);
    const int64_t n = static_cast<int64_t>(hx.size());
    std::vector<double> hg(hx.size(), 1.0);
    Dev x(be, OSLO_DTYPE_F32, {n}), gy(be, OSLO_DTYPE_F32, {n}), gx(be, OSLO_DTYPE_F32, {n});
    x.upload(hx);
    gy.upload(hg);
    be->unary_backward(op, gx.v, x.v, gy.v, 0.f);
    const auto got = gx.download();
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double xi = static_cast<float>(hx[static_cast<size_t>(i)]);
      const double r = ref_unary_grad(op, xi, 0.0);
      const bool ok = std::isnan(xi) ? std::isnan(got[static_cast<size_t>(i)])
                                     : std::fabs(got[static_cast<size_t>(i)] - r) <=
                                           2e-6 * std::max(1.0, std::fabs(r));
      if (!ok && bad++ < 5)
        check(false, fmt("x %g: got %.9g, want %.9g", xi, got[static_cast<size_t>(i)], r));
    }
    check(bad == 0, fmt("%d of %lld values off", bad, static_cast<long long>(n)));
  }
}

}  // namespace conf
