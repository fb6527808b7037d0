// Text generation over a CausalLM (core/generate/causal_lm.hpp): greedy
// decoding, sampling (temperature -> top-k -> top-p) and beam search, with the
// semantics of Hugging Face transformers' GenerationMixin.generate for
// decoder-only models (transformers 5.x: `_sample` and `_beam_search` in
// src/transformers/generation/utils.py, the warpers in logits_process.py).
//
// Matched against transformers 5.23 (tests/generate/make_reference.py): the
// same tokens and sequences_scores (to float32 rounding) for greedy, batched
// left-padded greedy and beam search, and the same surviving tokens and
// probabilities for the warpers. Where torch leaves an order unspecified,
// oslo fixes one: greedy takes the lowest index among tied maxima (as
// torch.argmax); beam search's top-k ranks tied scores by lower flat index
// (beam * vocab + token), torch.topk by an unspecified order; top-p drops
// the lower index first among tied scores, torch.sort (unstable above 16
// elements) in an unspecified order. Exact ties need exactly equal logits.
//
// Batching: prompts of different lengths are left-padded to the longest one
// (padding positions carry pad_token_id and mask 0), exactly as HF generate is
// fed for decoder-only models. Every generated position has mask 1, including
// the pad tokens a finished row keeps receiving (HF appends pad_token_id after
// a row's EOS while other rows go on).
//
// Rank agreement: with tensor parallelism every rank runs generate() on the
// same prompts and options. When `agree` (the tensor group's control
// messages, core/comm/control.hpp) is given, group rank 0 is the only
// rank that chooses tokens: after every model step it broadcasts (int64) the
// chosen tokens, per-row finished flags or beam source rows, and whether to go
// on (or rank 0's error status); every rank appends exactly those tokens and
// stops on that same step. The other ranks' logits are computed (the model
// step is collective) but not looked at, so ranks cannot diverge even if
// their logits differ in the last bit. The beam-search result (tokens and
// sequence scores) is broadcast from rank 0 at the end. Before the first step
// the ranks exchange a fingerprint of their prompts and options and whether
// they are valid; any mismatch or invalid option fails on every rank with
// OSLO_ERR_INVALID_ARGUMENT (no rank is left waiting).
//
// Sampling RNG (portable, not torch's): the draw for prompt i (its index in
// `prompts`) at generation step t (0 for the first new token) is
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC'11; the Random123 / cuRAND generator) with key {seed low 32 bits,
// seed high 32 bits} and counter {t low, t high, i low, i high}; the first
// two output words x0, x1 give the double u = ((x1 << 32 | x0) >> 11) * 2^-53
// in [0, 1) (sampling_uniform()). With s the row's scores after the
// processors and warpers, the token is the smallest index whose running sum
// (in index order, in double) of w_v = exp(s_v - max s) exceeds u * sum(w)
// (tokens filtered to -inf have w = 0 and are never chosen). So the same
// seed gives the same tokens in oslo across runs, machines, batch
// compositions, tensor-parallel sizes and backends, as far as the logits
// themselves are identical (TP sizes and backends may round logits
// differently) and up to the last-bit accuracy of the C library's exp(). It
// does not reproduce torch.multinomial's draws.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/comm/control.hpp"
#include "core/generate/causal_lm.hpp"

namespace oslo {

// HF's GenerationConfig.early_stopping: False (a heuristic decides when no
// running beam can beat the finished ones), True (stop a prompt as soon as it
// has num_beams finished hypotheses) or "never" (canonical beam search: stop
// only when no running beam could possibly do better).
enum class EarlyStopping { kFalse = 0, kTrue = 1, kNever = 2 };

// Options of generate(). A plain value type; the defaults are Hugging Face's
// GenerationConfig defaults except max_new_tokens (HF's default is
// max_length = 20 counting the prompt; here 20 new tokens).
struct GenerateOptions {
  // Tokens generated at most per prompt (>= 1). Also HF's max_length =
  // longest prompt + max_new_tokens for beam search's length bookkeeping.
  int64_t max_new_tokens = 20;
  // EOS cannot be generated before this many new tokens (HF's
  // MinNewTokensLengthLogitsProcessor; needs eos_token_ids). >= 0.
  int64_t min_new_tokens = 0;
  // The KV cache's storage: OSLO_DTYPE_F32 or OSLO_DTYPE_I8 (int8 rows, one
  // f32 scale per token and KV head; docs/QUANTIZATION.md).
  oslo_dtype kv_dtype = OSLO_DTYPE_F32;
  // false: greedy (num_beams == 1) or beam search; true: sampling.
  bool do_sample = false;
  // Sampling only: logits are divided by it (> 0; 1 = off).
  double temperature = 1.0;
  // Sampling only: keep the top_k highest logits and any tied with the
  // k-th (0 = off; >= 0).
  int64_t top_k = 50;
  // Sampling only: keep the smallest set of most probable tokens whose
  // probability reaches top_p, in (0, 1] (1 = off).
  double top_p = 1.0;
  // Sampling only: seed of the Philox stream (see the file comment).
  uint64_t seed = 0;
  // 1: greedy or sampling; > 1: beam search (with do_sample = false only).
  int64_t num_beams = 1;
  // Beam search: a finished hypothesis scores sum(logprobs) /
  // generated_length ** length_penalty.
  double length_penalty = 1.0;
  // Beam search stopping rule (see EarlyStopping).
  EarlyStopping early_stopping = EarlyStopping::kFalse;
  // A row stops when it emits any of these (may be empty: no EOS stop). Each
  // in [0, vocab).
  std::vector<int64_t> eos_token_ids;
  // Token fed at left-padding positions (mask 0) and after a row finished.
  // -1: eos_token_ids[0] if there is one (as HF does), else 0.
  int64_t pad_token_id = -1;
  // HF's RepetitionPenaltyLogitsProcessor (> 0; 1 = off): every token that
  // occurs in the row (prompt, without its padding, and generated) has its
  // score divided by it if positive, multiplied if negative.
  double repetition_penalty = 1.0;
};

// What generate() returns. Owned by the caller.
struct GenerateResult {
  // Per prompt, in order: the generated tokens only (no prompt). Greedy and
  // sampling: stops at and includes the first EOS, otherwise
  // max_new_tokens tokens. Beam search: the best hypothesis (HF's
  // sequences[:, prompt_len:], EOS included when it ended with one).
  std::vector<std::vector<int64_t>> tokens;
  // Beam search only: HF's sequences_scores (sum of the hypothesis'
  // log-probabilities / generated_length ** length_penalty); empty
  // otherwise.
  std::vector<float> sequence_scores;
};

// Checks the options; throws oslo::Error(OSLO_ERR_INVALID_ARGUMENT) naming
// the option and the bad value (OSLO_ERR_NOT_SUPPORTED for valid HF options
// oslo does not implement: beam sampling). vocab_size < 0 skips the checks
// against the vocabulary. Thread-safe (pure).
void validate_options(const GenerateOptions& opt, int64_t vocab_size = -1);

// Generates continuations of every prompt (each a non-empty list of token
// ids in [0, vocab)). Resets the model (model.reset) and drives it to the
// end; the model's cache is left in an unspecified state afterwards.
// Collective over `agree` (may be null: no agreement, e.g. one rank) and over
// whatever the model's steps are collective over; every rank must pass the
// same prompts and options. Throws oslo::Error: OSLO_ERR_INVALID_ARGUMENT for
// bad options or prompts (on every rank of `agree`), OSLO_ERR_SHAPE if the
// model returns logits of the wrong size, OSLO_ERR_INVALID_ARGUMENT if the
// logits contain NaN or a row has no finite logit to sample, anything the
// model or the group's communicator throws. Not thread-safe per model /
// group (one generate at a time on them).
GenerateResult generate(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                        const GenerateOptions& opt, Control* agree = nullptr);

// ---- building blocks, exposed for tests and for callers that sample
// themselves. All are pure functions on caller memory; thread-safe.

// HF's TemperatureLogitsWarper, TopKLogitsWarper and TopPLogitsWarper (with
// min_tokens_to_keep = 1) applied in that order to one row of scores, in
// place; removed tokens become -inf. Skipped when off (temperature == 1,
// top_k == 0, top_p == 1) as HF skips them. Ties: top-k keeps every token
// tied with the k-th largest; top-p sorts ascending by (score, index) (as a
// stable torch.sort) and removes from the low end while the cumulative
// probability (in double) is <= 1 - top_p (in float), never the largest.
void warp_scores(float* scores, int64_t n, double temperature, int64_t top_k, double top_p);

// Philox4x32-10: the four output words for a counter and a key.
void philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);

// The uniform double in [0, 1) of the documented sampling procedure for
// (seed, stream = prompt index, step): 53 bits from Philox words 0 and 1,
// ((uint64(x1) << 32 | x0) >> 11) * 2^-53.
double sampling_uniform(uint64_t seed, uint64_t stream, uint64_t step);

// Draws a token from softmax(scores) with the uniform u in [0, 1) as the
// file comment describes. Throws OSLO_ERR_INVALID_ARGUMENT if no score is
// finite.
int64_t sample_from_scores(const float* scores, int64_t n, double u);

// One sequence's next token from its next-token scores, exactly as
// generate() picks it for a prompt at index `stream` (greedy or sampling
// with HF's processors and warpers; the draw of Philox stream `stream` at
// step `generated`): `tokens` is the sequence so far (prompt and generated,
// no padding), `generated` how many of them are new, `scores` (vocab
// floats) is modified. What a caller that batches its own steps (the
// serving engine) uses, so its tokens are generate()'s. Throws
// OSLO_ERR_INVALID_ARGUMENT on NaN scores or none finite to sample.
int64_t choose_token(float* scores, int64_t vocab, const std::vector<int64_t>& tokens,
                     int64_t generated, const GenerateOptions& opt, uint64_t stream);

// Whether choose_token() needs the step's scores; false: the greedy choice
// (the largest logit, lowest token among ties: CausalLM::Choice) is it.
bool needs_scores(const GenerateOptions& opt, int64_t generated);

}  // namespace oslo
