// Matrix products of the CPU backend.
//
//  - f32: oneDNN's dnnl_sgemm (measured faster than OpenBLAS here, and as fast
//    as a GEMV for single rows; docs/BENCHMARKS.md).
//  - bf16/f16 with few rows (M <= 8, decoding) against a weight stored as
//    nn.Linear keeps it ([N, K], each output's K inputs contiguous): our own
//    AVX-512 (or AVX2 + F16C, picked at run time) kernel that widens the weight to f32 in registers
//    and never writes a converted copy, so it streams half the bytes of f32.
//  - bf16 with more rows: oneDNN's matmul primitive (bf16 in, f32
//    accumulation, using the CPU's AVX512_BF16 dot products), cached per shape.
//  - f16 with more rows (no f16 arithmetic on this CPU): the weight is widened
//    1024 output columns at a time and multiplied with dnnl_sgemm, so no
//    full-size converted copy exists.
// alpha, beta and the bias are applied in one f32 epilogue (beta == 0 never
// reads c, so NaN there is ignored).
#include "backends/cpu/cpu_matmul.hpp"
#include "backends/cpu/cpu_rows.hpp"

// GCC 12 reports its own AVX-512 intrinsics (which start from
// _mm512_undefined_*) as "maybe uninitialized": a known false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

namespace oslo {
namespace cpu {
namespace {

using dnnl::memory;

struct Mat {  // one 2-D operand
  char* data;
  oslo_dtype dtype;
  int64_t rows, cols, rs, cs;  // strides in elements
  size_t es() const { return dtype_size(dtype); }
  char* at(int64_t r, int64_t c) const {
    return data + (r * rs + c * cs) * static_cast<int64_t>(es());
  }
};

Mat mat_of(const V& v, int64_t batch) {
  const int d = v.ndim;
  Mat m;
  m.dtype = v.dtype;
  m.rows = v.shape[d - 2];
  m.cols = v.shape[d - 1];
  m.rs = v.strides[d - 2];
  m.cs = v.strides[d - 1];
  const int64_t bstride = d == 3 ? (v.shape[0] == 1 ? 0 : v.strides[0]) : 0;
  m.data = static_cast<char*>(v.data) + batch * bstride * static_cast<int64_t>(dtype_size(v.dtype));
  return m;
}

// A contiguous f32 copy of m (row-major, ld = cols).
std::vector<float> to_f32_dense(const Mat& m) {
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  V v{};
  v.data = m.data;
  v.dtype = m.dtype;
  v.ndim = 2;
  for (int64_t r = 0; r < m.rows; ++r) {
    v.shape[0] = 1;
    v.shape[1] = m.cols;
    v.strides[0] = m.rs;
    v.strides[1] = m.cs;
    const float* row =
        load_row(v, r * m.rs, m.cols, m.cs, out.data() + static_cast<size_t>(r * m.cols));
    if (row != out.data() + r * m.cols) std::copy(row, row + m.cols, out.begin() + r * m.cols);
  }
  return out;
}

// BLAS view of an f32 operand: 'N' with ld = rs when rows are contiguous, 'T'
// with ld = cs when columns are; false if neither.
bool blas_layout(const Mat& m, char* trans, int64_t* ld) {
  if (m.cs == 1 && (m.rs >= std::max<int64_t>(1, m.cols) || m.rows <= 1)) {
    *trans = 'N';
    *ld = std::max<int64_t>({m.rs, m.cols, 1});
    return true;
  }
  if (m.rs == 1 && (m.cs >= std::max<int64_t>(1, m.rows) || m.cols <= 1)) {
    *trans = 'T';
    *ld = std::max<int64_t>({m.cs, m.rows, 1});
    return true;
  }
  return false;
}

void sgemm(int threads, int64_t M, int64_t N, int64_t K, const Mat& a, const Mat& b, float* c,
           int64_t ldc, float alpha, float beta) {
  std::vector<float> ta, tb;
  char transa, transb;
  int64_t lda, ldb;
  const float* pa = reinterpret_cast<const float*>(a.data);
  const float* pb = reinterpret_cast<const float*>(b.data);
  if (a.dtype != OSLO_DTYPE_F32 || !blas_layout(a, &transa, &lda)) {
    ta = to_f32_dense(a);
    pa = ta.data();
    transa = 'N';
    lda = std::max<int64_t>(K, 1);
  }
  if (b.dtype != OSLO_DTYPE_F32 || !blas_layout(b, &transb, &ldb)) {
    tb = to_f32_dense(b);
    pb = tb.data();
    transb = 'N';
    ldb = std::max<int64_t>(N, 1);
  }
  omp_set_num_threads(std::max(1, threads));
  dnnl_status_t st = dnnl_sgemm(transa, transb, M, N, K, alpha, pa, lda, pb, ldb, beta, c, ldc);
  OSLO_CHECK(st == dnnl_success, OSLO_ERR_INTERNAL, "dnnl_sgemm failed with status ",
             static_cast<int>(st), " for m=", M, " n=", N, " k=", K);
}

// ---- few-row kernel: c[m, n] = sum_k a[m, k] * w[n, k] -------------------

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// The few-row kernels read the weight once, row after row: a stream the
// hardware prefetcher loses at every 4 KB page. Asking for the four cache
// lines 2 KB ahead of each 256 bytes read keeps enough loads in flight: a
// 1-row bf16 product over 245 MB went from 21 to 25 GB/s (f32: 22 to 25) on
// the 2-core AMX Xeon (docs/BENCHMARKS.md, 7). Prefetches past the end of
// the weight are harmless (they never fault).
constexpr int64_t kPrefetchAhead = 2048;
inline void prefetch256(const void* p) {
  const char* q = static_cast<const char*>(p) + kPrefetchAhead;
  _mm_prefetch(q, _MM_HINT_T0);
  _mm_prefetch(q + 64, _MM_HINT_T0);
  _mm_prefetch(q + 128, _MM_HINT_T0);
  _mm_prefetch(q + 192, _MM_HINT_T0);
}

__attribute__((target("avx512f"))) inline __m512 widen16(const uint16_t* p, bool bf16) {
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if (bf16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}

__attribute__((target("avx512f"))) void rows_dot_avx512(int64_t M, int64_t n0, int64_t n1,
                                                        int64_t K, const float* a,
                                                        const uint16_t* w, int64_t ldw, bool bf16,
                                                        float* c, int64_t ldc) {
  constexpr int NB = 4, MB = 4;
  int64_t n = n0;
  if (M == 1) {
    // Decode: one input row. Eight weight rows at a time keep more loads in
    // flight (the product is bound by memory bandwidth).
    constexpr int NB1 = 8;
    for (; n + NB1 <= n1; n += NB1) {
      __m512 acc[NB1];
      for (int j = 0; j < NB1; ++j) acc[j] = _mm512_setzero_ps();
      int64_t k = 0;
      for (; k + 16 <= K; k += 16) {
        __m512 av = _mm512_loadu_ps(a + k);
        for (int j = 0; j < NB1; ++j)
          acc[j] = _mm512_fmadd_ps(av, widen16(w + (n + j) * ldw + k, bf16), acc[j]);
      }
      for (int j = 0; j < NB1; ++j) {
        float s = _mm512_reduce_add_ps(acc[j]);
        for (int64_t kk = k; kk < K; ++kk) {
          const uint16_t h = w[(n + j) * ldw + kk];
          s += a[kk] * (bf16 ? bf16_to_f32(h) : f16_to_f32(h));
        }
        c[n + j] = s;
      }
    }
  }
  for (; n + NB <= n1; n += NB) {
    for (int64_t m0 = 0; m0 < M; m0 += MB) {
      const int64_t mb = std::min<int64_t>(MB, M - m0);
      __m512 acc[MB][NB];
      for (int i = 0; i < MB; ++i)
        for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_setzero_ps();
      int64_t k = 0;
      for (; k + 16 <= K; k += 16) {
        __m512 wv[NB];
        for (int j = 0; j < NB; ++j) wv[j] = widen16(w + (n + j) * ldw + k, bf16);
        for (int i = 0; i < mb; ++i) {
          __m512 av = _mm512_loadu_ps(a + (m0 + i) * K + k);
          for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_fmadd_ps(av, wv[j], acc[i][j]);
        }
      }
      for (int i = 0; i < mb; ++i)
        for (int j = 0; j < NB; ++j) {
          float s = _mm512_reduce_add_ps(acc[i][j]);
          for (int64_t kk = k; kk < K; ++kk) {
            const uint16_t h = w[(n + j) * ldw + kk];
            s += a[(m0 + i) * K + kk] * (bf16 ? bf16_to_f32(h) : f16_to_f32(h));
          }
          c[(m0 + i) * ldc + n + j] = s;
        }
    }
  }
  for (; n < n1; ++n)
    for (int64_t m = 0; m < M; ++m) {
      float s = 0;
      for (int64_t k = 0; k < K; ++k) {
        const uint16_t h = w[n * ldw + k];
        s += a[m * K + k] * (bf16 ? bf16_to_f32(h) : f16_to_f32(h));
      }
      c[m * ldc + n] = s;
    }
}

#pragma GCC diagnostic pop

void rows_dot_scalar(int64_t M, int64_t n0, int64_t n1, int64_t K, const float* a,
                     const uint16_t* w, int64_t ldw, bool bf16, float* c, int64_t ldc) {
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t m = 0; m < M; ++m) {
      float s = 0;
      for (int64_t k = 0; k < K; ++k) {
        const uint16_t h = w[n * ldw + k];
        s += a[m * K + k] * (bf16 ? bf16_to_f32(h) : f16_to_f32(h));
      }
      c[m * ldc + n] = s;
    }
}

// bf16 x bf16 -> f32 dot products with AVX512_BF16's vdpbf16ps: 32 weight
// elements per instruction, no widening (the decode path of bf16 models).
// a is [M, K] bf16 dense. Weight rows are walked one after the other, each
// from its first to its last byte, so the weights stream sequentially (the
// hardware prefetcher's best case); four accumulators hide the latency.
__attribute__((target("avx512f,avx512bf16"))) void rows_dot_bf16dp(int64_t M, int64_t n0,
                                                                   int64_t n1, int64_t K,
                                                                   const uint16_t* a,
                                                                   const uint16_t* w, int64_t ldw,
                                                                   float* c, int64_t ldc) {
  const int64_t k128 = K / 128 * 128, k32 = K / 32 * 32;
  for (int64_t n = n0; n < n1; ++n) {
    const uint16_t* wr = w + n * ldw;
    for (int64_t m = 0; m < M; ++m) {
      const uint16_t* am = a + m * K;
      __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
      int64_t k = 0;
      for (; k < k128; k += 128) {
        prefetch256(wr + k);
        acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)_mm512_loadu_si512(am + k),
                                (__m512bh)_mm512_loadu_si512(wr + k));
        acc1 = _mm512_dpbf16_ps(acc1, (__m512bh)_mm512_loadu_si512(am + k + 32),
                                (__m512bh)_mm512_loadu_si512(wr + k + 32));
        acc2 = _mm512_dpbf16_ps(acc2, (__m512bh)_mm512_loadu_si512(am + k + 64),
                                (__m512bh)_mm512_loadu_si512(wr + k + 64));
        acc3 = _mm512_dpbf16_ps(acc3, (__m512bh)_mm512_loadu_si512(am + k + 96),
                                (__m512bh)_mm512_loadu_si512(wr + k + 96));
      }
      for (; k < k32; k += 32)
        acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)_mm512_loadu_si512(am + k),
                                (__m512bh)_mm512_loadu_si512(wr + k));
      float s =
          _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
      for (; k < K; ++k) s += bf16_to_f32(am[k]) * bf16_to_f32(wr[k]);
      c[m * ldc + n] = s;
    }
  }
}

// f32 activations (few rows) times f32 weights W [N, K] with contiguous
// rows: each weight row streamed once from first to last byte (decode).
__attribute__((target("avx512f"))) void rows_dot_f32(int64_t M, int64_t n0, int64_t n1, int64_t K,
                                                     const float* a, int64_t lda, const float* w,
                                                     int64_t ldw, float* c, int64_t ldc) {
  const int64_t k64 = K / 64 * 64, k16 = K / 16 * 16;
  for (int64_t n = n0; n < n1; ++n) {
    const float* wr = w + n * ldw;
    for (int64_t m = 0; m < M; ++m) {
      const float* am = a + m * lda;
      __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
      int64_t k = 0;
      for (; k < k64; k += 64) {
        prefetch256(wr + k);
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(am + k), _mm512_loadu_ps(wr + k), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(am + k + 16), _mm512_loadu_ps(wr + k + 16), acc1);
        acc2 = _mm512_fmadd_ps(_mm512_loadu_ps(am + k + 32), _mm512_loadu_ps(wr + k + 32), acc2);
        acc3 = _mm512_fmadd_ps(_mm512_loadu_ps(am + k + 48), _mm512_loadu_ps(wr + k + 48), acc3);
      }
      for (; k < k16; k += 16)
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(am + k), _mm512_loadu_ps(wr + k), acc0);
      float s =
          _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
      for (; k < K; ++k) s += am[k] * wr[k];
      c[m * ldc + n] = s;
    }
  }
}

// ---- AVX2 + FMA kernels (CPUs without AVX-512: picked at run time) -------

__attribute__((target("avx2,fma"))) inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Eight 16-bit floats widened to f32 in registers (bf16: a shift; f16: F16C).
__attribute__((target("avx2,fma,f16c"))) inline __m256 widen8(const uint16_t* p, bool bf16) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (bf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return _mm256_cvtph_ps(h);
}

// f32 activations (a [M, K] dense) times a bf16/f16 weight W [N, K] with
// contiguous rows, widened in registers (no converted copy is written): the
// decode path of 16-bit models on AVX2 CPUs. Each weight row is streamed
// once; the M activation rows reuse it from L1.
__attribute__((target("avx2,fma,f16c"))) void rows_dot_avx2(int64_t M, int64_t n0, int64_t n1,
                                                            int64_t K, const float* a,
                                                            const uint16_t* w, int64_t ldw,
                                                            bool bf16, float* c, int64_t ldc) {
  const int64_t k32 = K / 32 * 32, k8 = K / 8 * 8;
  for (int64_t n = n0; n < n1; ++n) {
    const uint16_t* wr = w + n * ldw;
    for (int64_t m = 0; m < M; ++m) {
      const float* am = a + m * K;
      __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
      int64_t k = 0;
      for (; k < k32; k += 32) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(am + k), widen8(wr + k, bf16), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(am + k + 8), widen8(wr + k + 8, bf16), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(am + k + 16), widen8(wr + k + 16, bf16), acc2);
        acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(am + k + 24), widen8(wr + k + 24, bf16), acc3);
      }
      for (; k < k8; k += 8)
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(am + k), widen8(wr + k, bf16), acc0);
      float s = hsum256(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
      for (; k < K; ++k) s += am[k] * (bf16 ? bf16_to_f32(wr[k]) : f16_to_f32(wr[k]));
      c[m * ldc + n] = s;
    }
  }
}

// bf16 weights on AVX2 without widening shuffles: a 256-bit load holds 16
// bf16 as 8 pairs; in each 32-bit lane the odd element is already an f32 once
// the low half is masked off, and the even one after a shift. The
// activations are split once per call into their even and odd elements
// (ae, ao: [M, K/2]) so each half multiplies its own lane order: per 16
// weights one load, one shift, one and, two FMAs.
__attribute__((target("avx2,fma"))) void rows_dot_bf16_avx2(int64_t M, int64_t n0, int64_t n1,
                                                            int64_t K, const float* a,
                                                            const float* ae, const float* ao,
                                                            const uint16_t* w, int64_t ldw,
                                                            float* c, int64_t ldc) {
  const int64_t K2 = K / 2, k32 = K / 32 * 32, k16 = K / 16 * 16;
  const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t n = n0; n < n1; ++n) {
    const uint16_t* wr = w + n * ldw;
    for (int64_t m = 0; m < M; ++m) {
      const float* e = ae + m * K2;
      const float* o = ao + m * K2;
      __m256 e0 = _mm256_setzero_ps(), o0 = e0, e1 = e0, o1 = e0;
      int64_t k = 0;
      for (; k < k32; k += 32) {
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + k));
        const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + k + 16));
        e0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(w0, 16)),
                             _mm256_loadu_ps(e + k / 2), e0);
        o0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(w0, hi)),
                             _mm256_loadu_ps(o + k / 2), o0);
        e1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(w1, 16)),
                             _mm256_loadu_ps(e + k / 2 + 8), e1);
        o1 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(w1, hi)),
                             _mm256_loadu_ps(o + k / 2 + 8), o1);
      }
      for (; k < k16; k += 16) {
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + k));
        e0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(w0, 16)),
                             _mm256_loadu_ps(e + k / 2), e0);
        o0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(w0, hi)),
                             _mm256_loadu_ps(o + k / 2), o0);
      }
      float sum = hsum256(_mm256_add_ps(_mm256_add_ps(e0, o0), _mm256_add_ps(e1, o1)));
      for (; k < K; ++k) sum += a[m * K + k] * bf16_to_f32(wr[k]);
      c[m * ldc + n] = sum;
    }
  }
}

// Which SIMD kernels this CPU runs (checked once).
bool has_avx512() {
  static const bool v = __builtin_cpu_supports("avx512f");
  return v;
}
bool has_avx2() {
  static const bool v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                        __builtin_cpu_supports("f16c");
  return v;
}

void few_rows_f32(int threads, int64_t M, int64_t N, int64_t K, const float* a, int64_t lda,
                  const float* w, int64_t ldw, float* c, int64_t ldc) {
  const int64_t block = 64;
  const int64_t blocks = (N + block - 1) / block;
  const int nt = blocks > 1 && N * K > 65536 ? std::max(1, threads) : 1;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t bi = 0; bi < blocks; ++bi)
    rows_dot_f32(M, bi * block, std::min(N, bi * block + block), K, a, lda, w, ldw, c, ldc);
}

// Few rows of bf16 activations times bf16 weights W [N, K] (rows contiguous).
void few_rows_bf16dp(int threads, int64_t M, int64_t N, int64_t K, const uint16_t* a, const Mat& b,
                     float* c, int64_t ldc) {
  const uint16_t* w = reinterpret_cast<const uint16_t*>(b.data);
  const int64_t block = 64;
  const int64_t blocks = (N + block - 1) / block;
  const int nt = blocks > 1 && N * K > 65536 ? std::max(1, threads) : 1;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t bi = 0; bi < blocks; ++bi)
    rows_dot_bf16dp(M, bi * block, std::min(N, bi * block + block), K, a, w, b.cs, c, ldc);
}

void few_rows(int threads, int64_t M, int64_t N, int64_t K, const float* a, const Mat& b, float* c,
              int64_t ldc) {
  // b is [K, N] with element (k, n) at n * cs + k: the weight W [N, K].
  const uint16_t* w = reinterpret_cast<const uint16_t*>(b.data);
  const int64_t ldw = b.cs;
  const bool bf16 = b.dtype == OSLO_DTYPE_BF16;
  const bool avx512 = has_avx512(), avx2 = has_avx2();
  // bf16 on AVX2: the activations split into even and odd elements once.
  std::vector<float> ae, ao;
  const bool split = bf16 && !avx512 && avx2;
  if (split) {
    const int64_t K2 = K / 2;
    ae.resize(static_cast<size_t>(M * K2));
    ao.resize(static_cast<size_t>(M * K2));
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < K2; ++j) {
        ae[static_cast<size_t>(m * K2 + j)] = a[m * K + 2 * j];
        ao[static_cast<size_t>(m * K2 + j)] = a[m * K + 2 * j + 1];
      }
  }
  const int64_t block = 64;
  const int64_t blocks = (N + block - 1) / block;
  const int nt = blocks > 1 && N * K > 65536 ? std::max(1, threads) : 1;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t bi = 0; bi < blocks; ++bi) {
    const int64_t n0 = bi * block, n1 = std::min(N, n0 + block);
    if (avx512)
      rows_dot_avx512(M, n0, n1, K, a, w, ldw, bf16, c, ldc);
    else if (split)
      rows_dot_bf16_avx2(M, n0, n1, K, a, ae.data(), ao.data(), w, ldw, c, ldc);
    else if (avx2)
      rows_dot_avx2(M, n0, n1, K, a, w, ldw, bf16, c, ldc);
    else
      rows_dot_scalar(M, n0, n1, K, a, w, ldw, bf16, c, ldc);
  }
}

}  // namespace

Matmul::Matmul() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}
Matmul::~Matmul() = default;

bool Matmul::can_pack(oslo_dtype dtype) {
  if (dtype != OSLO_DTYPE_BF16 || !bf16_prim_ok_) return false;
  if (pack_ok_ < 0) {  // whether oneDNN has a bf16 matmul here, asked once
    try {
      memory::desc a({64, 64}, memory::data_type::bf16, memory::format_tag::ab);
      memory::desc b({64, 64}, memory::data_type::bf16, memory::format_tag::any);
      memory::desc c({64, 64}, memory::data_type::f32, memory::format_tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), engine_);
      pack_ok_ = 1;
    } catch (const dnnl::error&) {
      pack_ok_ = 0;
      bf16_prim_ok_ = false;  // the same answer bf16_gemm would find
    }
  }
  return pack_ok_ == 1;
}

std::unique_ptr<Matmul::Packed> Matmul::pack(int threads, const V& w) {
  if (w.ndim != 2 || !can_pack(w.dtype)) return nullptr;
  const int64_t K = w.shape[0], N = w.shape[1];
  if (K == 0 || N == 0) return nullptr;
  // The layout a prefill-sized product (256 rows) asks for; products of
  // other row counts that take it use it too (bf16_gemm checks).
  memory::desc a_md({256, K}, memory::data_type::bf16, memory::format_tag::ab);
  memory::desc any_md({K, N}, memory::data_type::bf16, memory::format_tag::any);
  memory::desc c_md({256, N}, memory::data_type::f32, memory::format_tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, any_md, c_md), engine_);
  memory::desc plain({K, N}, memory::data_type::bf16, {w.strides[0], w.strides[1]});
  auto p = std::make_unique<Packed>();
  p->md = pd.weights_desc();
  p->mem = memory(p->md, engine_);
  p->K = K;
  p->N = N;
  omp_set_num_threads(std::max(1, threads));
  memory src(plain, engine_, w.data);
  dnnl::reorder(src, p->mem).execute(stream_, src, p->mem);
  stream_.wait();
  return p;
}

bool Matmul::bf16_gemm(int threads, int64_t M, int64_t N, int64_t K, const Mat2& a, const Mat2& b,
                       float* c, int64_t ldc, const Packed* packed) {
  if (!bf16_prim_ok_) return false;
  Key key{M, N, K, a.rs, a.cs, packed ? 0 : b.rs, packed ? 0 : b.cs, ldc};
  auto it = cache_.find(key);
  if (it != cache_.end() && packed && !(it->second.b_md == packed->md)) {
    cache_.erase(it);  // another packed layout of this shape
    it = cache_.end();
  }
  if (it == cache_.end()) {
    memory::desc a_md({M, K}, memory::data_type::bf16, {a.rs, a.cs});
    memory::desc b_md =
        packed ? packed->md : memory::desc({K, N}, memory::data_type::bf16, {b.rs, b.cs});
    memory::desc c_md({M, N}, memory::data_type::f32, {ldc, 1});
    dnnl::matmul::desc d(a_md, b_md, c_md);
    dnnl::matmul::primitive_desc pd;
    try {
      pd = dnnl::matmul::primitive_desc(d, engine_);
    } catch (const dnnl::error& e) {
      // No bf16 implementation for this CPU (oneDNN 2.6 has none without
      // AVX-512): say so once per instance and let the caller widen.
      if (e.status != dnnl_unimplemented) throw;
      // A packed layout this row count's kernel does not take: the plain
      // weight serves (the caller passes it along).
      if (packed) return bf16_gemm(threads, M, N, K, a, b, c, ldc, nullptr);
      bf16_prim_ok_ = false;
      return false;
    }
    if (cache_.size() > 256) cache_.clear();
    it = cache_.emplace(key, Entry{dnnl::matmul(pd), a_md, b_md, c_md}).first;
  }
  Entry& e = it->second;
  omp_set_num_threads(std::max(1, threads));
  memory am(e.a_md, engine_, a.data), cm(e.c_md, engine_, c);
  memory bm = packed ? packed->mem : memory(e.b_md, engine_, b.data);
  e.prim.execute(stream_, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  stream_.wait();
  return true;
}

void Matmul::run(int threads, const V& c, const V& a, const V& b, const V* bias, float alpha,
                 float beta, const Activation* activation, const Packed* packed) {
  for (const V* v : {&c, &a, &b}) {
    OSLO_CHECK(v->ndim == 2 || v->ndim == 3, OSLO_ERR_SHAPE, "matmul operands must be 2-D or 3-D");
    OSLO_CHECK(is_float(v->dtype), OSLO_ERR_DTYPE, "matmul operands must be f32, f16 or bf16, not ",
               dtype_name(v->dtype));
    OSLO_CHECK(v->data || numel(*v) == 0, OSLO_ERR_INVALID_ARGUMENT, "matmul operand has no data");
  }
  // f32 activations against 16-bit weights (OSLO_BK_OP_MATMUL_MIXED): a is
  // rounded to b's dtype here, per batch, as the core would convert it.
  const bool mixed = a.dtype == OSLO_DTYPE_F32 && b.dtype != OSLO_DTYPE_F32;
  OSLO_CHECK(a.dtype == b.dtype || mixed, OSLO_ERR_DTYPE, "matmul a (", dtype_name(a.dtype),
             ") and b (", dtype_name(b.dtype), ") must share a dtype (or a f32 with b 16-bit)");
  const int64_t M = c.shape[c.ndim - 2], N = c.shape[c.ndim - 1];
  const int64_t K = a.shape[a.ndim - 1];
  OSLO_CHECK(a.shape[a.ndim - 2] == M && b.shape[b.ndim - 2] == K && b.shape[b.ndim - 1] == N,
             OSLO_ERR_SHAPE, "matmul shapes: a [", a.shape[a.ndim - 2], ", ", K, "], b [",
             b.shape[b.ndim - 2], ", ", b.shape[b.ndim - 1], "], c [", M, ", ", N, "]");
  const int64_t batches = c.ndim == 3 ? c.shape[0] : 1;
  for (const V* v : {&a, &b})
    OSLO_CHECK(v->ndim == 2 || v->shape[0] == batches || v->shape[0] == 1, OSLO_ERR_SHAPE,
               "matmul batch ", v->shape[0], " differs from ", batches);
  OSLO_CHECK(c.ndim == 3 || (a.ndim == 2 && b.ndim == 2), OSLO_ERR_SHAPE,
             "matmul with batched inputs needs a batched c");
  std::vector<float> bias32;
  if (bias) {
    OSLO_CHECK(is_float(bias->dtype) && numel(*bias) == N, OSLO_ERR_SHAPE, "matmul bias needs ", N,
               " float elements");
    V bv = *bias;
    bv.ndim = 1;
    bv.shape[0] = N;
    bv.strides[0] = bias->ndim ? bias->strides[bias->ndim - 1] : 1;
    bias32.resize(static_cast<size_t>(N));
    const float* p = load_row(bv, 0, N, bv.strides[0], bias32.data());
    if (p != bias32.data()) std::copy(p, p + N, bias32.begin());
  }
  const V* gate = activation ? activation->gate : nullptr;
  if (activation) {
    OSLO_CHECK(c.ndim == 2 && alpha == 1.f && beta == 0.f, OSLO_ERR_INVALID_ARGUMENT,
               "matmul_act is 2-D with alpha 1 and beta 0");
    if (gate)
      OSLO_CHECK(
          is_float(gate->dtype) && gate->ndim == 2 && gate->shape[0] == M && gate->shape[1] == N,
          OSLO_ERR_SHAPE, "matmul_act gate ", shape_of(*gate), " must be float [", M, ", ", N, "]");
  }
  if (M == 0 || N == 0) return;
  for (int64_t bi = 0; bi < batches; ++bi) {
    Mat am = mat_of(a, bi), bm = mat_of(b, bi), cm = mat_of(c, bi);
    if (mixed) {
      // a rounded to b's dtype into the instance's buffer (kept between
      // calls: a fresh one of prefill size would cost page faults each call).
      if (a_round_.size() < static_cast<size_t>(M * K)) a_round_.resize(static_cast<size_t>(M * K));
      uint16_t* dst = a_round_.data();
      const int nt = M > 1 && M * K > 65536 ? std::max(1, threads) : 1;
#pragma omp parallel num_threads(nt)
      {
        std::vector<float> buf(am.cs != 1 ? static_cast<size_t>(K) : 0);
        V row{};
        row.data = am.data;
        row.dtype = OSLO_DTYPE_F32;
        row.ndim = 1;
        row.shape[0] = K;
        row.strides[0] = am.cs;
#pragma omp for schedule(static)
        for (int64_t m = 0; m < M; ++m) {
          const float* r = load_row(row, m * am.rs, K, am.cs, buf.data());
          from_f32(bm.dtype, r, dst + m * K, static_cast<size_t>(K));
        }
      }
      am = Mat{reinterpret_cast<char*>(dst), bm.dtype, M, K, K, 1};
    }
    // c written directly when it is plain f32 and there is no epilogue left
    // (a gate that is c itself must be read before c is written).
    const bool direct =
        cm.dtype == OSLO_DTYPE_F32 && cm.cs == 1 && cm.rs >= N && !(gate && gate->data == c.data);
    std::vector<float> tmp;
    float* out = reinterpret_cast<float*>(cm.data);
    int64_t ldo = cm.rs;
    bool epilogue = true;
    if (K == 0) {
      tmp.assign(static_cast<size_t>(M * N), 0.f);
      out = tmp.data();
      ldo = N;
    } else if (am.dtype == OSLO_DTYPE_F32) {
      // AVX-512 only: on an AVX2 EPYC our one-row-at-a-time kernel read
      // 1 x 4096 x 4096 at 0.67x dnnl_sgemm's speed (bench/linear), so AVX2
      // CPUs keep dnnl_sgemm for f32.
      if (direct && M <= 4 && alpha == 1.f && beta == 0.f && has_avx512() && am.cs == 1 &&
          bm.dtype == OSLO_DTYPE_F32 && bm.rs == 1 && bm.cs >= K) {
        // Decode-shaped: stream W's rows (dnnl_sgemm's M = 1 path reads them
        // less evenly).
        few_rows_f32(threads, M, N, K, reinterpret_cast<const float*>(am.data), am.rs,
                     reinterpret_cast<const float*>(bm.data), bm.cs, out, ldo);
        epilogue = false;
      } else if (direct) {
        sgemm(threads, M, N, K, am, bm, out, ldo, alpha, beta);
        epilogue = false;
      } else {
        tmp.resize(static_cast<size_t>(M * N));
        out = tmp.data();
        ldo = N;
        sgemm(threads, M, N, K, am, bm, out, ldo, 1.f, 0.f);
      }
    } else {
      // Every 16-bit path below computes out = a @ b: straight into c when
      // c is plain f32 and nothing but a bias and an activation follows
      // (applied in place after), else into a scratch for the epilogue.
      if (direct && alpha == 1.f && beta == 0.f) {
        epilogue = false;
      } else {
        tmp.resize(static_cast<size_t>(M * N));
        out = tmp.data();
        ldo = N;
      }
      static const bool avx512bf16 = __builtin_cpu_supports("avx512bf16");
      if (M <= 8 && bm.rs == 1 && bm.cs >= K && am.dtype == OSLO_DTYPE_BF16 && avx512bf16) {
        // Native bf16 products (vdpbf16ps), f32 accumulation.
        std::vector<uint16_t> a16(static_cast<size_t>(M * K));
        for (int64_t m = 0; m < M; ++m)
          for (int64_t k = 0; k < K; ++k)
            std::memcpy(&a16[static_cast<size_t>(m * K + k)], am.at(m, k), 2);
        few_rows_bf16dp(threads, M, N, K, a16.data(), bm, out, ldo);
      } else if (M <= 8 && bm.rs == 1 && bm.cs >= K) {
        std::vector<float> a32 = to_f32_dense(am);
        few_rows(threads, M, N, K, a32.data(), bm, out, ldo);
      } else if (am.dtype == OSLO_DTYPE_BF16 &&
                 bf16_gemm(threads, M, N, K, Mat2{am.data, am.rs, am.cs},
                           Mat2{bm.data, bm.rs, bm.cs}, out, ldo,
                           batches == 1 ? packed : nullptr)) {
        // done by oneDNN's bf16 matmul
      } else {
        // f16 (and bf16 where oneDNN has no bf16 matmul for this CPU): widen
        // the weight a panel of columns at a time; f32 products of values
        // exactly widened, f32 accumulation as the contract says.
        std::vector<float> a32 = to_f32_dense(am);
        Mat a32m{reinterpret_cast<char*>(a32.data()), OSLO_DTYPE_F32, M, K, K, 1};
        const int64_t panel = 1024;  // 16 MB of f32 for K = 4096; fewer re-packs of a
        const bool w_rows = bm.rs == 1 && bm.cs >= K;  // b = W^T, W rows contiguous
        std::vector<float> b32;
        for (int64_t n0 = 0; n0 < N; n0 += panel) {
          const int64_t nb = std::min(panel, N - n0);
          Mat b32m;
          if (w_rows) {
            // Rows n0 .. n0 + nb of W, widened in one pass, used transposed.
            b32.resize(static_cast<size_t>(nb * K));
            for (int64_t j = 0; j < nb; ++j)
              to_f32(bm.dtype, bm.at(0, n0 + j), b32.data() + j * K, static_cast<size_t>(K));
            b32m = Mat{reinterpret_cast<char*>(b32.data()), OSLO_DTYPE_F32, K, nb, 1, K};
          } else {
            Mat bp = bm;
            bp.data = bm.at(0, n0);
            bp.cols = nb;
            b32 = to_f32_dense(bp);
            b32m = Mat{reinterpret_cast<char*>(b32.data()), OSLO_DTYPE_F32, K, nb, nb, 1};
          }
          sgemm(threads, M, nb, K, a32m, b32m, out + n0, ldo, 1.f, 0.f);
        }
      }
    }
    if (!epilogue && bias32.empty() && !activation) continue;
    // c = alpha * out + bias + beta * c, row by row (then act, times gate).
    V cv{};
    cv.data = cm.data;
    cv.dtype = cm.dtype;
    cv.ndim = 2;
    cv.shape[0] = M;
    cv.shape[1] = N;
    cv.strides[0] = cm.rs;
    cv.strides[1] = cm.cs;
    const int nt = M > 1 && M * N > 16384 ? std::max(1, threads) : 1;
#pragma omp parallel num_threads(nt)
    {
      std::vector<float> row(static_cast<size_t>(N)), old(static_cast<size_t>(N));
      // matmul_act's tail of row r, in place: act, then times the gate.
      auto act_gate = [&](float* x, int64_t r) {
        if (!activation) return;
        activate(activation->act, x, x, N);
        if (!gate) return;
        const float* g = load_row(*gate, r * gate->strides[0], N, gate->strides[1], old.data());
        for (int64_t j = 0; j < N; ++j) x[j] *= g[j];
      };
#pragma omp for schedule(static)
      for (int64_t r = 0; r < M; ++r) {
        const float* o = out + r * ldo;
        if (!epilogue) {  // sgemm did alpha and beta in place: bias, act and gate are left
          float* d = const_cast<float*>(o);
          if (!bias32.empty())
            for (int64_t j = 0; j < N; ++j) d[j] += bias32[static_cast<size_t>(j)];
          act_gate(d, r);
          continue;
        }
        const float* prev = beta != 0.f ? load_row(cv, r * cm.rs, N, cm.cs, old.data()) : nullptr;
        float* w = row.data();
        for (int64_t j = 0; j < N; ++j) {
          float v = alpha * o[j];
          if (!bias32.empty()) v += bias32[static_cast<size_t>(j)];
          if (prev) v += beta * prev[j];
          w[j] = v;
        }
        act_gate(w, r);  // before c's row is stored: the gate may be c
        store_row(cv, r * cm.rs, N, cm.cs, w);
      }
    }
  }
}

}  // namespace cpu
}  // namespace oslo
