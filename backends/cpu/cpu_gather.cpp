// The CPU backend's index ops (oslo_backend.h): argmax (the greedy
// decision over a vocabulary), gather_rows / scatter_add_rows (embedding
// lookups and their gradients), gather_cols / scatter_add_cols (the labels'
// logits of a cross-entropy and their gradients).
#include <immintrin.h>

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
  return id_at_ptr(static_cast<const char*>(ids.data) + i * static_cast<int64_t>(esize(ids.dtype)),
                   ids.dtype);
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
