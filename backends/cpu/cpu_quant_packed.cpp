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
// (up to 2 * 128 * 127 each) are widened to int32 one by one. With AVX-VNNI
// or AVX512-VNNI, _mm256_dpbusd sums the four products straight into int32
// (the same kernels, cpu_quant_packed.inc, with the integer steps swapped).
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

// --- SIMD -----------------------------------------------------------------------

#define P8_NS avx2
#define P8_TARGET "avx2,fma,f16c"
#define P8_ACC(s, u, a) _mm256_add_epi16(s, _mm256_maddubs_epi16(u, a))
#define P8_SUM(s) _mm256_madd_epi16(s, _mm256_set1_epi16(1))
// Each row's scale in both 16-bit halves of its lane: madd gives (the
// lane's pair sum) * sc in int32.
#define P8_SUM_SC(s, sc) _mm256_madd_epi16(s, _mm256_or_si256(sc, _mm256_slli_epi32(sc, 16)))
#define P8_ACC8(acc, u, s) \
  _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)))
#include "backends/cpu/cpu_quant_packed.inc"
#undef P8_NS
#undef P8_TARGET
#undef P8_ACC
#undef P8_SUM
#undef P8_SUM_SC
#undef P8_ACC8

#if defined(__GNUC__) && (__GNUC__ >= 11 || defined(__clang__))
#define OSLO_P8_VNNI 1
#define P8_NS avxvnni
#define P8_TARGET "avx2,fma,f16c,avxvnni"
#define P8_ACC(s, u, a) _mm256_dpbusd_avx_epi32(s, u, a)
#define P8_SUM(s) (s)
#define P8_SUM_SC(s, sc) _mm256_mullo_epi32(s, sc)
#define P8_ACC8(acc, u, s) _mm256_dpbusd_avx_epi32(acc, u, s)
#include "backends/cpu/cpu_quant_packed.inc"
#undef P8_NS
#undef P8_TARGET
#undef P8_ACC
#undef P8_SUM
#undef P8_SUM_SC
#undef P8_ACC8

#define P8_NS avx512vnni
#define P8_TARGET "avx2,fma,f16c,avx512f,avx512vl,avx512vnni"
#define P8_ACC(s, u, a) _mm256_dpbusd_epi32(s, u, a)
#define P8_SUM(s) (s)
#define P8_SUM_SC(s, sc) _mm256_mullo_epi32(s, sc)
#define P8_ACC8(acc, u, s) _mm256_dpbusd_epi32(acc, u, s)
#include "backends/cpu/cpu_quant_packed.inc"
#undef P8_NS
#undef P8_TARGET
#undef P8_ACC
#undef P8_SUM
#undef P8_SUM_SC
#undef P8_ACC8
#endif

}  // namespace

QuantPacked::~QuantPacked() {
  if (data && mem.free)
    mem.free(mem.ctx, data, alloc_bytes);
  else
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

namespace {
// q4_k's 12 bytes of 6-bit scales and mins from sc[8] and mn[8]: the
// inverse of q4_k_scales (every bit of the 12 bytes is one of theirs).
void q4_k_pack_scales(const uint8_t* sc, const uint8_t* mn, uint8_t* q) {
  for (int j = 0; j < 4; ++j) {
    q[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    q[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    q[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
  }
}
}  // namespace

void unpack_group(int fmt, const uint8_t* src, int64_t K, uint8_t* const row[8]) {
  const int64_t nb = K / kBlockCols[fmt];
  for (int64_t b = 0; b < nb; ++b, src += kBlockBytes[fmt])
    for (int i = 0; i < 8; ++i) {
      uint8_t* dst = row[i] + kPlainBytes[fmt] * static_cast<size_t>(b);
      std::memcpy(dst, src + 2 * i, 2);  // d
      if (fmt == 0) {
        for (int v = 0; v < 8; ++v) std::memcpy(dst + 2 + 4 * v, src + 16 + 32 * v + 4 * i, 4);
      } else if (fmt == 1) {
        for (int v = 0; v < 4; ++v) std::memcpy(dst + 2 + 4 * v, src + 16 + 32 * v + 4 * i, 4);
      } else {
        std::memcpy(dst + 2, src + 16 + 2 * i, 2);  // dmin
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; ++j) {
          sc[j] = src[32 + 8 * j + i];
          mn[j] = src[96 + 8 * j + i];
        }
        q4_k_pack_scales(sc, mn, dst + 4);
        for (int pi = 0; pi < 4; ++pi)
          for (int v = 0; v < 8; ++v)
            std::memcpy(dst + 16 + 32 * pi + 4 * v, src + 160 + 256 * pi + 32 * v + 4 * i, 4);
      }
    }
}

QuantDot8Fn quant_dot8(int fmt, int isa) {
  if (fmt < 0 || fmt > 2) return nullptr;
  static const QuantDot8Fn scalar[3] = {scalar8_q8_0, scalar8_q4_0, scalar8_q4_k};
  static const QuantDot8Fn k_avx2[3] = {avx2::dot8_q8_0, avx2::dot8_q4_0, avx2::dot8_q4_k};
#ifdef OSLO_P8_VNNI
  static const QuantDot8Fn k_vnni[3] = {avxvnni::dot8_q8_0, avxvnni::dot8_q4_0, avxvnni::dot8_q4_k};
  static const QuantDot8Fn k_vnni512[3] = {avx512vnni::dot8_q8_0, avx512vnni::dot8_q4_0,
                                           avx512vnni::dot8_q4_k};
  if (isa == 3) return k_vnni512[fmt];
  if (isa == 2) return k_vnni[fmt];
#endif
  if (isa >= 1) return k_avx2[fmt];
  return scalar[fmt];
}

}  // namespace cpu
}  // namespace oslo
