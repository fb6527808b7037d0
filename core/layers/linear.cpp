#include "core/layers/linear.hpp"

#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/layers/functional.hpp"
#include "core/layers/layer_util.hpp"
#include "core/parallel/mappings.hpp"
#include "core/tensor/view.hpp"

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
  Backend& be = ctx_.backend();
  View full = view(w);
  if (column()) {
    // Rows [r * out/tp, (r + 1) * out/tp) of W: the transposed view's columns.
    be.convert(view(weight),
               transposed(columns(transposed(full), tp_rank_ * local_out_, local_out_)));
  } else {
    be.convert(view(weight), columns(full, tp_rank_ * local_in_, local_in_));
  }
  if (b) {
    View bv = view(*b);
    be.convert(view(bias), column() ? columns(bv, tp_rank_ * local_out_, local_out_) : bv);
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
  ctx_.backend().convert(view(weight), view(w));
  if (b) ctx_.backend().convert(view(bias), view(*b));
}

void ParallelLinear::forward(const Tensor& input, const Tensor& output) {
  check_activation(input, input_features(), "input", -1);
  const int64_t rows = rows_of(input);
  check_activation(output, output_features(), "output", rows);
  Backend& be = ctx_.backend();
  auto bk = ctx_.backend_ptr();
  be.set_num_threads(ctx_.num_threads());
  // The products (layers tier, functional.hpp) run in the weight's dtype,
  // accumulating in f32.
  View x = matrix(input);
  const View w = view(weight);
  View y = matrix(output);
  View bv;
  if (opt_.bias) bv = view(bias);

  if (column()) {
    // y_local = x W_local^T + b_local, then optionally gathered.
    if (opt_.gather_output && tp_ > 1) {
      Tensor local = scratch(bk, output.dtype(), {rows, local_out_});
      linear_forward(be, bk, view(local), x, w, opt_.bias ? &bv : nullptr);
      gather_last_dim(ctx_, OSLO_GROUP_TENSOR, view(local), y);
    } else {
      linear_forward(be, bk, y, x, w, opt_.bias ? &bv : nullptr);
    }
    return;
  }
  Tensor split;
  if (!opt_.input_is_parallel && tp_ > 1) {
    split = scratch(bk, x.dtype, {rows, local_in_});
    split_last_dim(ctx_, OSLO_GROUP_TENSOR, x, view(split));
    x = view(split);
  }
  // Partial products summed over the group in f32; the bias (replicated)
  // after the sum.
  Tensor partial;
  View p = y;
  if (output.dtype() != OSLO_DTYPE_F32 && tp_ > 1) {
    partial = scratch(bk, OSLO_DTYPE_F32, {rows, local_out_});
    p = view(partial);
  }
  linear_forward(be, bk, p, x, w, nullptr);
  reduce_sum(ctx_, OSLO_GROUP_TENSOR, p);
  if (opt_.bias)
    be.binary(OSLO_BK_ADD, y, p, bv);
  else if (p.data != y.data)
    be.convert(y, p);
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
  Backend& be = ctx_.backend();
  be.set_num_threads(ctx_.num_threads());
  auto bk = ctx_.backend_ptr();

  // Local slices of the activations this rank's weights saw.
  View x = matrix(input), dy = matrix(grad_output);
  Tensor dy_split, x_split;
  if (column() && opt_.gather_output && tp_ > 1) {
    dy_split = scratch(bk, dy.dtype, {rows, local_out_});
    split_last_dim(ctx_, OSLO_GROUP_TENSOR, dy, view(dy_split));
    dy = view(dy_split);
  }
  if (!column() && !opt_.input_is_parallel && tp_ > 1) {
    x_split = scratch(bk, x.dtype, {rows, local_in_});
    split_last_dim(ctx_, OSLO_GROUP_TENSOR, x, view(x_split));
    x = view(x_split);
  }
  // The bias gradient sums dy in f32.
  Tensor dy32_keep;
  const View dy32 = in_dtype(be, bk, dy, OSLO_DTYPE_F32, &dy32_keep);

  // Where this rank's dx = dy W lands before the group's part: a column
  // layer's partial sum (f32 when summed over ranks), a row layer's slice.
  Tensor acc, local;
  View d;
  View dx;
  if (grad_input) {
    dx = matrix(*grad_input);
    d = dx;
    if (column() && grad_input->dtype() != OSLO_DTYPE_F32 && tp_ > 1) {
      acc = scratch(bk, OSLO_DTYPE_F32, {rows, local_in_});
      d = view(acc);
    } else if (!column() && !opt_.input_is_parallel && tp_ > 1) {
      local = scratch(bk, grad_input->dtype(), {rows, local_in_});
      d = view(local);
    }
  }
  // dW += dy^T x, db += column sums of dy, dx = dy W: the layers tier's one
  // rule (operands in the weight's dtype, f32 accumulation).
  const View gw = view(grad_weight);
  View gb;
  if (opt_.bias) gb = view(grad_bias);
  linear_backward(be, bk, dy32, x, view(weight), &gw, opt_.bias ? &gb : nullptr,
                  grad_input ? &d : nullptr, false);
  // The column layer's input gradient all-reduce is collective: every rank
  // must either take part or skip it, so callers skip it consistently.
  if (!grad_input) return;
  if (column()) {
    reduce_sum(ctx_, OSLO_GROUP_TENSOR, d);
    if (d.data != dx.data) be.convert(dx, d);
  } else if (local.defined()) {
    gather_last_dim(ctx_, OSLO_GROUP_TENSOR, view(local), dx);
  }
}

void ParallelLinear::zero_grad() {
  grad_weight.zero();
  if (opt_.bias) grad_bias.zero();
}

}  // namespace oslo
