// Column- and row-parallel linear layers y = x W^T + b (W is [out, in]), as
// in Megatron-LM and seed 004. Parameters are stored in the layer's dtype,
// gradients in f32; compute is f32.
#pragma once

#include "core/context/context.hpp"
#include "core/tensor/tensor.hpp"

namespace oslo {

class ParallelLinear {
 public:
  ParallelLinear(Context& ctx, const oslo_parallel_linear_options& options);

  void load_full(const Tensor& weight, const Tensor* bias);
  void load_shard(const Tensor& weight, const Tensor* bias);
  void forward(const Tensor& input, const Tensor& output);
  void backward(const Tensor& input, const Tensor& grad_output, const Tensor* grad_input);
  void zero_grad();

  const oslo_parallel_linear_options& options() const { return opt_; }
  bool column() const { return opt_.kind == OSLO_LINEAR_COLUMN; }
  int64_t local_in() const { return local_in_; }
  int64_t local_out() const { return local_out_; }
  // Expected last dimensions of the input and output tensors.
  int64_t input_features() const;
  int64_t output_features() const;
  Context& context() const { return ctx_; }

  Tensor weight, bias, grad_weight, grad_bias;

 private:
  void check_activation(const Tensor& t, int64_t last, const char* what, int64_t rows) const;

  Context& ctx_;
  oslo_parallel_linear_options opt_;
  int tp_, tp_rank_;
  int64_t local_in_, local_out_;
};

}  // namespace oslo
