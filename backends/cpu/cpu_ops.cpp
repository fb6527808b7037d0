#include "backends/cpu/cpu_ops.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_rows.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

namespace oslo {
namespace cpu {
namespace {

constexpr double kPi = 3.14159265358979323846;

float gelu(float x) {
  return 0.5f * x * (1.0f + std::erf(x / std::sqrt(2.0f)));
}
float gelu_grad(float x) {
  return 0.5f * (1.0f + std::erf(x / std::sqrt(2.0f))) +
         x * std::exp(-0.5f * x * x) / std::sqrt(2.0f * static_cast<float>(kPi));
}
float gelu_tanh(float x) {
  const float k = std::sqrt(2.0f / static_cast<float>(kPi));
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}
float gelu_tanh_grad(float x) {
  const float k = std::sqrt(2.0f / static_cast<float>(kPi));
  const float u = k * (x + 0.044715f * x * x * x);
  const float t = std::tanh(u);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x * x);
}
float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

// ---- AVX2 activations: x / (1 + exp(-z)) eight lanes at a time ------------
// SiLU (z = x) and the tanh GELU (z = 2u, since 0.5 (1 + tanh u) is
// sigmoid(2u)), the two activations of decoder MLPs. exp is Cody-Waite
// range reduction (x = n ln2 + r) and a degree-6 polynomial on
// |r| <= ln2 / 2, within 2 ulp of expf; results agree with the scalar forms
// above to a few ulp. NaN inputs give NaN, as the scalar forms do.

__attribute__((target("avx2,fma"))) inline __m256 exp256(__m256 x) {
  // The clamp keeps n in [-150, 128]; both halves of the 2^n split below stay
  // normal, so results under 2^-126 round once into the denormals (and to 0
  // below 2^-150), and above ln(FLT_MAX) the product overflows to inf.
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0f)), _mm256_set1_ps(88.73f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n as 2^half * 2^(n - half), each exponent in [-75, 64].
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(ni, 1);
  const __m256 s1 =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
  const __m256 s2 = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), _mm256_set1_epi32(127)), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

// exp256 with NaN passed through (the clamp above turns NaN into a number).
__attribute__((target("avx2,fma"))) inline __m256 exp256_nan(__m256 x) {
  return _mm256_blendv_ps(exp256(x), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// o[i] = a[i] / (1 + exp(-z(a[i]))), z = x (silu) or 2k(x + 0.044715 x^3) (gelu_tanh).
__attribute__((target("avx2,fma"))) void sigmoid_gate_avx2(float* o, const float* a, int64_t n,
                                                           bool gelu) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 k2 = _mm256_set1_ps(2.0f * 0.7978845608028654f), c = _mm256_set1_ps(0.044715f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(a + i);
    __m256 z = x;
    if (gelu) z = _mm256_mul_ps(k2, _mm256_fmadd_ps(_mm256_mul_ps(c, x), _mm256_mul_ps(x, x), x));
    __m256 y = _mm256_div_ps(x, _mm256_add_ps(one, exp256(_mm256_sub_ps(_mm256_setzero_ps(), z))));
    y = _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));  // NaN stays NaN
    // -inf * 0, as the scalar forms compute it: NaN.
    y = _mm256_blendv_ps(
        y, _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()),
        _mm256_cmp_ps(x, _mm256_set1_ps(-std::numeric_limits<float>::infinity()), _CMP_EQ_OQ));
    _mm256_storeu_ps(o + i, y);
  }
  for (; i < n; ++i) o[i] = gelu ? gelu_tanh(a[i]) : a[i] * sigmoid(a[i]);
}

// The gradients of the same two: with s = sigmoid(z),
//   silu'(x) = s (1 + x (1 - s)),
//   gelu_tanh'(x) = s + 2 x s (1 - s) k (1 + 3 c x^2)   (z = 2u, u = k (x + c x^3);
// 0.5 (1 + tanh u) = s and 1 - tanh^2 u = 4 s (1 - s)).
// o[i] = g[i] * that.
__attribute__((target("avx2,fma"))) void sigmoid_gate_grad_avx2(float* o, const float* a,
                                                                const float* g, int64_t n,
                                                                bool gelu);

// ---- exponentials and f64 sums of rows -------------------------------------
// Sums of f32 values accumulate in f64 over 16 lanes (element i into lane
// i % 16), combined by one fixed tree: the vector code and the scalar
// fallback add the same values in the same order, so a sum's bits depend on
// neither the thread count nor the CPU (the exponentials may: the vector
// path is within 2 ulp of std::exp).
constexpr int kLanes = 16;

double combine_lanes(const double* l) {
  double t[4];
  for (int j = 0; j < 4; ++j) t[j] = (l[j] + l[j + 4]) + (l[j + 8] + l[j + 12]);
  return (t[0] + t[2]) + (t[1] + t[3]);
}

__attribute__((target("avx2,fma"))) inline void add_lanes(__m256d* acc, __m256 lo8, __m256 hi8) {
  acc[0] = _mm256_add_pd(acc[0], _mm256_cvtps_pd(_mm256_castps256_ps128(lo8)));
  acc[1] = _mm256_add_pd(acc[1], _mm256_cvtps_pd(_mm256_extractf128_ps(lo8, 1)));
  acc[2] = _mm256_add_pd(acc[2], _mm256_cvtps_pd(_mm256_castps256_ps128(hi8)));
  acc[3] = _mm256_add_pd(acc[3], _mm256_cvtps_pd(_mm256_extractf128_ps(hi8, 1)));
}

__attribute__((target("avx2,fma"))) double sum_avx2(const float* a, int64_t n) {
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                    _mm256_setzero_pd()};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    add_lanes(acc, _mm256_loadu_ps(a + i), _mm256_loadu_ps(a + i + 8));
  alignas(32) double l[kLanes];
  for (int k = 0; k < 4; ++k) _mm256_store_pd(l + 4 * k, acc[k]);
  for (int k = 0; i + k < n; ++k) l[k] += a[i + k];
  return combine_lanes(l);
}

// o[i] = exp(a[i] - shift) (o may be a, or null: not stored); returns the
// f64 sum of the f32 exponentials when `sum` is set. The tail goes through
// the vector code too, so every element gets the same exponential.
__attribute__((target("avx2,fma"))) double sum_exp_avx2(float* o, const float* a, int64_t n,
                                                        float shift, bool sum) {
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                    _mm256_setzero_pd()};
  const __m256 sh = _mm256_set1_ps(shift);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m256 e0 = exp256_nan(_mm256_sub_ps(_mm256_loadu_ps(a + i), sh));
    const __m256 e1 = exp256_nan(_mm256_sub_ps(_mm256_loadu_ps(a + i + 8), sh));
    if (o) {
      _mm256_storeu_ps(o + i, e0);
      _mm256_storeu_ps(o + i + 8, e1);
    }
    if (sum) add_lanes(acc, e0, e1);
  }
  alignas(32) float t[kLanes] = {};
  const int64_t m = n - i;
  if (m > 0) {
    std::copy(a + i, a + n, t);
    _mm256_store_ps(t, exp256_nan(_mm256_sub_ps(_mm256_load_ps(t), sh)));
    _mm256_store_ps(t + 8, exp256_nan(_mm256_sub_ps(_mm256_load_ps(t + 8), sh)));
    if (o) std::copy(t, t + m, o + i);
  }
  if (!sum) return 0;
  alignas(32) double l[kLanes];
  for (int k = 0; k < 4; ++k) _mm256_store_pd(l + 4 * k, acc[k]);
  for (int64_t k = 0; k < m; ++k) l[k] += t[k];
  return combine_lanes(l);
}

// o[i] = exp(a[i]) (o may be a), eight lanes at a time.
__attribute__((target("avx2,fma"))) void exp_avx2(float* o, const float* a, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, exp256_nan(_mm256_loadu_ps(a + i)));
  if (i < n) {
    alignas(32) float t[8] = {};
    std::copy(a + i, a + n, t);
    _mm256_store_ps(t, exp256_nan(_mm256_load_ps(t)));
    std::copy(t, t + (n - i), o + i);
  }
}

__attribute__((target("avx2,fma"))) void sigmoid_gate_grad_avx2(float* o, const float* a,
                                                                const float* g, int64_t n,
                                                                bool gelu) {
  const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
  const __m256 k = _mm256_set1_ps(0.7978845608028654f), c = _mm256_set1_ps(0.044715f),
               c3 = _mm256_set1_ps(3.0f * 0.044715f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(a + i);
    const __m256 x2 = _mm256_mul_ps(x, x);
    __m256 z = x;
    if (gelu) z = _mm256_mul_ps(_mm256_mul_ps(two, k), _mm256_fmadd_ps(_mm256_mul_ps(c, x), x2, x));
    const __m256 s =
        _mm256_div_ps(one, _mm256_add_ps(one, exp256(_mm256_sub_ps(_mm256_setzero_ps(), z))));
    const __m256 s1 = _mm256_mul_ps(s, _mm256_sub_ps(one, s));  // s (1 - s)
    __m256 d;
    if (gelu) {
      // s + 2 x s (1 - s) k (1 + 3 c x^2)
      const __m256 du = _mm256_mul_ps(k, _mm256_fmadd_ps(c3, x2, one));
      d = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_mul_ps(two, x), s1), du, s);
    } else {
      d = _mm256_fmadd_ps(x, s1, s);  // s (1 + x (1 - s)) = s + x s (1 - s)
    }
    __m256 y = _mm256_mul_ps(_mm256_loadu_ps(g + i), d);
    // NaN in, NaN out; infinities as the scalar forms give them.
    const __m256 special = _mm256_or_ps(
        _mm256_cmp_ps(x, x, _CMP_UNORD_Q),
        _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x),
                      _mm256_set1_ps(std::numeric_limits<float>::infinity()), _CMP_EQ_OQ));
    if (_mm256_movemask_ps(special)) {
      alignas(32) float xs[8], gs[8], ys[8];
      _mm256_store_ps(xs, x);
      _mm256_storeu_ps(gs, _mm256_loadu_ps(g + i));
      _mm256_store_ps(ys, y);
      for (int l = 0; l < 8; ++l)
        if (!(std::fabs(xs[l]) < std::numeric_limits<float>::infinity()))
          ys[l] = gs[l] * (gelu ? gelu_tanh_grad(xs[l])
                                : sigmoid(xs[l]) * (1.0f + xs[l] * (1.0f - sigmoid(xs[l]))));
      y = _mm256_load_ps(ys);
    }
    _mm256_storeu_ps(o + i, y);
  }
  for (; i < n; ++i) {
    const float x = a[i];
    o[i] = g[i] * (gelu ? gelu_tanh_grad(x) : sigmoid(x) * (1.0f + x * (1.0f - sigmoid(x))));
  }
}

}  // namespace

double sum_f64(const float* a, int64_t n) {
  if (has_avx2_fma()) return sum_avx2(a, n);
  double l[kLanes] = {};
  for (int64_t i = 0; i < n; ++i) l[i % kLanes] += a[i];
  return combine_lanes(l);
}

double sq_dev_sum_f64(const float* a, int64_t n, double m) {
  double l[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const double d = a[i + k] - m;
      l[k] += d * d;
    }
  for (; i < n; ++i) {
    const double d = a[i] - m;
    l[i % kLanes] += d * d;
  }
  return combine_lanes(l);
}

double exp_sum_f64(float* o, const float* a, int64_t n, float shift, bool sum) {
  if (has_avx2_fma()) return sum_exp_avx2(o, a, n, shift, sum);
  double l[kLanes] = {};
  for (int64_t i = 0; i < n; ++i) {
    const float e = std::exp(a[i] - shift);
    if (o) o[i] = e;
    l[i % kLanes] += e;
  }
  return sum ? combine_lanes(l) : 0.0;
}

void exp_f32(float* o, const float* a, int64_t n) {
  if (has_avx2_fma()) return exp_avx2(o, a, n);
  for (int64_t i = 0; i < n; ++i) o[i] = std::exp(a[i]);
}

int64_t numel(const V& v) {
  int64_t n = 1;
  for (int i = 0; i < v.ndim; ++i) n *= v.shape[i];
  return n;
}

std::string shape_of(const V& v) {
  std::string s = "[";
  for (int i = 0; i < v.ndim; ++i) s += (i ? ", " : "") + std::to_string(v.shape[i]);
  return s + "]";
}

const float* load_row(const V& v, int64_t off, int64_t n, int64_t s, float* buf) {
  if (v.dtype == OSLO_DTYPE_F32 && s == 1) return reinterpret_cast<const float*>(at(v, off));
  if (s == 0) {
    std::fill(buf, buf + n, load1(v, off));
    return buf;
  }
  if (s == 1) {
    to_f32(v.dtype, at(v, off), buf, static_cast<size_t>(n));
    return buf;
  }
  for (int64_t i = 0; i < n; ++i) buf[i] = load1(v, off + i * s);
  return buf;
}

void store_row(const V& v, int64_t off, int64_t n, int64_t s, const float* src) {
  if (s == 1) {
    if (v.dtype == OSLO_DTYPE_F32) {
      float* d = reinterpret_cast<float*>(at(v, off));
      if (d != src) std::memmove(d, src, static_cast<size_t>(n) * 4);
    } else {
      from_f32(v.dtype, src, at(v, off), static_cast<size_t>(n));
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    char* p = at(v, off + i * s);
    if (v.dtype == OSLO_DTYPE_F32) {
      std::memcpy(p, &src[i], 4);
    } else {
      uint16_t h = v.dtype == OSLO_DTYPE_BF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
      std::memcpy(p, &h, 2);
    }
  }
}

// ---- convert / fill -----------------------------------------------------

void convert(int threads, const V& out, const V& x0) {
  check_view(out, "convert output");
  check_view(x0, "convert input");
  const V x = broadcast_to(out, x0, "convert input");
  if (is_int(out.dtype) || is_int(x.dtype)) {
    OSLO_CHECK(is_int(out.dtype) && is_int(x.dtype), OSLO_ERR_DTYPE, "cannot convert ",
               dtype_name(x.dtype), " to ", dtype_name(out.dtype));
    const int64_t rows = rows_of(out), cols = cols_of(out);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t oo = row_offset(out, out, r), xo = row_offset(out, x, r);
      for (int64_t c = 0; c < cols; ++c) {
        const char* p = at(x, xo + c * inner_stride(x));
        int64_t val;
        if (x.dtype == OSLO_DTYPE_I32) {
          int32_t t;
          std::memcpy(&t, p, 4);
          val = t;
        } else {
          std::memcpy(&val, p, 8);
        }
        char* q = at(out, oo + c * inner_stride(out));
        if (out.dtype == OSLO_DTYPE_I32) {
          OSLO_CHECK(val >= INT32_MIN && val <= INT32_MAX, OSLO_ERR_INVALID_ARGUMENT, "value ", val,
                     " does not fit i32");
          int32_t t = static_cast<int32_t>(val);
          std::memcpy(q, &t, 4);
        } else {
          std::memcpy(q, &val, 8);
        }
      }
    }
    return;
  }
  const int64_t n = numel(out);
  if (n == 0) return;
  if (flat(out) && flat(x) && numel(x0) == n) {
    // Same layout: one linear conversion (or copy), split into chunks.
    const int64_t chunk = 1 << 16;
    const int64_t pieces = (n + chunk - 1) / chunk;
    const int nt = pieces > 1 ? std::max(1, threads) : 1;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t p = 0; p < pieces; ++p) {
      const int64_t lo = p * chunk, m = std::min(chunk, n - lo);
      if (out.dtype == x.dtype) {
        if (at(out, lo) != at(x, lo))
          std::memmove(at(out, lo), at(x, lo), static_cast<size_t>(m) * esize(out.dtype));
      } else if (x.dtype == OSLO_DTYPE_F32) {
        from_f32(out.dtype, reinterpret_cast<const float*>(at(x, lo)), at(out, lo),
                 static_cast<size_t>(m));
      } else if (out.dtype == OSLO_DTYPE_F32) {
        to_f32(x.dtype, at(x, lo), reinterpret_cast<float*>(at(out, lo)), static_cast<size_t>(m));
      } else {
        std::vector<float> tmp(static_cast<size_t>(m));
        to_f32(x.dtype, at(x, lo), tmp.data(), static_cast<size_t>(m));
        from_f32(out.dtype, tmp.data(), at(out, lo), static_cast<size_t>(m));
      }
    }
    return;
  }
  const int64_t rows = rows_of(out), cols = cols_of(out);
  for_rows(threads, rows, cols, [&](int64_t r, Scratch& s) {
    const float* xr = load_row(x, row_offset(out, x, r), cols, inner_stride(x), s.a.data());
    store_row(out, row_offset(out, out, r), cols, inner_stride(out), xr);
  });
}

void fill(int threads, const V& out, double value) {
  check_view(out, "fill output");
  const int64_t rows = rows_of(out), cols = cols_of(out);
  if (is_int(out.dtype)) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        char* q = at(out, row_offset(out, out, r) + c * inner_stride(out));
        if (out.dtype == OSLO_DTYPE_I32) {
          int32_t t = static_cast<int32_t>(value);
          std::memcpy(q, &t, 4);
        } else {
          int64_t t = static_cast<int64_t>(value);
          std::memcpy(q, &t, 8);
        }
      }
    return;
  }
  if (value == 0 && flat(out)) {
    std::memset(out.data, 0, static_cast<size_t>(numel(out)) * esize(out.dtype));
    return;
  }
  for_rows(threads, rows, cols, [&](int64_t r, Scratch& s) {
    std::fill(s.a.begin(), s.a.begin() + cols, static_cast<float>(value));
    store_row(out, row_offset(out, out, r), cols, inner_stride(out), s.a.data());
  });
}

// ---- element-wise -------------------------------------------------------

namespace {

// Runs f(out_row, a_row, b_row, n) over the rows of out, with a and b
// broadcast to it (b may be null).
template <typename F>
void elementwise(int threads, const V& out0, const V& a0, const V* b0, F f) {
  V out = out0;
  V a = broadcast_to(out0, a0, "input");
  V b = b0 ? broadcast_to(out0, *b0, "second input") : V{};
  const int64_t n = numel(out);
  if (n == 0) return;
  const int64_t chunk = 4096;
  if (flat(out) && flat(a) && numel(a0) == n && (!b0 || (flat(b) && numel(*b0) == n)) &&
      n > chunk) {
    // One long contiguous run as rows of `chunk` (every thread gets rows,
    // no row-sized scratch), then the tail.
    const int64_t body = n / chunk * chunk;
    if (body < n) {
      auto tail = [&](const V& v) {
        V t = v;
        t.ndim = 1;
        t.shape[0] = n - body;
        t.strides[0] = 1;
        t.data = static_cast<char*>(v.data) + body * static_cast<int64_t>(esize(v.dtype));
        return t;
      };
      const V bt = b0 ? tail(b) : V{};
      elementwise(threads, tail(out), tail(a), b0 ? &bt : nullptr, f);
    }
    out = as_chunks(out, body, chunk);
    a = as_chunks(a, body, chunk);
    if (b0) b = as_chunks(b, body, chunk);
  }
  const int64_t rows = rows_of(out), cols = cols_of(out);
  for_rows(threads, rows, cols, [&](int64_t r, Scratch& s) {
    const float* ar = load_row(a, row_offset(out, a, r), cols, inner_stride(a), s.a.data());
    const float* br =
        b0 ? load_row(b, row_offset(out, b, r), cols, inner_stride(b), s.b.data()) : nullptr;
    const bool direct = out.dtype == OSLO_DTYPE_F32 && inner_stride(out) == 1;
    float* o = direct ? reinterpret_cast<float*>(at(out, row_offset(out, out, r))) : s.c.data();
    f(o, ar, br, cols);
    if (!direct) store_row(out, row_offset(out, out, r), cols, inner_stride(out), o);
  });
}

}  // namespace

void binary(int threads, oslo_bk_binary op, const V& out, const V& a, const V& b) {
  check_float(out, "binary output");
  check_float(a, "binary input a");
  check_float(b, "binary input b");
  switch (op) {
    case OSLO_BK_ADD:
      return elementwise(threads, out, a, &b,
                         [](float* o, const float* x, const float* y, int64_t n) {
                           for (int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
                         });
    case OSLO_BK_SUB:
      return elementwise(threads, out, a, &b,
                         [](float* o, const float* x, const float* y, int64_t n) {
                           for (int64_t i = 0; i < n; ++i) o[i] = x[i] - y[i];
                         });
    case OSLO_BK_MUL:
      return elementwise(threads, out, a, &b,
                         [](float* o, const float* x, const float* y, int64_t n) {
                           for (int64_t i = 0; i < n; ++i) o[i] = x[i] * y[i];
                         });
    case OSLO_BK_DIV:
      return elementwise(threads, out, a, &b,
                         [](float* o, const float* x, const float* y, int64_t n) {
                           for (int64_t i = 0; i < n; ++i) o[i] = x[i] / y[i];
                         });
    case OSLO_BK_MAXIMUM:
      return elementwise(threads, out, a, &b,
                         [](float* o, const float* x, const float* y, int64_t n) {
                           for (int64_t i = 0; i < n; ++i)
                             o[i] = (std::isnan(x[i]) || x[i] > y[i]) ? x[i] : y[i];
                         });
    case OSLO_BK_MINIMUM:
      return elementwise(threads, out, a, &b,
                         [](float* o, const float* x, const float* y, int64_t n) {
                           for (int64_t i = 0; i < n; ++i)
                             o[i] = (std::isnan(x[i]) || x[i] < y[i]) ? x[i] : y[i];
                         });
    default: break;
  }
  fail(OSLO_ERR_INVALID_ARGUMENT, "unknown binary op ", static_cast<int>(op));
}

namespace {
float relu(float v) {
  return v > 0 ? v : (v == v ? 0.f : v);
}
}  // namespace

void activate(oslo_bk_unary act, float* o, const float* a, int64_t n) {
  auto run = [&](auto fn) {
    for (int64_t i = 0; i < n; ++i) o[i] = fn(a[i]);
  };
  switch (act) {
    case OSLO_BK_GELU: return run(gelu);
    case OSLO_BK_GELU_TANH:
      if (has_avx2_fma()) return sigmoid_gate_avx2(o, a, n, true);
      return run(gelu_tanh);
    case OSLO_BK_SILU:
      if (has_avx2_fma()) return sigmoid_gate_avx2(o, a, n, false);
      return run([](float v) { return v * sigmoid(v); });
    case OSLO_BK_RELU: return run(relu);
    case OSLO_BK_TANH: return run([](float v) { return std::tanh(v); });
    default: break;
  }
  fail(OSLO_ERR_INVALID_ARGUMENT, "activation ", static_cast<int>(act),
       " is not GELU, GELU_TANH, SILU, RELU or TANH");
}

void unary(int threads, oslo_bk_unary op, const V& out, const V& x, float alpha) {
  check_float(out, "unary output");
  check_float(x, "unary input");
  auto run = [&](auto fn) {
    elementwise(threads, out, x, nullptr, [&](float* o, const float* a, const float*, int64_t n) {
      for (int64_t i = 0; i < n; ++i) o[i] = fn(a[i]);
    });
  };
  switch (op) {
    case OSLO_BK_GELU:
    case OSLO_BK_GELU_TANH:
    case OSLO_BK_SILU:
    case OSLO_BK_RELU:
    case OSLO_BK_TANH:
      return elementwise(
          threads, out, x, nullptr,
          [op](float* o, const float* a, const float*, int64_t n) { activate(op, o, a, n); });
    case OSLO_BK_SCALE: return run([alpha](float v) { return v * alpha; });
    case OSLO_BK_EXP:
      return elementwise(
          threads, out, x, nullptr,
          [](float* o, const float* a, const float*, int64_t n) { exp_f32(o, a, n); });
    case OSLO_BK_SQUARE: return run([](float v) { return v * v; });
    case OSLO_BK_ABS_POW:
      if (alpha == 2.f) return run([](float v) { return v * v; });
      if (alpha == 1.f) return run([](float v) { return std::fabs(v); });
      return run([alpha](float v) { return std::pow(std::fabs(v), alpha); });
    case OSLO_BK_ABS: return run([](float v) { return std::fabs(v); });
    case OSLO_BK_LOG: return run([](float v) { return std::log(v); });
    case OSLO_BK_RSQRT: return run([](float v) { return 1.0f / std::sqrt(v); });
    default: break;
  }
  fail(OSLO_ERR_INVALID_ARGUMENT, "unknown unary op ", static_cast<int>(op));
}

void unary_backward(int threads, oslo_bk_unary op, const V& gx, const V& x, const V& gy,
                    float alpha) {
  check_float(gx, "unary_backward grad_x");
  check_float(x, "unary_backward x");
  check_float(gy, "unary_backward grad_out");
  auto run = [&](auto fn) {
    elementwise(threads, gx, x, &gy, [&](float* o, const float* a, const float* g, int64_t n) {
      for (int64_t i = 0; i < n; ++i) o[i] = g[i] * fn(a[i]);
    });
  };
  switch (op) {
    case OSLO_BK_SCALE: return run([alpha](float) { return alpha; });
    case OSLO_BK_GELU: return run(gelu_grad);
    case OSLO_BK_GELU_TANH:
    case OSLO_BK_SILU:
      if (has_avx2_fma())
        return elementwise(threads, gx, x, &gy,
                           [op](float* o, const float* a, const float* g, int64_t n) {
                             sigmoid_gate_grad_avx2(o, a, g, n, op == OSLO_BK_GELU_TANH);
                           });
      if (op == OSLO_BK_GELU_TANH) return run(gelu_tanh_grad);
      return run([](float v) {
        const float s = sigmoid(v);
        return s * (1.0f + v * (1.0f - s));
      });
    case OSLO_BK_RELU: return run([](float v) { return v > 0 ? 1.f : 0.f; });
    case OSLO_BK_TANH:
      return run([](float v) {
        const float t = std::tanh(v);
        return 1.0f - t * t;
      });
    default: break;
  }
  fail(OSLO_ERR_NOT_SUPPORTED, "unary_backward of op ", static_cast<int>(op));
}

// ---- reductions ---------------------------------------------------------

void reduce(int threads, oslo_bk_reduce op, const V& out, const V& x, const V* shift, int64_t valid,
            bool accumulate) {
  check_float(out, "reduce output");
  check_float(x, "reduce input");
  OSLO_CHECK(op == OSLO_BK_REDUCE_SUM || op == OSLO_BK_REDUCE_MAX || op == OSLO_BK_REDUCE_SUM_EXP ||
                 op == OSLO_BK_REDUCE_MAX_ABS,
             OSLO_ERR_INVALID_ARGUMENT, "unknown reduce op ", static_cast<int>(op));
  const int64_t rows = rows_of(x), cols = cols_of(x);
  OSLO_CHECK(numel(out) == rows, OSLO_ERR_SHAPE, "reduce output ", shape_of(out), " needs ", rows,
             " elements for input ", shape_of(x));
  OSLO_CHECK(flat(out), OSLO_ERR_NOT_SUPPORTED, "reduce output must be contiguous");
  if (op == OSLO_BK_REDUCE_SUM_EXP) {
    OSLO_CHECK(shift, OSLO_ERR_INVALID_ARGUMENT, "reduce SUM_EXP needs a shift");
    check_float(*shift, "reduce shift");
    OSLO_CHECK(numel(*shift) == rows && flat(*shift), OSLO_ERR_SHAPE, "reduce shift ",
               shape_of(*shift), " needs ", rows, " contiguous elements");
  }
  const int64_t n = valid < 0 ? cols : std::min(valid, cols);
  const V o = align(out, 1);
  std::vector<float> results(static_cast<size_t>(rows));
  // One long row (e.g. a flattened gradient): reduce fixed 64 K pieces in
  // parallel, then combine them in order, so the bits do not depend on the
  // thread count.
  auto reduce_range = [&](const float* p, int64_t m, double sh, double* acc) {
    switch (op) {
      case OSLO_BK_REDUCE_SUM: *acc += sum_f64(p, m); break;
      case OSLO_BK_REDUCE_SUM_EXP:
        *acc += exp_sum_f64(nullptr, p, m, static_cast<float>(sh), true);
        break;
      case OSLO_BK_REDUCE_MAX:
        for (int64_t i = 0; i < m; ++i)
          if (std::isnan(p[i]) || p[i] > *acc) *acc = p[i];
        break;
      case OSLO_BK_REDUCE_MAX_ABS:
        for (int64_t i = 0; i < m; ++i)
          if (std::isnan(p[i]) || std::fabs(p[i]) > *acc) *acc = std::fabs(p[i]);
        break;
      default: break;  // checked above
    }
  };
  const bool is_max = op == OSLO_BK_REDUCE_MAX || op == OSLO_BK_REDUCE_MAX_ABS;
  const double init = op == OSLO_BK_REDUCE_MAX ? -std::numeric_limits<double>::infinity() : 0.0;
  auto combine = [&](double a, double b) {
    if (!is_max) return a + b;
    return (std::isnan(b) || b > a) ? b : a;
  };
  const int64_t piece = 1 << 16;
  if (rows == 1 && n > piece) {
    const int64_t pieces = (n + piece - 1) / piece;
    std::vector<double> part(static_cast<size_t>(pieces), init);
    float sh = shift ? load1(*shift, 0) : 0.f;
#pragma omp parallel num_threads(std::max(1, threads))
    {
      std::vector<float> buf(static_cast<size_t>(piece));
#pragma omp for schedule(static)
      for (int64_t p = 0; p < pieces; ++p) {
        const int64_t lo = p * piece, m = std::min(piece, n - lo);
        const float* row = load_row(x, lo * inner_stride(x), m, inner_stride(x), buf.data());
        double acc = init;
        reduce_range(row, m, sh, &acc);
        part[static_cast<size_t>(p)] = acc;
      }
    }
    double acc = init;
    for (double v : part) acc = combine(acc, v);
    results[0] = static_cast<float>(acc);
  } else {
    const V xa = x;
    for_rows(threads, rows, n, [&](int64_t r, Scratch& s) {
      const float* row = load_row(xa, row_offset(xa, xa, r), n, inner_stride(xa), s.a.data());
      double acc = init;
      reduce_range(row, n, shift ? load1(*shift, r) : 0.0, &acc);
      results[static_cast<size_t>(r)] = static_cast<float>(acc);
    });
  }
  for (int64_t r = 0; r < rows; ++r) {
    float v = results[static_cast<size_t>(r)];
    if (accumulate) v = static_cast<float>(combine(load1(o, r), v));
    store_row(o, r, 1, 1, &v);
  }
}

void sum_rows(int threads, const V& out, const V& x, bool accumulate) {
  check_float(out, "sum_rows output");
  check_float(x, "sum_rows input");
  OSLO_CHECK(x.ndim == 2, OSLO_ERR_SHAPE, "sum_rows input must be 2-D, got ", shape_of(x));
  const int64_t rows = x.shape[0], cols = x.shape[1];
  OSLO_CHECK(numel(out) == cols && flat(out), OSLO_ERR_SHAPE, "sum_rows output ", shape_of(out),
             " needs ", cols, " contiguous elements");
  const int64_t block = 256;
  const int64_t blocks = (cols + block - 1) / block;
  const int nt = blocks > 1 && rows * cols > 16384 ? std::max(1, threads) : 1;
  const V o = align(out, 1);
#pragma omp parallel num_threads(nt)
  {
    std::vector<double> acc(static_cast<size_t>(block));
    std::vector<float> buf(static_cast<size_t>(block));
#pragma omp for schedule(static)
    for (int64_t bi = 0; bi < blocks; ++bi) {
      const int64_t c0 = bi * block, m = std::min(block, cols - c0);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t r = 0; r < rows; ++r) {
        const float* row =
            load_row(x, r * x.strides[0] + c0 * x.strides[1], m, x.strides[1], buf.data());
        for (int64_t i = 0; i < m; ++i) acc[static_cast<size_t>(i)] += row[i];
      }
      for (int64_t i = 0; i < m; ++i) {
        float v = static_cast<float>(acc[static_cast<size_t>(i)]);
        if (accumulate) v += load1(o, c0 + i);
        store_row(o, c0 + i, 1, 1, &v);
      }
    }
  }
}

// ---- softmax and norms ----------------------------------------------------

void softmax(int threads, const V& out, const V& x, const V* mask0, float scale, bool causal,
             int64_t offset) {
  check_float(out, "softmax output");
  check_float(x, "softmax input");
  OSLO_CHECK(numel(out) == numel(x) && out.ndim == x.ndim, OSLO_ERR_SHAPE, "softmax output ",
             shape_of(out), " differs from input ", shape_of(x));
  V mask;
  if (mask0) {
    check_float(*mask0, "softmax mask");
    mask = broadcast_to(x, *mask0, "softmax mask");
  }
  const int64_t rows = rows_of(x), cols = cols_of(x);
  const int64_t qlen = x.ndim >= 2 ? x.shape[x.ndim - 2] : 1;
  for_rows(threads, rows, cols, [&](int64_t r, Scratch& s) {
    const float* xr = load_row(x, row_offset(x, x, r), cols, inner_stride(x), s.a.data());
    const float* mr =
        mask0 ? load_row(mask, row_offset(x, mask, r), cols, inner_stride(mask), s.b.data())
              : nullptr;
    float* o = s.c.data();
    const int64_t q = r % qlen;
    const int64_t lim =
        causal ? std::min<int64_t>(cols, std::max<int64_t>(0, q + offset + 1)) : cols;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < lim; ++i) {
      o[i] = scale * xr[i] + (mr ? mr[i] : 0.f);
      mx = std::max(mx, o[i]);
    }
    double sum = 0;
    if (mx == -std::numeric_limits<float>::infinity())
      std::fill(o, o + lim, 0.f);
    else
      sum = exp_sum_f64(o, o, lim, mx, true);
    const float inv = sum > 0 ? static_cast<float>(1.0 / sum) : 0.f;
    for (int64_t i = 0; i < lim; ++i) o[i] *= inv;
    for (int64_t i = lim; i < cols; ++i) o[i] = 0.f;
    store_row(out, row_offset(out, out, r), cols, inner_stride(out), o);
  });
}

void softmax_backward(int threads, const V& gx, const V& y, const V& gy, float scale) {
  check_float(gx, "softmax_backward grad_x");
  check_float(y, "softmax_backward y");
  check_float(gy, "softmax_backward grad_y");
  OSLO_CHECK(numel(gx) == numel(y) && numel(gy) == numel(y), OSLO_ERR_SHAPE,
             "softmax_backward shapes differ");
  const int64_t rows = rows_of(y), cols = cols_of(y);
  for_rows(threads, rows, cols, [&](int64_t r, Scratch& s) {
    const float* yr = load_row(y, row_offset(y, y, r), cols, inner_stride(y), s.a.data());
    const float* gr = load_row(gy, row_offset(y, gy, r), cols, inner_stride(gy), s.b.data());
    double dot = 0;
    for (int64_t i = 0; i < cols; ++i) dot += static_cast<double>(yr[i]) * gr[i];
    float* o = s.c.data();
    for (int64_t i = 0; i < cols; ++i) o[i] = scale * yr[i] * (gr[i] - static_cast<float>(dot));
    store_row(gx, row_offset(gx, gx, r), cols, inner_stride(gx), o);
  });
}

}  // namespace cpu
}  // namespace oslo
