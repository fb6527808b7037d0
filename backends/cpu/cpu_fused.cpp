// The CPU backend's fused attention (OSLO_BK_OP_ATTENTION, and
// OSLO_BK_OP_ATTENTION_KV8 over an int8 cache; contracts in
// core/backend/oslo_backend.h): every query head over a key/value cache in
// one call, without the [queries x keys] score matrix the composition
// (core/backend/fused.cpp) writes.
//
//  - Online softmax (a running max, sum and output rescaled as keys come),
//    over blocks of 64 keys: the block's scores are computed first (dot
//    products), then their exponentials, then the value rows are accumulated.
//  - The g query heads sharing one key/value head (grouped-query attention)
//    are one work item, so each key and value row is read once for all of
//    them.
//  - Threads split the (batch, key/value head, query) items; when those are
//    fewer than twice the threads (decoding one sequence with few key/value
//    heads) the cache itself is split into chunks, each with its own running
//    max and sum, merged at the end (split-K, as flash-decoding does).
//  - Causal: query i stops at key i + offset, so no masked block is visited.
//  - Prefill (16 queries or more): tiles of 64 queries of one key/value head
//    through two oneDNN products and a row softmax in between (see
//    prefill_tiles), each tile only against the keys its queries see.
// The dot products and row updates use AVX2 + FMA when the CPU has them
// (checked at run time), else plain loops. Over an int8 cache the decode
// path reads the codes and their row scales as stored (a quarter of the f32
// cache's bytes): each score is the query's dot with the codes times the
// key row's scale, each value row is weighted by p[j] times its scale.
// Prefill tiles dequantize the rows to f32 first (their products are
// compute-bound).
#include <dnnl.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_ops.hpp"
#include "backends/cpu/cpu_rows.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

namespace oslo {
namespace cpu {
namespace {

constexpr int64_t kBlock = 64;  // keys per block
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// ---- row kernels: n rows of length D at base + j * stride ------------------
// Rows are f32, or int8 with one f32 scale per row (sc[j * sst]; sc null:
// f32 rows, scale 1). The int8 forms read the cache as it is stored: the
// dot of the query with the codes times the row's scale, and the value
// rows' codes weighted by p[j] * scale.

inline float row_scale(const float* sc, int64_t sst, int64_t j) {
  return sc ? sc[j * sst] : 1.0f;
}

// s[j] = scale_j * dot(q, rows[j]) for j < n.
template <class E>
void dots_plain(const float* q, const E* base, int64_t stride, const float* sc, int64_t sst,
                int64_t n, int64_t D, float* s) {
  for (int64_t j = 0; j < n; ++j) {
    const E* r = base + j * stride;
    float acc = 0;
    for (int64_t d = 0; d < D; ++d) acc += q[d] * static_cast<float>(r[d]);
    s[j] = sc ? acc * row_scale(sc, sst, j) : acc;
  }
}
// acc[d] += sum_j p[j] * scale_j * rows[j][d].
template <class E>
void axpys_plain(const float* p, const E* base, int64_t stride, const float* sc, int64_t sst,
                 int64_t n, int64_t D, float* acc) {
  for (int64_t j = 0; j < n; ++j) {
    const E* r = base + j * stride;
    const float pj = p[j] * row_scale(sc, sst, j);
    for (int64_t d = 0; d < D; ++d) acc[d] += pj * static_cast<float>(r[d]);
  }
}

#define OSLO_AVX2 __attribute__((target("avx2,fma")))

OSLO_AVX2 inline __m256 ld8(const float* r) {
  return _mm256_loadu_ps(r);
}
OSLO_AVX2 inline __m256 ld8(const int8_t* r) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(r))));
}

OSLO_AVX2 inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <class E>
OSLO_AVX2 void dots_avx2(const float* q, const E* base, int64_t stride, const float* sc,
                         int64_t sst, int64_t n, int64_t D, float* s) {
  const int64_t D8 = D / 8 * 8;
  int64_t j = 0;
  // Two rows at a time share the query's loads.
  for (; j + 2 <= n; j += 2) {
    const E* r0 = base + j * stride;
    const E* r1 = r0 + stride;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t d = 0;
    for (; d < D8; d += 8) {
      const __m256 qv = _mm256_loadu_ps(q + d);
      a0 = _mm256_fmadd_ps(qv, ld8(r0 + d), a0);
      a1 = _mm256_fmadd_ps(qv, ld8(r1 + d), a1);
    }
    float s0 = hsum8(a0), s1 = hsum8(a1);
    for (; d < D; ++d) {
      s0 += q[d] * static_cast<float>(r0[d]);
      s1 += q[d] * static_cast<float>(r1[d]);
    }
    s[j] = sc ? s0 * row_scale(sc, sst, j) : s0;
    s[j + 1] = sc ? s1 * row_scale(sc, sst, j + 1) : s1;
  }
  for (; j < n; ++j) {
    const E* r = base + j * stride;
    __m256 a = _mm256_setzero_ps();
    int64_t d = 0;
    for (; d < D8; d += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), ld8(r + d), a);
    float acc = hsum8(a);
    for (; d < D; ++d) acc += q[d] * static_cast<float>(r[d]);
    s[j] = sc ? acc * row_scale(sc, sst, j) : acc;
  }
}

template <class E>
OSLO_AVX2 void axpys_avx2(const float* p, const E* base, int64_t stride, const float* sc,
                          int64_t sst, int64_t n, int64_t D, float* acc) {
  int64_t d = 0;
  // 64 output lanes in eight registers over all n rows: eight independent
  // multiply-add chains (one chain would wait on each add's latency). Each
  // lane adds its rows in order j = 0, 1, ... in every form below.
  for (; d + 64 <= D; d += 64) {
    __m256 a[8];
    for (int u = 0; u < 8; ++u) a[u] = _mm256_loadu_ps(acc + d + 8 * u);
    for (int64_t j = 0; j < n; ++j) {
      const __m256 w = _mm256_set1_ps(p[j] * row_scale(sc, sst, j));
      const E* r = base + j * stride + d;
      for (int u = 0; u < 8; ++u) a[u] = _mm256_fmadd_ps(w, ld8(r + 8 * u), a[u]);
    }
    for (int u = 0; u < 8; ++u) _mm256_storeu_ps(acc + d + 8 * u, a[u]);
  }
  for (; d + 8 <= D; d += 8) {
    __m256 a = _mm256_loadu_ps(acc + d);
    for (int64_t j = 0; j < n; ++j)
      a = _mm256_fmadd_ps(_mm256_set1_ps(p[j] * row_scale(sc, sst, j)), ld8(base + j * stride + d),
                          a);
    _mm256_storeu_ps(acc + d, a);
  }
  for (; d < D; ++d) {
    float a = acc[d];
    for (int64_t j = 0; j < n; ++j)
      a += p[j] * row_scale(sc, sst, j) * static_cast<float>(base[j * stride + d]);
    acc[d] = a;
  }
}

// The f32 forms of AttentionRowKernels (no scales).
template <bool kAvx2>
void dots_f32(const float* q, const float* base, int64_t stride, int64_t n, int64_t D, float* s) {
  if (kAvx2)
    dots_avx2<float>(q, base, stride, nullptr, 0, n, D, s);
  else
    dots_plain<float>(q, base, stride, nullptr, 0, n, D, s);
}
template <bool kAvx2>
void axpys_f32(const float* p, const float* base, int64_t stride, int64_t n, int64_t D,
               float* acc) {
  if (kAvx2)
    axpys_avx2<float>(p, base, stride, nullptr, 0, n, D, acc);
  else
    axpys_plain<float>(p, base, stride, nullptr, 0, n, D, acc);
}

using RowKernels = AttentionRowKernels;

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

const RowKernels& row_kernels() {
  static const RowKernels k = has_avx2() ? RowKernels{dots_f32<true>, axpys_f32<true>}
                                         : RowKernels{dots_f32<false>, axpys_f32<false>};
  return k;
}

// A key or value operand [B, H, T, D] as the decode path reads it: f32 rows
// (f) or int8 rows with their scales (i8, sc); element strides of the rows
// (sb, sh, st) and of the scales (ssb, ssh, sst).
struct KvRows {
  const float* f = nullptr;
  const int8_t* i8 = nullptr;
  const float* sc = nullptr;
  int64_t sb = 0, sh = 0, st = 0, ssb = 0, ssh = 0, sst = 0;
};

// scores s[0, n) of rows [jb, jb + n) of head (b, kh).
void kv_dots(const KvRows& K, const float* q, int64_t b, int64_t kh, int64_t jb, int64_t n,
             int64_t D, float* s) {
  const int64_t off = b * K.sb + kh * K.sh + jb * K.st;
  if (!K.i8) return row_kernels().dots(q, K.f + off, K.st, n, D, s);
  const float* sc = K.sc + b * K.ssb + kh * K.ssh + jb * K.sst;
  if (has_avx2())
    dots_avx2<int8_t>(q, K.i8 + off, K.st, sc, K.sst, n, D, s);
  else
    dots_plain<int8_t>(q, K.i8 + off, K.st, sc, K.sst, n, D, s);
}

// acc[0, D) += sum_j p[j] rows[jb + j] of head (b, kh).
void kv_axpys(const KvRows& V, const float* p, int64_t b, int64_t kh, int64_t jb, int64_t n,
              int64_t D, float* acc) {
  const int64_t off = b * V.sb + kh * V.sh + jb * V.st;
  if (!V.i8) return row_kernels().axpys(p, V.f + off, V.st, n, D, acc);
  const float* sc = V.sc + b * V.ssb + kh * V.ssh + jb * V.sst;
  if (has_avx2())
    axpys_avx2<int8_t>(p, V.i8 + off, V.st, sc, V.sst, n, D, acc);
  else
    axpys_plain<int8_t>(p, V.i8 + off, V.st, sc, V.sst, n, D, acc);
}

// ---- operands ---------------------------------------------------------------

// A [B, H, T, D] operand as f32 rows with a unit inner stride: the view
// itself when it already is, else a converted contiguous copy.
struct Rows {
  const float* data;
  int64_t sb, sh, st;  // strides in floats
  std::vector<float> copy;
};

void as_f32_rows(int threads, const V& v, Rows* out) {
  if (v.dtype == OSLO_DTYPE_F32 && v.strides[3] == 1) {
    out->data = static_cast<const float*>(v.data);
    out->sb = v.strides[0];
    out->sh = v.strides[1];
    out->st = v.strides[2];
    return;
  }
  const int64_t B = v.shape[0], H = v.shape[1], T = v.shape[2], D = v.shape[3];
  out->copy.resize(static_cast<size_t>(B * H * T * D));
  V dst{};
  dst.data = out->copy.data();
  dst.dtype = OSLO_DTYPE_F32;
  dst.ndim = 4;
  const int64_t shape[4] = {B, H, T, D}, strides[4] = {H * T * D, T * D, D, 1};
  for (int i = 0; i < 4; ++i) {
    dst.shape[i] = shape[i];
    dst.strides[i] = strides[i];
  }
  convert(threads, dst, v);
  out->data = out->copy.data();
  out->sb = H * T * D;
  out->sh = T * D;
  out->st = D;
}

// The running state of one query head over some keys.
struct Partial {
  float m = kNegInf;  // max score so far
  float l = 0;        // sum of exp(score - m)
};

constexpr int64_t kTileMin = 16;  // queries from which a call is a prefill
constexpr int64_t kTile = 64;     // queries per tile

// Prefill: tiles of up to 64 queries of one key/value head (times its g
// query heads) against the keys they can see (a causal tile stops at its
// last query's limit, so the masked half is never computed): scores as one
// product [rows x D] x [D x keys] (oneDNN's sgemm, one thread per tile), a
// softmax per row with its own causal limit and the mask, then [rows x keys]
// x [keys x D]. Nothing larger than [g * 64 x T] per thread exists.
void prefill_tiles(int threads, const V& out, const V& q, const Rows& K, const Rows& Vr,
                   const float* mk, int64_t B, int64_t Hq, int64_t Hkv, int64_t S, int64_t T,
                   int64_t D, float scale, bool causal, int64_t offset) {
  const int64_t g = Hq / Hkv, tiles = (S + kTile - 1) / kTile;
  const int64_t work = B * Hkv * tiles;
  const int nt = work > 1 ? std::max(1, threads) : 1;
#pragma omp parallel num_threads(nt)
  {
    omp_set_num_threads(1);  // this task's ICV: the dnnl_sgemm calls below stay on this thread
    std::vector<float> qt, sc, ot, qbuf(static_cast<size_t>(D));
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < work; ++w) {
      const int64_t t = w % tiles, kh = (w / tiles) % Hkv, b = w / (tiles * Hkv);
      const int64_t i0 = t * kTile, nq = std::min(kTile, S - i0), R = g * nq;
      // Keys any query of the tile sees.
      int64_t tl = T;
      if (causal) tl = std::min<int64_t>(T, std::max<int64_t>(0, i0 + nq - 1 + offset + 1));
      qt.resize(static_cast<size_t>(R * D));
      ot.assign(static_cast<size_t>(R * D), 0.f);
      // Rows (hg, i) of scaled queries.
      for (int64_t hg = 0; hg < g; ++hg)
        for (int64_t ii = 0; ii < nq; ++ii) {
          const int64_t h = kh * g + hg, i = i0 + ii;
          const float* qr = load_row(q, b * q.strides[0] + h * q.strides[1] + i * q.strides[2], D,
                                     q.strides[3], qbuf.data());
          float* d = qt.data() + (hg * nq + ii) * D;
          for (int64_t e = 0; e < D; ++e) d[e] = qr[e] * scale;
        }
      if (tl > 0) {
        sc.resize(static_cast<size_t>(R * tl));
        const float* kb = K.data + b * K.sb + kh * K.sh;
        const float* vb = Vr.data + b * Vr.sb + kh * Vr.sh;
        // sc [R, tl] = qt [R, D] x K^T (dnnl_sgemm is row-major; the key rows
        // are used transposed in place).
        dnnl_status_t st =
            dnnl_sgemm('N', 'T', R, tl, D, 1.f, qt.data(), D, kb, K.st, 0.f, sc.data(), tl);
        OSLO_CHECK(st == dnnl_success, OSLO_ERR_INTERNAL, "attention: dnnl_sgemm failed (",
                   static_cast<int>(st), ")");
        for (int64_t r = 0; r < R; ++r) {
          const int64_t i = i0 + r % nq;
          int64_t lim = tl;
          if (causal) lim = std::min<int64_t>(tl, std::max<int64_t>(0, i + offset + 1));
          float* row = sc.data() + r * tl;
          float m = kNegInf;
          for (int64_t j = 0; j < lim; ++j) {
            if (mk) row[j] += mk[b * T + j];
            m = std::max(m, row[j]);
          }
          double sum = 0;
          if (m == kNegInf)
            std::fill(row, row + lim, 0.f);
          else
            sum = exp_sum_f64(row, row, lim, m, true);
          const float inv = sum > 0 ? static_cast<float>(1.0 / sum) : 0.f;
          for (int64_t j = 0; j < lim; ++j) row[j] *= inv;
          for (int64_t j = lim; j < tl; ++j) row[j] = 0.f;
        }
        // ot [R, D] = sc [R, tl] x V [tl, D].
        st = dnnl_sgemm('N', 'N', R, D, tl, 1.f, sc.data(), tl, vb, Vr.st, 0.f, ot.data(), D);
        OSLO_CHECK(st == dnnl_success, OSLO_ERR_INTERNAL, "attention: dnnl_sgemm failed (",
                   static_cast<int>(st), ")");
      }
      for (int64_t hg = 0; hg < g; ++hg)
        for (int64_t ii = 0; ii < nq; ++ii) {
          const int64_t h = kh * g + hg, i = i0 + ii;
          store_row(out, b * out.strides[0] + h * out.strides[1] + i * out.strides[2], D,
                    out.strides[3], ot.data() + (hg * nq + ii) * D);
        }
    }
  }
}

// The checks of attention() and attention_kv8() on everything but the key
// and value dtypes (kv8: i8 with f32 scales [B, Hkv, T], checked there).
void check_attention(const V& out, const V& q, const V& k, const V& v, const V* mask) {
  for (const V* t : {&out, &q})
    OSLO_CHECK(t->ndim == 4 && is_float(t->dtype), OSLO_ERR_SHAPE,
               "attention operands must be 4-D float views ([batch, heads, seq, head_dim]), got ",
               shape_of(*t), " ", dtype_name(t->dtype));
  for (const V* t : {&k, &v})
    OSLO_CHECK(t->ndim == 4, OSLO_ERR_SHAPE,
               "attention keys and values must be 4-D ([batch, heads, seq, head_dim]), got ",
               shape_of(*t));
  const int64_t B = q.shape[0], Hq = q.shape[1], D = q.shape[3];
  const int64_t Hkv = k.shape[1], T = k.shape[2];
  OSLO_CHECK(k.shape[0] == B && k.shape[3] == D && Hkv > 0 && Hq % Hkv == 0, OSLO_ERR_SHAPE,
             "attention keys ", shape_of(k), " do not fit queries ", shape_of(q),
             " (batch and head_dim equal, query heads a multiple of key heads)");
  for (int i = 0; i < 4; ++i) {
    OSLO_CHECK(v.shape[i] == k.shape[i], OSLO_ERR_SHAPE, "attention values ", shape_of(v),
               " differ from keys ", shape_of(k));
    OSLO_CHECK(out.shape[i] == q.shape[i], OSLO_ERR_SHAPE, "attention output ", shape_of(out),
               " differs from queries ", shape_of(q));
  }
  if (mask) {
    OSLO_CHECK(
        is_float(mask->dtype) && mask->ndim == 2 && mask->shape[0] == B && mask->shape[1] == T,
        OSLO_ERR_SHAPE, "attention mask ", shape_of(*mask), " must be float [", B, ", ", T, "]");
  }
}

// The mask as f32 [B, T] (rows contiguous); empty without one.
std::vector<float> mask_rows(const V* mask, int64_t B, int64_t T) {
  std::vector<float> mk;
  if (!mask) return mk;
  mk.resize(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b) {
    const float* r = load_row(*mask, b * mask->strides[0], T, mask->strides[1], mk.data() + b * T);
    if (r != mk.data() + b * T) std::copy(r, r + T, mk.begin() + b * T);
  }
  return mk;
}

// Fewer than kTileMin queries (decoding): the online softmax over blocks of
// keys per work item, as the file's header describes.
void decode(int threads, const V& out, const V& q, const KvRows& K, const KvRows& Vr,
            const float* mk, int64_t B, int64_t Hq, int64_t Hkv, int64_t S, int64_t T, int64_t D,
            float scale, bool causal, int64_t offset) {
  const int64_t g = Hq / Hkv;
  // Work items: (b, kv head, query i), each for the g heads of the group,
  // optionally split into `chunks` ranges of keys.
  const int64_t items = B * Hkv * S;
  const int nt = std::max(1, threads);
  int64_t chunks = 1;
  if (items < 2 * nt && T >= 2 * kBlock)
    chunks = std::min<int64_t>((2 * nt + items - 1) / items, (T + kBlock - 1) / kBlock);
  const int64_t chunk_len = ((T + chunks - 1) / chunks + kBlock - 1) / kBlock * kBlock;
  // Per (item, chunk, head): the running max/sum and the unnormalised output.
  std::vector<Partial> part(static_cast<size_t>(items * chunks * g));
  std::vector<float> acc(static_cast<size_t>(items * chunks * g * D), 0.f);
  const int64_t work = items * chunks;
  const int used =
      work > 1 && static_cast<double>(work) * static_cast<double>(T) * static_cast<double>(D * g) >
                      32768.0
          ? nt
          : 1;

#pragma omp parallel num_threads(used)
  {
    std::vector<float> qrow(static_cast<size_t>(D)), s(kBlock), qbuf(static_cast<size_t>(D));
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < work; ++w) {
      const int64_t item = w / chunks, c = w % chunks;
      const int64_t i = item % S, kh = (item / S) % Hkv, b = item / (S * Hkv);
      int64_t lim = T;
      if (causal) lim = std::min<int64_t>(T, std::max<int64_t>(0, i + offset + 1));
      const int64_t j0 = c * chunk_len, j1 = std::min(lim, j0 + chunk_len);
      const float* mrow = mk ? mk + b * T : nullptr;
      for (int64_t hg = 0; hg < g; ++hg) {
        const int64_t h = kh * g + hg;
        Partial& P = part[static_cast<size_t>(w * g + hg)];
        float* o = acc.data() + (w * g + hg) * D;
        const float* qr = load_row(q, b * q.strides[0] + h * q.strides[1] + i * q.strides[2], D,
                                   q.strides[3], qbuf.data());
        for (int64_t d = 0; d < D; ++d) qrow[static_cast<size_t>(d)] = qr[d] * scale;
        for (int64_t jb = j0; jb < j1; jb += kBlock) {
          const int64_t n = std::min(kBlock, j1 - jb);
          kv_dots(K, qrow.data(), b, kh, jb, n, D, s.data());
          float bm = kNegInf;
          for (int64_t j = 0; j < n; ++j) {
            if (mrow) s[static_cast<size_t>(j)] += mrow[jb + j];
            bm = std::max(bm, s[static_cast<size_t>(j)]);
          }
          if (bm == kNegInf) continue;  // every key of the block masked
          const float mnew = std::max(P.m, bm);
          if (mnew > P.m && P.m != kNegInf) {
            const float corr = std::exp(P.m - mnew);
            P.l *= corr;
            for (int64_t d = 0; d < D; ++d) o[d] *= corr;
          }
          P.m = mnew;
          // The block's exponentials in one vector pass (exp_f32: within 2
          // ulp of std::exp; a masked -inf gives 0).
          for (int64_t j = 0; j < n; ++j) s[static_cast<size_t>(j)] -= mnew;
          exp_f32(s.data(), s.data(), n);
          float sum = 0;
          for (int64_t j = 0; j < n; ++j) sum += s[static_cast<size_t>(j)];
          P.l += sum;
          kv_axpys(Vr, s.data(), b, kh, jb, n, D, o);
        }
      }
    }
  }

  // Merge the chunks of every (item, head) and write the output.
  const int merge_nt = items * g * D > 16384 ? nt : 1;
#pragma omp parallel num_threads(merge_nt)
  {
    std::vector<float> row(static_cast<size_t>(D));
#pragma omp for schedule(static)
    for (int64_t ih = 0; ih < items * g; ++ih) {
      const int64_t item = ih / g, hg = ih % g;
      const int64_t i = item % S, kh = (item / S) % Hkv, b = item / (S * Hkv);
      float m = kNegInf;
      for (int64_t c = 0; c < chunks; ++c)
        m = std::max(m, part[static_cast<size_t>((item * chunks + c) * g + hg)].m);
      std::fill(row.begin(), row.end(), 0.f);
      float l = 0;
      if (m != kNegInf) {
        for (int64_t c = 0; c < chunks; ++c) {
          const Partial& P = part[static_cast<size_t>((item * chunks + c) * g + hg)];
          if (P.m == kNegInf) continue;
          const float f = std::exp(P.m - m);
          l += P.l * f;
          const float* o = acc.data() + ((item * chunks + c) * g + hg) * D;
          for (int64_t d = 0; d < D; ++d) row[static_cast<size_t>(d)] += f * o[d];
        }
      }
      const float inv = l > 0 ? 1.0f / l : 0.f;
      for (int64_t d = 0; d < D; ++d) row[static_cast<size_t>(d)] *= inv;
      const int64_t h = kh * g + hg;
      store_row(out, b * out.strides[0] + h * out.strides[1] + i * out.strides[2], D,
                out.strides[3], row.data());
    }
  }
}

// The int8 rows [B, H, T, D] and their scales [B, H, T] as f32 rows (the
// prefill tiles' operands).
void dequantized_rows(int threads, const V& q8, const V& sc, Rows* out) {
  const int64_t B = q8.shape[0], H = q8.shape[1], T = q8.shape[2], D = q8.shape[3];
  out->copy.resize(static_cast<size_t>(B * H * T * D));
  const int64_t rows = B * H * T;
  const int nt = rows * D > 65536 ? std::max(1, threads) : 1;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r % T, h = (r / T) % H, b = r / (T * H);
    const int8_t* src = static_cast<const int8_t*>(q8.data) + b * q8.strides[0] +
                        h * q8.strides[1] + t * q8.strides[2];
    const float d = static_cast<const float*>(
        sc.data)[b * sc.strides[0] + h * sc.strides[1] + t * sc.strides[2]];
    float* dst = out->copy.data() + r * D;
    for (int64_t i = 0; i < D; ++i) dst[i] = static_cast<float>(src[i]) * d;
  }
  out->data = out->copy.data();
  out->sb = H * T * D;
  out->sh = T * D;
  out->st = D;
}

KvRows kv_of(const Rows& r) {
  KvRows k;
  k.f = r.data;
  k.sb = r.sb;
  k.sh = r.sh;
  k.st = r.st;
  return k;
}

}  // namespace

const AttentionRowKernels& attention_row_kernels() {
  return row_kernels();
}

void attention(int threads, const V& out, const V& q, const V& k, const V& v, const V* mask,
               float scale, bool causal, int64_t offset) {
  check_attention(out, q, k, v, mask);
  for (const V* t : {&k, &v})
    OSLO_CHECK(is_float(t->dtype), OSLO_ERR_SHAPE,
               "attention operands must be 4-D float views ([batch, heads, seq, head_dim]), got ",
               shape_of(*t), " ", dtype_name(t->dtype));
  OSLO_CHECK(q.dtype == k.dtype && q.dtype == v.dtype, OSLO_ERR_DTYPE,
             "attention q, k and v must share a dtype (", dtype_name(q.dtype), ", ",
             dtype_name(k.dtype), ", ", dtype_name(v.dtype), ")");
  const int64_t B = q.shape[0], Hq = q.shape[1], S = q.shape[2], D = q.shape[3];
  const int64_t Hkv = k.shape[1], T = k.shape[2];
  if (B * Hq * S * D == 0) return;
  Rows K, Vr;
  as_f32_rows(threads, k, &K);
  as_f32_rows(threads, v, &Vr);
  const std::vector<float> mk = mask_rows(mask, B, T);
  const float* m = mask ? mk.data() : nullptr;
  if (S >= kTileMin)
    prefill_tiles(threads, out, q, K, Vr, m, B, Hq, Hkv, S, T, D, scale, causal, offset);
  else
    decode(threads, out, q, kv_of(K), kv_of(Vr), m, B, Hq, Hkv, S, T, D, scale, causal, offset);
}

void attention_kv8(int threads, const V& out, const V& q, const V& k, const V& k_scale, const V& v,
                   const V& v_scale, const V* mask, float scale, bool causal, int64_t offset) {
  check_attention(out, q, k, v, mask);
  const int64_t B = q.shape[0], Hq = q.shape[1], S = q.shape[2], D = q.shape[3];
  const int64_t Hkv = k.shape[1], T = k.shape[2];
  for (const V* t : {&k, &v})
    OSLO_CHECK(t->dtype == OSLO_DTYPE_I8 && (t->shape[3] <= 1 || t->strides[3] == 1),
               OSLO_ERR_DTYPE,
               "attention_kv8: keys and values must be i8 rows with a unit last "
               "stride, got ",
               dtype_name(t->dtype), " ", shape_of(*t));
  for (const V* t : {&k_scale, &v_scale})
    OSLO_CHECK(t->dtype == OSLO_DTYPE_F32 && t->ndim == 3 && t->shape[0] == B &&
                   t->shape[1] == Hkv && t->shape[2] == T,
               OSLO_ERR_SHAPE, "attention_kv8: scales must be f32 [", B, ", ", Hkv, ", ", T,
               "], got ", dtype_name(t->dtype), " ", shape_of(*t));
  if (B * Hq * S * D == 0) return;
  const std::vector<float> mk = mask_rows(mask, B, T);
  const float* m = mask ? mk.data() : nullptr;
  if (S >= kTileMin) {
    Rows K, Vr;
    dequantized_rows(threads, k, k_scale, &K);
    dequantized_rows(threads, v, v_scale, &Vr);
    prefill_tiles(threads, out, q, K, Vr, m, B, Hq, Hkv, S, T, D, scale, causal, offset);
    return;
  }
  auto rows = [](const V& t, const V& sc) {
    KvRows r;
    r.i8 = static_cast<const int8_t*>(t.data);
    r.sc = static_cast<const float*>(sc.data);
    r.sb = t.strides[0];
    r.sh = t.strides[1];
    r.st = t.strides[2];
    r.ssb = sc.strides[0];
    r.ssh = sc.strides[1];
    r.sst = sc.strides[2];
    return r;
  };
  decode(threads, out, q, rows(k, k_scale), rows(v, v_scale), m, B, Hq, Hkv, S, T, D, scale, causal,
         offset);
}

}  // namespace cpu
}  // namespace oslo
