// The row-dot kernels of matmul_quant (cpu_quant.hpp's QuantKernels): one
// weight row of a block format against up to four rows of activations
// quantized to 8 bits in blocks of 32 (f32 scale per block, int16 sums per
// 16). Integer products per block of 32, scaled and accumulated in f32:
//   - scalar: portable C++ (any CPU);
//   - avx2: _mm256_maddubs_epi16 (unsigned weight bytes x signed activation
//     bytes, pairs summed to int16) then _mm256_madd_epi16 with ones (int32);
//   - avxvnni / avx512vnni: _mm256_dpbusd (the same four products summed
//     straight into int32; the AVX512-VNNI build uses its 256-bit EVEX form).
// q8_0's signed weights go in as |w| against a * sign(w); q4_0, q4_k and
// q6_k's unsigned codes go in as they are, their offsets (8, the min, 32)
// taken off with the activations' block sums. Picked at run time with
// __builtin_cpu_supports; a set the compiler cannot target is left out.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "backends/cpu/cpu_quant.hpp"
#include "core/common/dtype.hpp"

namespace oslo {
namespace cpu {

void q4_k_scales(const uint8_t* q, uint8_t* sc, uint8_t* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = q[j] & 63;
    mn[j] = q[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    mn[j] = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

namespace {

inline float half_of(const uint8_t* p) {
  return f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8)));
}

// --- scalar ---------------------------------------------------------------

int32_t idot32(const int8_t* q, const int* u) {
  int32_t s = 0;
  for (int i = 0; i < 32; ++i) s += q[i] * u[i];
  return s;
}

void scalar_q8_0(const uint8_t* w, int64_t K, const QuantRow* rows, int R, float* out) {
  for (int r = 0; r < R; ++r) out[r] = 0.f;
  int u[32];
  for (int64_t b = 0; b < K / 32; ++b, w += 34) {
    const float dw = half_of(w);
    for (int i = 0; i < 32; ++i) u[i] = static_cast<int8_t>(w[2 + i]);
    for (int r = 0; r < R; ++r)
      out[r] += dw * rows[r].d[b] * static_cast<float>(idot32(rows[r].q + 32 * b, u));
  }
}

void scalar_q4_0(const uint8_t* w, int64_t K, const QuantRow* rows, int R, float* out) {
  for (int r = 0; r < R; ++r) out[r] = 0.f;
  int u[32];
  for (int64_t b = 0; b < K / 32; ++b, w += 18) {
    const float dw = half_of(w);
    for (int i = 0; i < 16; ++i) {
      u[i] = (w[2 + i] & 0xF) - 8;
      u[i + 16] = (w[2 + i] >> 4) - 8;
    }
    for (int r = 0; r < R; ++r)
      out[r] += dw * rows[r].d[b] * static_cast<float>(idot32(rows[r].q + 32 * b, u));
  }
}

void scalar_q4_k(const uint8_t* w, int64_t K, const QuantRow* rows, int R, float* out) {
  for (int r = 0; r < R; ++r) out[r] = 0.f;
  int u[32];
  for (int64_t s = 0; s < K / 256; ++s, w += 144) {
    const float d = half_of(w), dmin = half_of(w + 2);
    uint8_t sc[8], mn[8];
    q4_k_scales(w + 4, sc, mn);
    for (int j = 0; j < 8; ++j) {
      const uint8_t* x = w + 16 + 32 * (j / 2);
      for (int i = 0; i < 32; ++i) u[i] = j % 2 ? x[i] >> 4 : x[i] & 0xF;
      const int64_t b = 8 * s + j;
      for (int r = 0; r < R; ++r) {
        const int32_t sum = rows[r].s16[2 * b] + rows[r].s16[2 * b + 1];
        out[r] += rows[r].d[b] * (d * sc[j] * static_cast<float>(idot32(rows[r].q + 32 * b, u)) -
                                  dmin * mn[j] * static_cast<float>(sum));
      }
    }
  }
}

void scalar_q6_k(const uint8_t* w, int64_t K, const QuantRow* rows, int R, float* out) {
  for (int r = 0; r < R; ++r) out[r] = 0.f;
  int u[32];
  for (int64_t s = 0; s < K / 256; ++s, w += 210) {
    const float d = half_of(w + 208);
    const int8_t* sc = reinterpret_cast<const int8_t*>(w + 192);
    for (int hf = 0; hf < 2; ++hf) {
      const uint8_t* ql = w + 64 * hf;
      const uint8_t* qh = w + 128 + 32 * hf;
      for (int c = 0; c < 4; ++c) {
        for (int l = 0; l < 32; ++l) {
          const int low = c == 0   ? ql[l] & 0xF
                          : c == 1 ? ql[l + 32] & 0xF
                          : c == 2 ? ql[l] >> 4
                                   : ql[l + 32] >> 4;
          u[l] = (low | (((qh[l] >> (2 * c)) & 3) << 4)) - 32;
        }
        const int g = 8 * hf + 2 * c;
        const int64_t b = 8 * s + 4 * hf + c;
        for (int r = 0; r < R; ++r) {
          const int8_t* q = rows[r].q + 32 * b;
          int32_t s0 = 0, s1 = 0;
          for (int i = 0; i < 16; ++i) {
            s0 += q[i] * u[i];
            s1 += q[i + 16] * u[i + 16];
          }
          out[r] += d * rows[r].d[b] * static_cast<float>(sc[g] * s0 + sc[g + 1] * s1);
        }
      }
    }
  }
}

// One block of activations (cpu_quant.hpp's QuantizeBlockFn).
void scalar_quantize_block(const float* x, int8_t* q, float* d, int16_t* s16) {
  float amax = 0.f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float db = amax / 127.f;
  const float id = db > 0.f ? 127.f / amax : 0.f;
  *d = db;
  int s[2] = {0, 0};
  for (int i = 0; i < 32; ++i) {
    // |x * id| <= 127 (up to rounding, clamped): no overflow; NaN -> 0.
    float v = std::nearbyint(x[i] * id);
    v = v > 127.f ? 127.f : v < -127.f ? -127.f : v;
    const int qi = v == v ? static_cast<int>(v) : 0;
    q[i] = static_cast<int8_t>(qi);
    s[i / 16] += qi;
  }
  s16[0] = static_cast<int16_t>(s[0]);
  s16[1] = static_cast<int16_t>(s[1]);
}

// The same with AVX2: max_ps(|x|, m) returns m for a NaN |x| (as std::max
// above), round_ps to nearest even is nearbyint in the default mode, and
// NaN -> 0 comes before the clamp (which then sees no NaN).
__attribute__((target("avx2,fma"))) void avx2_quantize_block(const float* x, int8_t* q, float* d,
                                                             int16_t* s16) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 v[4];
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    m = _mm256_max_ps(_mm256_and_ps(v[i], abs_mask), m);
  }
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  const float amax = _mm_cvtss_f32(h);
  const float db = amax / 127.f;
  const float id = db > 0.f ? 127.f / amax : 0.f;
  *d = db;
  const __m256 vid = _mm256_set1_ps(id), hi = _mm256_set1_ps(127.f), lo = _mm256_set1_ps(-127.f);
  __m256i n[4];
  for (int i = 0; i < 4; ++i) {
    __m256 r =
        _mm256_round_ps(_mm256_mul_ps(v[i], vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_and_ps(r, _mm256_cmp_ps(r, r, _CMP_ORD_Q));
    n[i] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
  }
  const __m256i p =
      _mm256_packs_epi16(_mm256_packs_epi32(n[0], n[1]), _mm256_packs_epi32(n[2], n[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  for (int j = 0; j < 2; ++j) {
    const __m256i t = _mm256_add_epi32(n[2 * j], n[2 * j + 1]);
    __m128i u = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
    u = _mm_add_epi32(u, _mm_shuffle_epi32(u, 0x4E));
    u = _mm_add_epi32(u, _mm_shuffle_epi32(u, 0xB1));
    s16[j] = static_cast<int16_t>(_mm_cvtsi128_si32(u));
  }
}

// --- SIMD -------------------------------------------------------------------

#define QK_NS avx2
#define QK_TARGET "avx2,fma,f16c"
#define QK_DOT(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
#define QK_OFFN(s, n) _mm256_maddubs_epi16(_mm256_set1_epi8(n), s)
#define QK_OFF(s) QK_OFFN(s, 8)
#define QK_DOT_OFF(u, s, c) \
  _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(u, s), c), _mm256_set1_epi16(1))
#include "backends/cpu/cpu_quant_simd.inc"
#undef QK_NS
#undef QK_TARGET
#undef QK_DOT
#undef QK_OFF
#undef QK_OFFN
#undef QK_DOT_OFF

#if defined(__GNUC__) && (__GNUC__ >= 11 || defined(__clang__))
#define OSLO_QK_VNNI 1
#define QK_NS avxvnni
#define QK_TARGET "avx2,fma,f16c,avxvnni"
#define QK_DOT(u, s) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s)
#define QK_OFFN(s, n) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(n), s)
#define QK_OFF(s) QK_OFFN(s, 8)
#define QK_DOT_OFF(u, s, c) _mm256_sub_epi32(QK_DOT(u, s), c)
#include "backends/cpu/cpu_quant_simd.inc"
#undef QK_NS
#undef QK_TARGET
#undef QK_DOT
#undef QK_OFF
#undef QK_OFFN
#undef QK_DOT_OFF

#define QK_NS avx512vnni
#define QK_TARGET "avx2,fma,f16c,avx512f,avx512vl,avx512vnni"
#define QK_DOT(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
#define QK_OFFN(s, n) _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(n), s)
#define QK_OFF(s) QK_OFFN(s, 8)
#define QK_DOT_OFF(u, s, c) _mm256_sub_epi32(QK_DOT(u, s), c)
#include "backends/cpu/cpu_quant_simd.inc"
#undef QK_NS
#undef QK_TARGET
#undef QK_DOT
#undef QK_OFF
#undef QK_OFFN
#undef QK_DOT_OFF
#endif

}  // namespace

const QuantKernels* quant_kernels(const char* force_isa) {
  // With the packed layouts' kernels (cpu_quant_packed.cpp) of each set.
  static const QuantKernels scalar{"scalar",
                                   {scalar_q8_0, scalar_q4_0, scalar_q4_k, scalar_q6_k},
                                   scalar_quantize_block,
                                   {quant_dot8(0, 0), quant_dot8(1, 0), quant_dot8(2, 0), nullptr}};
  static const QuantKernels k_avx2{"avx2",
                                   {avx2::dot_q8_0, avx2::dot_q4_0, avx2::dot_q4_k, avx2::dot_q6_k},
                                   avx2_quantize_block,
                                   {quant_dot8(0, 1), quant_dot8(1, 1), quant_dot8(2, 1), nullptr}};
  static const bool has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                               __builtin_cpu_supports("f16c");
#ifdef OSLO_QK_VNNI
  static const QuantKernels k_vnni{
      "avxvnni",
      {avxvnni::dot_q8_0, avxvnni::dot_q4_0, avxvnni::dot_q4_k, avxvnni::dot_q6_k},
      avx2_quantize_block,
      {quant_dot8(0, 2), quant_dot8(1, 2), quant_dot8(2, 2), nullptr}};
  static const QuantKernels k_vnni512{
      "avx512vnni",
      {avx512vnni::dot_q8_0, avx512vnni::dot_q4_0, avx512vnni::dot_q4_k, avx512vnni::dot_q6_k},
      avx2_quantize_block,
      {quant_dot8(0, 3), quant_dot8(1, 3), quant_dot8(2, 3), nullptr}};
  static const bool has_vnni = has_avx2 && __builtin_cpu_supports("avxvnni");
  static const bool has_vnni512 = has_avx2 && __builtin_cpu_supports("avx512f") &&
                                  __builtin_cpu_supports("avx512vl") &&
                                  __builtin_cpu_supports("avx512vnni");
#endif
  if (force_isa) {
    const std::string isa = force_isa;
    if (isa == "scalar") return &scalar;
    if (isa == "avx2") return has_avx2 ? &k_avx2 : nullptr;
#ifdef OSLO_QK_VNNI
    if (isa == "avxvnni") return has_vnni ? &k_vnni : nullptr;
    if (isa == "avx512vnni") return has_vnni512 ? &k_vnni512 : nullptr;
#endif
    return nullptr;
  }
#ifdef OSLO_QK_VNNI
  if (has_vnni512) return &k_vnni512;
  if (has_vnni) return &k_vnni;
#endif
  return has_avx2 ? &k_avx2 : &scalar;
}

}  // namespace cpu
}  // namespace oslo
