#include "backends/cpu/cpu_kernels.hpp"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

namespace oslo {
namespace {

inline int64_t read_id(const void* ids, oslo_dtype dt, int64_t i) {
  return dt == OSLO_DTYPE_I64 ? static_cast<const int64_t*>(ids)[i]
                              : static_cast<int64_t>(static_cast<const int32_t*>(ids)[i]);
}

// Work below this many elements is not worth waking threads for.
constexpr int64_t kParallelGrain = 1 << 15;

}  // namespace

void CpuKernels::gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                      float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? 0.f : beta * c[i * ldc + j];
    return;
  }
  // oneDNN reads the OpenMP thread count of the calling thread, so ranks that
  // are threads of one process each get their own count.
  omp_set_num_threads(num_threads_);
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b,
                                ldb, beta, c, ldc);
  OSLO_CHECK(st == dnnl_success, OSLO_ERR_INTERNAL, "cpu: dnnl_sgemm failed with status ",
             static_cast<int>(st), " for m=", m, " n=", n, " k=", k);
}

void CpuKernels::convert(oslo_dtype dst_dtype, void* dst, oslo_dtype src_dtype, const void* src,
                         size_t n) {
  if (dst_dtype == src_dtype) {
    if (dst != src) std::memmove(dst, src, n * dtype_size(dst_dtype));
    return;
  }
  const size_t dsz = dtype_size(dst_dtype), ssz = dtype_size(src_dtype);
  // Checked here: nothing may throw inside the parallel region below.
  OSLO_CHECK(dtype_is_float(src_dtype) && dtype_is_float(dst_dtype), OSLO_ERR_DTYPE,
             "cpu: cannot convert ", dtype_name(src_dtype), " to ", dtype_name(dst_dtype));
  if (src_dtype == OSLO_DTYPE_F32 || dst_dtype == OSLO_DTYPE_F32) {
    // Element-wise, so splitting into blocks across threads is deterministic.
    const int64_t block = 1 << 14;
    const int64_t nblocks = (static_cast<int64_t>(n) + block - 1) / block;
#pragma omp parallel for num_threads(num_threads_) if (nblocks > 1)
    for (int64_t b = 0; b < nblocks; ++b) {
      const size_t i = static_cast<size_t>(b * block);
      const size_t c = std::min<size_t>(block, n - i);
      const char* s = static_cast<const char*>(src) + i * ssz;
      char* d = static_cast<char*>(dst) + i * dsz;
      if (src_dtype == OSLO_DTYPE_F32)
        from_f32(dst_dtype, reinterpret_cast<const float*>(s), d, c);
      else
        to_f32(src_dtype, s, reinterpret_cast<float*>(d), c);
    }
  } else {  // f16 <-> bf16 through f32, in blocks
    float buf[1024];
    for (size_t i = 0; i < n; i += 1024) {
      size_t c = std::min<size_t>(1024, n - i);
      to_f32(src_dtype, static_cast<const char*>(src) + i * 2, buf, c);
      from_f32(dst_dtype, buf, static_cast<char*>(dst) + i * 2, c);
    }
  }
}

void CpuKernels::add_row_vector(float* y, const float* b, int64_t rows, int64_t cols) {
#pragma omp parallel for num_threads(num_threads_) if (rows * cols > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * cols;
    for (int64_t c = 0; c < cols; ++c) yr[c] += b[c];
  }
}

void CpuKernels::accumulate_column_sums(float* out, const float* y, int64_t rows, int64_t cols) {
  // Each column is summed in row order by one thread: deterministic.
  const int64_t block = 256;
  const int64_t nblocks = (cols + block - 1) / block;
#pragma omp parallel for num_threads(num_threads_) if (rows * cols > kParallelGrain)
  for (int64_t bi = 0; bi < nblocks; ++bi) {
    int64_t c0 = bi * block, c1 = std::min(cols, c0 + block);
    float acc[block];
    for (int64_t c = c0; c < c1; ++c) acc[c - c0] = 0.f;
    for (int64_t r = 0; r < rows; ++r) {
      const float* yr = y + r * cols;
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += yr[c];
    }
    for (int64_t c = c0; c < c1; ++c) out[c] += acc[c - c0];
  }
}

void CpuKernels::copy_2d(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows,
                         int64_t cols) {
#pragma omp parallel for num_threads(num_threads_) if (rows * cols > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * dst_ld, src + r * src_ld, static_cast<size_t>(cols) * sizeof(float));
}

void CpuKernels::add(float* y, const float* x, size_t n) {
  const int64_t nn = static_cast<int64_t>(n);
#pragma omp parallel for num_threads(num_threads_) if (nn > kParallelGrain)
  for (int64_t i = 0; i < nn; ++i) y[i] += x[i];
}

void CpuKernels::scale(float* x, size_t n, float s) {
  const int64_t nn = static_cast<int64_t>(n);
#pragma omp parallel for num_threads(num_threads_) if (nn > kParallelGrain)
  for (int64_t i = 0; i < nn; ++i) x[i] *= s;
}

double CpuKernels::norm_accumulate(const float* x, size_t n, double p) {
  // Sequential on purpose: the sum order must not depend on the thread count.
  if (std::isinf(p)) {
    double m = 0;
    for (size_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(std::fabs(x[i])));
    return m;
  }
  double s = 0;
  if (p == 2.0) {
    for (size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  } else if (p == 1.0) {
    for (size_t i = 0; i < n; ++i) s += std::fabs(static_cast<double>(x[i]));
  } else {
    for (size_t i = 0; i < n; ++i) s += std::pow(std::fabs(static_cast<double>(x[i])), p);
  }
  return s;
}

void CpuKernels::embedding_forward(float* out, const float* table, int64_t start, int64_t rows,
                                   int64_t hidden, const void* ids, oslo_dtype id_dtype, int64_t n,
                                   int64_t vocab) {
  for (int64_t t = 0; t < n; ++t) {
    int64_t id = read_id(ids, id_dtype, t);
    OSLO_CHECK(id >= 0 && id < vocab, OSLO_ERR_INVALID_ARGUMENT, "embedding: token id ", id,
               " at position ", t, " is outside the vocabulary [0, ", vocab, ")");
  }
#pragma omp parallel for num_threads(num_threads_) if (n * hidden > kParallelGrain)
  for (int64_t t = 0; t < n; ++t) {
    int64_t local = read_id(ids, id_dtype, t) - start;
    float* o = out + t * hidden;
    if (local >= 0 && local < rows)
      std::memcpy(o, table + local * hidden, static_cast<size_t>(hidden) * sizeof(float));
    else
      std::memset(o, 0, static_cast<size_t>(hidden) * sizeof(float));
  }
}

void CpuKernels::embedding_backward(float* grad_table, int64_t start, int64_t rows, int64_t hidden,
                                    const void* ids, oslo_dtype id_dtype, int64_t n,
                                    const float* grad_out) {
  // Token order, one thread: repeated ids accumulate in a fixed order.
  for (int64_t t = 0; t < n; ++t) {
    int64_t local = read_id(ids, id_dtype, t) - start;
    if (local < 0 || local >= rows) continue;
    float* g = grad_table + local * hidden;
    const float* d = grad_out + t * hidden;
    for (int64_t h = 0; h < hidden; ++h) g[h] += d[h];
  }
}

void CpuKernels::xent_row_max(float* row_max, const float* logits, int64_t tokens, int64_t cols,
                              int64_t valid) {
#pragma omp parallel for num_threads(num_threads_) if (tokens * cols > kParallelGrain)
  for (int64_t t = 0; t < tokens; ++t) {
    const float* x = logits + t * cols;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < valid; ++c) m = std::max(m, x[c]);
    row_max[t] = m;
  }
}

void CpuKernels::xent_local_sums(float* sums, const float* logits, const float* gmax,
                                 const void* labels, oslo_dtype label_dtype, int64_t tokens,
                                 int64_t cols, int64_t valid, int64_t start, int64_t vocab,
                                 int64_t ignore_index) {
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t y = read_id(labels, label_dtype, t);
    OSLO_CHECK(y == ignore_index || (y >= 0 && y < vocab), OSLO_ERR_INVALID_ARGUMENT,
               "cross_entropy: label ", y, " at position ", t, " is outside [0, ", vocab,
               ") and is not ignore_index (", ignore_index, ")");
  }
#pragma omp parallel for num_threads(num_threads_) if (tokens * cols > kParallelGrain)
  for (int64_t t = 0; t < tokens; ++t) {
    const float* x = logits + t * cols;
    const float m = gmax[t];
    float s = 0.f;
    for (int64_t c = 0; c < valid; ++c) s += std::exp(x[c] - m);
    sums[t] = s;
    int64_t y = read_id(labels, label_dtype, t);
    int64_t local = y - start;
    sums[tokens + t] = (y != ignore_index && local >= 0 && local < valid) ? x[local] : 0.f;
  }
}

void CpuKernels::xent_grad(float* grad, const float* logits, const float* gmax, const float* sumexp,
                           const void* labels, oslo_dtype label_dtype, int64_t tokens, int64_t cols,
                           int64_t valid, int64_t start, int64_t ignore_index, float scale) {
#pragma omp parallel for num_threads(num_threads_) if (tokens * cols > kParallelGrain)
  for (int64_t t = 0; t < tokens; ++t) {
    const float* x = logits + t * cols;
    float* g = grad + t * cols;
    int64_t y = read_id(labels, label_dtype, t);
    if (y == ignore_index) {
      std::memset(g, 0, static_cast<size_t>(cols) * sizeof(float));
      continue;
    }
    const float m = gmax[t];
    const float inv = 1.f / sumexp[t];
    for (int64_t c = 0; c < valid; ++c) g[c] = std::exp(x[c] - m) * inv * scale;
    for (int64_t c = valid; c < cols; ++c) g[c] = 0.f;
    int64_t local = y - start;
    if (local >= 0 && local < valid) g[local] -= scale;
  }
}

}  // namespace oslo
