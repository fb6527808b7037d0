// A Hugging Face transformer of any registered architecture
// (core/model/arch/), built from its BlockTraits and its sharding rules, split
// over the context's tensor-parallel group: attention by heads (key/value
// heads replicated when there are fewer than ranks), MLPs by columns then
// rows, embeddings and the LM head by vocabulary. Built from the backend
// seam's ops and the communication mappings. Inference (model.cpp) and the
// causal-LM loss with its backward (model_train.cpp).
//
// Every method that computes is collective over the tensor group: all its
// ranks call it with the same arguments. One thread at a time per model.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/context/context.hpp"
#include "core/generate/causal_lm.hpp"
#include "core/model/config.hpp"
#include "core/model/sharding.hpp"

namespace oslo {

struct ModelLoadOptions {
  // Dtype of the matrices (weights of products and embedding tables):
  // -1 keeps each checkpoint's stored float dtype; else F32, F16 or BF16.
  int dtype = -1;
  // Pipeline stages: model chunks per pipeline rank (Megatron's virtual
  // stages: virtual stage c P + r on rank r), and the blocks of each
  // virtual stage in order (empty: Colossal-AI's partition_uniform). One
  // count per virtual stage, each >= 1, summing to the model's blocks
  // (partition_counts; OSLO_ERR_INVALID_ARGUMENT naming the bad one).
  int virtual_stages = 1;
  std::vector<int> pipeline_layers;
};

class Model : public CausalLM {
 public:
  // Loads a Hugging Face folder or an oslo parallel checkpoint; every rank
  // reads only its own slices. Collective over the tensor group.
  static std::unique_ptr<Model> load(Context& ctx, const std::string& path,
                                     const ModelLoadOptions& options);
  ~Model() override;

  const ModelConfig& config() const { return cfg_; }
  Context& context() const { return ctx_; }
  oslo_dtype dtype() const { return dtype_; }
  // Every tensor this rank holds with its placement (for saving).
  const std::vector<PlacedTensor>& tensors() const { return params_; }
  bool causal() const { return cfg_.traits.causal; }
  // Where the model was loaded from, and the files of that folder worth
  // copying along when saving (tokenizer, generation config).
  const std::string& source() const { return source_; }
  const std::vector<std::string>& extra_files() const { return extra_files_; }
  // Saves a parallel checkpoint (core/checkpoint/FORMAT.md): each rank its
  // owned segments, the manifest last. Collective over the world group.
  void save(const std::string& dir);

  // Full forward without cache. ids and mask are [batch, seq] (mask may be
  // empty: all ones; token_types may be empty: zeros, models with token
  // types only). Positions
  // follow the mask (cumulative count of real tokens - 1), so left-padded
  // rows compute as if unpadded. Writes [batch, seq, hidden] (after the final
  // norm) or [batch, seq, vocab] logits into `out` (resized). Only positions
  // with mask 1 are meaningful.
  void forward(const std::vector<int64_t>& ids, const std::vector<int64_t>& mask,
               const std::vector<int64_t>& token_types, int64_t batch, int64_t seq, bool logits,
               std::vector<float>* out);
  // Sentence embeddings as sentence-transformers computes them for encoder
  // models: mean of the last hidden states over the mask, then (normalize)
  // L2-normalised. out: [batch, hidden].
  void embed(const std::vector<int64_t>& ids, const std::vector<int64_t>& mask, int64_t batch,
             int64_t seq, bool normalize, std::vector<float>* out);

  // CausalLM (generation).
  int64_t vocab_size() const override { return cfg_.vocab_size; }
  void reset(int64_t rows, int64_t max_len) override;
  std::vector<float> append(const std::vector<int64_t>& tokens, int64_t n,
                            const std::vector<uint8_t>& mask) override;
  std::vector<Choice> append_argmax(const std::vector<int64_t>& tokens, int64_t n,
                                    const std::vector<uint8_t>& mask) override;
  void reorder(const std::vector<int64_t>& src) override;
  int64_t length() const override { return past_; }

  // Training (core/model/model_train.cpp).
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
  // holding it). Weights f32, bf16 or f16 (mixed precision: activations,
  // norms, attention, the loss and every gradient stay f32; each product
  // with a weight, forward and backward, rounds its f32 operands to the
  // weight's dtype and accumulates in f32, as torch.autocast does).
  // OSLO_ERR_NOT_SUPPORTED for other weight dtypes.
  // Collective over the tensor group; one thread at a time per model.
  float loss_backward(const std::vector<int64_t>& ids, const std::vector<int64_t>& labels,
                      const std::vector<int64_t>& mask, int64_t batch, int64_t seq,
                      float grad_scale = 1.f);
  // The backward of any family (encoders included) from a gradient of the
  // hidden states the caller supplies, as oslo_model_forward's hidden
  // output [batch, seq, hidden] (after the final norm, if any): for a loss
  // the caller computes from the hidden states (an embedding model's
  // contrastive loss), grad_hidden is d loss / d hidden, row-major
  // [batch, seq, hidden], the same on every rank. Adds grad_scale * the
  // parameters' gradients into grads(). ids, mask (empty: all ones) and
  // token_types (empty: zeros; models with token types only) as forward().
  // f32 weights. Collective over the tensor group.
  void hidden_backward(const std::vector<int64_t>& ids, const std::vector<int64_t>& mask,
                       const std::vector<int64_t>& token_types, int64_t batch, int64_t seq,
                       const std::vector<float>& grad_hidden, float grad_scale = 1.f);
  // Pipeline parallelism (the context's pipeline size p > 1; any p works):
  // the causal-LM loss and backward of `batch` rows cut into
  // `micro_batches` micro-batches of batch / micro_batches rows, run
  // through the stages in Megatron-LM's 1F1B order (core/pipeline/
  // schedule.hpp: p - r - 1 warm-up forwards on stage r, then one forward
  // and one backward, then the cool-down backwards; at most p micro-
  // batches' activations alive). Each stage receives the residual stream
  // from the previous stage and sends its output to the next (the
  // gradients the other way) over the pipeline group with blocking
  // send/recv, each exchange between two neighbours activation first, so
  // that no order of arrival can deadlock. Every stage passes the same ids,
  // labels and mask (checked over the pipeline group, with the tensor
  // group as loss_backward); each micro-batch's loss is its mean over its
  // kept labels, scaled by grad_scale / micro_batches into the gradients
  // (Megatron and DDP's mean of micro-batch means). The backward hook
  // (data parallelism) runs only in the last micro-batch's backward
  // (no_sync). Returns, on every stage, the mean of the micro-batches'
  // losses, this stage's compute and wall seconds and the bubble over all
  // stages. head_split != 0 (tied word embeddings): the first
  // stage also runs the head and loss of each micro-batch's first tokens
  // with its token table (a fraction in (0, 1], or < 0: the share that
  // makes the first and the last rank's products per token equal), in the
  // order of pipeline_schedule_head_split; 0 tokens (a share rounding to
  // none) runs Megatron's order. A non-finite loss (no label kept in a micro-batch, non-finite
  // logits) is returned, not thrown, after the whole schedule, with the
  // gradients spoiled: the caller fails (the trainer after its data-
  // parallel reduction, on every rank alike) and zeroes them. Errors: as
  // loss_backward; OSLO_ERR_INVALID_ARGUMENT when micro_batches < 1 or
  // does not divide batch; OSLO_ERR_NOT_SUPPORTED with ZeRO-3;
  // OSLO_ERR_COMM / OSLO_ERR_TIMEOUT when a stage fails or dies mid-
  // schedule (the communicator's timeout bounds every recv). Collective
  // over the tensor and pipeline groups.
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
  // The per-token costs the pipeline plans are made with (the same on
  // every rank): each virtual stage's forward and backward (a block's
  // products, its backward twice that; on the last stage the head's product
  // plus its cross-entropy forward, two products backward, for the 1 -
  // share of the tokens it keeps) and `head`, a third of rank 0's HEAD op
  // for the share it takes (pipeline_schedule_head_split's head_cost).
  // Empty on one stage without virtual stages. Thread-safe (const).
  struct PipelineCosts {
    std::vector<double> forward, backward;
    double head = 0;
  };
  PipelineCosts pipeline_costs(double share) const;
  PipelineStats pipeline_loss_backward(const std::vector<int64_t>& ids,
                                       const std::vector<int64_t>& labels,
                                       const std::vector<int64_t>& mask, int64_t batch, int64_t seq,
                                       int micro_batches, float grad_scale = 1.f,
                                       double head_split = 0);
  // The pipeline stages of this model (the context's pipeline size) and
  // this model's stage.
  int pipeline_size() const { return pp_; }
  int pipeline_rank() const { return pp_rank_; }
  // Tied word embeddings across stages (Megatron's embedding group): the
  // first stage's token table and the last stage's copy of it for the head
  // are one parameter; this adds the two gradients so that both hold their
  // sum (bitwise alike) and the same update keeps them equal. A no-op
  // unless p > 1 and the embeddings are tied; stages in between do
  // nothing. Call after the backwards of an accumulation window, before
  // the update. Collective over the pipeline group's first and last stage.
  void sync_tied_grads();
  // One f32 gradient per tensors() entry, of its local shape (empty before
  // the first loss_backward or zero_grad; an entry is undefined after
  // release_grads until the next backward makes it again).
  const std::vector<Tensor>& grads() const { return grads_; }
  // Sets every gradient to zero (making them all on first use; released
  // ones stay released).
  void zero_grad();
  // Frees the gradients of these tensors() entries (ZeRO-2 keeps only its
  // partition of them); the next backward makes them again, zero. Local.
  void release_grads(const std::vector<size_t>& params);

  // Data-parallel gradient reduction (core/train/data_parallel) overlaps
  // the backward: loss_backward and hidden_backward finish the gradients in
  // backward_stages() stages, in this order: 0 the LM head and the final
  // norm (and parameters the backward never reaches, such as a pooler), 1
  // the last block, ..., L the first block, L + 1 the embeddings.
  // grad_stages()[i] is the stage after which tensors()[i]'s gradient is
  // final. The hook (none by default) is called on the calling thread after
  // each stage of every backward, with the stage's number.
  int backward_stages() const { return static_cast<int>(layers_.size()) + 2; }
  std::vector<int> grad_stages() const;
  // `owner` identifies who set it: clear_backward_hook(owner) removes it
  // only if it is still that owner's (the last trainer made over a model
  // drives its reduction).
  void set_backward_hook(std::function<void(int stage)> hook, const void* owner = nullptr) {
    backward_hook_ = std::move(hook);
    hook_owner_ = owner;
  }
  void clear_backward_hook(const void* owner) {
    if (hook_owner_ == owner) set_backward_hook(nullptr, nullptr);
  }
  // With data parallelism: loss_backward and hidden_backward also agree
  // over the data-parallel group on whether every rank accepted its batch
  // (one more small exchange), so that a batch refused on one data rank
  // fails every rank at once instead of leaving the others waiting in the
  // gradient reduction.
  void set_agree_over_data(bool on) { agree_over_data_ = on; }
  // ZeRO-3 (core/train/data_parallel): the parameters of each unit (0: the
  // embeddings, final norm and head; 1 + l: block l) are gathered by
  // `hook(unit, true, next)` just before loss_backward and hidden_backward
  // use them and released by `hook(unit, false, -1)` after: unit 0 from the
  // embedding to the head's backward, each block for its forward and again
  // for its backward (the last block once, for both). An acquisition of a
  // unit already held is allowed; `next` is the unit the pass acquires
  // after this one (-1: none), for the hook to start gathering it early.
  // While `partitioned`, inference and Model::save refuse
  // (OSLO_ERR_NOT_SUPPORTED): the parameters live in the optimizer's
  // partitions.
  void set_param_hook(std::function<void(int unit, bool acquire, int next)> hook,
                      bool partitioned) {
    param_hook_ = std::move(hook);
    partitioned_ = partitioned;
  }
  // The unit of each tensors() entry (see set_param_hook).
  std::vector<int> param_units() const;
  // ZeRO-3: the head's weight W (local [rows, hidden], tensors() entry
  // head_param()) handed to the loss in row chunks instead of whole, so
  // that neither W nor its gradient is ever whole while the activations
  // are. Each of the `parts` data ranks owns part_rows rows of W (rank q
  // rows [q * part_rows, (q + 1) * part_rows), the last fewer); chunk k
  // (0 <= k < chunks) is `parts` blocks of chunk_rows rows, block q rows
  // q * part_rows + k * chunk_rows + j of W (rows past its part or past W
  // are padding). gather(k, out) fills out [parts * chunk_rows, hidden]
  // (W's dtype) with chunk k; reduce(k, grad) takes this rank's f32
  // gradient of chunk k in the same layout (padding rows zero) and adds
  // the sum over the data ranks into each owner's gradient partition. Both
  // are collective over the data group. With rows set (parts > 0) and
  // labels given, the pass releases unit 0 after the embeddings and runs
  // the head chunk by chunk; parts == 0 turns it off.
  struct HeadRows {
    int parts = 0;
    int64_t part_rows = 0, chunk_rows = 0, chunks = 0;
    std::function<void(int64_t, const View&)> gather;
    std::function<void(int64_t, const View&)> reduce;
  };
  void set_head_rows(HeadRows rows) { head_rows_ = std::move(rows); }
  // The tensors() entry of the head's weight (the tied embedding's when
  // tied); -1 when this stage has no head.
  int64_t head_param() const;
  // The tensors() entry of the token table; -1 when this stage has none.
  int64_t embed_param() const;
  // Activation checkpointing: keep only each block's input between the
  // forward and the backward of loss_backward and recompute the rest block
  // by block (gradients bitwise equal; one more forward of compute).
  void set_activation_checkpointing(bool on) { checkpoint_activations_ = on; }
  // Bytes of block activations the last loss_backward kept from its forward
  // for its backward (with checkpointing: the blocks' inputs only).
  size_t saved_activation_bytes() const { return saved_activation_bytes_; }
  // Pipeline stages at inference: a forward's rows go through the stages in
  // micro-batches (up to 2 x stages of them, one row or more each) when
  // every micro-batch keeps at least `tokens` tokens (default 64: smaller
  // products are bound by reading the weights, which every micro-batch
  // reads again). Results are the same either way.
  void set_pipeline_micro_tokens(int64_t tokens) { pipeline_micro_tokens_ = tokens; }
  // Call after changing parameters in place (an optimizer step): refreshes
  // what the model derives from them (Gemma's 1 + w norm weights) and drops
  // the packed weight copies (made again at the next inference run).
  void parameters_changed();

 private:
  struct Layer;
  Model(Context& ctx, ModelConfig cfg, oslo_dtype dtype);
  void bind();
  // Runs the stack on tokens [rows, n] at cache offset past_ (cache used when
  // use_cache), returning the final hidden states [rows * n, hidden] f32.
  // With pipeline stages the rows go through in micro-batches when each
  // keeps at least pipeline_micro_tokens_ tokens (a stage runs one while
  // the next runs the one before: micro-batched prefill).
  Tensor run(const std::vector<int64_t>& ids, const std::vector<int64_t>& positions,
             const std::vector<int64_t>& token_types, const std::vector<float>& key_mask,
             int64_t rows, int64_t n, bool use_cache);
  // run() on the rows [row0, row0 + rows) of the cache; with `broadcast`
  // the last stage's hidden states go to every stage.
  Tensor run_rows(const std::vector<int64_t>& ids, const std::vector<int64_t>& positions,
                  const std::vector<int64_t>& token_types, const std::vector<float>& key_mask,
                  int64_t rows, int64_t n, bool use_cache, int64_t row0, bool broadcast);
  int64_t row0_ = 0;  // the first cache row run_rows works on
  void attention(Layer& L, const View& q, const View& k, const View& v, const Tensor& out,
                 const Tensor& mask, int64_t rows, int64_t n, bool use_cache);
  // Logits of the given hidden rows (view [r, hidden]) gathered over the
  // tensor group: [r, vocab] f32 on the host.
  std::vector<float> logits_of(const View& hidden, int64_t r);
  std::vector<float> head_logits(const View& hidden, int64_t r);  // this stage's head
  // This rank's logits of the hidden rows: [r, local vocabulary] f32.
  Tensor head_local(const View& hidden, int64_t r);
  // The greedy choice of every hidden row: each rank's argmax over its
  // vocabulary slice (backend argmax), then one exchange of [r] pairs.
  std::vector<Choice> argmax_of(const View& hidden, int64_t r);
  std::vector<Choice> head_argmax(const View& hidden, int64_t r);  // this stage's head
  // cos and sin [positions, R/2] of the rotary embedding at these positions.
  void rope_tables(const std::vector<int64_t>& positions, Tensor* cos, Tensor* sin);
  // One micro-batch's pass, phase by phase (model_train.cpp).
  struct Pass;
  // loss_backward (labels given) and hidden_backward (grad_hidden given):
  // validation agreed over the tensor group, the forward keeping
  // activations, the head (the loss, or the supplied gradient) and the
  // backward through every block and the embeddings. Returns the loss (0
  // for hidden_backward).
  // With `pipe`, the batch runs as pipe->micro_batches micro-batches
  // through the stages (pipeline_loss_backward), which fills pipe.
  struct PipeRun {
    int micro_batches = 1;
    double head_split = 0;  // pipeline_loss_backward's
    PipelineStats stats;
  };
  float train_pass(const std::vector<int64_t>& ids, const std::vector<int64_t>* labels,
                   const std::vector<int64_t>& mask, const std::vector<int64_t>& token_types,
                   const std::vector<float>* grad_hidden, int64_t batch, int64_t seq,
                   float grad_scale, PipeRun* pipe = nullptr);
  // pipeline_loss_backward's schedule, after train_pass's checks.
  void run_pipeline(const std::vector<int64_t>& ids, const std::vector<int64_t>& labels,
                    const std::vector<int64_t>& mask, int64_t batch, int64_t seq, float grad_scale,
                    PipeRun& pipe);
  // The gradient of a compute tensor (a parameter, or the shifted copy of a
  // unit-offset norm weight).
  Tensor& grad_of(const Tensor& w);
  // append()'s forward: the last new position's hidden rows [rows, hidden].
  View append_hidden(const std::vector<int64_t>& tokens, int64_t n,
                     const std::vector<uint8_t>& mask, Tensor* keep);

  Context& ctx_;
  ModelConfig cfg_;
  oslo_dtype dtype_;
  std::string source_;
  std::vector<std::string> extra_files_;
  int tp_ = 1, rank_ = 0;
  // Pipeline parallelism: layers_ holds only this stage's blocks, one model
  // chunk after the other (one chunk without virtual stages): local block
  // i is the model's block global_layer_[i]; chunk c is local blocks
  // [chunks_[c].first, chunks_[c].second) and virtual stage c pp_ + pp_rank_.
  int pp_ = 1, pp_rank_ = 0, vstages_ = 1;
  std::vector<int64_t> global_layer_;
  std::vector<std::pair<size_t, size_t>> chunks_;
  // Every virtual stage's blocks' forward cost (multiply-adds per token of
  // their products; run_pipeline adds the head's and the backwards): how
  // pipeline_plan orders the transfers.
  std::vector<double> stage_cost_;
  bool first_stage() const { return pp_rank_ == 0; }
  bool last_stage() const { return pp_rank_ == pp_ - 1; }
  // OSLO_ERR_NOT_SUPPORTED, naming it, when pipeline stages would train.
  void check_single_stage() const;
  // Pipeline parallelism: the last stage's `t` to every stage (a tensor of
  // the same shape and dtype on each). Collective over the pipeline group.
  void from_last_stage(const Tensor& t);
  int64_t nhl_ = 0, nkvl_ = 0;  // local attention / key-value heads
  std::vector<PlacedTensor> params_;
  std::vector<oslo_dtype> stored_dtype_;  // per params_ entry: dtype in the source
  std::vector<std::unique_ptr<Layer>> layers_;
  Tensor wte_, wpe_, type_, emb_ln_w_, emb_ln_b_, norm_w_, norm_b_, lm_head_, pool_w_, pool_b_;
  int64_t vocab_start_ = 0, vocab_local_ = 0, vocab_valid_ = 0;
  std::vector<float> inv_freq_;
  // Training: gradients per params_ entry, and which entry a compute
  // tensor's memory belongs to.
  std::vector<Tensor> grads_;
  std::map<const Storage*, size_t> param_of_;
  // Compute copies derived from a parameter (unit-offset norm weights: the
  // stored weight + 1) and the params_ index they come from.
  std::vector<std::pair<Tensor, size_t>> derived_;
  // The backend's packed copies of the block weights (Backend::pack_weight),
  // by the weight's data pointer: made at load, dropped by
  // parameters_changed() and made again at the next inference run. Training
  // passes read the plain weights.
  std::map<const void*, std::unique_ptr<PackedWeight>> packs_;
  bool packs_made_ = false;
  void make_packs();
  const PackedWeight* pack_of(const Tensor& w) const;
  bool checkpoint_activations_ = false;
  size_t saved_activation_bytes_ = 0;
  std::function<void(int)> backward_hook_;
  const void* hook_owner_ = nullptr;
  bool agree_over_data_ = false;
  std::function<void(int, bool, int)> param_hook_;
  HeadRows head_rows_;
  bool partitioned_ = false;
  void check_whole(const char* what) const;
  // Generation state.
  int64_t rows_ = 0, max_len_ = 0, past_ = 0;
  int64_t pipeline_micro_tokens_ = 64;
};

}  // namespace oslo
