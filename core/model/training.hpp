// A loaded model's training side: the causal-LM loss (or a caller's
// gradient of the hidden states) and the backward through the one block
// (core/model/block.hpp) into f32 gradients, under tensor parallelism, in
// pipeline stages (through core/pipeline/executor.hpp) and with the hooks
// data parallelism and ZeRO (core/train/) drive: a backward hook per stage
// of the backward, a parameter hook around each unit's use, the head in
// row chunks. Activation checkpointing recomputes each block's forward.
//
// Mixed precision (bf16 or f16 weights): activations, norms, attention, the
// loss and every gradient are f32; each product with a weight, forward and
// backward, rounds its f32 operands to the weight's dtype and accumulates
// in f32, as torch.autocast does (core/layers/functional.hpp).
//
// Every method that computes is collective over the tensor group (and the
// pipeline group for the pipelined loss). One thread at a time per model.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/model/stack.hpp"
#include "core/pipeline/executor.hpp"

namespace oslo {

class TrainingPass {
 public:
  TrainingPass(BlockStack& stack, const std::vector<PlacedTensor>& params);
  ~TrainingPass();

  // The causal-LM loss of a batch as transformers computes it: ids, labels
  // and mask are [batch, seq] row-major (mask empty: all ones; padding is a
  // 0 in the mask and should carry the label -100), labels are shifted
  // inside (the logits at position t predict labels[t + 1]), -100 is
  // ignored, and the loss is the mean over the labels kept. Adds
  // grad_scale * d loss / d parameter into grads() (made, zero, on first
  // use) and returns the loss, the same on every rank. Decoder families
  // with pre-norm blocks (every causal family of the registry), every
  // tensor-parallel size the model loads at (key/value heads split or
  // replicated: a replicated head's gradient is summed over the ranks
  // holding it). Weights f32, bf16 or f16 (OSLO_ERR_NOT_SUPPORTED for
  // others). One pipeline stage (OSLO_ERR_NOT_SUPPORTED otherwise: use
  // pipeline_loss_backward). Every rank of the tensor group must pass the
  // same batch (checked: OSLO_ERR_INVALID_ARGUMENT on every rank).
  float loss_backward(const std::vector<int64_t>& ids, const std::vector<int64_t>& labels,
                      const std::vector<int64_t>& mask, int64_t batch, int64_t seq,
                      float grad_scale = 1.f);
  // The backward of any family (encoders included) from a gradient of the
  // hidden states the caller supplies, as the inference forward's hidden
  // output [batch, seq, hidden] (after the final norm, if any), the same on
  // every rank. Adds grad_scale * the parameters' gradients into grads().
  // ids, mask (empty: all ones) and token_types (empty: zeros; models with
  // token types only) as the forward.
  void hidden_backward(const std::vector<int64_t>& ids, const std::vector<int64_t>& mask,
                       const std::vector<int64_t>& token_types, int64_t batch, int64_t seq,
                       const std::vector<float>& grad_hidden, float grad_scale = 1.f);
  // Pipeline parallelism (the context's pipeline size p > 1; any p works):
  // the causal-LM loss and backward of `batch` rows cut into
  // `micro_batches` micro-batches of batch / micro_batches rows, run
  // through the stages in Megatron-LM's 1F1B (or interleaved) order
  // (core/pipeline/schedule.hpp) by core/pipeline/executor.hpp. Every stage
  // passes the same ids, labels and mask (checked over the pipeline group);
  // each micro-batch's loss is its mean over its kept labels, scaled by
  // grad_scale / micro_batches into the gradients (Megatron and DDP's mean
  // of micro-batch means). The backward hook (data parallelism) runs only
  // in the last micro-batch's backward (no_sync). head_split != 0 (tied
  // word embeddings): the first stage also runs the head and loss of each
  // micro-batch's first tokens with its token table (a fraction in (0, 1],
  // or < 0: the share that makes the first and the last rank's products
  // per token equal). A non-finite loss is returned, not thrown, after the
  // whole schedule, with the gradients spoiled: the caller fails and zeroes
  // them. Errors: as loss_backward; OSLO_ERR_INVALID_ARGUMENT when
  // micro_batches < 1 or does not divide batch; OSLO_ERR_NOT_SUPPORTED with
  // ZeRO-3; OSLO_ERR_COMM / OSLO_ERR_TIMEOUT when a stage fails or dies.
  PipelineStats pipeline_loss_backward(const std::vector<int64_t>& ids,
                                       const std::vector<int64_t>& labels,
                                       const std::vector<int64_t>& mask, int64_t batch, int64_t seq,
                                       int micro_batches, float grad_scale = 1.f,
                                       double head_split = 0);
  // The per-token costs this model's pipeline plans are made with, for the
  // first stage's head share `share` (executor.hpp). Thread-safe (const).
  PipelineCosts pipeline_costs(double share) const;

  // Tied word embeddings across stages (Megatron's embedding group): adds
  // the first stage's token table gradient and the last stage's head
  // gradient so that both hold their sum. A no-op unless p > 1 and the
  // embeddings are tied. Call after the backwards of an accumulation
  // window, before the update. Collective over the pipeline group's first
  // and last stage.
  void sync_tied_grads();

  // One f32 gradient per tensors() entry, of its local shape (empty before
  // the first backward or zero_grad; an entry is undefined after
  // release_grads until the next backward makes it again).
  const std::vector<Tensor>& grads() const { return grads_; }
  // Sets every gradient to zero (making them all on first use; released
  // ones stay released).
  void zero_grad();
  // Frees the gradients of these tensors() entries (ZeRO-2 keeps only its
  // partition of them); the next backward makes them again, zero. Local.
  // OSLO_ERR_INVALID_ARGUMENT for an index out of range.
  void release_grads(const std::vector<size_t>& params);

  // The backward finishes the gradients in backward_stages() stages, in
  // this order: 0 the LM head and the final norm (and parameters the
  // backward never reaches, such as a pooler), 1 the last block, ..., L the
  // first block, L + 1 the embeddings. grad_stages()[i] is the stage after
  // which tensors()[i]'s gradient is final. The hook (none by default) is
  // called on the calling thread after each stage of every backward.
  // `owner` identifies who set it: clear_backward_hook(owner) removes it
  // only if it is still that owner's.
  int backward_stages() const { return static_cast<int>(s_.layers.size()) + 2; }
  std::vector<int> grad_stages() const;
  void set_backward_hook(std::function<void(int stage)> hook, const void* owner = nullptr);
  void clear_backward_hook(const void* owner);
  // With data parallelism: the backward also agrees over the data-parallel
  // group on whether every rank accepted its batch (one more small
  // exchange), so that a batch refused on one data rank fails every rank.
  void set_agree_over_data(bool on) { agree_over_data_ = on; }
  // Parameter units (ZeRO-3, core/train/data_parallel.hpp: zero_units): unit 0 the embeddings,
  // final norm and head; 1 + l block l. `hook(unit, true, next)` runs just
  // before the backward's forward and backward use a unit, `hook(unit,
  // false, -1)` after (unit 0 from the embedding to the head's backward,
  // each block for its forward and again for its backward, the last block
  // once); `next` is the unit acquired after this one (-1: none). While
  // `partitioned`, inference and saving refuse (OSLO_ERR_NOT_SUPPORTED).
  void set_param_hook(std::function<void(int unit, bool acquire, int next)> hook, bool partitioned);
  // The head's weight W (local [rows, hidden], tensors() entry head_param())
  // handed to the loss in row chunks instead of whole (ZeRO-3), so that
  // neither W nor its gradient is ever whole while the activations are.
  // Each of `parts` data ranks owns part_rows rows of W; chunk k is `parts`
  // blocks of chunk_rows rows, block q rows q * part_rows + k * chunk_rows
  // + j of W (rows past its part or past W are padding). gather(k, out)
  // fills out [parts * chunk_rows, hidden] (W's dtype) with chunk k;
  // reduce(k, grad) takes this rank's f32 gradient of chunk k in the same
  // layout. Both are collective over the data group. parts == 0: off.
  struct HeadRows {
    int parts = 0;
    int64_t part_rows = 0, chunk_rows = 0, chunks = 0;
    std::function<void(int64_t, const View&)> gather;
    std::function<void(int64_t, const View&)> reduce;
  };
  void set_head_rows(HeadRows rows) { head_rows_ = std::move(rows); }
  // The tensors() entry of the head's weight (the tied embedding's when
  // tied); -1 when this stage has no head.
  int64_t head_param() const { return s_.param_index(s_.lm_head); }
  // The tensors() entry of the token table; -1 when this stage has none.
  int64_t embed_param() const { return s_.param_index(s_.wte); }
  // Activation checkpointing: keep only each block's input between the
  // forward and the backward and recompute the rest block by block
  // (gradients bitwise equal; one more forward of compute).
  void set_activation_checkpointing(bool on) { checkpoint_activations_ = on; }
  // Bytes of block activations the last backward kept from its forward
  // (with checkpointing: the blocks' inputs only).
  size_t saved_activation_bytes() const { return saved_activation_bytes_; }

 private:
  friend struct MicroPass;
  friend class PassMicroBatch;
  // Validation agreed over the groups, then one micro-batch's pass (or the
  // pipeline's schedule, with `pipe`).
  struct PipeRun {
    int micro_batches = 1;
    double head_split = 0;
    PipelineStats stats;
  };
  float train_pass(const std::vector<int64_t>& ids, const std::vector<int64_t>* labels,
                   const std::vector<int64_t>& mask, const std::vector<int64_t>& token_types,
                   const std::vector<float>* grad_hidden, int64_t batch, int64_t seq,
                   float grad_scale, PipeRun* pipe = nullptr);
  void run_pipeline(const std::vector<int64_t>& ids, const std::vector<int64_t>& labels,
                    const std::vector<int64_t>& mask, int64_t batch, int64_t seq, float grad_scale,
                    PipeRun& pipe);
  // The gradient of a compute tensor (a parameter, or the shifted copy of
  // a unit-offset norm weight); made (zero) when released.
  Tensor& grad_of(const Tensor& w);
  void check_single_stage() const;

  BlockStack& s_;
  const std::vector<PlacedTensor>& params_;
  std::vector<Tensor> grads_;
  bool checkpoint_activations_ = false;
  size_t saved_activation_bytes_ = 0;
  std::function<void(int)> backward_hook_;
  const void* hook_owner_ = nullptr;
  bool agree_over_data_ = false;
  std::function<void(int, bool, int)> param_hook_;
  HeadRows head_rows_;
};

}  // namespace oslo
