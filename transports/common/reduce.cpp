// Reduction kernels shared by the host transports (shm, gloo): one kernel, so
// every transport gives the same bits for the same inputs. They are plain loops that
// GCC vectorises; target_clones builds AVX-512, AVX2 and baseline versions and
// picks one at load time, so the library stays portable while a collective on
// this host reduces at memory speed. The file is compiled with -O3 (see
// CMakeLists.txt) because -O2 of GCC 12 does not vectorise these loops.
//
// Determinism: every element is combined in source order 0..n-1 with the same
// code on every rank, and no reassociation is allowed (no -ffast-math), so the
// result is bitwise reproducible.
#include "transports/common/reduce.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

#define OSLO_SHM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define OSLO_SHM_INLINE inline __attribute__((always_inline))

namespace oslo {
namespace transport {
namespace {

// Elements per block when sources are combined through a local accumulator
// (three or more sources, f16/bf16): 8 KB of f32 stays in L1.
constexpr size_t kBlock = 2048;

struct Sum {
  template <typename A>
  OSLO_SHM_INLINE A operator()(A a, A b) const {
    return a + b;
  }
};
// Floating MAX/MIN propagate NaN (like torch.maximum): a NaN from any rank
// wins, whichever rank it came from.
struct FMax {
  OSLO_SHM_INLINE float operator()(float a, float b) const { return (b > a || b != b) ? b : a; }
};
struct FMin {
  OSLO_SHM_INLINE float operator()(float a, float b) const { return (b < a || b != b) ? b : a; }
};
struct IMax {
  template <typename A>
  OSLO_SHM_INLINE A operator()(A a, A b) const {
    return b > a ? b : a;
  }
};
struct IMin {
  template <typename A>
  OSLO_SHM_INLINE A operator()(A a, A b) const {
    return b < a ? b : a;
  }
};

struct Same {
  template <typename A>
  OSLO_SHM_INLINE A operator()(A a) const {
    return a;
  }
};
template <typename A>
struct Div {
  A d;
  OSLO_SHM_INLINE A operator()(A a) const { return a / d; }
};

// Conversions between the stored type T and the accumulator type A.
template <typename T, typename A>
struct Cast {
  OSLO_SHM_INLINE A load(T v) const { return static_cast<A>(v); }
  OSLO_SHM_INLINE T store(A v) const { return static_cast<T>(v); }
};

// The body shared by f32 and the integer types. Two sources (the common
// tensor-parallel case) are combined in one pass straight into dst; the
// in-place variants let the compiler see that dst and a source are the same
// array, so it vectorises without an overlap check that would fail.
template <typename T, typename A, typename Cv, typename Op, typename Fin>
OSLO_SHM_INLINE void reduce_body(T* dst, const T* const* srcs, int n, size_t count, Cv cv, Op op,
                                 Fin fin) {
  if (n == 1) {
    const T* a = srcs[0];
    for (size_t i = 0; i < count; ++i) dst[i] = cv.store(fin(cv.load(a[i])));
    return;
  }
  if (n == 2) {
    const T* a = srcs[0];
    const T* b = srcs[1];
    if (dst == a) {
      for (size_t i = 0; i < count; ++i) dst[i] = cv.store(fin(op(cv.load(dst[i]), cv.load(b[i]))));
    } else if (dst == b) {
      for (size_t i = 0; i < count; ++i) dst[i] = cv.store(fin(op(cv.load(a[i]), cv.load(dst[i]))));
    } else {
      for (size_t i = 0; i < count; ++i) dst[i] = cv.store(fin(op(cv.load(a[i]), cv.load(b[i]))));
    }
    return;
  }
  // Three or more: accumulate a block locally so that dst may alias any source
  // and is written once.
  A acc[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t m = std::min(kBlock, count - base);
    const T* a = srcs[0] + base;
    const T* b = srcs[1] + base;
    for (size_t i = 0; i < m; ++i) acc[i] = op(cv.load(a[i]), cv.load(b[i]));
    for (int p = 2; p < n; ++p) {
      const T* c = srcs[p] + base;
      for (size_t i = 0; i < m; ++i) acc[i] = op(acc[i], cv.load(c[i]));
    }
    T* o = dst + base;
    for (size_t i = 0; i < m; ++i) o[i] = cv.store(fin(acc[i]));
  }
}

// ---- f32 -------------------------------------------------------------------

OSLO_SHM_CLONES void reduce_f32(float* dst, const float* const* s, int n, size_t count,
                                oslo_reduce_op op, int div) {
  Cast<float, float> cv;
  switch (op) {
    case OSLO_REDUCE_SUM: return reduce_body<float, float>(dst, s, n, count, cv, Sum(), Same());
    case OSLO_REDUCE_AVG:
      return reduce_body<float, float>(dst, s, n, count, cv, Sum(),
                                       Div<float>{static_cast<float>(div)});
    case OSLO_REDUCE_MAX: return reduce_body<float, float>(dst, s, n, count, cv, FMax(), Same());
    case OSLO_REDUCE_MIN: return reduce_body<float, float>(dst, s, n, count, cv, FMin(), Same());
    default: return;  // validated by the caller
  }
}

// ---- integers ----------------------------------------------------------------

// SUM wraps around (two's complement), done in unsigned arithmetic so that the
// overflow is defined behaviour; the wrapped sum equals the exact sum reduced
// modulo 2^bits, whatever the order.
OSLO_SHM_CLONES void reduce_i32(int32_t* dst, const int32_t* const* s, int n, size_t count,
                                oslo_reduce_op op, int div) {
  switch (op) {
    case OSLO_REDUCE_SUM:
      return reduce_body<uint32_t, uint32_t>(reinterpret_cast<uint32_t*>(dst),
                                             reinterpret_cast<const uint32_t* const*>(s), n, count,
                                             Cast<uint32_t, uint32_t>(), Sum(), Same());
    case OSLO_REDUCE_AVG:
      return reduce_body<int32_t, int64_t>(dst, s, n, count, Cast<int32_t, int64_t>(), Sum(),
                                           Div<int64_t>{div});
    case OSLO_REDUCE_MAX:
      return reduce_body<int32_t, int32_t>(dst, s, n, count, Cast<int32_t, int32_t>(), IMax(),
                                           Same());
    case OSLO_REDUCE_MIN:
      return reduce_body<int32_t, int32_t>(dst, s, n, count, Cast<int32_t, int32_t>(), IMin(),
                                           Same());
    default: return;
  }
}

OSLO_SHM_CLONES void reduce_i64(int64_t* dst, const int64_t* const* s, int n, size_t count,
                                oslo_reduce_op op, int div) {
  switch (op) {
    case OSLO_REDUCE_SUM:
      return reduce_body<uint64_t, uint64_t>(reinterpret_cast<uint64_t*>(dst),
                                             reinterpret_cast<const uint64_t* const*>(s), n, count,
                                             Cast<uint64_t, uint64_t>(), Sum(), Same());
    case OSLO_REDUCE_AVG:
      // The exact sum of up to 2^63 / 2^63-bounded values needs 128 bits.
      return reduce_body<int64_t, __int128>(dst, s, n, count, Cast<int64_t, __int128>(), Sum(),
                                            Div<__int128>{div});
    case OSLO_REDUCE_MAX:
      return reduce_body<int64_t, int64_t>(dst, s, n, count, Cast<int64_t, int64_t>(), IMax(),
                                           Same());
    case OSLO_REDUCE_MIN:
      return reduce_body<int64_t, int64_t>(dst, s, n, count, Cast<int64_t, int64_t>(), IMin(),
                                           Same());
    default: return;
  }
}

// ---- f16 / bf16: converted block by block to f32 ---------------------------

OSLO_SHM_CLONES void bf16_load(const uint16_t* s, float* d, size_t m) {
  for (size_t i = 0; i < m; ++i) d[i] = bf16_to_f32(s[i]);
}
OSLO_SHM_CLONES void bf16_store(const float* s, uint16_t* d, size_t m) {
  for (size_t i = 0; i < m; ++i) d[i] = f32_to_bf16(s[i]);
}

// F16C converts 8 halves per instruction; GCC does not vectorise the scalar
// bit manipulation of dtype.cpp, so use the intrinsics when the CPU has them.
// Both round to nearest even, so they agree except for NaN payloads (every
// rank of a host takes the same path anyway).
__attribute__((target("avx2,f16c"))) void f16_load_f16c(const uint16_t* s, float* d, size_t m) {
  size_t i = 0;
  for (; i + 8 <= m; i += 8)
    _mm256_storeu_ps(d + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  if (i < m) {
    uint16_t in[8] = {0};
    float out[8];
    std::memcpy(in, s + i, (m - i) * 2);
    _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in))));
    std::memcpy(d + i, out, (m - i) * 4);
  }
}
__attribute__((target("avx2,f16c"))) void f16_store_f16c(const float* s, uint16_t* d, size_t m) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  size_t i = 0;
  for (; i + 8 <= m; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), kRound));
  if (i < m) {
    float in[8] = {0};
    uint16_t out[8];
    std::memcpy(in, s + i, (m - i) * 4);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_cvtps_ph(_mm256_loadu_ps(in), kRound));
    std::memcpy(d + i, out, (m - i) * 2);
  }
}

bool have_f16c() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return yes;
}

void half_load(oslo_dtype dt, const void* s, float* d, size_t m) {
  auto h = static_cast<const uint16_t*>(s);
  if (dt == OSLO_DTYPE_BF16) return bf16_load(h, d, m);
  if (have_f16c()) return f16_load_f16c(h, d, m);
  to_f32(OSLO_DTYPE_F16, s, d, m);
}
void half_store(oslo_dtype dt, const float* s, void* d, size_t m) {
  auto h = static_cast<uint16_t*>(d);
  if (dt == OSLO_DTYPE_BF16) return bf16_store(s, h, m);
  if (have_f16c()) return f16_store_f16c(s, h, m);
  from_f32(OSLO_DTYPE_F16, s, d, m);
}

// acc = acc op b, then (last) acc /= div for AVG.
OSLO_SHM_CLONES void combine_f32(float* acc, const float* b, size_t m, oslo_reduce_op op) {
  switch (op) {
    case OSLO_REDUCE_SUM:
    case OSLO_REDUCE_AVG:
      for (size_t i = 0; i < m; ++i) acc[i] = Sum()(acc[i], b[i]);
      return;
    case OSLO_REDUCE_MAX:
      for (size_t i = 0; i < m; ++i) acc[i] = FMax()(acc[i], b[i]);
      return;
    case OSLO_REDUCE_MIN:
      for (size_t i = 0; i < m; ++i) acc[i] = FMin()(acc[i], b[i]);
      return;
    default: return;
  }
}
OSLO_SHM_CLONES void divide_f32(float* acc, size_t m, float div) {
  for (size_t i = 0; i < m; ++i) acc[i] = acc[i] / div;
}

void reduce_half(oslo_dtype dt, void* dst, const void* const* srcs, int n, size_t count,
                 oslo_reduce_op op, int div) {
  float acc[kBlock];
  float tmp[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t m = std::min(kBlock, count - base);
    half_load(dt, static_cast<const uint16_t*>(srcs[0]) + base, acc, m);
    for (int p = 1; p < n; ++p) {
      half_load(dt, static_cast<const uint16_t*>(srcs[p]) + base, tmp, m);
      combine_f32(acc, tmp, m, op);
    }
    if (op == OSLO_REDUCE_AVG) divide_f32(acc, m, static_cast<float>(div));
    half_store(dt, acc, static_cast<uint16_t*>(dst) + base, m);
  }
}

}  // namespace

void reduce(void* dst, const void* const* srcs, int nsrc, size_t count, oslo_dtype dt,
            oslo_reduce_op op, int avg_div) {
  if (count == 0) return;
  switch (dt) {
    case OSLO_DTYPE_F32:
      return reduce_f32(static_cast<float*>(dst), reinterpret_cast<const float* const*>(srcs), nsrc,
                        count, op, avg_div);
    case OSLO_DTYPE_F16:
    case OSLO_DTYPE_BF16: return reduce_half(dt, dst, srcs, nsrc, count, op, avg_div);
    case OSLO_DTYPE_I32:
      return reduce_i32(static_cast<int32_t*>(dst), reinterpret_cast<const int32_t* const*>(srcs),
                        nsrc, count, op, avg_div);
    case OSLO_DTYPE_I64:
      return reduce_i64(static_cast<int64_t*>(dst), reinterpret_cast<const int64_t* const*>(srcs),
                        nsrc, count, op, avg_div);
    default: break;
  }
  fail(OSLO_ERR_DTYPE, "shm: cannot reduce dtype ", static_cast<int>(dt));
}

}  // namespace transport
}  // namespace oslo
