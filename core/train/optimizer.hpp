// Optimizers over a model's parameters (each rank its local slices),
// learning-rate schedules, and the gradient clipping that goes with them,
// with PyTorch's and Hugging Face's semantics:
//
//  - AdamW: torch.optim.AdamW (decoupled weight decay p *= 1 - lr wd, bias
//    correction, eps added outside the square root).
//  - SGD: torch.optim.SGD (weight decay added to the gradient, momentum with
//    dampening, Nesterov).
//  - Parameter groups as Hugging Face's Trainer makes them: no weight decay
//    for 1-D parameters (norm weights and biases).
//  - Schedules as transformers' get_scheduler: constant, constant with
//    warmup, linear and cosine with warmup (lr multiplier at optimizer step
//    k, counted from 0).
//
// Optimizer state (AdamW's two moments, SGD's momentum buffer) is f32 with
// the local shape of its parameter, so it is sliced exactly like it. Every
// call is collective over the tensor group only where it says so.
//
// Mixed precision: a parameter held in bf16 or f16 (a model loaded with that
// dtype) gets an f32 master copy, sliced like it; the update runs on the
// master and the parameter becomes the master rounded to its dtype (round to
// nearest even), as torch.autocast training on f32 weights does. Memory per
// such parameter element: 4 bytes of master on top of the 8 (AdamW) or 4
// (SGD with momentum) bytes of state; f32 parameters are their own master.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/model.hpp"

namespace oslo {

enum class OptimizerKind { ADAMW, SGD };

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::ADAMW;
  double lr = 1e-3;  // base learning rate (schedules scale it)
  double weight_decay = 0.0;
  // AdamW
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  // SGD
  double momentum = 0.0, dampening = 0.0;
  bool nesterov = false;
  // Weight decay for 1-D parameters too (Hugging Face's Trainer: no).
  bool decay_1d = false;
};

enum class ScheduleKind { CONSTANT, CONSTANT_WITH_WARMUP, LINEAR, COSINE };

// transformers' schedules: the multiplier of the base learning rate at
// optimizer step `step` (0-based) of `total`.
double schedule_factor(ScheduleKind kind, int64_t step, int64_t warmup, int64_t total);
// "constant", "constant_with_warmup", "linear", "cosine"; throws
// OSLO_ERR_INVALID_ARGUMENT naming the choices otherwise.
ScheduleKind parse_schedule(const std::string& name);

class Optimizer {
 public:
  // Over every parameter of `model` (its tensors(), updated in place; their
  // gradients are model.grads()). Validates the options
  // (OSLO_ERR_INVALID_ARGUMENT naming the bad one). Parameters f32, bf16 or
  // f16 (OSLO_ERR_NOT_SUPPORTED naming the parameter otherwise); each non-f32
  // one gets its f32 master, the parameter's values widened (exact). The
  // model is borrowed and must outlive the optimizer. Not collective.
  Optimizer(Model& model, const OptimizerOptions& options);
  // ZeRO (core/train/data_parallel): state and f32 masters only for the
  // elements [owned[i].first, owned[i].second) of each flattened parameter
  // (an empty range: nothing); state(i) is then 1-D of that length. step()
  // takes the owned gradients and updates only those elements.
  // own_masters (ZeRO-3): an f32 master for every parameter, f32 ones too,
  // and the parameters are not written by step() (the data-parallel
  // reducer gathers them from the masters).
  Optimizer(Model& model, const OptimizerOptions& options,
            const std::vector<std::pair<int64_t, int64_t>>& owned, bool own_masters = false);

  // One update with learning rate `lr` from the current gradients (call
  // after loss_backward, and clip_grad_norm if wanted): on the masters, then
  // every non-f32 parameter set to its master rounded to its dtype, then
  // Model::parameters_changed(). Local: no communication (every rank holds
  // the same replicated gradients).
  void step(double lr);
  // The same with the gradient of each parameter's owned elements given
  // (grads[i]: f32, flat, hi - lo elements), as ZeRO reads them.
  void step(double lr, const std::vector<View>& grads);
  // Whether the optimizer holds only some elements of each parameter
  // (ZeRO), and which.
  bool partitioned() const { return !owned_.empty(); }
  std::pair<int64_t, int64_t> owned(size_t i) const;
  // The f32 values the update applies to for parameter i's owned elements,
  // flat (the parameter's memory when it is f32, else its master).
  View master_view(size_t i) const;
  // Steps taken so far (AdamW's bias correction uses it).
  int64_t steps() const { return steps_; }
  const OptimizerOptions& options() const { return o_; }
  Model& model() const { return model_; }
  // State tensors of parameter i, f32 with the parameter's local shape
  // (AdamW: exp_avg, exp_avg_sq; SGD with momentum: momentum_buffer, zero
  // until the first step sets it to the first update as PyTorch's does),
  // named by state_names() (PyTorch's state keys). A training checkpoint
  // saves and restores them in place, together with steps().
  const std::vector<Tensor>& state(size_t i) const { return state_[i]; }
  const std::vector<std::string>& state_names() const { return state_names_; }
  // Restores the step count (a training checkpoint's resume).
  void set_steps(int64_t steps);
  // The f32 weights the update applies to for parameter i: the parameter
  // itself when it is f32, else its f32 master (the local shape of the
  // parameter, owned by the optimizer, valid while it lives). A training
  // checkpoint saves these as the model's weights and, on resume, writes
  // them and then calls masters_loaded().
  const Tensor& master(size_t i) const;
  // After master(i) was overwritten: brings the model's compute tensors up
  // to date (each non-f32 parameter = its master rounded to its dtype, then
  // Model::parameters_changed). Local: no communication.
  void masters_loaded();
  // Bytes of f32 master copies held (0 for an f32 model).
  size_t master_bytes() const;

 private:
  Model& model_;
  OptimizerOptions o_;
  int64_t steps_ = 0;
  std::vector<std::string> state_names_;
  std::vector<std::vector<Tensor>> state_;
  // Per parameter: its f32 master, undefined when the parameter is f32.
  std::vector<Tensor> masters_;
  // ZeRO: the owned elements per parameter (empty: all of every one).
  std::vector<std::pair<int64_t, int64_t>> owned_;
  bool own_masters_ = false;
  // Every non-f32 parameter = its master rounded to its dtype.
  void round_to_parameters();
  // The owned elements of parameter i in its own dtype, flat.
  View param_range(size_t i) const;
};

// torch.nn.utils.clip_grad_norm_ over the model's gradients: the global
// norm over every rank's slices (replicated gradients counted once),
// gradients scaled by max_norm / (norm + 1e-6) when that is below 1.
// Returns the norm before clipping, the same on every rank. Collective over
// the tensor group.
double clip_grad_norm(Model& model, double max_norm, double norm_type = 2.0);

}  // namespace oslo
