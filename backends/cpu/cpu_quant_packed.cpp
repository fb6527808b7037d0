// Packed copies of block-quantized weights and their eight-row kernels
// (cpu_quant.hpp's QuantPacked; oslo_backend.h's pack_weight for q8_0, q4_0
// and q4_k).
//
// Why: a decode step multiplies one row of activations by every weight row.
// Dotting one weight row at a time ends each row in a horizontal sum and
// hands the prefetchers rows a row's length apart; with eight rows
// interleaved in 4-byte units, one 32-byte load holds four columns of eight
// rows, the activations' four bytes are broadcast to all lanes, and
// _mm256_maddubs_epi16 leaves each row's sums in its own lane: no
// horizontal sum, one contiguous stream, the activation block loaded once
// for eight rows. Eight maddubs results of 4-bit codes (at most 2 * 15 * 127
// per int16 each) add up in int16 without saturating (30480 < 32767); q8_0's
// (up to 2 * 128 * 127 each) are widened to int32 one by one.
//
// Values: the integer sums are exact; the f32 scaling and accumulation are
// in the order written below (block by block; q4_k: each sub-block's sum
// times its scale in integers, times the activation scale, summed over the
// super-block, then times d; the mins' term likewise), within
// oslo_backend.h's matmul_quant bound as the one-row kernels are.
#include <immintrin.h>

#include <cstdlib>
#include <cstring>

#include "backends/cpu/cpu_quant.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

namespace oslo {
namespace cpu {
namespace {

// Bytes per packed block (8 rows) and columns per block, by fmt_index.
constexpr size_t kBlockBytes[3] = {272, 144, 1184};
constexpr int64_t kBlockCols[3] = {32, 32, 256};
constexpr size_t kPlainBytes[3] = {34, 18, 144};

float half_of(const uint8_t* p) {
  return f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8)));
}

// --- scalar -------------------------------------------------------------------

// Row i's code at column c of a packed block's chunks (chunk c / 4 of 4-byte
// units, byte 4 i + c % 4).
inline uint8_t chunk_byte(const uint8_t* chunks, int i, int c) {
  return chunks[32 * (c / 4) + 4 * i + c % 4];
}

void scalar8_q8_0(const uint8_t* p, int64_t K, const QuantRow* rows, int R, float* out) {
  for (int k = 0; k < 8 * R; ++k) out[k] = 0.f;
  for (int64_t b = 0; b < K / 32; ++b, p += 272)
    for (int i = 0; i < 8; ++i) {
      const float dw = half_of(p + 2 * i);
      for (int r = 0; r < R; ++r) {
        const int8_t* a = rows[r].q + 32 * b;
        int32_t s = 0;
        for (int c = 0; c < 32; ++c) s += static_cast<int8_t>(chunk_byte(p + 16, i, c)) * a[c];
        out[8 * r + i] += static_cast<float>(s) * (dw * rows[r].d[b]);
      }
    }
}

void scalar8_q4_0(const uint8_t* p, int64_t K, const QuantRow* rows, int R, float* out) {
  for (int k = 0; k < 8 * R; ++k) out[k] = 0.f;
  for (int64_t b = 0; b < K / 32; ++b, p += 144)
    for (int i = 0; i < 8; ++i) {
      const float dw = half_of(p + 2 * i);
      for (int r = 0; r < R; ++r) {
        const int8_t* a = rows[r].q + 32 * b;
        int32_t s = 0;
        for (int c = 0; c < 16; ++c) {
          const uint8_t x = chunk_byte(p + 16, i, c);
          s += (x & 0xF) * a[c] + (x >> 4) * a[c + 16];
        }
        s -= 8 * (rows[r].s16[2 * b] + rows[r].s16[2 * b + 1]);
        out[8 * r + i] += static_cast<float>(s) * (dw * rows[r].d[b]);
      }
    }
}

void scalar8_q4_k(const uint8_t* p, int64_t K, const QuantRow* rows, int R, float* out) {
  for (int k = 0; k < 8 * R; ++k) out[k] = 0.f;
  for (int64_t s = 0; s < K / 256; ++s, p += 1184)
    for (int i = 0; i < 8; ++i) {
      const float d = half_of(p + 2 * i), dmin = half_of(p + 16 + 2 * i);
      for (int r = 0; r < R; ++r) {
        float fs = 0.f, fm = 0.f;
        for (int j = 0; j < 8; ++j) {
          const int64_t b = 8 * s + j;
          const int8_t* a = rows[r].q + 32 * b;
          const uint8_t* chunks = p + 160 + 256 * (j / 2);
          int32_t t = 0;
          for (int c = 0; c < 32; ++c) {
            const uint8_t x = chunk_byte(chunks, i, c);
            t += (j % 2 ? x >> 4 : x & 0xF) * a[c];
          }
          const float da = rows[r].d[b];
          fs += static_cast<float>(t * p[32 + 8 * j + i]) * da;
          fm += static_cast<float>(p[96 + 8 * j + i]) *
                (da * static_cast<float>(rows[r].s16[2 * b] + rows[r].s16[2 * b + 1]));
        }
        out[8 * r + i] += d * fs - dmin * fm;
      }
    }
}

// --- AVX2 -------------------------------------------------------------------------

#define P8_FN __attribute__((target("avx2,fma,f16c"))) inline

P8_FN __m256i load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
// Four activation bytes at a, in every 32-bit lane.
P8_FN __m256i bcast4(const int8_t* a) {
  int32_t v;
  std::memcpy(&v, a, 4);
  return _mm256_set1_epi32(v);
}
P8_FN __m256 halves8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

template <int R>
__attribute__((target("avx2,fma,f16c"))) void avx2_8_q8_0(const uint8_t* p, int64_t K,
                                                          const QuantRow* rows, float* out) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < K / 32; ++b, p += 272) {
    const __m256 dw = halves8(p);
    __m256i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) {
      const __m256i x = load32(p + 16 + 32 * v);
      const __m256i ux = _mm256_sign_epi8(x, x);  // |x| as unsigned bytes (-128: 128)
      for (int r = 0; r < R; ++r) {
        const __m256i s = _mm256_sign_epi8(bcast4(rows[r].q + 32 * b + 4 * v), x);
        isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(ux, s), ones));
      }
    }
    for (int r = 0; r < R; ++r)
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]),
                               _mm256_mul_ps(dw, _mm256_set1_ps(rows[r].d[b])), acc[r]);
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + 8 * r, acc[r]);
}

template <int R>
__attribute__((target("avx2,fma,f16c"))) void avx2_8_q4_0(const uint8_t* p, int64_t K,
                                                          const QuantRow* rows, float* out) {
  constexpr int A = R <= 2 ? 2 : 1;  // accumulators per row (the fma's latency)
  __m256 acc[R][A];
  for (int r = 0; r < R; ++r)
    for (int a = 0; a < A; ++a) acc[r][a] = _mm256_setzero_ps();
  const __m256i lo4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  const int64_t nb = K / 32;
  for (int64_t b = 0; b < nb; ++b, p += 144) {
    const __m256 dw = halves8(p);
    __m256i u[8];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m256i x = load32(p + 16 + 32 * v);
      u[v] = _mm256_and_si256(x, lo4);                            // columns 4v..
      u[v + 4] = _mm256_and_si256(_mm256_srli_epi16(x, 4), lo4);  // columns 16 + 4v..
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const int8_t* a = rows[r].q + 32 * b;
      __m256i s = _mm256_maddubs_epi16(u[0], bcast4(a));
#pragma GCC unroll 8
      for (int v = 1; v < 8; ++v)
        s = _mm256_add_epi16(s, _mm256_maddubs_epi16(u[v], bcast4(a + 4 * v)));
      const __m256i is =
          _mm256_sub_epi32(_mm256_madd_epi16(s, ones),
                           _mm256_set1_epi32(8 * (rows[r].s16[2 * b] + rows[r].s16[2 * b + 1])));
      acc[r][b % A] = _mm256_fmadd_ps(
          _mm256_cvtepi32_ps(is), _mm256_mul_ps(dw, _mm256_set1_ps(rows[r].d[b])), acc[r][b % A]);
    }
  }
  for (int r = 0; r < R; ++r) {
    __m256 t = acc[r][0];
    for (int a = 1; a < A; ++a) t = _mm256_add_ps(t, acc[r][a]);
    _mm256_storeu_ps(out + 8 * r, t);
  }
}

template <int R>
__attribute__((target("avx2,fma,f16c"))) void avx2_8_q4_k(const uint8_t* p, int64_t K,
                                                          const QuantRow* rows, float* out) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  const __m256i lo4 = _mm256_set1_epi8(0x0F);
  for (int64_t s = 0; s < K / 256; ++s, p += 1184) {
    __m256 fs[R], fm[R];
    for (int r = 0; r < R; ++r) fs[r] = fm[r] = _mm256_setzero_ps();
#pragma GCC unroll 1
    for (int i = 0; i < 4; ++i) {
      const uint8_t* chunks = p + 160 + 256 * i;
      const int64_t b0 = 8 * s + 2 * i;  // the pair's first block of 32
      __m256i sl[R], sh[R];
      for (int r = 0; r < R; ++r) sl[r] = sh[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) {
        const __m256i x = load32(chunks + 32 * v);
        const __m256i lo = _mm256_and_si256(x, lo4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), lo4);
        for (int r = 0; r < R; ++r) {
          const int8_t* a = rows[r].q + 32 * b0 + 4 * v;
          sl[r] = _mm256_add_epi16(sl[r], _mm256_maddubs_epi16(lo, bcast4(a)));
          sh[r] = _mm256_add_epi16(sh[r], _mm256_maddubs_epi16(hi, bcast4(a + 32)));
        }
      }
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const int j = 2 * i + h;
        // Each row's scale in both 16-bit halves of its lane: madd gives
        // (sum of the lane's pair) * sc in int32.
        const __m256i sc32 =
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 32 + 8 * j)));
        const __m256i sc16 = _mm256_or_si256(sc32, _mm256_slli_epi32(sc32, 16));
        const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 96 + 8 * j))));
        for (int r = 0; r < R; ++r) {
          const float da = rows[r].d[b0 + h];
          const __m256i is = _mm256_madd_epi16(h ? sh[r] : sl[r], sc16);
          fs[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_set1_ps(da), fs[r]);
          const float bs =
              static_cast<float>(rows[r].s16[2 * (b0 + h)] + rows[r].s16[2 * (b0 + h) + 1]);
          fm[r] = _mm256_fmadd_ps(mn, _mm256_set1_ps(da * bs), fm[r]);
        }
      }
    }
    const __m256 d = halves8(p), dmin = halves8(p + 16);
    for (int r = 0; r < R; ++r)
      acc[r] = _mm256_fnmadd_ps(dmin, fm[r], _mm256_fmadd_ps(d, fs[r], acc[r]));
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + 8 * r, acc[r]);
}

#undef P8_FN

__attribute__((target("avx2,fma,f16c"))) void avx2_dot8_q8_0(const uint8_t* p, int64_t K,
                                                             const QuantRow* rows, int R,
                                                             float* out) {
  switch (R) {
    case 1: return avx2_8_q8_0<1>(p, K, rows, out);
    case 2: return avx2_8_q8_0<2>(p, K, rows, out);
    case 3: return avx2_8_q8_0<3>(p, K, rows, out);
    default: return avx2_8_q8_0<4>(p, K, rows, out);
  }
}
__attribute__((target("avx2,fma,f16c"))) void avx2_dot8_q4_0(const uint8_t* p, int64_t K,
                                                             const QuantRow* rows, int R,
                                                             float* out) {
  switch (R) {
    case 1: return avx2_8_q4_0<1>(p, K, rows, out);
    case 2: return avx2_8_q4_0<2>(p, K, rows, out);
    case 3: return avx2_8_q4_0<3>(p, K, rows, out);
    default: return avx2_8_q4_0<4>(p, K, rows, out);
  }
}
__attribute__((target("avx2,fma,f16c"))) void avx2_dot8_q4_k(const uint8_t* p, int64_t K,
                                                             const QuantRow* rows, int R,
                                                             float* out) {
  switch (R) {
    case 1: return avx2_8_q4_k<1>(p, K, rows, out);
    case 2: return avx2_8_q4_k<2>(p, K, rows, out);
    case 3: return avx2_8_q4_k<3>(p, K, rows, out);
    default: return avx2_8_q4_k<4>(p, K, rows, out);
  }
}

}  // namespace

QuantPacked::~QuantPacked() {
  std::free(data);
}

bool quant_packs(oslo_dtype dtype) {
  return dtype == OSLO_DTYPE_Q8_0 || dtype == OSLO_DTYPE_Q4_0 || dtype == OSLO_DTYPE_Q4_K;
}

size_t packed_group_bytes(int fmt, int64_t K) {
  return static_cast<size_t>(K / kBlockCols[fmt]) * kBlockBytes[fmt];
}

void pack_group(int fmt, const uint8_t* const row[8], int64_t K, uint8_t* dst) {
  const int64_t nb = K / kBlockCols[fmt];
  for (int64_t b = 0; b < nb; ++b, dst += kBlockBytes[fmt])
    for (int i = 0; i < 8; ++i) {
      const uint8_t* src = row[i] + kPlainBytes[fmt] * static_cast<size_t>(b);
      std::memcpy(dst + 2 * i, src, 2);  // d
      if (fmt == 0) {
        for (int v = 0; v < 8; ++v) std::memcpy(dst + 16 + 32 * v + 4 * i, src + 2 + 4 * v, 4);
      } else if (fmt == 1) {
        for (int v = 0; v < 4; ++v) std::memcpy(dst + 16 + 32 * v + 4 * i, src + 2 + 4 * v, 4);
      } else {
        std::memcpy(dst + 16 + 2 * i, src + 2, 2);  // dmin
        uint8_t sc[8], mn[8];
        q4_k_scales(src + 4, sc, mn);
        for (int j = 0; j < 8; ++j) {
          dst[32 + 8 * j + i] = sc[j];
          dst[96 + 8 * j + i] = mn[j];
        }
        for (int pi = 0; pi < 4; ++pi)
          for (int v = 0; v < 8; ++v)
            std::memcpy(dst + 160 + 256 * pi + 32 * v + 4 * i, src + 16 + 32 * pi + 4 * v, 4);
      }
    }
}

QuantDot8Fn quant_dot8(int fmt, bool avx2) {
  static const QuantDot8Fn scalar[3] = {scalar8_q8_0, scalar8_q4_0, scalar8_q4_k};
  static const QuantDot8Fn simd[3] = {avx2_dot8_q8_0, avx2_dot8_q4_0, avx2_dot8_q4_k};
  if (fmt < 0 || fmt > 2) return nullptr;
  return avx2 ? simd[fmt] : scalar[fmt];
}

}  // namespace cpu
}  // namespace oslo
