#include "core/common/dtype.hpp"

#include <immintrin.h>

#include <cstring>

#include "core/common/error.hpp"

namespace oslo {
namespace {

// F16C converts 8 halves per instruction (IEEE round to nearest even, like
// the scalar code below); used when the CPU has it.
bool have_f16c() {
  static const bool yes = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return yes;
}

__attribute__((target("avx,f16c"))) size_t f16_to_f32_f16c(const uint16_t* s, float* d, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  return i;
}

__attribute__((target("avx,f16c"))) size_t f32_to_f16_f16c(const float* s, uint16_t* d, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  return i;
}

// bf16 <-> f32 sixteen at a time with AVX2 integer ops, bit for bit the
// scalar conversions of dtype.hpp (round to nearest even; a NaN stays a
// quiet NaN with its sign and top payload bits).
bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

__attribute__((target("avx2"))) size_t f32_to_bf16_avx2(const float* s, uint16_t* d, size_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff);
  const __m256i quiet = _mm256_set1_epi32(0x400000);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i r[2];
    for (int h = 0; h < 2; ++h) {
      const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 8 * h));
      // |u| fits 31 bits, so the signed compare is the unsigned one.
      const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
      const __m256i even = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
      const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(half, even));
      r[h] = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, _mm256_or_si256(u, quiet), nan), 16);
    }
    // Pack per 128-bit lane (values < 2^16: no saturation), then put the
    // four 64-bit quarters back in order.
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), p);
  }
  return i;
}

__attribute__((target("avx2"))) size_t bf16_to_f32_avx2(const uint16_t* s, float* d, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i),
                        _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  return i;
}

}  // namespace

bool dtype_valid(int dt) {
  return dt >= OSLO_DTYPE_F32 && dt <= OSLO_DTYPE_I64;
}

size_t dtype_size(oslo_dtype dt) {
  switch (dt) {
    case OSLO_DTYPE_F32: return 4;
    case OSLO_DTYPE_F16: return 2;
    case OSLO_DTYPE_BF16: return 2;
    case OSLO_DTYPE_I32: return 4;
    case OSLO_DTYPE_I64: return 8;
    case OSLO_DTYPE_I8: return 1;
    default: break;
  }
  if (dtype_is_block(dt)) {
    int64_t e, b;
    dtype_block(dt, &e, &b);
    fail(OSLO_ERR_DTYPE, dtype_name(dt), " is a block-quantized format (", e, " elements in ", b,
         " bytes), not an element type: this operation takes f32, f16, bf16, i32 or i64");
  }
  fail(OSLO_ERR_DTYPE, "unknown dtype ", static_cast<int>(dt));
}

bool dtype_is_block(int dt) {
  return dt == OSLO_DTYPE_Q8_0 || dt == OSLO_DTYPE_Q4_0 || dt == OSLO_DTYPE_Q4_K ||
         dt == OSLO_DTYPE_Q6_K || dt == OSLO_DTYPE_Q4_G128;
}

bool dtype_known(int dt) {
  return dtype_valid(dt) || dtype_is_block(dt);
}

void dtype_block(oslo_dtype dt, int64_t* elems, int64_t* bytes) {
  switch (dt) {
    case OSLO_DTYPE_Q8_0: *elems = 32, *bytes = 34; return;
    case OSLO_DTYPE_Q4_0: *elems = 32, *bytes = 18; return;
    case OSLO_DTYPE_Q4_K: *elems = 256, *bytes = 144; return;
    case OSLO_DTYPE_Q6_K: *elems = 256, *bytes = 210; return;
    case OSLO_DTYPE_Q4_G128: *elems = 128, *bytes = 68; return;
    default: break;
  }
  *elems = 1;
  *bytes = static_cast<int64_t>(dtype_size(dt));
}

size_t dtype_bytes(oslo_dtype dt, int64_t elements) {
  int64_t e, b;
  dtype_block(dt, &e, &b);
  OSLO_CHECK(elements >= 0 && elements % e == 0, OSLO_ERR_SHAPE, dtype_name(dt), ": ", elements,
             " elements are not whole blocks of ", e);
  return static_cast<size_t>(elements / e) * static_cast<size_t>(b);
}

bool dtype_parse(const char* name, oslo_dtype* out) {
  static const oslo_dtype all[] = {
      OSLO_DTYPE_F32,  OSLO_DTYPE_F16,  OSLO_DTYPE_BF16, OSLO_DTYPE_I32,  OSLO_DTYPE_I64,
      OSLO_DTYPE_Q8_0, OSLO_DTYPE_Q4_0, OSLO_DTYPE_Q4_K, OSLO_DTYPE_Q6_K, OSLO_DTYPE_Q4_G128};
  if (!name) return false;
  for (oslo_dtype d : all)
    if (std::strcmp(name, dtype_name(d)) == 0) {
      *out = d;
      return true;
    }
  return false;
}

const char* dtype_name(oslo_dtype dt) {
  switch (dt) {
    case OSLO_DTYPE_F32: return "f32";
    case OSLO_DTYPE_F16: return "f16";
    case OSLO_DTYPE_BF16: return "bf16";
    case OSLO_DTYPE_I32: return "i32";
    case OSLO_DTYPE_I64: return "i64";
    case OSLO_DTYPE_I8: return "i8";
    case OSLO_DTYPE_Q8_0: return "q8_0";
    case OSLO_DTYPE_Q4_0: return "q4_0";
    case OSLO_DTYPE_Q4_K: return "q4_k";
    case OSLO_DTYPE_Q6_K: return "q6_k";
    case OSLO_DTYPE_Q4_G128: return "q4_g128";
    default: break;
  }
  return "unknown";
}

bool dtype_is_float(oslo_dtype dt) {
  return dt == OSLO_DTYPE_F32 || dt == OSLO_DTYPE_F16 || dt == OSLO_DTYPE_BF16;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      u = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (absu >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (absu < 0x38800000u) {  // subnormal or zero in f16
    if (absu < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t e = absu >> 23;
    uint32_t man = (absu & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // 14..24
    uint32_t half = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t h = ((absu >> 13) - ((127 - 15) << 10));
  uint32_t rem = absu & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

void to_f32(oslo_dtype src_dtype, const void* src, float* dst, size_t n) {
  switch (src_dtype) {
    case OSLO_DTYPE_F32:
      if (static_cast<const void*>(dst) != src) std::memcpy(dst, src, n * 4);
      return;
    case OSLO_DTYPE_F16: {
      auto s = static_cast<const uint16_t*>(src);
      size_t i = have_f16c() ? f16_to_f32_f16c(s, dst, n) : 0;
      for (; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case OSLO_DTYPE_BF16: {
      auto s = static_cast<const uint16_t*>(src);
      size_t i = have_avx2() ? bf16_to_f32_avx2(s, dst, n) : 0;
      for (; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    default: fail(OSLO_ERR_DTYPE, "cannot convert ", dtype_name(src_dtype), " to f32");
  }
}

void from_f32(oslo_dtype dst_dtype, const float* src, void* dst, size_t n) {
  switch (dst_dtype) {
    case OSLO_DTYPE_F32:
      if (static_cast<const void*>(src) != dst) std::memcpy(dst, src, n * 4);
      return;
    case OSLO_DTYPE_F16: {
      auto d = static_cast<uint16_t*>(dst);
      size_t i = have_f16c() ? f32_to_f16_f16c(src, d, n) : 0;
      for (; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    case OSLO_DTYPE_BF16: {
      auto d = static_cast<uint16_t*>(dst);
      size_t i = have_avx2() ? f32_to_bf16_avx2(src, d, n) : 0;
      for (; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    default: fail(OSLO_ERR_DTYPE, "cannot convert f32 to ", dtype_name(dst_dtype));
  }
}

}  // namespace oslo
