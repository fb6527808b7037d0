// The int8 KV cache's rows on the CPU (oslo_backend.h's quantize_rows and
// dequantize_rows): the bytes of the core's reference
// (core/backend/fused_kv8.cpp) without its per-call bookkeeping, with AVX2
// where the CPU has it. A decode step quantizes each layer's new key and
// value rows; through the reference that was about 3.5 % of a GPT-2-small
// Q4_0 step (std::round per value, the rows' offsets gathered per call).
//
// The rule, per row of D values, all in f32: a = max |x| (NaN when the row
// holds one), d = a / 127, id = d != 0 ? 1 / d : 0, q = round-half-away(x *
// id) clamped to [-127, 127], 0 where x * id is NaN. The vector form rounds
// as t = trunc(v), plus sign(v) where |v - t| >= 0.5 (v - t is exact), which
// is std::round for every float; the conformance group kv8 compares the
// bytes with the rule computed in the test.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_ops.hpp"
#include "backends/cpu/cpu_rows.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

namespace oslo {
namespace cpu {
namespace {

// fn(row's element offset in `rows`, in `q`, scale's in `sc`) for every row
// of the views [d0, ..., D] (2 to 4 dimensions) and [d0, ...].
template <class F>
void each_row(const V& rows, const V& q, const V& sc, F fn) {
  const int lead = rows.ndim - 1;
  int64_t n[3] = {1, 1, 1}, rs[3] = {0, 0, 0}, qs[3] = {0, 0, 0}, ss[3] = {0, 0, 0};
  for (int i = 0; i < lead; ++i) {
    const int k = 3 - lead + i;
    n[k] = rows.shape[i];
    rs[k] = rows.strides[i];
    qs[k] = q.strides[i];
    ss[k] = sc.strides[i];
  }
  for (int64_t a = 0; a < n[0]; ++a)
    for (int64_t b = 0; b < n[1]; ++b)
      for (int64_t c = 0; c < n[2]; ++c)
        fn(a * rs[0] + b * rs[1] + c * rs[2], a * qs[0] + b * qs[1] + c * qs[2],
           a * ss[0] + b * ss[1] + c * ss[2]);
}

void check(const V& fl, const V& q, const V& sc, const char* op) {
  OSLO_CHECK(is_float(fl.dtype) && q.dtype == OSLO_DTYPE_I8 && sc.dtype == OSLO_DTYPE_F32,
             OSLO_ERR_DTYPE, op, ": float rows, i8 codes and f32 scales expected, got ",
             dtype_name(fl.dtype), ", ", dtype_name(q.dtype), " and ", dtype_name(sc.dtype));
  OSLO_CHECK(fl.ndim >= 2 && fl.ndim <= 4 && q.ndim == fl.ndim && sc.ndim == fl.ndim - 1,
             OSLO_ERR_SHAPE, op, ": rows ", shape_of(fl), ", codes ", shape_of(q), ", scales ",
             shape_of(sc), " do not fit");
  for (int d = 0; d < fl.ndim; ++d)
    OSLO_CHECK(q.shape[d] == fl.shape[d] && (d == fl.ndim - 1 || sc.shape[d] == fl.shape[d]),
               OSLO_ERR_SHAPE, op, ": rows ", shape_of(fl), ", codes ", shape_of(q), ", scales ",
               shape_of(sc), " do not fit");
}

// The largest |x| of the row (NaN if it holds one).
float amax_plain(const float* x, int64_t D) {
  float a = 0.0f;
  for (int64_t i = 0; i < D; ++i) {
    const float v = std::fabs(x[i]);
    if (std::isnan(v) || v > a) a = v;
  }
  return a;
}

void codes_plain(const float* x, int64_t D, float id, int8_t* q) {
  for (int64_t i = 0; i < D; ++i) {
    float r = std::round(x[i] * id);
    if (std::isnan(r)) r = 0.0f;
    q[i] = static_cast<int8_t>(r > 127.0f ? 127.0f : (r < -127.0f ? -127.0f : r));
  }
}

__attribute__((target("avx2,fma"))) float amax_avx2(const float* x, int64_t D) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 m = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= D; i += 8) {
    const __m256 v = _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    m = _mm256_max_ps(m, v);
  }
  if (_mm256_movemask_ps(nan)) return amax_plain(x, D);  // the row's own NaN, as the rule
  alignas(32) float l[8];
  _mm256_store_ps(l, m);
  float a = 0.0f;
  for (float v : l) a = std::max(a, v);
  const float rest = amax_plain(x + i, D - i);
  return std::isnan(rest) || rest > a ? rest : a;
}

__attribute__((target("avx2,fma"))) void codes_avx2(const float* x, int64_t D, float id,
                                                    int8_t* q) {
  const __m256 vid = _mm256_set1_ps(id), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  const __m256 hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= D; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vid);
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    // sign(v) where |v - t| >= 0.5, else 0.
    const __m256 away = _mm256_and_ps(_mm256_cmp_ps(frac, half, _CMP_GE_OQ),
                                      _mm256_or_ps(one, _mm256_and_ps(v, sign)));
    __m256 r = _mm256_add_ps(t, away);
    r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
    r = _mm256_blendv_ps(r, zero, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));  // NaN: 0
    alignas(32) int32_t w[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(w), _mm256_cvtps_epi32(r));
    for (int k = 0; k < 8; ++k) q[i + k] = static_cast<int8_t>(w[k]);
  }
  codes_plain(x + i, D - i, id, q + i);
}

__attribute__((target("avx2,fma"))) void int8_rows_avx2(const int8_t* q, const float* scales,
                                                        int64_t rows, int64_t D, float* out) {
  for (int64_t r = 0; r < rows; ++r, q += D, out += D) {
    const float d = scales[r];
    const __m256 vd = _mm256_set1_ps(d);
    int64_t i = 0;
    for (; i + 8 <= D; i += 8) {
      const __m256i w =
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i)));
      _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_cvtepi32_ps(w), vd));
    }
    for (; i < D; ++i) out[i] = static_cast<float>(q[i]) * d;
  }
}

}  // namespace

void int8_rows_to_f32(const int8_t* q, const float* scales, int64_t rows, int64_t D, float* out) {
  if (has_avx2_fma()) return int8_rows_avx2(q, scales, rows, D, out);
  for (int64_t r = 0; r < rows; ++r, q += D, out += D)
    for (int64_t i = 0; i < D; ++i) out[i] = static_cast<float>(q[i]) * scales[r];
}

void quantize_rows(int /*threads*/, const V& q, const V& scale, const V& x) {
  check(x, q, scale, "quantize_rows");
  const int64_t D = x.shape[x.ndim - 1];
  std::vector<float> buf(static_cast<size_t>(D));
  auto* qb = static_cast<int8_t*>(q.data);
  auto* sb = static_cast<float*>(scale.data);
  const bool simd = has_avx2_fma();
  each_row(x, q, scale, [&](int64_t xo, int64_t qo, int64_t so) {
    const float* row = load_row(x, xo, D, 1, buf.data());
    const float a = simd ? amax_avx2(row, D) : amax_plain(row, D);
    const float d = a / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    if (simd)
      codes_avx2(row, D, id, qb + qo);
    else
      codes_plain(row, D, id, qb + qo);
    sb[so] = d;
  });
}

void dequantize_rows(int /*threads*/, const V& out, const V& q, const V& scale) {
  check(out, q, scale, "dequantize_rows");
  const int64_t D = out.shape[out.ndim - 1];
  std::vector<float> buf(static_cast<size_t>(D));
  const auto* qb = static_cast<const int8_t*>(q.data);
  const auto* sb = static_cast<const float*>(scale.data);
  each_row(out, q, scale, [&](int64_t oo, int64_t qo, int64_t so) {
    int8_rows_to_f32(qb + qo, sb + so, 1, D, buf.data());
    store_row(out, oo, D, 1, buf.data());
  });
}

}  // namespace cpu
}  // namespace oslo
