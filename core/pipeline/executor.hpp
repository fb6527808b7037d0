// Runs this rank's part of a pipeline schedule (schedule.hpp's plans) over
// the pipeline group: each compute step hands a micro-batch's work to the
// model, each transfer sends or receives a residual stream (or its
// gradient) with the pipeline group's blocking send/recv, in the plan's
// deadlock-free order. The model is behind PipelineMicroBatch, so this
// tier knows schedules and transfers, not blocks. Also the cost model the
// plans are ordered by.
//
// Collective over the pipeline group (every stage runs its own plan of the
// same schedule). One thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/context/context.hpp"
#include "core/pipeline/schedule.hpp"
#include "core/tensor/tensor.hpp"

namespace oslo {

// What a pipelined training step reports, the same on every stage.
struct PipelineStats {
  float loss = 0.f;
  int micro_batches = 0;
  int peak_live = 0;  // the most micro-batches whose activations were alive at once
  double compute_s = 0, wall_s = 0;
  // The pipeline's measured bubble: 1 - (the stages' compute seconds
  // summed) / (stages x the longest stage's wall seconds).
  double bubble = 0;
  int64_t head_rows = 0;  // tokens of each micro-batch whose head ran on the first stage
};

// The per-token costs the pipeline plans are made with (the same on every
// rank): each virtual stage's forward and backward (a block's products,
// its backward twice that; on the last stage the head's product plus its
// cross-entropy forward, two products backward, for the 1 - share of the
// tokens it keeps) and `head`, a third of rank 0's HEAD op for the share it
// takes (pipeline_schedule_head_split's head_cost). Empty when stage_cost
// is (one stage without virtual stages).
struct PipelineCosts {
  std::vector<double> forward, backward;
  double head = 0;
};
PipelineCosts pipeline_costs(const std::vector<double>& stage_cost, double vocab, double hidden,
                             double share);

// The tokens of each micro-batch (of `tokens`) whose head the first stage
// runs: head_split a fraction in (0, 1], or < 0: the share that makes the
// first and the last rank's work per token equal; 0: none.
int64_t pipeline_head_rows(double head_split, const std::vector<double>& stage_cost, double vocab,
                           double hidden, int pipeline_size, int chunks, int64_t tokens);

// One micro-batch's work on this rank, supplied by the model.
class PipelineMicroBatch {
 public:
  virtual ~PipelineMicroBatch() = default;
  // The forward of this rank's model chunk `chunk`: `in` is the previous
  // virtual stage's output (undefined on the first virtual stage). Returns
  // the output for the next one (undefined on the last). On the last
  // virtual stage it also runs the head and the loss: *loss is the
  // micro-batch's loss (a share of it with the head split), *head_out the
  // hidden states of the tokens whose head the first stage runs (undefined
  // without the head split).
  virtual Tensor forward(int chunk, bool first, bool last, Tensor in, float* loss,
                         Tensor* head_out) = 0;
  // The backward of chunk `chunk` from `grad`, the next virtual stage's
  // input gradient (undefined on the last, which starts from its loss;
  // head_grad: the first stage's gradient of the head split's tokens).
  // Returns the gradient for the previous virtual stage (undefined on the
  // first).
  virtual Tensor backward(int chunk, bool first, bool last, Tensor grad, Tensor head_grad) = 0;
  // The first stage's share of the head: the last stage's hidden states h
  // of the split's tokens; returns their loss share, *dh their gradient.
  virtual float head_share(const Tensor& h, Tensor* dh) = 0;
};

struct PipelineRun {
  int micro_batches = 1;
  int chunks = 1;              // model chunks per rank (virtual stages)
  int64_t tokens = 0;          // per micro-batch
  int64_t hidden = 0;          // the residual stream's width (f32)
  int64_t head_rows = 0;       // pipeline_head_rows
  std::vector<PipeStep> plan;  // this rank's (pipeline_plan / pipeline_plan_head_split)
  // Micro-batch i's work, made at its first forward, dropped after its last
  // backward on this rank.
  std::function<std::unique_ptr<PipelineMicroBatch>(int i)> make;
  // Called before each backward with whether it is the last micro-batch's
  // (data parallelism reduces gradients only then: no_sync).
  std::function<void(bool last_micro_batch)> before_backward;
};

// Runs the plan; returns the stages' statistics (the loss: the last
// stage's mean over the micro-batches, plus the first stage's share with
// the head split). OSLO_ERR_COMM / OSLO_ERR_TIMEOUT when a stage fails or
// dies (the communicator's timeout bounds every recv); OSLO_ERR_INTERNAL
// when the plan is inconsistent.
PipelineStats run_pipeline(Context& ctx, const PipelineRun& run);

}  // namespace oslo
