// Backend conformance, op level: every op of the backend table
// (core/backend/oslo_backend.h) on the backend named by argv[1] against an
// independent f64 reference computed here, in f32, f16 and bf16, with
// strided, transposed and broadcast views, plus the error paths. The same
// cases run on every backend that is built (ctest: conformance_<backend>_ops).
//
// Tolerances are relative to the largest reference magnitude: f32 1e-5
// (products: 1e-5 x sqrt(K)), f16 2e-3, bf16 1.6e-2 (outputs rounded to the
// dtype; inputs are generated already representable in their dtype, so the
// reference sees exactly what the backend sees).
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/backend/backend.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

using namespace oslo;

namespace {

int g_passed = 0, g_failed = 0;
std::string g_case;

void check(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
    return;
  }
  ++g_failed;
  std::fprintf(stderr, "FAIL [%s] %s\n", g_case.c_str(), what.c_str());
}

double tol(oslo_dtype dt) {
  return dt == OSLO_DTYPE_BF16 ? 1.6e-2 : dt == OSLO_DTYPE_F16 ? 2e-3 : 1e-5;
}

uint64_t g_seed = 1;
double rnd() {
  uint64_t x = (g_seed++) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return static_cast<double>(x >> 11) / static_cast<double>(1ull << 53) * 2.0 - 1.0;
}

// The value as stored in dt.
double quant(double v, oslo_dtype dt) {
  float f = static_cast<float>(v);
  if (dt == OSLO_DTYPE_BF16) return bf16_to_f32(f32_to_bf16(f));
  if (dt == OSLO_DTYPE_F16) return f16_to_f32(f32_to_f16(f));
  return f;
}

// A device buffer holding a host array, contiguous, with its view.
struct Dev {
  std::shared_ptr<Backend> be;
  void* p = nullptr;
  size_t bytes = 0;
  View v;
  Dev(std::shared_ptr<Backend> b, oslo_dtype dt, std::vector<int64_t> shape) : be(std::move(b)) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    bytes = static_cast<size_t>(n) * dtype_size(dt);
    p = be->allocate(bytes);
    v = make_view(p, dt, shape);
  }
  ~Dev() { be->deallocate(p, bytes); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;

  void upload(const std::vector<double>& host) {
    const size_t n = host.size();
    std::vector<char> raw(bytes);
    for (size_t i = 0; i < n; ++i) {
      switch (v.dtype) {
        case OSLO_DTYPE_F32: {
          float f = static_cast<float>(host[i]);
          std::memcpy(raw.data() + 4 * i, &f, 4);
          break;
        }
        case OSLO_DTYPE_BF16: {
          uint16_t h = f32_to_bf16(static_cast<float>(host[i]));
          std::memcpy(raw.data() + 2 * i, &h, 2);
          break;
        }
        case OSLO_DTYPE_F16: {
          uint16_t h = f32_to_f16(static_cast<float>(host[i]));
          std::memcpy(raw.data() + 2 * i, &h, 2);
          break;
        }
        case OSLO_DTYPE_I32: {
          int32_t x = static_cast<int32_t>(host[i]);
          std::memcpy(raw.data() + 4 * i, &x, 4);
          break;
        }
        default: {
          int64_t x = static_cast<int64_t>(host[i]);
          std::memcpy(raw.data() + 8 * i, &x, 8);
        }
      }
    }
    be->copy(p, raw.data(), bytes, CopyKind::HostToDevice);
  }
  std::vector<double> download() const {
    std::vector<char> raw(bytes);
    be->copy(raw.data(), p, bytes, CopyKind::DeviceToHost);
    const size_t n = bytes / dtype_size(v.dtype);
    std::vector<double> out(n);
    for (size_t i = 0; i < n; ++i) {
      switch (v.dtype) {
        case OSLO_DTYPE_F32: {
          float f;
          std::memcpy(&f, raw.data() + 4 * i, 4);
          out[i] = f;
          break;
        }
        case OSLO_DTYPE_BF16: {
          uint16_t h;
          std::memcpy(&h, raw.data() + 2 * i, 2);
          out[i] = bf16_to_f32(h);
          break;
        }
        case OSLO_DTYPE_F16: {
          uint16_t h;
          std::memcpy(&h, raw.data() + 2 * i, 2);
          out[i] = f16_to_f32(h);
          break;
        }
        case OSLO_DTYPE_I32: {
          int32_t x;
          std::memcpy(&x, raw.data() + 4 * i, 4);
          out[i] = x;
          break;
        }
        default: {
          int64_t x;
          std::memcpy(&x, raw.data() + 8 * i, 8);
          out[i] = static_cast<double>(x);
        }
      }
    }
    return out;
  }
};

std::vector<double> random_in(size_t n, oslo_dtype dt, double scale = 1.0) {
  std::vector<double> v(n);
  for (auto& x : v) x = quant(scale * rnd(), dt);
  return v;
}

// max |got - ref| <= rel * max(|ref|, floor)
bool close(const std::vector<double>& got, const std::vector<double>& ref, double rel,
           double* err = nullptr, double floor = 1.0) {
  if (got.size() != ref.size()) {
    if (err) *err = INFINITY;
    return false;
  }
  double mref = 0, merr = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isfinite(ref[i])) mref = std::max(mref, std::fabs(ref[i]));
    double e = got[i] == ref[i] ? 0.0 : std::fabs(got[i] - ref[i]);
    if (std::isnan(got[i]) != std::isnan(ref[i])) e = INFINITY;
    if (std::isnan(got[i]) && std::isnan(ref[i])) e = 0;
    if (!(e <= merr)) merr = e;
  }
  double scale = std::max(mref, floor * 1e-3);
  if (err) *err = merr / (scale > 0 ? scale : 1);
  return merr <= rel * (scale > 0 ? scale : 1);
}

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

const oslo_dtype kFloats[] = {OSLO_DTYPE_F32, OSLO_DTYPE_F16, OSLO_DTYPE_BF16};

// ---- cases ----------------------------------------------------------------

void test_convert(const std::shared_ptr<Backend>& be) {
  for (oslo_dtype src : kFloats)
    for (oslo_dtype dst : kFloats) {
      g_case = fmt("convert %s->%s", dtype_name(src), dtype_name(dst));
      Dev a(be, src, {7, 70000 / 7 + 3});
      auto h = random_in(static_cast<size_t>(a.v.numel()), src, 3.0);
      a.upload(h);
      Dev b(be, dst, {7, 70000 / 7 + 3});
      be->convert(b.v, a.v);
      std::vector<double> ref(h.size());
      for (size_t i = 0; i < h.size(); ++i) ref[i] = quant(h[i], dst);
      double e;
      {
        const bool ok_ = close(b.download(), ref, 1e-7, &e);
        check(ok_, fmt("err %g", e));
      }
    }
  // Transposed copy and broadcast of a row.
  g_case = "convert transpose";
  {
    Dev a(be, OSLO_DTYPE_F32, {5, 3});
    auto h = random_in(15, OSLO_DTYPE_F32);
    a.upload(h);
    Dev b(be, OSLO_DTYPE_BF16, {3, 5});
    View t = a.v;
    std::swap(t.shape[0], t.shape[1]);
    std::swap(t.strides[0], t.strides[1]);
    be->convert(b.v, t);
    std::vector<double> ref(15);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j) ref[i * 5 + j] = quant(h[j * 3 + i], OSLO_DTYPE_BF16);
    check(close(b.download(), ref, 1e-7), "transposed values");
  }
  g_case = "convert broadcast";
  {
    Dev a(be, OSLO_DTYPE_F16, {4});
    auto h = random_in(4, OSLO_DTYPE_F16);
    a.upload(h);
    Dev b(be, OSLO_DTYPE_F32, {3, 4});
    be->convert(b.v, a.v);
    std::vector<double> ref(12);
    for (int i = 0; i < 12; ++i) ref[i] = h[i % 4];
    check(close(b.download(), ref, 0), "broadcast rows");
  }
  g_case = "convert ints";
  {
    Dev a(be, OSLO_DTYPE_I64, {5});
    a.upload({-3, 0, 7, 123456789, -2147483648.0});
    Dev b(be, OSLO_DTYPE_I32, {5});
    be->convert(b.v, a.v);
    check(b.download() == std::vector<double>({-3, 0, 7, 123456789, -2147483648.0}), "i64->i32");
    Dev f(be, OSLO_DTYPE_F32, {5});
    oslo_status st = OSLO_OK;
    try {
      be->convert(f.v, a.v);
    } catch (const Error& e) {
      st = e.status();
    }
    check(st == OSLO_ERR_DTYPE, "i64 -> f32 refused with OSLO_ERR_DTYPE");
  }
  g_case = "fill";
  for (oslo_dtype dt : kFloats) {
    Dev a(be, dt, {3, 5});
    be->fill(a.v, 0.5);
    check(a.download() == std::vector<double>(15, 0.5), fmt("fill %s", dtype_name(dt)));
  }
}

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

void test_reduce(const std::shared_ptr<Backend>& be) {
  for (oslo_dtype dt : kFloats)
    for (int64_t cols : {int64_t(1), int64_t(37), int64_t(1000)})
      for (int64_t valid : {int64_t(-1), cols / 2})
        for (oslo_bk_reduce op : {OSLO_BK_REDUCE_SUM, OSLO_BK_REDUCE_MAX, OSLO_BK_REDUCE_SUM_EXP,
                                  OSLO_BK_REDUCE_MAX_ABS})
          for (int acc = 0; acc < 2; ++acc) {
            g_case = fmt("reduce %d %s cols %lld valid %lld acc %d", static_cast<int>(op),
                         dtype_name(dt), static_cast<long long>(cols),
                         static_cast<long long>(valid), acc);
            const int64_t R = 6;
            Dev x(be, dt, {R, cols});
            auto hx = random_in(static_cast<size_t>(R * cols), dt, 2.0);
            x.upload(hx);
            Dev shift(be, OSLO_DTYPE_F32, {R});
            auto hs = random_in(static_cast<size_t>(R), OSLO_DTYPE_F32);
            shift.upload(hs);
            Dev out(be, OSLO_DTYPE_F32, {R});
            auto ho = random_in(static_cast<size_t>(R), OSLO_DTYPE_F32);
            out.upload(ho);
            be->reduce(op, out.v, x.v, &shift.v, valid, acc != 0);
            const int64_t n = valid < 0 ? cols : valid;
            std::vector<double> ref(static_cast<size_t>(R));
            for (int64_t r = 0; r < R; ++r) {
              double v = op == OSLO_BK_REDUCE_MAX ? -INFINITY : 0;
              for (int64_t c = 0; c < n; ++c) {
                double x0 = hx[r * cols + c];
                if (op == OSLO_BK_REDUCE_SUM) v += x0;
                if (op == OSLO_BK_REDUCE_SUM_EXP) v += std::exp(x0 - hs[r]);
                if (op == OSLO_BK_REDUCE_MAX) v = std::max(v, x0);
                if (op == OSLO_BK_REDUCE_MAX_ABS) v = std::max(v, std::fabs(x0));
              }
              bool is_max = op == OSLO_BK_REDUCE_MAX || op == OSLO_BK_REDUCE_MAX_ABS;
              if (acc) v = is_max ? std::max(v, ho[r]) : v + ho[r];
              ref[r] = v;
            }
            double e;
            {
              const bool ok_ = close(out.download(), ref, 1e-5, &e);
              check(ok_, fmt("err %g", e));
            }
          }
  g_case = "reduce long row";
  {
    const int64_t n = 300001;
    Dev x(be, OSLO_DTYPE_F32, {1, n});
    auto hx = random_in(static_cast<size_t>(n), OSLO_DTYPE_F32);
    x.upload(hx);
    Dev out(be, OSLO_DTYPE_F32, {1});
    be->reduce(OSLO_BK_REDUCE_SUM, out.v, x.v);
    double s = 0;
    for (double v : hx) s += v;
    check(std::fabs(out.download()[0] - s) <= 1e-6 * std::max(1.0, std::fabs(s)),
          fmt("sum %g vs %g", out.download()[0], s));
  }
  // SUM_EXP over rows whose terms span f32's range (exp(x - shift) from
  // e^-140, which underflows to 0, up to e^80), with -inf elements (masked
  // logits: 0), rows of 37 and 1000 elements (vector tails) and one longer
  // than a 64 K piece.
  for (int64_t cols : {int64_t(37), int64_t(1000), int64_t(200003)}) {
    g_case = fmt("reduce sum_exp wide range cols %lld", static_cast<long long>(cols));
    const int64_t R = cols > 100000 ? 1 : 3;
    std::vector<double> hx(static_cast<size_t>(R * cols)), hs(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
      double mx = -INFINITY;
      for (int64_t c = 0; c < cols; ++c) {
        const double v = c % 7 == 3 ? -INFINITY : quant(70.0 * rnd() + 20.0, OSLO_DTYPE_F32);
        hx[r * cols + c] = v;
        mx = std::max(mx, v);
      }
      hs[r] = quant(r == 2 ? mx - 80.0 : mx, OSLO_DTYPE_F32);
    }
    Dev x(be, OSLO_DTYPE_F32, {R, cols}), shift(be, OSLO_DTYPE_F32, {R}),
        out(be, OSLO_DTYPE_F32, {R});
    x.upload(hx);
    shift.upload(hs);
    be->reduce(OSLO_BK_REDUCE_SUM_EXP, out.v, x.v, &shift.v, -1, false);
    std::vector<double> ref(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
      double v = 0;
      for (int64_t c = 0; c < cols; ++c) v += std::exp(hx[r * cols + c] - hs[r]);
      ref[r] = v;
    }
    const auto got = out.download();
    for (int64_t r = 0; r < R; ++r)
      check(std::fabs(got[r] - ref[r]) <= 2e-6 * ref[r],
            fmt("row %lld: %.9g vs %.9g", static_cast<long long>(r), got[r], ref[r]));
  }
  g_case = "reduce max NaN";
  {
    Dev x(be, OSLO_DTYPE_F32, {1, 4});
    x.upload({1, NAN, 3, 2});
    Dev out(be, OSLO_DTYPE_F32, {1});
    be->reduce(OSLO_BK_REDUCE_MAX, out.v, x.v);
    check(std::isnan(out.download()[0]), "NaN wins max");
  }
  for (oslo_dtype dt : kFloats) {
    g_case = fmt("sum_rows %s", dtype_name(dt));
    const int64_t R = 77, C = 600;
    Dev x(be, dt, {R, C});
    auto hx = random_in(static_cast<size_t>(R * C), dt);
    x.upload(hx);
    Dev out(be, OSLO_DTYPE_F32, {C});
    auto ho = random_in(static_cast<size_t>(C), OSLO_DTYPE_F32);
    out.upload(ho);
    be->sum_rows(out.v, x.v, true);
    std::vector<double> ref = ho;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) ref[c] += hx[r * C + c];
    check(close(out.download(), ref, 1e-5), "column sums accumulated");
  }
}

void test_softmax_norm(const std::shared_ptr<Backend>& be) {
  for (oslo_dtype dt : kFloats)
    for (int causal = 0; causal < 2; ++causal)
      for (int with_mask = 0; with_mask < 2; ++with_mask) {
        g_case = fmt("softmax %s causal %d mask %d", dtype_name(dt), causal, with_mask);
        const int64_t B = 2, Q = 5, K = 9, off = 3;
        Dev x(be, dt, {B, Q, K}), y(be, dt, {B, Q, K});
        auto hx = random_in(static_cast<size_t>(B * Q * K), dt, 4.0);
        x.upload(hx);
        Dev mask(be, OSLO_DTYPE_F32, {K});
        std::vector<double> hm(static_cast<size_t>(K), 0.0);
        hm[2] = -INFINITY;
        hm[4] = -1.5;
        mask.upload(hm);
        const float scale = 0.7f;
        be->softmax(y.v, x.v, with_mask ? &mask.v : nullptr, scale, causal != 0, off);
        std::vector<double> ref(hx.size());
        for (int64_t b = 0; b < B; ++b)
          for (int64_t q = 0; q < Q; ++q) {
            double mx = -INFINITY;
            std::vector<double> z(static_cast<size_t>(K));
            for (int64_t k = 0; k < K; ++k) {
              bool masked = causal && k > q + off;
              z[k] = masked ? -INFINITY : scale * hx[(b * Q + q) * K + k] + (with_mask ? hm[k] : 0);
              mx = std::max(mx, z[k]);
            }
            double s = 0;
            for (auto& v : z) s += (v = std::exp(v - mx));
            for (int64_t k = 0; k < K; ++k) ref[(b * Q + q) * K + k] = z[k] / s;
          }
        double e;
        {
          const bool ok_ = close(y.download(), ref, tol(dt), &e);
          check(ok_, fmt("err %g", e));
        }
        // Backward.
        Dev gy(be, dt, {B, Q, K}), gx(be, OSLO_DTYPE_F32, {B, Q, K});
        auto hg = random_in(hx.size(), dt);
        gy.upload(hg);
        auto hy = y.download();
        be->softmax_backward(gx.v, y.v, gy.v, scale);
        std::vector<double> rg(hx.size());
        for (int64_t r = 0; r < B * Q; ++r) {
          double dot = 0;
          for (int64_t k = 0; k < K; ++k) dot += hy[r * K + k] * hg[r * K + k];
          for (int64_t k = 0; k < K; ++k)
            rg[r * K + k] = scale * hy[r * K + k] * (hg[r * K + k] - dot);
        }
        {
          const bool ok_ = close(gx.download(), rg, std::max(tol(dt), 1e-5), &e);
          check(ok_, fmt("backward err %g", e));
        }
      }
  // Long rows with a wide range of scores (probabilities from 1 down to
  // underflow), -inf mask entries and causal limits that are no multiple of
  // a vector's width.
  {
    g_case = "softmax f32 long rows";
    const int64_t Q = 5, K = 300, off = 150;
    Dev x(be, OSLO_DTYPE_F32, {Q, K}), y(be, OSLO_DTYPE_F32, {Q, K}), mask(be, OSLO_DTYPE_F32, {K});
    auto hx = random_in(static_cast<size_t>(Q * K), OSLO_DTYPE_F32, 60.0);
    x.upload(hx);
    std::vector<double> hm(static_cast<size_t>(K), 0.0);
    for (int64_t k = 0; k < K; k += 11) hm[k] = -INFINITY;
    mask.upload(hm);
    be->softmax(y.v, x.v, &mask.v, 1.0f, true, off);
    std::vector<double> ref(hx.size(), 0.0);
    for (int64_t q = 0; q < Q; ++q) {
      const int64_t lim = std::min<int64_t>(K, q + off + 1);
      double mx = -INFINITY, sum = 0;
      for (int64_t k = 0; k < lim; ++k) mx = std::max(mx, hx[q * K + k] + hm[k]);
      for (int64_t k = 0; k < lim; ++k) sum += std::exp(hx[q * K + k] + hm[k] - mx);
      for (int64_t k = 0; k < lim; ++k) ref[q * K + k] = std::exp(hx[q * K + k] + hm[k] - mx) / sum;
    }
    double e;
    const bool ok_ = close(y.download(), ref, 1e-5, &e);
    check(ok_, fmt("err %g", e));
  }
  for (oslo_dtype dt : kFloats)
    for (int rms = 0; rms < 2; ++rms) {
      g_case = fmt("norm %s rms %d", dtype_name(dt), rms);
      const int64_t R = 7, H = 96;
      Dev x(be, dt, {R, H}), y(be, dt, {R, H}), g(be, dt, {H}), b(be, dt, {H});
      auto hx = random_in(static_cast<size_t>(R * H), dt, 3.0);
      auto hgm = random_in(static_cast<size_t>(H), dt);
      auto hb = random_in(static_cast<size_t>(H), dt);
      x.upload(hx);
      g.upload(hgm);
      b.upload(hb);
      const float eps = 1e-5f;
      be->norm(y.v, x.v, &g.v, rms ? nullptr : &b.v, eps, rms != 0);
      std::vector<double> ref(hx.size());
      for (int64_t r = 0; r < R; ++r) {
        double mean = 0, var = 0;
        if (!rms) {
          for (int64_t i = 0; i < H; ++i) mean += hx[r * H + i];
          mean /= H;
        }
        for (int64_t i = 0; i < H; ++i) var += (hx[r * H + i] - mean) * (hx[r * H + i] - mean);
        var /= H;
        for (int64_t i = 0; i < H; ++i)
          ref[r * H + i] =
              (hx[r * H + i] - mean) / std::sqrt(var + eps) * hgm[i] + (rms ? 0 : hb[i]);
      }
      double e;
      {
        const bool ok_ = close(y.download(), ref, tol(dt) * 2, &e);
        check(ok_, fmt("err %g", e));
      }
    }
}

void test_gather_scatter(const std::shared_ptr<Backend>& be) {
  for (oslo_dtype dt : kFloats)
    for (oslo_dtype it : {OSLO_DTYPE_I32, OSLO_DTYPE_I64}) {
      g_case = fmt("gather_rows %s %s", dtype_name(dt), dtype_name(it));
      const int64_t rows = 5, H = 8, offset = 10, limit = 20;
      Dev table(be, dt, {rows, H});
      auto ht = random_in(static_cast<size_t>(rows * H), dt);
      table.upload(ht);
      std::vector<double> ids = {10, 14, 3, 12, 19, 10};
      Dev id(be, it, {static_cast<int64_t>(ids.size())});
      id.upload(ids);
      Dev out(be, OSLO_DTYPE_F32, {static_cast<int64_t>(ids.size()), H});
      be->gather_rows(out.v, table.v, id.v, offset, limit);
      std::vector<double> ref(ids.size() * H, 0.0);
      for (size_t t = 0; t < ids.size(); ++t) {
        int64_t l = static_cast<int64_t>(ids[t]) - offset;
        if (l >= 0 && l < rows)
          for (int64_t h = 0; h < H; ++h) ref[t * H + h] = ht[l * H + h];
      }
      check(close(out.download(), ref, 0), "gathered rows, zeros off range");
      // Scatter: table += src at each in-range id, in order (10 twice).
      Dev grad(be, OSLO_DTYPE_F32, {rows, H});
      be->fill(grad.v, 0);
      Dev src(be, dt, {static_cast<int64_t>(ids.size()), H});
      auto hs = random_in(ids.size() * H, dt);
      src.upload(hs);
      be->scatter_add_rows(grad.v, id.v, src.v, offset);
      std::vector<double> rg(static_cast<size_t>(rows * H), 0.0);
      for (size_t t = 0; t < ids.size(); ++t) {
        int64_t l = static_cast<int64_t>(ids[t]) - offset;
        if (l >= 0 && l < rows)
          for (int64_t h = 0; h < H; ++h) rg[l * H + h] += hs[t * H + h];
      }
      check(close(grad.download(), rg, 1e-6), "scattered rows");
      // An id outside [0, limit) is an error naming it.
      Dev bad(be, it, {2});
      bad.upload({1, 25});
      oslo_status st = OSLO_OK;
      std::string msg;
      try {
        be->gather_rows(make_view(out.p, OSLO_DTYPE_F32, {2, H}), table.v, bad.v, offset, limit);
      } catch (const Error& e) {
        st = e.status();
        msg = e.what();
      }
      check(st == OSLO_ERR_INVALID_ARGUMENT && msg.find("25") != std::string::npos,
            "out-of-range id refused, named: " + msg);
    }
  for (oslo_dtype dt : kFloats) {
    g_case = fmt("gather_cols/scatter_add_cols %s", dtype_name(dt));
    const int64_t T = 5, C = 6, offset = 6, limit = 12, ignore = -100;
    Dev x(be, dt, {T, C});
    auto hx = random_in(static_cast<size_t>(T * C), dt);
    x.upload(hx);
    std::vector<double> idx = {7, 2, -100, 11, 6};
    Dev id(be, OSLO_DTYPE_I64, {T});
    id.upload(idx);
    Dev out(be, OSLO_DTYPE_F32, {T});
    be->gather_cols(out.v, x.v, id.v, offset, limit, ignore);
    std::vector<double> ref(static_cast<size_t>(T), 0.0);
    for (int64_t t = 0; t < T; ++t) {
      int64_t c = static_cast<int64_t>(idx[t]) - offset;
      if (idx[t] != ignore && c >= 0 && c < C) ref[t] = hx[t * C + c];
    }
    check(close(out.download(), ref, 0), "picked columns");
    Dev g(be, OSLO_DTYPE_F32, {T, C});
    be->fill(g.v, 1.0);
    be->scatter_add_cols(g.v, id.v, offset, ignore, -0.25f);
    std::vector<double> rg(static_cast<size_t>(T * C), 1.0);
    for (int64_t t = 0; t < T; ++t) {
      int64_t c = static_cast<int64_t>(idx[t]) - offset;
      if (idx[t] != ignore && c >= 0 && c < C) rg[t * C + c] -= 0.25;
    }
    check(close(g.download(), rg, 0), "added at columns");
    Dev bad(be, OSLO_DTYPE_I64, {T});
    bad.upload({7, 2, 12, 11, 6});
    oslo_status st = OSLO_OK;
    try {
      be->gather_cols(out.v, x.v, bad.v, offset, limit, ignore);
    } catch (const Error& e) {
      st = e.status();
    }
    check(st == OSLO_ERR_INVALID_ARGUMENT, "label 12 outside [0, 12) refused");
  }
}

}  // namespace

// The backend (its name and options) under test: test_abi_v2 starts a second
// instance of it.
std::string g_name;
BackendOptions g_options;

// The entries of backend ABI v2, or the core's fallbacks for a v1 backend:
// asynchronous copies ordered with ops on the queue, events ordering two
// instances (a compute and a communication queue on one device),
// stream-ordered memory, device queries, the op capability query and the
// native stream.
void test_abi_v2(const std::shared_ptr<Backend>& be) {
  g_case = "abi version";
  check(be->abi_version() >= OSLO_BACKEND_ABI_VERSION_MIN &&
            be->abi_version() <= OSLO_BACKEND_ABI_VERSION,
        fmt("abi_version %u", be->abi_version()));

  g_case = "copy_async and stream-ordered memory";
  const int64_t n = 1 << 16;
  const size_t bytes = n * sizeof(float);
  std::vector<float> host(n), back(n, 0.f);
  for (int64_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000) - 500.f;
  void* a = be->allocate_async(bytes);
  void* b = be->allocate_async(bytes);
  be->copy_async(a, host.data(), bytes, CopyKind::HostToDevice);
  be->copy_async(b, a, bytes, CopyKind::DeviceToDevice);
  View vb = make_view(b, OSLO_DTYPE_F32, {n});
  be->unary(OSLO_BK_SCALE, vb, vb, 2.f);  // ordered after the copies on the queue
  be->copy_async(back.data(), b, bytes, CopyKind::DeviceToHost);
  {
    Event done(*be);
    done.record();
    done.synchronize();
  }
  bool same = true;
  for (int64_t i = 0; i < n; ++i) same = same && back[i] == 2.f * host[i];
  check(same, "H2D, D2D, an op, D2H, all enqueued, then an event's synchronize");
  be->deallocate_async(a, bytes);
  be->deallocate_async(b, bytes);

  g_case = "events between two queues";
  std::shared_ptr<Backend> comm = create_backend(g_name, g_options);
  for (int round = 0; round < 3; ++round) {
    Dev x(be, OSLO_DTYPE_F32, {4096}), y(be, OSLO_DTYPE_F32, {4096}), z(be, OSLO_DTYPE_F32, {4096});
    be->fill(x.v, 3.0 + round);
    Event produced(*be);
    produced.record();
    produced.wait(*comm);
    comm->binary(OSLO_BK_ADD, y.v, x.v, x.v);  // the "communication" queue
    Event reduced(*comm);
    reduced.record();
    reduced.wait(*be);
    be->binary(OSLO_BK_MUL, z.v, y.v, x.v);
    std::vector<double> got = z.download();
    const double want = 2.0 * (3 + round) * (3 + round);
    bool ok = true;
    for (double g : got) ok = ok && g == want;
    check(ok, fmt("round %d: x on queue 1, y = x + x on queue 2, z = y * x on queue 1", round));
  }
  comm.reset();

  g_case = "device queries";
  const std::string dev = be->device_name();
  check(!dev.empty(), "device_name is not empty");
  size_t free_b = 0, total_b = 0;
  try {
    be->memory_info(&free_b, &total_b);
    check(total_b > 0 && free_b <= total_b, fmt("memory free %zu of %zu", free_b, total_b));
    check(be->abi_version() >= 2, "a v1 backend has no memory_info");
  } catch (const Error& e) {
    check(e.status() == OSLO_ERR_NOT_SUPPORTED, std::string("memory_info: ") + e.what());
    if (be->abi_version() < 2) check(dev == be->name(), "v1 fallback: device_name is the name");
  }

  g_case = "op_supported";
  check(be->op_supported(OSLO_BK_OP_MATMUL, OSLO_DTYPE_F32), "matmul f32 is supported");
  check(be->op_supported(OSLO_BK_OP_SOFTMAX, OSLO_DTYPE_BF16), "softmax bf16 is supported");
  check(!be->op_supported(static_cast<oslo_bk_op>(OSLO_BK_OP_MATMUL_MIXED + 1), OSLO_DTYPE_F32),
        "an op id no fused op has yet is declined");
  check(!be->op_supported(static_cast<oslo_bk_op>(-7), OSLO_DTYPE_F32), "a bad op id is declined");

  g_case = "native stream";
  const int64_t stream = be->native_stream();
  if (be->dlpack_device_type() == 1) check(stream == 0, "a CPU queue has no native stream");
  Dev w(be, OSLO_DTYPE_F32, {256});
  be->fill(w.v, 5.0);
  // A consumer on the backend's own stream (or, without one, the host) waits
  // for the fill.
  be->make_stream_wait(stream != 0 ? stream : 1);
  std::vector<double> got = w.download();
  bool ok = true;
  for (double g : got) ok = ok && g == 5.0;
  check(ok, "data is ready after make_stream_wait");
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

// ---- fused ops (oslo_backend.h: attention, residual_norm, rope) -------------
// Each runs twice: through the backend's fused entry where it offers one for
// the dtype, and composed from the required ops (the core's reference,
// set_fused_enabled(false)); both against f64 here, and against each other.

// A fused-op error case: fn must throw oslo::Error with status want (on
// the fused path when fused, else on the composed one).
template <typename F>
void expect_refused(bool fused, const char* what, oslo_status want, F fn) {
  try {
    fn();
    check(false, fmt("%s (fused %d): accepted", what, fused));
  } catch (const Error& e) {
    check(e.status() == want, fmt("%s (fused %d): %s", what, fused, e.what()));
  }
}

View strided_view(void* data, oslo_dtype dt, std::vector<int64_t> shape,
                  std::vector<int64_t> strides) {
  View v = make_view(data, dt, shape);
  for (size_t i = 0; i < strides.size(); ++i) v.strides[i] = strides[i];
  return v;
}

struct FusedToggle {  // restores the backend's setting
  Backend& be;
  bool was;
  FusedToggle(Backend& b, bool on) : be(b), was(b.fused_enabled()) { be.set_fused_enabled(on); }
  ~FusedToggle() { be.set_fused_enabled(was); }
};

void test_attention_case(const std::shared_ptr<Backend>& be, oslo_dtype dt, int64_t B, int64_t Hq,
                         int64_t Hkv, int64_t S, int64_t T, int64_t D, bool causal, int64_t off,
                         bool with_mask) {
  // q lives inside a wider [B * S, Hq * D + 8] buffer (a strided view, as
  // the model's fused QKV columns); k and v are [B, Hkv, Tmax, D] caches of
  // which the first T positions are used; out is [B, S, Hq, D] seen as
  // [B, Hq, S, D].
  const int64_t Tmax = T + 3, qrow = Hq * D + 8, g = Hq / Hkv;
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
  std::vector<double> ref(static_cast<size_t>(B * S * Hq * D), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t kh = h / g;
        std::vector<double> z(static_cast<size_t>(T), -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j < T; ++j) {
          if (causal && j > i + off) continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += hq[static_cast<size_t>((b * S + i) * qrow + h * D + d)] *
                   hk[static_cast<size_t>(((b * Hkv + kh) * Tmax + j) * D + d)];
          z[j] = static_cast<double>(scale) * dot + (with_mask ? hm[b * T + j] : 0.0);
          mx = std::max(mx, z[j]);
        }
        if (mx == -INFINITY) continue;  // no key: 0
        double sum = 0;
        for (auto& e : z) sum += (e = std::exp(e - mx));
        for (int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (int64_t j = 0; j < T; ++j)
            o += z[j] * hv[static_cast<size_t>(((b * Hkv + kh) * Tmax + j) * D + d)];
          ref[static_cast<size_t>(((b * S + i) * Hq + h) * D + d)] = o / sum;
        }
      }
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
  struct A {
    int64_t B, Hq, Hkv, S, T, D;
    bool causal;
    int64_t off;
    bool mask;
  };
  const A cases[] = {
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
    for (const A& c : cases) {
      g_case =
          fmt("attention %s B%lld Hq%lld Hkv%lld S%lld T%lld D%lld causal %d off %lld mask %d",
              dtype_name(dt), (long long)c.B, (long long)c.Hq, (long long)c.Hkv, (long long)c.S,
              (long long)c.T, (long long)c.D, c.causal, (long long)c.off, c.mask);
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

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "cpu";
  std::shared_ptr<Backend> be;
  try {
    BackendOptions o;
    o.num_threads = 2;
    if (argc > 2) o.extra_json = argv[2];
    be = create_backend(name, o);
    g_name = name;
    g_options = o;
  } catch (const Error& e) {
    std::fprintf(stderr, "cannot create backend '%s': %s\n", name.c_str(), e.what());
    return 1;
  }
  const std::pair<const char*, void (*)(const std::shared_ptr<Backend>&)> groups[] = {
      {"convert", test_convert},
      {"matmul", test_matmul},
      {"elementwise", test_elementwise},
      {"reduce", test_reduce},
      {"softmax_norm", test_softmax_norm},
      {"gather_scatter", test_gather_scatter},
      {"abi_v2", test_abi_v2},
      {"fused", test_fused},
  };
  for (auto& g : groups) {
    g_case = g.first;
    try {
      g.second(be);
    } catch (const Error& e) {
      check(false, std::string("unexpected oslo::Error: ") + e.what());
    } catch (const std::exception& e) {
      check(false, std::string("unexpected exception: ") + e.what());
    }
  }
  std::printf("conformance ops on %s: %d passed, %d failed\n", name.c_str(), g_passed, g_failed);
  return g_failed ? 1 : 0;
}
