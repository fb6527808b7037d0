#include "core/layers/linear.hpp"

#include "core/comm/mappings.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/layers/f32_view.hpp"

namespace oslo {

ParallelLinear::ParallelLinear(Context& ctx, const oslo_parallel_linear_options& o)
    : ctx_(ctx), opt_(o) {
  OSLO_CHECK(o.kind == OSLO_LINEAR_COLUMN || o.kind == OSLO_LINEAR_ROW, OSLO_ERR_INVALID_ARGUMENT,
             "linear: unknown kind ", static_cast<int>(o.kind));
  OSLO_CHECK(o.in_features > 0 && o.out_features > 0, OSLO_ERR_INVALID_ARGUMENT,
             "linear: in_features (", o.in_features, ") and out_features (", o.out_features,
             ") must be positive");
  OSLO_CHECK(dtype_valid(o.dtype) && dtype_is_float(o.dtype), OSLO_ERR_DTYPE,
             "linear: dtype must be f32, f16 or bf16");
  tp_ = ctx.topology().tp_size();
  tp_rank_ = ctx.topology().tp_rank();
  if (column()) {
    OSLO_CHECK(o.out_features % tp_ == 0, OSLO_ERR_INVALID_ARGUMENT,
               "column-parallel linear: out_features (", o.out_features,
               ") is not divisible by tensor_parallel_size (", tp_, ")");
    local_in_ = o.in_features;
    local_out_ = o.out_features / tp_;
  } else {
    OSLO_CHECK(o.in_features % tp_ == 0, OSLO_ERR_INVALID_ARGUMENT,
               "row-parallel linear: in_features (", o.in_features,
               ") is not divisible by tensor_parallel_size (", tp_, ")");
    local_in_ = o.in_features / tp_;
    local_out_ = o.out_features;
  }
  auto be = ctx.backend_ptr();
  weight = Tensor::zeros(be, o.dtype, {local_out_, local_in_});
  grad_weight = Tensor::zeros(be, OSLO_DTYPE_F32, {local_out_, local_in_});
  if (o.bias) {
    bias = Tensor::zeros(be, o.dtype, {local_out_});
    grad_bias = Tensor::zeros(be, OSLO_DTYPE_F32, {local_out_});
  }
}

int64_t ParallelLinear::input_features() const {
  if (column()) return opt_.in_features;
  return opt_.input_is_parallel ? local_in_ : opt_.in_features;
}

int64_t ParallelLinear::output_features() const {
  if (column()) return opt_.gather_output ? opt_.out_features : local_out_;
  return opt_.out_features;
}

void ParallelLinear::check_activation(const Tensor& t, int64_t last, const char* what,
                                      int64_t rows) const {
  require_float(t, what);
  OSLO_CHECK(t.ndim() >= 1 && t.dim(-1) == last, OSLO_ERR_SHAPE, "linear: ", what, " has shape ",
             Tensor::shape_str(t.shape()), " but its last dimension must be ", last);
  if (rows >= 0)
    OSLO_CHECK(rows_of(t) == rows, OSLO_ERR_SHAPE, "linear: ", what, " has shape ",
               Tensor::shape_str(t.shape()), " whose leading dimensions hold ", rows_of(t),
               " rows, but the input has ", rows);
}

void ParallelLinear::load_full(const Tensor& w, const Tensor* b) {
  require_float(w, "weight");
  OSLO_CHECK(w.ndim() == 2 && w.dim(0) == opt_.out_features && w.dim(1) == opt_.in_features,
             OSLO_ERR_SHAPE, "linear: full weight has shape ", Tensor::shape_str(w.shape()),
             ", expected [", opt_.out_features, ", ", opt_.in_features, "]");
  OSLO_CHECK(opt_.bias || !b, OSLO_ERR_INVALID_ARGUMENT,
             "linear: a bias was given but the layer was created without bias");
  if (b) {
    require_float(*b, "bias");
    OSLO_CHECK(b->ndim() == 1 && b->dim(0) == opt_.out_features, OSLO_ERR_SHAPE,
               "linear: full bias has shape ", Tensor::shape_str(b->shape()), ", expected [",
               opt_.out_features, "]");
  }
  Kernels& k = ctx_.kernels();
  const size_t wsz = dtype_size(w.dtype()), dsz = dtype_size(opt_.dtype);
  const char* src = static_cast<const char*>(w.data());
  char* dst = static_cast<char*>(weight.data());
  if (column()) {
    k.convert(opt_.dtype, dst, w.dtype(), src + tp_rank_ * local_out_ * local_in_ * wsz,
              local_out_ * local_in_);
  } else {
    for (int64_t r = 0; r < local_out_; ++r)
      k.convert(opt_.dtype, dst + r * local_in_ * dsz, w.dtype(),
                src + (r * opt_.in_features + tp_rank_ * local_in_) * wsz, local_in_);
  }
  if (b) {
    const char* bs = static_cast<const char*>(b->data());
    int64_t off = column() ? tp_rank_ * local_out_ : 0;
    k.convert(opt_.dtype, bias.data(), b->dtype(), bs + off * dtype_size(b->dtype()), local_out_);
  }
}

void ParallelLinear::load_shard(const Tensor& w, const Tensor* b) {
  require_float(w, "weight");
  OSLO_CHECK(w.ndim() == 2 && w.dim(0) == local_out_ && w.dim(1) == local_in_, OSLO_ERR_SHAPE,
             "linear: weight shard has shape ", Tensor::shape_str(w.shape()), ", expected [",
             local_out_, ", ", local_in_, "]");
  OSLO_CHECK(opt_.bias || !b, OSLO_ERR_INVALID_ARGUMENT,
             "linear: a bias was given but the layer was created without bias");
  if (b) {
    require_float(*b, "bias");
    OSLO_CHECK(b->ndim() == 1 && b->dim(0) == local_out_, OSLO_ERR_SHAPE,
               "linear: bias shard has shape ", Tensor::shape_str(b->shape()), ", expected [",
               local_out_, "]");
  }
  ctx_.kernels().convert(opt_.dtype, weight.data(), w.dtype(), w.data(), w.numel());
  if (b) ctx_.kernels().convert(opt_.dtype, bias.data(), b->dtype(), b->data(), local_out_);
}

void ParallelLinear::forward(const Tensor& input, const Tensor& output) {
  check_activation(input, input_features(), "input", -1);
  const int64_t rows = rows_of(input);
  check_activation(output, output_features(), "output", rows);
  Kernels& k = ctx_.kernels();
  ctx_.backend().set_num_threads(ctx_.num_threads());
  F32In x(ctx_, input);
  F32In w(ctx_, weight);
  std::unique_ptr<F32In> b;
  if (opt_.bias) b = std::make_unique<F32In>(ctx_, bias);
  F32Out y(ctx_, output);

  if (column()) {
    // y_local = x W_local^T + b_local, then optionally gathered.
    std::unique_ptr<DeviceBuffer> local;
    float* yl = y.get();
    if (opt_.gather_output && tp_ > 1) {
      local = std::make_unique<DeviceBuffer>(ctx_.backend(), rows * local_out_ * sizeof(float));
      yl = local->f32();
    }
    k.gemm(false, true, rows, local_out_, local_in_, 1.f, x.get(), local_in_, w.get(), local_in_,
           0.f, yl, local_out_);
    if (b) k.add_row_vector(yl, b->get(), rows, local_out_);
    if (opt_.gather_output && tp_ > 1)
      gather_last_dim(ctx_, OSLO_GROUP_TENSOR, yl, y.get(), rows, local_out_);
  } else {
    const float* xl = x.get();
    std::unique_ptr<DeviceBuffer> split;
    if (!opt_.input_is_parallel && tp_ > 1) {
      split = std::make_unique<DeviceBuffer>(ctx_.backend(), rows * local_in_ * sizeof(float));
      split_last_dim(ctx_, OSLO_GROUP_TENSOR, x.get(), split->f32(), rows, opt_.in_features);
      xl = split->f32();
    }
    // Partial products summed over the group; the bias (replicated) after the sum.
    k.gemm(false, true, rows, local_out_, local_in_, 1.f, xl, local_in_, w.get(), local_in_, 0.f,
           y.get(), local_out_);
    reduce_sum(ctx_, OSLO_GROUP_TENSOR, y.get(), rows * local_out_);
    if (b) k.add_row_vector(y.get(), b->get(), rows, local_out_);
  }
  y.commit();
}

void ParallelLinear::backward(const Tensor& input, const Tensor& grad_output,
                              const Tensor* grad_input) {
  check_activation(input, input_features(), "input", -1);
  const int64_t rows = rows_of(input);
  check_activation(grad_output, output_features(), "grad_output", rows);
  if (grad_input) {
    check_activation(*grad_input, input_features(), "grad_input", rows);
    OSLO_CHECK(grad_input->shape() == input.shape(), OSLO_ERR_SHAPE,
               "linear: grad_input has shape ", Tensor::shape_str(grad_input->shape()),
               " but input has ", Tensor::shape_str(input.shape()));
  }
  Kernels& k = ctx_.kernels();
  ctx_.backend().set_num_threads(ctx_.num_threads());
  F32In x(ctx_, input);
  F32In dy_full(ctx_, grad_output);
  F32In w(ctx_, weight);

  // Local slices of the activations this rank's weights saw.
  const float* dy = dy_full.get();
  std::unique_ptr<DeviceBuffer> dy_split, x_split;
  if (column() && opt_.gather_output && tp_ > 1) {
    dy_split = std::make_unique<DeviceBuffer>(ctx_.backend(), rows * local_out_ * sizeof(float));
    split_last_dim(ctx_, OSLO_GROUP_TENSOR, dy_full.get(), dy_split->f32(), rows,
                   opt_.out_features);
    dy = dy_split->f32();
  }
  const float* xl = x.get();
  if (!column() && !opt_.input_is_parallel && tp_ > 1) {
    x_split = std::make_unique<DeviceBuffer>(ctx_.backend(), rows * local_in_ * sizeof(float));
    split_last_dim(ctx_, OSLO_GROUP_TENSOR, x.get(), x_split->f32(), rows, opt_.in_features);
    xl = x_split->f32();
  }

  // dW += dy^T x ; db += column sums of dy.
  k.gemm(true, false, local_out_, local_in_, rows, 1.f, dy, local_out_, xl, local_in_, 1.f,
         grad_weight.f32(), local_in_);
  if (opt_.bias) k.accumulate_column_sums(grad_bias.f32(), dy, rows, local_out_);

  if (!grad_input) {
    // The column layer's input gradient all-reduce is collective: every rank
    // must either take part or skip it, so callers skip it consistently.
    return;
  }
  F32Out dx(ctx_, *grad_input);
  if (column()) {
    k.gemm(false, false, rows, local_in_, local_out_, 1.f, dy, local_out_, w.get(), local_in_, 0.f,
           dx.get(), local_in_);
    reduce_sum(ctx_, OSLO_GROUP_TENSOR, dx.get(), rows * local_in_);
  } else if (opt_.input_is_parallel || tp_ == 1) {
    k.gemm(false, false, rows, local_in_, local_out_, 1.f, dy, local_out_, w.get(), local_in_, 0.f,
           dx.get(), local_in_);
  } else {
    DeviceBuffer local(ctx_.backend(), rows * local_in_ * sizeof(float));
    k.gemm(false, false, rows, local_in_, local_out_, 1.f, dy, local_out_, w.get(), local_in_, 0.f,
           local.f32(), local_in_);
    gather_last_dim(ctx_, OSLO_GROUP_TENSOR, local.f32(), dx.get(), rows, local_in_);
  }
  dx.commit();
}

void ParallelLinear::zero_grad() {
  grad_weight.zero();
  if (opt_.bias) grad_bias.zero();
}

}  // namespace oslo
