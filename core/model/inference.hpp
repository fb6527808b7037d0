// A loaded model's inference: the full forward (hidden states or logits),
// sentence embeddings, and generation's side (core/generate/causal_lm.hpp):
// the KV cache, prefill and append, the greedy choice where the logits
// live, recorded decode steps, beam reordering. Runs the one block
// (core/model/block.hpp) over the stack (core/model/stack.hpp); pipeline
// stages pass the residual stream on and bring the last stage's results to
// every stage. What generate and a serving engine build on.
//
// Every method that computes is collective over the tensor and pipeline
// groups: all their ranks call it with the same arguments. One thread at a
// time per model.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/generate/causal_lm.hpp"
#include "core/model/stack.hpp"

namespace oslo {

class InferenceRunner : public CausalLM {
 public:
  explicit InferenceRunner(BlockStack& stack);

  // Full forward without cache. ids and mask are [batch, seq] (mask may be
  // empty: all ones; token_types may be empty: zeros, models with token
  // types only). Positions follow the mask (cumulative count of real tokens
  // - 1), so left-padded rows compute as if unpadded. Writes [batch, seq,
  // hidden] (after the final norm) or [batch, seq, vocab] logits into `out`
  // (resized). Only positions with mask 1 are meaningful.
  // OSLO_ERR_INVALID_ARGUMENT / OSLO_ERR_SHAPE on bad sizes.
  void forward(const std::vector<int64_t>& ids, const std::vector<int64_t>& mask,
               const std::vector<int64_t>& token_types, int64_t batch, int64_t seq, bool logits,
               std::vector<float>* out);
  // Sentence embeddings as sentence-transformers computes them for encoder
  // models: mean of the last hidden states over the mask, then (normalize)
  // L2-normalised. out: [batch, hidden].
  void embed(const std::vector<int64_t>& ids, const std::vector<int64_t>& mask, int64_t batch,
             int64_t seq, bool normalize, std::vector<float>* out);

  // CausalLM (generation).
  int64_t vocab_size() const override { return s_.cfg.vocab_size; }
  void reset(int64_t rows, int64_t max_len) override;
  // F32 (default) or I8: the cache reset() makes from then on (int8 rows of
  // head_dim with one f32 scale per token and KV head; each attention
  // dequantizes the rows it reads into f32 scratch of one layer). Throws
  // OSLO_ERR_DTYPE on any other.
  void set_kv_dtype(oslo_dtype dt) override;
  std::vector<float> append(const std::vector<int64_t>& tokens, int64_t n,
                            const std::vector<uint8_t>& mask) override;
  std::vector<Choice> append_argmax(const std::vector<int64_t>& tokens, int64_t n,
                                    const std::vector<uint8_t>& mask) override;
  void reorder(const std::vector<int64_t>& src) override;
  int64_t length() const override { return past_; }

  // Pipeline stages at inference: a forward's rows go through the stages in
  // micro-batches (up to 2 x stages of them, one row or more each) when
  // every micro-batch keeps at least `tokens` tokens (default 64: smaller
  // products are bound by reading the weights, which every micro-batch
  // reads again). Results are the same either way.
  void set_pipeline_micro_tokens(int64_t tokens) { pipeline_micro_tokens_ = tokens; }

  // For callers that keep their own KV memory (the serving engine's paged
  // cache, core/serve):
  // The attention of local block `layer`: q, k, v are its rotated
  // projections ([B * S, heads * D] column views), out [B * S, nhl * D].
  using Attend = std::function<void(size_t layer, const View& q, const View& k, const View& v,
                                    const View& out)>;
  // Runs the stack on tokens [B, S] (ids and positions [B * S]; token_types
  // empty or [B * S]) with `attend` as every block's attention; returns the
  // final hidden states [B * S, hidden] f32 (after the final norm), on
  // every stage when `broadcast` (else only the last stage's are).
  Tensor run_stack(const std::vector<int64_t>& ids, const std::vector<int64_t>& positions,
                   const std::vector<int64_t>& token_types, int64_t B, int64_t S,
                   const Attend& attend, bool broadcast);
  // The head over hidden rows (a view [r, hidden] f32, every stage's):
  // logits [r, vocab] f32 on the host, or each row's greedy choice; the
  // same on every rank. Collective over the tensor and pipeline groups.
  std::vector<float> logits_of(const View& hidden, int64_t r);
  std::vector<Choice> argmax_of(const View& hidden, int64_t r);

 private:
  // Runs the stack on tokens [rows, n] at cache offset past_ (cache used
  // when use_cache), returning the final hidden states [rows * n, hidden]
  // f32. With pipeline stages the rows go through in micro-batches when
  // each keeps at least pipeline_micro_tokens_ tokens.
  Tensor run(const std::vector<int64_t>& ids, const std::vector<int64_t>& positions,
             const std::vector<int64_t>& token_types, const std::vector<float>& key_mask,
             int64_t rows, int64_t n, bool use_cache);
  // run() on the rows [row0, row0 + rows) of the cache; with `broadcast`
  // the last stage's hidden states go to every stage.
  Tensor run_rows(const std::vector<int64_t>& ids, const std::vector<int64_t>& positions,
                  const std::vector<int64_t>& token_types, const std::vector<float>& key_mask,
                  int64_t rows, int64_t n, bool use_cache, int64_t row0, bool broadcast);
  // Attention of local block li's q, k, v (through the cache when
  // use_cache) into out.
  void attention(size_t li, const View& q, const View& k, const View& v, const View& out,
                 const Tensor& mask, int64_t rows, int64_t n, bool use_cache, int64_t row0);
  std::vector<float> head_logits(const View& hidden, int64_t r);  // this stage's head
  // This rank's logits of the hidden rows: [r, local vocabulary] f32.
  Tensor head_local(const View& hidden, int64_t r);
  // The greedy choice of every hidden row: each rank's argmax over its
  // vocabulary slice (backend argmax), then one exchange of [r] pairs.
  std::vector<Choice> head_argmax(const View& hidden, int64_t r);  // this stage's head
  // The last stage's `t` to every stage. Collective over the pipeline group.
  void from_last_stage(const Tensor& t);
  // append()'s forward: the last new position's hidden rows [rows, hidden].
  View append_hidden(const std::vector<int64_t>& tokens, int64_t n,
                     const std::vector<uint8_t>& mask, Tensor* keep);

  BlockStack& s_;
  // The KV cache: per local block [rows, local kv heads, max_len, head_dim]
  // f32, or i8 with the scales [rows, local kv heads, max_len] f32 (kv_dtype_
  // I8).
  std::vector<Tensor> k_cache_, v_cache_, k_scale_, v_scale_;
  oslo_dtype kv_dtype_ = OSLO_DTYPE_F32;
  int64_t rows_ = 0, max_len_ = 0, past_ = 0;
  int64_t pipeline_micro_tokens_ = 64;
};

}  // namespace oslo
