// f32 kernels of the CPU backend (see core/backend/backend.hpp for contracts).
#pragma once

#include "core/backend/backend.hpp"

namespace oslo {

class CpuKernels : public Kernels {
 public:
  explicit CpuKernels(int num_threads) : num_threads_(num_threads > 0 ? num_threads : 1) {}
  void set_num_threads(int n) { num_threads_ = n > 0 ? n : 1; }
  int num_threads() const { return num_threads_; }

  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
            int64_t ldc) override;
  void convert(oslo_dtype dst_dtype, void* dst, oslo_dtype src_dtype, const void* src,
               size_t n) override;
  void add_row_vector(float* y, const float* b, int64_t rows, int64_t cols) override;
  void accumulate_column_sums(float* out, const float* y, int64_t rows, int64_t cols) override;
  void copy_2d(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows,
               int64_t cols) override;
  void add(float* y, const float* x, size_t n) override;
  void scale(float* x, size_t n, float s) override;
  double norm_accumulate(const float* x, size_t n, double p) override;
  void embedding_forward(float* out, const float* table, int64_t start, int64_t rows,
                         int64_t hidden, const void* ids, oslo_dtype id_dtype, int64_t n,
                         int64_t vocab) override;
  void embedding_backward(float* grad_table, int64_t start, int64_t rows, int64_t hidden,
                          const void* ids, oslo_dtype id_dtype, int64_t n,
                          const float* grad_out) override;
  void xent_row_max(float* row_max, const float* logits, int64_t tokens, int64_t cols,
                    int64_t valid) override;
  void xent_local_sums(float* sums, const float* logits, const float* gmax, const void* labels,
                       oslo_dtype label_dtype, int64_t tokens, int64_t cols, int64_t valid,
                       int64_t start, int64_t vocab, int64_t ignore_index) override;
  void xent_grad(float* grad, const float* logits, const float* gmax, const float* sumexp,
                 const void* labels, oslo_dtype label_dtype, int64_t tokens, int64_t cols,
                 int64_t valid, int64_t start, int64_t ignore_index, float scale) override;

 private:
  int num_threads_;
};

}  // namespace oslo
