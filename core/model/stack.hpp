// A loaded model's compute side on this rank: its tensors laid out for the
// block (core/model/block.hpp), the pipeline stage's layout (which blocks
// this rank holds, in which chunks), the shapes this rank computes with
// (local heads, its vocabulary slice), the rotary frequencies, the
// embeddings' forward, the backend's packed weight copies, and which
// parameter each compute tensor belongs to. Model (model.hpp) fills it at
// load; the inference runner (inference.hpp) and the training pass
// (training.hpp) both compute from it.
//
// Internal to core/model and core/train. One thread at a time per model.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/checkpoint/placement.hpp"
#include "core/context/context.hpp"
#include "core/model/block.hpp"
#include "core/model/config.hpp"

namespace oslo {

class BlockStack {
 public:
  BlockStack(Context& ctx, const ModelConfig& cfg);
  ~BlockStack();

  Context& ctx;
  const ModelConfig& cfg;
  // Tensor parallelism, and pipeline stages: `layers` holds only this
  // stage's blocks, one model chunk after the other (one chunk without
  // virtual stages): local block i is the model's block global_layer[i];
  // chunk c is local blocks [chunks[c].first, chunks[c].second) and virtual
  // stage c * pp + pp_rank.
  int tp = 1, rank = 0, pp = 1, pp_rank = 0, vstages = 1;
  std::vector<int64_t> global_layer;
  std::vector<std::pair<size_t, size_t>> chunks;
  // Every virtual stage's blocks' forward cost (multiply-adds per token of
  // their products): what the pipeline's plans are ordered by.
  std::vector<double> stage_cost;
  bool first_stage() const { return pp_rank == 0; }
  bool last_stage() const { return pp_rank == pp - 1; }

  int64_t nhl = 0, nkvl = 0;  // local attention / key-value heads
  int64_t vocab_start = 0, vocab_local = 0, vocab_valid = 0;
  std::vector<std::unique_ptr<BlockWeights>> layers;
  Tensor wte, wpe, type, emb_ln_w, emb_ln_b, norm_w, norm_b, lm_head, pool_w, pool_b;

  // Puts params[i] (with its plan's role and block) in its slot, then
  // derives what compute needs (the head, unit-offset norm copies, rotary
  // frequencies). OSLO_ERR_INTERNAL when the rules left a block incomplete.
  void bind(const std::vector<PlacedTensor>& params, const std::vector<std::string>& roles,
            const std::vector<int>& layer_of);
  // Refreshes the compute copies derived from parameters (unit-offset norm
  // weights: the stored weight + 1) after the parameters changed in place,
  // and drops the packed copies.
  void parameters_changed(const std::vector<PlacedTensor>& params);

  // The parameters' entry a compute tensor's memory belongs to (-1: none).
  int64_t param_index(const Tensor& t) const;

  // The block's environment for a batch of [B, S] (shapes, traits; the
  // caller plugs in attention, packing, gradients, rotary tables).
  BlockEnv env(int64_t B, int64_t S) const;
  // cos and sin [positions, R/2] of the rotary embedding at these positions.
  void rope_tables(const std::vector<int64_t>& positions, Tensor* cos, Tensor* sin) const;
  // The embeddings (first stage) of ids [B * S] (i64) at positions pos
  // [B * S] (and token types, when the family has them) into x [B * S, H]
  // f32: the token table's lookup summed over the tensor group, scaled
  // (Gemma: by sqrt(hidden) rounded to the table's dtype, as transformers),
  // plus positions and token types, then the embedding norm (into x; its
  // input into *norm_in when given). Collective over the tensor group.
  // A block-quantized token table (a GGUF file's) is read row by row: each
  // looked-up row dequantized (Backend::dequantize), zeros for ids outside
  // this rank's rows; host_ids, when given, are `ids` on the host (else
  // they are copied back). OSLO_ERR_INVALID_ARGUMENT for an id outside
  // [0, vocab).
  void embed(const Tensor& ids, const Tensor& pos, const Tensor* types, const Tensor& x,
             Tensor* norm_in = nullptr, const std::vector<int64_t>* host_ids = nullptr) const;
  // The embeddings' scale as the forward applies it.
  float embed_scale() const;

  // Packed copies of the block weights (Backend::pack_weight), made at the
  // first inference run after load or a parameter change. Where a copy
  // holds the whole weight (PackedWeight::whole(): the CPU backend's
  // block-quantized copies), make_packs() then frees the plain weight's
  // memory (release_plain()): its tensors keep their dtype and shape with
  // no data, and the products read the copy alone. Not for the token
  // table a tied head shares, nor memory the model does not own.
  void make_packs();
  const PackedWeight* pack_of(const Tensor& w) const;
  bool packs_made() const { return packs_made_; }
  // Frees the plain weights whose copies hold them whole (nothing after
  // keep_plain()). Called by make_packs() and by each inference run (again
  // after a restore_plain()).
  void release_plain();
  // Writes the released weights back from their copies into new memory:
  // before anything reads the parameters' bytes (a save). Released again at
  // the next inference run.
  void restore_plain();
  // restore_plain(), and no release after: for callers that keep views of
  // the parameters (a trainer, data parallelism).
  void keep_plain();
  // The bytes of plain weights released now.
  size_t plain_released_bytes() const;

  // ZeRO-3 holds the parameters partitioned: inference and saving refuse.
  bool partitioned = false;
  void check_whole(const char* what) const;

 private:
  // embed()'s lookup in a block-quantized table: x [B * S, H] f32.
  void gather_quantized(const Tensor& ids, const std::vector<int64_t>* host_ids,
                        const Tensor& x) const;

  std::vector<float> inv_freq_;
  std::map<const Storage*, size_t> param_of_;
  // Compute copies derived from a parameter and the params index they come
  // from.
  std::vector<std::pair<Tensor, size_t>> derived_;
  // The packed copies by the storage of the weight they were made from.
  struct Pack {
    Tensor w;  // the plain weight (its storage has no data while released)
    std::unique_ptr<PackedWeight> copy;
    bool released = false;
  };
  std::map<const Storage*, Pack> packs_;
  void release(Pack& pk);  // release_plain() of one copy
  bool packs_made_ = false;
  bool keep_plain_ = false;
  bool released_ = false;         // some plain weight is released now
  bool release_pending_ = false;  // restore_plain() ran since the last release
};

}  // namespace oslo
