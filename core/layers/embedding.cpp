#include "core/layers/embedding.hpp"

#include <cmath>
#include <limits>

#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/layers/layer_util.hpp"
#include "core/parallel/mappings.hpp"
#include "core/tensor/view.hpp"

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
  if (real_rows_ == 0) return;
  View src = make_view(static_cast<char*>(w.data()) + start_ * hidden_ * dtype_size(w.dtype()),
                       w.dtype(), {real_rows_, hidden_});
  ctx_.backend().convert(real_rows(weight), src);
}

void ParallelEmbedding::load_shard(const Tensor& w) {
  require_float(w, "weight");
  OSLO_CHECK(w.ndim() == 2 && w.dim(0) == local_rows_ && w.dim(1) == hidden_, OSLO_ERR_SHAPE,
             "embedding: weight shard has shape ", Tensor::shape_str(w.shape()), ", expected [",
             local_rows_, ", ", hidden_, "]");
  weight.zero();  // padding rows must never hold anything
  if (real_rows_ == 0) return;
  View src = make_view(w.data(), w.dtype(), {real_rows_, hidden_});
  ctx_.backend().convert(real_rows(weight), src);
}

View ParallelEmbedding::real_rows(const Tensor& t) const {
  return make_view(t.data(), t.dtype(), {real_rows_, hidden_});
}

void ParallelEmbedding::check_ids(const Tensor& ids) const {
  OSLO_CHECK(ids.defined(), OSLO_ERR_INVALID_ARGUMENT, "embedding: ids is NULL");
  OSLO_CHECK(ids.dtype() == OSLO_DTYPE_I32 || ids.dtype() == OSLO_DTYPE_I64, OSLO_ERR_DTYPE,
             "embedding: ids must be i32 or i64, got ", dtype_name(ids.dtype()));
}

namespace {

// A copy of integer ids (labels) on the host, through the backend's copy (a
// wait point): the core never dereferences device memory.
std::vector<int64_t> ids_on_host(Context& ctx, const Tensor& ids) {
  const size_t n = static_cast<size_t>(ids.numel());
  std::vector<int64_t> out(n);
  if (ids.dtype() == OSLO_DTYPE_I64) {
    ctx.backend().copy(out.data(), ids.data(), n * 8, CopyKind::DeviceToHost);
  } else {
    std::vector<int32_t> tmp(n);
    ctx.backend().copy(tmp.data(), ids.data(), n * 4, CopyKind::DeviceToHost);
    std::copy(tmp.begin(), tmp.end(), out.begin());
  }
  return out;
}

View flat_ids(const Tensor& ids) {
  return make_view(ids.data(), ids.dtype(), {ids.numel()});
}

}  // namespace

void ParallelEmbedding::forward(const Tensor& ids, const Tensor& output) {
  check_ids(ids);
  require_float(output, "output");
  std::vector<int64_t> expect = ids.shape();
  expect.push_back(hidden_);
  OSLO_CHECK(output.shape() == expect, OSLO_ERR_SHAPE, "embedding: output has shape ",
             Tensor::shape_str(output.shape()), ", expected ", Tensor::shape_str(expect));
  Backend& be = ctx_.backend();
  be.set_num_threads(ctx_.num_threads());
  View y = make_view(output.data(), output.dtype(), {ids.numel(), hidden_});
  // Each token's row is on exactly one rank (zeros elsewhere), so the sum
  // over the group is exact in any dtype.
  be.gather_rows(y, real_rows(weight), flat_ids(ids), start_, vocab_);
  reduce_sum(ctx_, OSLO_GROUP_TENSOR, y);
}

void ParallelEmbedding::backward(const Tensor& ids, const Tensor& grad_output) {
  check_ids(ids);
  require_float(grad_output, "grad_output");
  std::vector<int64_t> expect = ids.shape();
  expect.push_back(hidden_);
  OSLO_CHECK(grad_output.shape() == expect, OSLO_ERR_SHAPE, "embedding: grad_output has shape ",
             Tensor::shape_str(grad_output.shape()), ", expected ", Tensor::shape_str(expect));
  std::vector<int64_t> host = ids_on_host(ctx_, ids);
  for (size_t t = 0; t < host.size(); ++t)
    OSLO_CHECK(host[t] >= 0 && host[t] < vocab_, OSLO_ERR_INVALID_ARGUMENT, "embedding: token id ",
               host[t], " at position ", t, " is outside the vocabulary [0, ", vocab_, ")");
  if (real_rows_ == 0) return;
  ctx_.backend().set_num_threads(ctx_.num_threads());
  ctx_.backend().scatter_add_rows(
      real_rows(grad_weight), flat_ids(ids),
      make_view(grad_output.data(), grad_output.dtype(), {ids.numel(), hidden_}), start_);
}

void vocab_parallel_cross_entropy(Context& ctx, const Tensor& logits, const Tensor& labels,
                                  int64_t vocab, int64_t ignore_index, const Tensor* losses,
                                  float* mean_loss, const Tensor* grad_logits, int64_t divisor) {
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
  const int64_t tokens = logits.dim(0);
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
  // Labels are checked on the host (a wait point) so the error names the
  // label, as the unsharded loss would.
  std::vector<int64_t> host_labels = ids_on_host(ctx, labels);
  int64_t counted = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t y = host_labels[static_cast<size_t>(t)];
    if (y == ignore_index) continue;
    OSLO_CHECK(y >= 0 && y < vocab, OSLO_ERR_INVALID_ARGUMENT, "cross_entropy: label ", y,
               " at position ", t, " is outside [0, ", vocab, ")");
    ++counted;
  }
  Backend& be = ctx.backend();
  auto bk = ctx.backend_ptr();
  be.set_num_threads(ctx.num_threads());
  View x = view(logits);
  View lab = flat_ids(labels);
  // stats: gmax[T] | sumexp[T], target[T]
  Tensor gmax = scratch(bk, OSLO_DTYPE_F32, {tokens});
  Tensor sums = scratch(bk, OSLO_DTYPE_F32, {2, tokens});
  View sumexp = make_view(sums.data(), OSLO_DTYPE_F32, {tokens});
  View target = make_view(static_cast<float*>(sums.data()) + tokens, OSLO_DTYPE_F32, {tokens});
  be.reduce(OSLO_BK_REDUCE_MAX, view(gmax), x, nullptr, p.valid);
  reduce_max(ctx, OSLO_GROUP_TENSOR, view(gmax));
  View gm = view(gmax);
  be.reduce(OSLO_BK_REDUCE_SUM_EXP, sumexp, x, &gm, p.valid);
  be.gather_cols(target, x, lab, p.start, vocab, ignore_index);
  reduce_sum(ctx, OSLO_GROUP_TENSOR, view(sums));

  // Per-token losses on the host (tokens floats; tiny next to the logits).
  std::vector<float> hmax(static_cast<size_t>(tokens)), hsums(static_cast<size_t>(2 * tokens));
  be.copy(hmax.data(), gmax.data(), hmax.size() * 4, CopyKind::DeviceToHost);
  be.copy(hsums.data(), sums.data(), hsums.size() * 4, CopyKind::DeviceToHost);
  std::vector<float> per(static_cast<size_t>(tokens), 0.f);
  std::vector<float> coef(static_cast<size_t>(tokens), 0.f);
  OSLO_CHECK(divisor >= 0, OSLO_ERR_INTERNAL, "cross_entropy: divisor ", divisor, " < 0");
  const int64_t denom = divisor > 0 ? divisor : counted;
  const float scale = denom ? 1.f / static_cast<float>(denom) : 0.f;
  double total = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    const size_t i = static_cast<size_t>(t);
    if (host_labels[i] == ignore_index) continue;
    per[i] = std::log(hsums[i]) + hmax[i] - hsums[tokens + t];
    coef[i] = scale / hsums[i];
    total += per[i];
  }
  if (losses) be.copy(losses->data(), per.data(), per.size() * 4, CopyKind::HostToDevice);
  if (mean_loss)
    *mean_loss =
        denom ? static_cast<float>(total / denom) : std::numeric_limits<float>::quiet_NaN();
  if (grad_logits) {
    // grad = coef[t] * exp(x - gmax[t]) over the real columns, 0 on padding,
    // then -scale at each label's column.
    View g = view(*grad_logits);
    if (p.valid < p.local) be.fill(columns(g, p.valid, p.local - p.valid), 0.0);
    if (p.valid > 0) {
      Tensor c = scratch(bk, OSLO_DTYPE_F32, {tokens});
      be.copy(c.data(), coef.data(), coef.size() * 4, CopyKind::HostToDevice);
      // An f32 gradient holds the intermediate itself; another dtype gets an
      // f32 scratch (rounding once, at the end). No fresh [tokens, vocab]
      // buffer for f32: that is hundreds of MB of page faults per step.
      const View gv = columns(g, 0, p.valid);
      Tensor tmp;
      if (g.dtype != OSLO_DTYPE_F32) tmp = scratch(bk, OSLO_DTYPE_F32, {tokens, p.valid});
      const View t = tmp.defined() ? view(tmp) : gv;
      be.binary(OSLO_BK_SUB, t, columns(x, 0, p.valid), as_column(gm));
      be.unary(OSLO_BK_EXP, t, t);
      be.binary(OSLO_BK_MUL, gv, t, as_column(view(c)));
    }
    be.scatter_add_cols(g, lab, p.start, ignore_index, -scale);
  }
}

}  // namespace oslo
