#include "backends/cpu/cpu_ops.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

namespace oslo {
namespace cpu {
namespace {

constexpr double kPi = 3.14159265358979323846;

bool is_float(oslo_dtype dt) {
  return dt == OSLO_DTYPE_F32 || dt == OSLO_DTYPE_F16 || dt == OSLO_DTYPE_BF16;
}
bool is_int(oslo_dtype dt) {
  return dt == OSLO_DTYPE_I32 || dt == OSLO_DTYPE_I64;
}

void check_view(const V& v, const char* what) {
  OSLO_CHECK(v.ndim >= 0 && v.ndim <= OSLO_MAX_DIMS, OSLO_ERR_INVALID_ARGUMENT, what, " has ",
             v.ndim, " dimensions");
  OSLO_CHECK(dtype_valid(v.dtype), OSLO_ERR_DTYPE, what, " has unknown dtype ",
             static_cast<int>(v.dtype));
  for (int i = 0; i < v.ndim; ++i)
    OSLO_CHECK(v.shape[i] >= 0, OSLO_ERR_SHAPE, what, " has a negative extent");
  OSLO_CHECK(v.data || numel(v) == 0, OSLO_ERR_INVALID_ARGUMENT, what, " has no data");
}

void check_float(const V& v, const char* what) {
  check_view(v, what);
  OSLO_CHECK(is_float(v.dtype), OSLO_ERR_DTYPE, what, " must be f32, f16 or bf16, not ",
             dtype_name(v.dtype));
}

void check_ids(const V& v, const char* what) {
  check_view(v, what);
  OSLO_CHECK(is_int(v.dtype), OSLO_ERR_DTYPE, what, " must be i32 or i64, not ",
             dtype_name(v.dtype));
}

// v right-aligned to n dimensions (leading size-1 dimensions prepended).
V align(const V& v, int n) {
  V r = v;
  const int pad = n - v.ndim;
  OSLO_CHECK(pad >= 0, OSLO_ERR_SHAPE, "view ", shape_of(v), " has more dimensions than ", n);
  for (int i = n - 1; i >= 0; --i) {
    r.shape[i] = i >= pad ? v.shape[i - pad] : 1;
    r.strides[i] = i >= pad ? v.strides[i - pad] : 0;
  }
  r.ndim = n;
  return r;
}

// x (aligned to out) broadcasts to out: each extent equal or 1.
V broadcast_to(const V& out, const V& x, const char* what) {
  V r = align(x, out.ndim);
  for (int i = 0; i < out.ndim; ++i) {
    OSLO_CHECK(r.shape[i] == out.shape[i] || r.shape[i] == 1, OSLO_ERR_SHAPE, what, " ",
               shape_of(x), " does not broadcast to ", shape_of(out));
    if (r.shape[i] != out.shape[i]) r.strides[i] = 0;
  }
  return r;
}

int64_t rows_of(const V& v) {
  int64_t r = 1;
  for (int i = 0; i + 1 < v.ndim; ++i) r *= v.shape[i];
  return r;
}
int64_t cols_of(const V& v) {
  return v.ndim ? v.shape[v.ndim - 1] : 1;
}
int64_t inner_stride(const V& v) {
  return v.ndim ? v.strides[v.ndim - 1] : 1;
}

// Element offset of row r (a flat index over all dimensions but the last of
// `shape_src`) inside v, which has the same number of dimensions.
int64_t row_offset(const V& shape_src, const V& v, int64_t r) {
  int64_t off = 0;
  for (int i = shape_src.ndim - 2; i >= 0; --i) {
    const int64_t e = shape_src.shape[i];
    const int64_t idx = e ? r % e : 0;
    r = e ? r / e : 0;
    off += idx * v.strides[i];
  }
  return off;
}

size_t esize(oslo_dtype dt) {
  return dtype_size(dt);
}

char* at(const V& v, int64_t off) {
  return static_cast<char*>(v.data) + off * static_cast<int64_t>(esize(v.dtype));
}

float load1(const V& v, int64_t off) {
  const char* p = at(v, off);
  switch (v.dtype) {
    case OSLO_DTYPE_F32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case OSLO_DTYPE_BF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return bf16_to_f32(h);
    }
    default: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return f16_to_f32(h);
    }
  }
}

int64_t load_id(const V& v, int64_t i) {
  const char* p = at(v, i * (v.ndim ? v.strides[v.ndim - 1] : 1));
  if (v.dtype == OSLO_DTYPE_I32) {
    int32_t x;
    std::memcpy(&x, p, 4);
    return x;
  }
  int64_t x;
  std::memcpy(&x, p, 8);
  return x;
}

// One scratch row of n floats, allocated when first asked for and never
// zero-filled: most rows are read in place (load_row returns the row
// itself), so a decode step's norms and its argmax over the vocabulary
// allocate nothing (a zero-filled row per call was a memset and fresh
// pages per token).
class ScratchRow {
 public:
  explicit ScratchRow(int64_t n) : n_(std::max<int64_t>(n, 1)) {}
  float* data() {
    if (!p_) p_.reset(new float[static_cast<size_t>(n_)]);
    return p_.get();
  }
  float* begin() { return data(); }

 private:
  int64_t n_;
  std::unique_ptr<float[]> p_;
};

// Per-thread scratch rows.
struct Scratch {
  explicit Scratch(int64_t n) : a(n), b(n), c(n) {}
  ScratchRow a, b, c;
};

// Runs body(r, scratch) for every row r, in parallel over rows.
template <typename Body>
void for_rows(int threads, int64_t rows, int64_t cols, Body body) {
  const int nt = rows > 1 && rows * cols > 16384 ? std::max(1, threads) : 1;
#pragma omp parallel num_threads(nt)
  {
    Scratch s(cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) body(r, s);
  }
}

// A contiguous view of many elements as [rows, chunk] so that element-wise ops
// on a single long row still use every thread.
bool flat(const V& v) {
  int64_t expect = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    if (v.shape[i] != 1 && v.strides[i] != expect) return false;
    expect *= v.shape[i];
  }
  return true;
}
V as_chunks(const V& v, int64_t n, int64_t chunk) {
  V r = v;
  r.ndim = 2;
  r.shape[0] = n / chunk;
  r.shape[1] = chunk;
  r.strides[0] = chunk;
  r.strides[1] = 1;
  return r;
}

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

bool has_avx2_fma() {
  static const bool v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return v;
}

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

namespace {

// gamma, beta or a bias of a norm as f32 [cols]: p is the view's own data
// when it is f32 with unit stride (no copy per call), else a converted
// copy; null when absent.
struct NormParam {
  const float* p = nullptr;
  std::vector<float> copy;
  bool empty() const { return p == nullptr; }
  float operator[](size_t i) const { return p[i]; }
};

void load_norm_param(const V* v, const char* what, int64_t cols, NormParam* dst) {
  if (!v) return;
  check_float(*v, what);
  OSLO_CHECK(numel(*v) == cols, OSLO_ERR_SHAPE, what, " ", shape_of(*v), " needs ", cols,
             " elements");
  const V a = align(*v, 1);
  if (a.dtype == OSLO_DTYPE_F32 && (a.strides[0] == 1 || cols <= 1)) {
    dst->p = static_cast<const float*>(a.data);
    return;
  }
  dst->copy.resize(static_cast<size_t>(cols));
  const float* row = load_row(a, 0, cols, a.strides[0], dst->copy.data());
  if (row != dst->copy.data()) std::copy(row, row + cols, dst->copy.begin());
  dst->p = dst->copy.data();
}

// The statistics of one row as norm() and norm_backward() use them: the
// mean (0 for RMS) and the mean squared deviation from it, in f64 over 16
// lanes combined in a fixed order (sum_f64's), so independent chains and
// the same bits for every thread count.
void row_stats(const float* xr, int64_t cols, bool rms, double* mean, double* var) {
  const double n = static_cast<double>(std::max<int64_t>(cols, 1));
  const double m = rms ? 0.0 : sum_f64(xr, cols) / n;
  double l[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= cols; i += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const double d = xr[i + k] - m;
      l[k] += d * d;
    }
  for (; i < cols; ++i) {
    const double d = xr[i] - m;
    l[i % kLanes] += d * d;
  }
  *mean = m;
  *var = combine_lanes(l) / n;
}

// One row of norm(): o = (x - mean) / sqrt(var + eps) (* g) (+ b), the
// statistics from row_stats.
void norm_row(const float* xr, int64_t cols, const NormParam& g, const NormParam& b, float eps,
              bool rms, float* o) {
  double mean, var;
  row_stats(xr, cols, rms, &mean, &var);
  const float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
  for (int64_t i = 0; i < cols; ++i) {
    float v = (xr[i] - static_cast<float>(mean)) * inv;
    if (!g.empty()) v *= g[static_cast<size_t>(i)];
    if (!b.empty()) v += b[static_cast<size_t>(i)];
    o[i] = v;
  }
}

}  // namespace

void norm(int threads, const V& out, const V& x, const V* gamma, const V* beta, float eps,
          bool rms) {
  check_float(out, "norm output");
  check_float(x, "norm input");
  OSLO_CHECK(numel(out) == numel(x) && cols_of(out) == cols_of(x), OSLO_ERR_SHAPE, "norm output ",
             shape_of(out), " differs from input ", shape_of(x));
  const int64_t rows = rows_of(x), cols = cols_of(x);
  NormParam g, b;
  load_norm_param(gamma, "norm gamma", cols, &g);
  if (!rms) load_norm_param(beta, "norm beta", cols, &b);
  for_rows(threads, rows, cols, [&](int64_t r, Scratch& s) {
    const float* xr = load_row(x, row_offset(x, x, r), cols, inner_stride(x), s.a.data());
    norm_row(xr, cols, g, b, eps, rms, s.c.data());
    store_row(out, row_offset(out, out, r), cols, inner_stride(out), s.c.data());
  });
}

namespace {

struct AdamW {
  float decay, keep, beta1, beta2, c1, c2, step_size, inv, eps;
};

void adamw_range(const AdamW& k, float* pp, const float* gp, float* mp, float* vp, int64_t lo,
                 int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) {
    float pi = k.decay != 0.f ? pp[i] * k.keep : pp[i];
    const float gi = gp[i];
    const float mi = k.beta1 * mp[i] + k.c1 * gi;
    const float vi = k.beta2 * vp[i] + k.c2 * (gi * gi);
    pi -= k.step_size * (mi / (std::sqrt(vi) * k.inv + k.eps));
    pp[i] = pi;
    mp[i] = mi;
    vp[i] = vi;
  }
}

// The same update eight lanes at a time (exact sqrt and division; products
// may fuse with the adds, within an ulp of the scalar form's steps).
__attribute__((target("avx2,fma"))) void adamw_avx2(const AdamW& k, float* pp, const float* gp,
                                                    float* mp, float* vp, int64_t lo, int64_t hi) {
  const __m256 keep = _mm256_set1_ps(k.keep), b1 = _mm256_set1_ps(k.beta1),
               b2 = _mm256_set1_ps(k.beta2), c1 = _mm256_set1_ps(k.c1), c2 = _mm256_set1_ps(k.c2),
               step = _mm256_set1_ps(k.step_size), inv = _mm256_set1_ps(k.inv),
               eps = _mm256_set1_ps(k.eps);
  const bool decay = k.decay != 0.f;
  int64_t i = lo;
  for (; i + 8 <= hi; i += 8) {
    __m256 p = _mm256_loadu_ps(pp + i);
    if (decay) p = _mm256_mul_ps(p, keep);
    const __m256 g = _mm256_loadu_ps(gp + i);
    const __m256 m =
        _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(mp + i)), _mm256_mul_ps(c1, g));
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(vp + i)),
                                   _mm256_mul_ps(c2, _mm256_mul_ps(g, g)));
    const __m256 den = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(v), inv), eps);
    p = _mm256_sub_ps(p, _mm256_mul_ps(step, _mm256_div_ps(m, den)));
    _mm256_storeu_ps(pp + i, p);
    _mm256_storeu_ps(mp + i, m);
    _mm256_storeu_ps(vp + i, v);
  }
  adamw_range(k, pp, gp, mp, vp, i, hi);
}

}  // namespace

void adamw(int threads, const V& p, const V& g, const V& m, const V& v, float decay, float beta1,
           float beta2, float step_size, float bc2_sqrt, float eps) {
  const int64_t n = numel(p);
  for (const V* t : {&p, &g, &m, &v}) {
    OSLO_CHECK(t->dtype == OSLO_DTYPE_F32 && flat(*t) && numel(*t) == n, OSLO_ERR_SHAPE,
               "adamw: operands must be contiguous f32 of ", n, " elements, not ", shape_of(*t),
               " ", dtype_name(t->dtype));
  }
  float* pp = static_cast<float*>(p.data);
  const float* gp = static_cast<const float*>(g.data);
  float* mp = static_cast<float*>(m.data);
  float* vp = static_cast<float*>(v.data);
  const AdamW k{decay,       1.f - decay, beta1,          beta2, 1.f - beta1,
                1.f - beta2, step_size,   1.f / bc2_sqrt, eps};
  const bool vec = has_avx2_fma();
  // Pieces of 64 K elements, as many per thread.
  const int64_t piece = 1 << 16, pieces = (n + piece - 1) / piece;
  const int nt = n > 32768 ? std::max(1, threads) : 1;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t q = 0; q < pieces; ++q) {
    const int64_t lo = q * piece, hi = std::min(n, lo + piece);
    if (vec)
      adamw_avx2(k, pp, gp, mp, vp, lo, hi);
    else
      adamw_range(k, pp, gp, mp, vp, lo, hi);
  }
}

void norm_backward(int threads, const V& gx, const V* ggamma, const V* gbeta, const V& x,
                   const V* gamma, const V& dy, float eps, bool rms) {
  check_float(gx, "norm_backward grad_x");
  check_float(x, "norm_backward x");
  check_float(dy, "norm_backward dy");
  OSLO_CHECK(x.ndim == 2 && dy.ndim == 2 && gx.ndim == 2 && dy.shape[0] == x.shape[0] &&
                 dy.shape[1] == x.shape[1] && gx.shape[0] == x.shape[0] &&
                 gx.shape[1] == x.shape[1],
             OSLO_ERR_SHAPE, "norm_backward: x ", shape_of(x), ", dy ", shape_of(dy),
             " and grad_x ", shape_of(gx), " must be the same [rows, H]");
  const int64_t rows = x.shape[0], cols = x.shape[1];
  NormParam g;
  load_norm_param(gamma, "norm_backward gamma", cols, &g);
  const V* gb = rms ? nullptr : gbeta;
  for (const V* p : {ggamma, gb})
    if (p)
      OSLO_CHECK(p->dtype == OSLO_DTYPE_F32 && numel(*p) == cols, OSLO_ERR_SHAPE,
                 "norm_backward: parameter gradients must be f32 [", cols, "], not ", shape_of(*p));
  if (rows * cols == 0) return;
  // 1. Row statistics exactly as norm() computes them (f64 sums, f32 rstd).
  std::vector<float> mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
  for_rows(threads, rows, cols, [&](int64_t r, Scratch& s) {
    const float* xr = load_row(x, r * x.strides[0], cols, x.strides[1], s.a.data());
    double m, var;
    row_stats(xr, cols, rms, &m, &var);
    mean[static_cast<size_t>(r)] = static_cast<float>(m);
    rstd[static_cast<size_t>(r)] = static_cast<float>(1.0 / std::sqrt(var + eps));
  });
  // 2. Parameter gradients (before grad_x is written: it may be dy):
  // columns in blocks across threads, rows in order, so the sums are the
  // same whatever the thread count.
  if (ggamma || gb) {
    const int64_t block = 256, blocks = (cols + block - 1) / block;
    const int nt = blocks > 1 && rows * cols > 16384 ? std::max(1, threads) : 1;
    const V gg1 = ggamma ? align(*ggamma, 1) : V{}, gb1 = gb ? align(*gb, 1) : V{};
#pragma omp parallel num_threads(nt)
    {
      std::vector<float> xb(static_cast<size_t>(block)), db(static_cast<size_t>(block)),
          cur(static_cast<size_t>(block)), w(static_cast<size_t>(block));
      std::vector<double> ag(static_cast<size_t>(block)), ab(static_cast<size_t>(block));
#pragma omp for schedule(static)
      for (int64_t bi = 0; bi < blocks; ++bi) {
        const int64_t j0 = bi * block, n = std::min(block, cols - j0);
        std::fill(ag.begin(), ag.end(), 0.0);
        std::fill(ab.begin(), ab.end(), 0.0);
        for (int64_t r = 0; r < rows; ++r) {
          const float* xr =
              load_row(x, r * x.strides[0] + j0 * x.strides[1], n, x.strides[1], xb.data());
          const float* dr =
              load_row(dy, r * dy.strides[0] + j0 * dy.strides[1], n, dy.strides[1], db.data());
          const float mf = mean[static_cast<size_t>(r)], inv = rstd[static_cast<size_t>(r)];
          for (int64_t j = 0; j < n; ++j) {
            ag[static_cast<size_t>(j)] += static_cast<double>(dr[j]) * ((xr[j] - mf) * inv);
            ab[static_cast<size_t>(j)] += dr[j];
          }
        }
        for (int k = 0; k < 2; ++k) {
          const V& p = k == 0 ? gg1 : gb1;
          const std::vector<double>& acc = k == 0 ? ag : ab;
          if (!p.data) continue;
          const float* c = load_row(p, j0 * p.strides[0], n, p.strides[0], cur.data());
          for (int64_t j = 0; j < n; ++j)
            w[static_cast<size_t>(j)] = c[j] + static_cast<float>(acc[static_cast<size_t>(j)]);
          store_row(p, j0 * p.strides[0], n, p.strides[0], w.data());
        }
      }
    }
  }
  // 3. grad_x, row by row (each row of dy read before its grad_x row is stored).
  for_rows(threads, rows, cols, [&](int64_t r, Scratch& s) {
    const float* xr = load_row(x, r * x.strides[0], cols, x.strides[1], s.a.data());
    const float* dr = load_row(dy, r * dy.strides[0], cols, dy.strides[1], s.b.data());
    const float mf = mean[static_cast<size_t>(r)], inv = rstd[static_cast<size_t>(r)];
    double s1 = 0, s2 = 0;  // sum g, sum g * xhat
    for (int64_t i = 0; i < cols; ++i) {
      const float gi = g.empty() ? dr[i] : dr[i] * g[static_cast<size_t>(i)];
      s1 += gi;
      s2 += static_cast<double>(gi) * ((xr[i] - mf) * inv);
    }
    const float a1 = rms ? 0.f : static_cast<float>(s1 / static_cast<double>(cols));
    const float a2 = static_cast<float>(s2 / static_cast<double>(cols));
    float* o = s.c.data();
    for (int64_t i = 0; i < cols; ++i) {
      const float gi = g.empty() ? dr[i] : dr[i] * g[static_cast<size_t>(i)];
      o[i] = inv * (gi - a1 - (xr[i] - mf) * inv * a2);
    }
    store_row(gx, r * gx.strides[0], cols, gx.strides[1], o);
  });
}

void residual_norm(int threads, const V& out, const V& x, const V* y, const V* bias, const V* gamma,
                   const V* beta, float eps, bool rms) {
  check_float(out, "residual_norm output");
  check_float(x, "residual_norm x");
  const int64_t rows = rows_of(x), cols = cols_of(x);
  OSLO_CHECK(numel(out) == numel(x) && cols_of(out) == cols, OSLO_ERR_SHAPE,
             "residual_norm output ", shape_of(out), " differs from x ", shape_of(x));
  if (y) {
    check_float(*y, "residual_norm y");
    OSLO_CHECK(numel(*y) == numel(x) && cols_of(*y) == cols, OSLO_ERR_SHAPE, "residual_norm y ",
               shape_of(*y), " differs from x ", shape_of(x));
  }
  NormParam bv, g, b;
  load_norm_param(bias, "residual_norm bias", cols, &bv);
  load_norm_param(gamma, "residual_norm gamma", cols, &g);
  if (!rms) load_norm_param(beta, "residual_norm beta", cols, &b);
  const bool round_x = x.dtype != OSLO_DTYPE_F32;
  for_rows(threads, rows, cols, [&](int64_t r, Scratch& s) {
    const int64_t xo = row_offset(x, x, r);
    const float* xr = load_row(x, xo, cols, inner_stride(x), s.a.data());
    const float* yr =
        y ? load_row(*y, row_offset(x, *y, r), cols, inner_stride(*y), s.b.data()) : nullptr;
    float* xn = s.c.data();
    // As the composition: t = y + bias in f32, then x + t rounded to x's dtype.
    for (int64_t i = 0; i < cols; ++i) {
      float t = yr ? yr[i] : 0.f;
      if (!bv.empty()) t = yr ? t + bv[static_cast<size_t>(i)] : bv[static_cast<size_t>(i)];
      xn[i] = (yr || !bv.empty()) ? xr[i] + t : xr[i];
    }
    store_row(x, xo, cols, inner_stride(x), xn);
    const float* xs = round_x ? load_row(x, xo, cols, inner_stride(x), s.a.data()) : xn;
    float* o = s.b.data();
    norm_row(xs, cols, g, b, eps, rms, o);
    store_row(out, row_offset(out, out, r), cols, inner_stride(out), o);
  });
}

void rope(int threads, const V& x, const V& cos, const V& sin) {
  check_float(x, "rope x");
  OSLO_CHECK(x.ndim == 3, OSLO_ERR_SHAPE, "rope x must be [rows, heads, head_dim], not ",
             shape_of(x));
  for (const V* t : {&cos, &sin}) {
    OSLO_CHECK(t->dtype == OSLO_DTYPE_F32, OSLO_ERR_DTYPE, "rope cos/sin must be f32, not ",
               dtype_name(t->dtype));
    OSLO_CHECK(t->ndim == 2 && t->shape[0] == x.shape[0] && t->shape[1] == cos.shape[1],
               OSLO_ERR_SHAPE, "rope cos/sin ", shape_of(*t), " must be [", x.shape[0], ", R]");
  }
  const int64_t rows = x.shape[0], heads = x.shape[1], D = x.shape[2], R = cos.shape[1];
  OSLO_CHECK(2 * R <= D, OSLO_ERR_SHAPE, "rope rotates 2 x ", R, " dimensions of heads of ", D);
  const int64_t xs = x.strides[2];
  const bool f32 = x.dtype == OSLO_DTYPE_F32;
  // Rounded as the composition rounds each op's output to x's dtype.
  auto rnd = [&](float v) {
    if (f32) return v;
    return x.dtype == OSLO_DTYPE_BF16 ? bf16_to_f32(f32_to_bf16(v)) : f16_to_f32(f32_to_f16(v));
  };
  for_rows(threads, rows * heads, 2 * R, [&](int64_t rh, Scratch& s) {
    const int64_t r = rh / heads, h = rh % heads;
    const int64_t off = r * x.strides[0] + h * x.strides[1];
    float* v = s.a.data();
    const float* in = load_row(x, off, 2 * R, xs, v);
    if (in != v) std::copy(in, in + 2 * R, v);
    const char* cb = static_cast<const char*>(cos.data);
    const char* sb = static_cast<const char*>(sin.data);
    float* o = s.c.data();
    for (int64_t i = 0; i < R; ++i) {
      float c, sn;
      std::memcpy(&c, cb + 4 * (r * cos.strides[0] + i * cos.strides[1]), 4);
      std::memcpy(&sn, sb + 4 * (r * sin.strides[0] + i * sin.strides[1]), 4);
      const float x1 = v[i], x2 = v[R + i];
      const float a = x1 * sn, b = x2 * sn;  // the composition's f32 scratches
      o[i] = rnd(rnd(x1 * c) - b);
      o[R + i] = rnd(rnd(x2 * c) + a);
    }
    store_row(x, off, 2 * R, xs, o);
  });
}

// ---- gathers and scatters -------------------------------------------------

namespace {}  // namespace

namespace {

// The first NaN of p[0, n) if there is one, else the lowest index of the
// largest value (n > 0). AVX2: one pass for the maximum (and whether a NaN
// is there), then the first index holding it.
__attribute__((target("avx2,fma"))) int64_t first_nan_or_max_avx2(const float* p, int64_t n,
                                                                  float* bv) {
  __m256 vm = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 nan = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(p + j);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    vm = _mm256_max_ps(vm, v);
  }
  float m = -std::numeric_limits<float>::infinity();
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vm);
  for (float l : lanes) m = std::max(m, l);
  bool has_nan = _mm256_movemask_ps(nan) != 0;
  for (int64_t k = j; k < n; ++k) {
    if (std::isnan(p[k])) has_nan = true;
    if (p[k] > m) m = p[k];
  }
  // The first index holding it (or the first NaN), eight at a time.
  const __m256 target = _mm256_set1_ps(m);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256 v = _mm256_loadu_ps(p + k);
    const int hit = _mm256_movemask_ps(has_nan ? _mm256_cmp_ps(v, v, _CMP_UNORD_Q)
                                               : _mm256_cmp_ps(v, target, _CMP_EQ_OQ));
    if (hit) {
      k += __builtin_ctz(static_cast<unsigned>(hit));
      *bv = p[k];
      return k;
    }
  }
  for (; k < n; ++k)
    if (has_nan ? std::isnan(p[k]) : p[k] == m) {
      *bv = p[k];
      return k;
    }
  *bv = p[0];
  return 0;  // not reached: the maximum is one of the values
}

void argmax_row(const float* p, int64_t n, int64_t* best, float* bv) {
  if (has_avx2_fma()) {
    *best = first_nan_or_max_avx2(p, n, bv);
    return;
  }
  *best = 0;
  *bv = p[0];
  if (std::isnan(*bv)) return;
  for (int64_t j = 1; j < n; ++j) {
    if (std::isnan(p[j])) {
      *best = j;
      *bv = p[j];
      return;
    }
    if (p[j] > *bv) {
      *best = j;
      *bv = p[j];
    }
  }
}

}  // namespace

void argmax(int threads, const V& index, const V& value, const V& x, int64_t valid) {
  check_float(x, "argmax x");
  OSLO_CHECK(x.ndim == 2, OSLO_ERR_SHAPE, "argmax x must be [rows, n], not ", shape_of(x));
  const int64_t rows = x.shape[0];
  OSLO_CHECK(index.dtype == OSLO_DTYPE_I64 && index.ndim == 1 && index.shape[0] == rows,
             OSLO_ERR_SHAPE, "argmax index must be i64 [", rows, "], not ", shape_of(index), " ",
             dtype_name(index.dtype));
  OSLO_CHECK(value.dtype == OSLO_DTYPE_F32 && value.ndim == 1 && value.shape[0] == rows,
             OSLO_ERR_SHAPE, "argmax value must be f32 [", rows, "], not ", shape_of(value), " ",
             dtype_name(value.dtype));
  OSLO_CHECK(valid <= x.shape[1], OSLO_ERR_INVALID_ARGUMENT, "argmax: ", valid,
             " valid elements in rows of ", x.shape[1]);
  const int64_t n = valid < 0 ? x.shape[1] : valid;
  auto* idx = static_cast<int64_t*>(index.data);
  auto* val = static_cast<float*>(value.data);
  for_rows(threads, rows, n, [&](int64_t r, Scratch& s) {
    const float* p = load_row(x, r * x.strides[0], n, x.strides[1], s.a.data());
    int64_t best = n > 0 ? 0 : -1;
    float bv = n > 0 ? p[0] : -std::numeric_limits<float>::infinity();
    if (n > 0) argmax_row(p, n, &best, &bv);
    idx[r * index.strides[0]] = best;
    val[r * value.strides[0]] = bv;
  });
}

namespace {

int64_t ids_len(const V& ids, const char* what) {
  check_ids(ids, what);
  OSLO_CHECK(ids.ndim <= 1 || rows_of(ids) == 1 || cols_of(ids) == 1 || flat(ids),
             OSLO_ERR_NOT_SUPPORTED, what, " must be contiguous or 1-D");
  return numel(ids);
}

// ids as a flat list (any contiguous shape, or a strided 1-D view).
int64_t id_at(const V& ids, int64_t i) {
  if (ids.ndim <= 1) return load_id(ids, i);
  const char* p = static_cast<const char*>(ids.data) + i * static_cast<int64_t>(esize(ids.dtype));
  if (ids.dtype == OSLO_DTYPE_I32) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  int64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace

void gather_rows(int threads, const V& out, const V& table, const V& ids, int64_t offset,
                 int64_t limit) {
  check_float(out, "gather_rows output");
  check_float(table, "gather_rows table");
  OSLO_CHECK(table.ndim == 2, OSLO_ERR_SHAPE, "gather_rows table must be 2-D, got ",
             shape_of(table));
  const int64_t t = ids_len(ids, "gather_rows ids"), h = table.shape[1], rows = table.shape[0];
  OSLO_CHECK(rows_of(out) == t && cols_of(out) == h, OSLO_ERR_SHAPE, "gather_rows output ",
             shape_of(out), " must be [", t, ", ", h, "]");
  for (int64_t i = 0; i < t; ++i) {
    const int64_t id = id_at(ids, i);
    OSLO_CHECK(id >= 0 && id < limit, OSLO_ERR_INVALID_ARGUMENT, "id ", id, " at position ", i,
               " is outside [0, ", limit, ")");
  }
  for_rows(threads, t, h, [&](int64_t r, Scratch& s) {
    const int64_t local = id_at(ids, r) - offset;
    float* o = s.c.data();
    if (local >= 0 && local < rows) {
      const float* row = load_row(table, local * table.strides[0], h, table.strides[1], s.a.data());
      std::copy(row, row + h, o);
    } else {
      std::fill(o, o + h, 0.f);
    }
    store_row(out, row_offset(out, out, r), h, inner_stride(out), o);
  });
}

void scatter_add_rows(int threads, const V& table, const V& ids, const V& src, int64_t offset) {
  check_float(table, "scatter_add_rows table");
  check_float(src, "scatter_add_rows src");
  OSLO_CHECK(table.ndim == 2, OSLO_ERR_SHAPE, "scatter_add_rows table must be 2-D");
  const int64_t t = ids_len(ids, "scatter_add_rows ids"), h = table.shape[1], rows = table.shape[0];
  OSLO_CHECK(rows_of(src) == t && cols_of(src) == h, OSLO_ERR_SHAPE, "scatter_add_rows src ",
             shape_of(src), " must be [", t, ", ", h, "]");
  // Columns in parallel, tokens in order within each: deterministic.
  const int64_t block = 512;
  const int64_t blocks = (h + block - 1) / block;
  const int nt = blocks > 1 && t * h > 16384 ? std::max(1, threads) : 1;
#pragma omp parallel num_threads(nt)
  {
    std::vector<float> acc(static_cast<size_t>(block)), buf(static_cast<size_t>(block));
#pragma omp for schedule(static)
    for (int64_t bi = 0; bi < blocks; ++bi) {
      const int64_t c0 = bi * block, m = std::min(block, h - c0);
      for (int64_t i = 0; i < t; ++i) {
        const int64_t local = id_at(ids, i) - offset;
        if (local < 0 || local >= rows) continue;
        const int64_t toff = local * table.strides[0] + c0 * table.strides[1];
        const float* cur = load_row(table, toff, m, table.strides[1], acc.data());
        if (cur != acc.data()) std::copy(cur, cur + m, acc.begin());
        const float* s = load_row(src, row_offset(src, src, i) + c0 * inner_stride(src), m,
                                  inner_stride(src), buf.data());
        for (int64_t k = 0; k < m; ++k) acc[static_cast<size_t>(k)] += s[k];
        store_row(table, toff, m, table.strides[1], acc.data());
      }
    }
  }
}

void gather_cols(int threads, const V& out, const V& x, const V& idx, int64_t offset, int64_t limit,
                 int64_t ignore) {
  (void)threads;
  check_float(out, "gather_cols output");
  check_float(x, "gather_cols input");
  OSLO_CHECK(x.ndim == 2, OSLO_ERR_SHAPE, "gather_cols input must be 2-D, got ", shape_of(x));
  const int64_t t = ids_len(idx, "gather_cols index");
  OSLO_CHECK(x.shape[0] == t && numel(out) == t && flat(out), OSLO_ERR_SHAPE, "gather_cols needs ",
             t, " rows and a contiguous output of ", t, " elements");
  const V o = align(out, 1);
  for (int64_t i = 0; i < t; ++i) {
    const int64_t id = id_at(idx, i);
    float v = 0.f;
    if (id != ignore) {
      OSLO_CHECK(id >= 0 && id < limit, OSLO_ERR_INVALID_ARGUMENT, "label ", id, " at position ", i,
                 " is outside [0, ", limit, ")");
      const int64_t c = id - offset;
      if (c >= 0 && c < x.shape[1]) v = load1(x, i * x.strides[0] + c * x.strides[1]);
    }
    store_row(o, i, 1, 1, &v);
  }
}

void scatter_add_cols(int threads, const V& x, const V& idx, int64_t offset, int64_t ignore,
                      float value) {
  (void)threads;
  check_float(x, "scatter_add_cols target");
  OSLO_CHECK(x.ndim == 2, OSLO_ERR_SHAPE, "scatter_add_cols target must be 2-D");
  const int64_t t = ids_len(idx, "scatter_add_cols index");
  OSLO_CHECK(x.shape[0] == t, OSLO_ERR_SHAPE, "scatter_add_cols needs ", t, " rows");
  for (int64_t i = 0; i < t; ++i) {
    const int64_t id = id_at(idx, i);
    if (id == ignore) continue;
    const int64_t c = id - offset;
    if (c < 0 || c >= x.shape[1]) continue;
    const int64_t off = i * x.strides[0] + c * x.strides[1];
    float v = load1(x, off) + value;
    store_row(x, off, 1, 1, &v);
  }
}

}  // namespace cpu
}  // namespace oslo
