#include "core/layers/embedding.hpp"

#include <cmath>
#include <limits>

#include "core/comm/mappings.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/layers/f32_view.hpp"

namespace oslo {

VocabPartition vocab_partition(int64_t vocab, int tp, int rank) {
  VocabPartition p;
  p.local = (vocab + tp - 1) / tp;
  p.start = p.local * rank;
  p.valid = std::max<int64_t>(0, std::min(p.local, vocab - p.start));
  return p;
}

ParallelEmbedding::ParallelEmbedding(Context& ctx, int64_t vocab, int64_t hidden, oslo_dtype dtype)
    : ctx_(ctx), vocab_(vocab), hidden_(hidden) {
  OSLO_CHECK(vocab > 0 && hidden > 0, OSLO_ERR_INVALID_ARGUMENT, "embedding: vocab_size (", vocab,
             ") and hidden_size (", hidden, ") must be positive");
  OSLO_CHECK(dtype_valid(dtype) && dtype_is_float(dtype), OSLO_ERR_DTYPE,
             "embedding: dtype must be f32, f16 or bf16");
  VocabPartition p = vocab_partition(vocab, ctx.topology().tp_size(), ctx.topology().tp_rank());
  local_rows_ = p.local;
  start_ = p.start;
  real_rows_ = p.valid;
  weight = Tensor::zeros(ctx.backend_ptr(), dtype, {local_rows_, hidden_});
  grad_weight = Tensor::zeros(ctx.backend_ptr(), OSLO_DTYPE_F32, {local_rows_, hidden_});
}

void ParallelEmbedding::load_full(const Tensor& w) {
  require_float(w, "weight");
  OSLO_CHECK(w.ndim() == 2 && w.dim(0) == vocab_ && w.dim(1) == hidden_, OSLO_ERR_SHAPE,
             "embedding: full weight has shape ", Tensor::shape_str(w.shape()), ", expected [",
             vocab_, ", ", hidden_, "]");
  weight.zero();  // padding rows stay zero
  const char* src = static_cast<const char*>(w.data()) + start_ * hidden_ * dtype_size(w.dtype());
  ctx_.kernels().convert(weight.dtype(), weight.data(), w.dtype(), src, real_rows_ * hidden_);
}

void ParallelEmbedding::load_shard(const Tensor& w) {
  require_float(w, "weight");
  OSLO_CHECK(w.ndim() == 2 && w.dim(0) == local_rows_ && w.dim(1) == hidden_, OSLO_ERR_SHAPE,
             "embedding: weight shard has shape ", Tensor::shape_str(w.shape()), ", expected [",
             local_rows_, ", ", hidden_, "]");
  ctx_.kernels().convert(weight.dtype(), weight.data(), w.dtype(), w.data(), w.numel());
  // Padding rows must never hold anything.
  size_t dsz = dtype_size(weight.dtype());
  ctx_.backend().fill_zero(static_cast<char*>(weight.data()) + real_rows_ * hidden_ * dsz,
                           (local_rows_ - real_rows_) * hidden_ * dsz);
}

void ParallelEmbedding::check_ids(const Tensor& ids) const {
  OSLO_CHECK(ids.defined(), OSLO_ERR_INVALID_ARGUMENT, "embedding: ids is NULL");
  OSLO_CHECK(ids.dtype() == OSLO_DTYPE_I32 || ids.dtype() == OSLO_DTYPE_I64, OSLO_ERR_DTYPE,
             "embedding: ids must be i32 or i64, got ", dtype_name(ids.dtype()));
}

void ParallelEmbedding::forward(const Tensor& ids, const Tensor& output) {
  check_ids(ids);
  require_float(output, "output");
  std::vector<int64_t> expect = ids.shape();
  expect.push_back(hidden_);
  OSLO_CHECK(output.shape() == expect, OSLO_ERR_SHAPE, "embedding: output has shape ",
             Tensor::shape_str(output.shape()), ", expected ", Tensor::shape_str(expect));
  ctx_.backend().set_num_threads(ctx_.num_threads());
  F32In w(ctx_, weight);
  F32Out y(ctx_, output);
  ctx_.kernels().embedding_forward(y.get(), w.get(), start_, real_rows_, hidden_, ids.data(),
                                   ids.dtype(), ids.numel(), vocab_);
  reduce_sum(ctx_, OSLO_GROUP_TENSOR, y.get(), ids.numel() * hidden_);
  y.commit();
}

void ParallelEmbedding::backward(const Tensor& ids, const Tensor& grad_output) {
  check_ids(ids);
  require_float(grad_output, "grad_output");
  std::vector<int64_t> expect = ids.shape();
  expect.push_back(hidden_);
  OSLO_CHECK(grad_output.shape() == expect, OSLO_ERR_SHAPE, "embedding: grad_output has shape ",
             Tensor::shape_str(grad_output.shape()), ", expected ", Tensor::shape_str(expect));
  const int64_t n = ids.numel();
  for (int64_t t = 0; t < n; ++t) {
    int64_t id = ids.dtype() == OSLO_DTYPE_I64 ? static_cast<const int64_t*>(ids.data())[t]
                                               : static_cast<const int32_t*>(ids.data())[t];
    OSLO_CHECK(id >= 0 && id < vocab_, OSLO_ERR_INVALID_ARGUMENT, "embedding: token id ", id,
               " at position ", t, " is outside the vocabulary [0, ", vocab_, ")");
  }
  F32In dy(ctx_, grad_output);
  ctx_.kernels().embedding_backward(grad_weight.f32(), start_, real_rows_, hidden_, ids.data(),
                                    ids.dtype(), n, dy.get());
}

void vocab_parallel_cross_entropy(Context& ctx, const Tensor& logits, const Tensor& labels,
                                  int64_t vocab, int64_t ignore_index, const Tensor* losses,
                                  float* mean_loss, const Tensor* grad_logits) {
  require_float(logits, "logits");
  OSLO_CHECK(labels.defined(), OSLO_ERR_INVALID_ARGUMENT, "cross_entropy: labels is NULL");
  OSLO_CHECK(labels.dtype() == OSLO_DTYPE_I32 || labels.dtype() == OSLO_DTYPE_I64, OSLO_ERR_DTYPE,
             "cross_entropy: labels must be i32 or i64, got ", dtype_name(labels.dtype()));
  OSLO_CHECK(vocab > 0, OSLO_ERR_INVALID_ARGUMENT, "cross_entropy: vocab_size must be positive");
  const int tp = ctx.topology().tp_size();
  VocabPartition p = vocab_partition(vocab, tp, ctx.topology().tp_rank());
  OSLO_CHECK(logits.ndim() == 2 && logits.dim(1) == p.local, OSLO_ERR_SHAPE,
             "cross_entropy: logits have shape ", Tensor::shape_str(logits.shape()),
             ", expected [tokens, ", p.local, "] (vocab ", vocab, " padded to ", p.local * tp,
             " over ", tp, " ranks)");
  const int64_t tokens = logits.dim(0), cols = p.local;
  OSLO_CHECK(labels.numel() == tokens, OSLO_ERR_SHAPE, "cross_entropy: labels have ",
             labels.numel(), " elements but logits have ", tokens, " rows");
  if (losses) {
    OSLO_CHECK(losses->dtype() == OSLO_DTYPE_F32, OSLO_ERR_DTYPE,
               "cross_entropy: losses must be f32");
    OSLO_CHECK(losses->numel() == tokens, OSLO_ERR_SHAPE, "cross_entropy: losses have ",
               losses->numel(), " elements, expected ", tokens);
  }
  if (grad_logits) {
    require_float(*grad_logits, "grad_logits");
    OSLO_CHECK(grad_logits->shape() == logits.shape(), OSLO_ERR_SHAPE,
               "cross_entropy: grad_logits have shape ", Tensor::shape_str(grad_logits->shape()),
               ", expected ", Tensor::shape_str(logits.shape()));
  }
  Kernels& k = ctx.kernels();
  ctx.backend().set_num_threads(ctx.num_threads());
  F32In x(ctx, logits);
  // gmax[T] | sums: sumexp[T], target[T]
  DeviceBuffer gmax(ctx.backend(), tokens * sizeof(float) + 1);
  DeviceBuffer sums(ctx.backend(), 2 * tokens * sizeof(float) + 1);
  k.xent_row_max(gmax.f32(), x.get(), tokens, cols, p.valid);
  ctx.comm(OSLO_GROUP_TENSOR)
      .all_reduce(gmax.get(), gmax.get(), tokens, OSLO_DTYPE_F32, OSLO_REDUCE_MAX);
  k.xent_local_sums(sums.f32(), x.get(), gmax.f32(), labels.data(), labels.dtype(), tokens, cols,
                    p.valid, p.start, vocab, ignore_index);
  reduce_sum(ctx, OSLO_GROUP_TENSOR, sums.f32(), 2 * tokens);

  // Per-token losses on the host (tokens floats; tiny next to the logits).
  std::vector<float> hmax(tokens), hsums(2 * tokens);
  ctx.backend().copy(hmax.data(), gmax.get(), tokens * sizeof(float), CopyKind::DeviceToHost);
  ctx.backend().copy(hsums.data(), sums.get(), 2 * tokens * sizeof(float), CopyKind::DeviceToHost);
  std::vector<float> per(tokens, 0.f);
  double total = 0;
  int64_t counted = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t y = labels.dtype() == OSLO_DTYPE_I64 ? static_cast<const int64_t*>(labels.data())[t]
                                                 : static_cast<const int32_t*>(labels.data())[t];
    if (y == ignore_index) continue;
    per[t] = std::log(hsums[t]) + hmax[t] - hsums[tokens + t];
    total += per[t];
    ++counted;
  }
  if (losses)
    ctx.backend().copy(losses->data(), per.data(), tokens * sizeof(float), CopyKind::HostToDevice);
  if (mean_loss)
    *mean_loss =
        counted ? static_cast<float>(total / counted) : std::numeric_limits<float>::quiet_NaN();
  if (grad_logits) {
    F32Out g(ctx, *grad_logits);
    float scale = counted ? 1.f / static_cast<float>(counted) : 0.f;
    k.xent_grad(g.get(), x.get(), gmax.f32(), sums.f32(), labels.data(), labels.dtype(), tokens,
                cols, p.valid, p.start, ignore_index, scale);
    g.commit();
  }
}

}  // namespace oslo
