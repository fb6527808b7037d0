// The loop around an optimizer, as Hugging Face's Trainer runs it: gradient
// accumulation over micro-batches, dynamic loss scaling (PyTorch's
// GradScaler), global gradient-norm clipping, the learning-rate schedule and
// the update, with every decision (skip a step, back the scale off) taken
// alike on every rank. The C ABI's oslo_optimizer is one Trainer.
//
// One optimizer step, after grad_accum_steps micro-batches:
//   grads /= loss_scale (loss scaling on); norm = global gradient norm
//   (collective); non-finite norm -> the update is skipped, the scale backs
//   off; else clip to max_grad_norm, lr = base lr * schedule(updates so far),
//   update; then gradients are zeroed.
// Skipped steps do not advance the schedule (as Accelerate's scheduler
// wrapper does when GradScaler skipped the optimizer step).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/model/model.hpp"
#include "core/train/data_parallel.hpp"
#include "core/train/optimizer.hpp"

namespace oslo {

// torch.amp.GradScaler's options and defaults.
struct LossScalerOptions {
  bool enabled = false;
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

struct TrainerOptions {
  OptimizerOptions optimizer;
  ScheduleKind schedule = ScheduleKind::CONSTANT;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;     // the schedule's length in optimizer steps (linear, cosine)
  double max_grad_norm = 0.0;  // > 0: clip the global norm to it
  int64_t grad_accum_steps = 1;
  LossScalerOptions scaler;
  // Data parallelism over the context's data group (used when its size is
  // above 1 or zero_stage above 0): bucket size and ZeRO stage
  // (core/train/data_parallel.hpp).
  DataParallelOptions data_parallel;
  // Micro-batches each train_step's batch is cut into (it must divide the
  // batch): with pipeline stages (the context's pipeline size above 1) they
  // run through the stages in 1F1B order (Model::pipeline_loss_backward);
  // on one stage one after the other. Either way one train_step is one
  // micro-batch of the grad_accum_steps window.
  int64_t micro_batches = 1;
  // Model::pipeline_loss_backward's head_split: 0 off, a fraction in (0, 1],
  // -1 by the stages' costs.
  double pipeline_head_split = 0;
};

// What a micro-batch or an update did.
struct TrainStepResult {
  float loss = 0.f;         // this micro-batch's loss (unscaled)
  bool stepped = false;     // an optimizer step ran (or was skipped) after it
  bool skipped = false;     // the step was skipped: non-finite gradients
  double mean_loss = 0.0;   // stepped: mean loss over the accumulated micro-batches
  double grad_norm = 0.0;   // stepped: global norm before clipping (NaN when not computed)
  double lr = 0.0;          // stepped: the learning rate used (0 when skipped)
  double loss_scale = 1.0;  // the scale in force after this call
  int64_t step = 0;         // optimizer updates applied so far
};

class Trainer {
 public:
  // Over `model` (borrowed, must outlive the trainer). Validates the options
  // (OSLO_ERR_INVALID_ARGUMENT naming the bad one). Not collective.
  Trainer(Model& model, const TrainerOptions& options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One micro-batch: loss and backward with gradients scaled by
  // loss_scale / grad_accum_steps, then, if this completes an accumulation
  // window, step(). Arguments as Model::loss_backward. Collective over the
  // tensor group.
  TrainStepResult train_step(const std::vector<int64_t>& ids, const std::vector<int64_t>& labels,
                             const std::vector<int64_t>& mask, int64_t batch, int64_t seq);
  // The same for a gradient of the hidden states the caller supplies
  // (Model::hidden_backward: encoders, or any loss the caller computes from
  // the hidden states); the result's loss is 0. Collective over the tensor
  // group.
  TrainStepResult backward_step(const std::vector<int64_t>& ids, const std::vector<int64_t>& mask,
                                const std::vector<int64_t>& token_types, int64_t batch, int64_t seq,
                                const std::vector<float>& grad_hidden);
  // The optimizer step from the gradients accumulated so far (whatever the
  // window), then zero_grad(). Collective over the tensor group.
  TrainStepResult step();
  // Zeroes the gradients and restarts the accumulation window.
  void zero_grad();

  Model& model() const { return model_; }
  Optimizer& optimizer() { return *opt_; }
  // The data-parallel reducer (null without data parallelism).
  DataParallel* data_parallel() const { return dp_.get(); }
  const TrainerOptions& options() const { return o_; }
  double loss_scale() const { return scale_; }
  // This rank's compute and wall seconds of the last train_step's
  // pipeline schedule (zeros before one ran).
  const PipelineStats& pipeline_stats() const { return pipe_; }
  // Micro-batches accumulated since the last step.
  int64_t pending_micro_batches() const { return micro_; }
  // The learning rate the next update will use.
  double next_lr() const;

  // The scalar state a training checkpoint keeps (optimizer updates, loss
  // scale and its growth tracker, options that must match on resume), and
  // its restore (OSLO_ERR_FORMAT naming a missing or bad key,
  // OSLO_ERR_INVALID_ARGUMENT when the optimizer kind differs).
  nlohmann::json state() const;
  void set_state(const nlohmann::json& state);

 private:
  Model& model_;
  TrainerOptions o_;
  std::unique_ptr<DataParallel> dp_;  // before opt_: ZeRO partitions the optimizer
  std::unique_ptr<Optimizer> opt_;
  double scale_ = 1.0;
  int64_t growth_tracker_ = 0;
  int64_t micro_ = 0;
  double loss_sum_ = 0.0;
  PipelineStats pipe_;
  // Counts a micro-batch of loss `loss`; steps when the window is complete.
  TrainStepResult after_micro_batch(float loss);
  // Runs a backward (`fn`) with the data-parallel reduction around it.
  void reduced_backward(const std::function<void()>& fn);
  // The gradient multiplier of a micro-batch: loss scale / (accumulation
  // steps x data-parallel size).
  double grad_multiplier() const;
};

}  // namespace oslo
