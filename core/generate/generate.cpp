// Greedy decoding, sampling and beam search over a CausalLM with Hugging Face
// transformers' semantics (see generate.hpp). Beam search follows
// GenerationMixin._beam_search of transformers 5.x step by step, with the same
// float32 arithmetic (scores, the -1e9 offsets, the length penalty divisions)
// so that its decisions and sequences_scores match HF's.
#include "core/generate/generate.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <numeric>

#include "core/comm/leader.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

namespace oslo {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// HF's "very large negative value" for excluded beams, a float32 constant.
constexpr float kBig = 1.0e9f;

int64_t effective_pad(const GenerateOptions& opt) {
  if (opt.pad_token_id >= 0) return opt.pad_token_id;
  return opt.eos_token_ids.empty() ? 0 : opt.eos_token_ids[0];
}

bool is_eos(const GenerateOptions& opt, int64_t tok) {
  for (int64_t e : opt.eos_token_ids)
    if (e == tok) return true;
  return false;
}

// FNV-1a over the options and prompts: what the ranks compare before the
// first step.
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, size_t n) {
    const unsigned char* c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) {
      h ^= c[i];
      h *= 1099511628211ull;
    }
  }
  template <typename T>
  void pod(const T& v) {
    bytes(&v, sizeof v);
  }
};

uint64_t fingerprint(const std::vector<std::vector<int64_t>>& prompts, const GenerateOptions& o) {
  Fnv f;
  f.pod(o.max_new_tokens);
  f.pod(o.min_new_tokens);
  f.pod(o.kv_dtype);
  f.pod(o.do_sample);
  f.pod(o.temperature);
  f.pod(o.top_k);
  f.pod(o.top_p);
  f.pod(o.seed);
  f.pod(o.num_beams);
  f.pod(o.length_penalty);
  f.pod(o.early_stopping);
  f.pod(o.pad_token_id);
  f.pod(o.repetition_penalty);
  f.pod(o.eos_token_ids.size());
  for (int64_t e : o.eos_token_ids) f.pod(e);
  f.pod(prompts.size());
  for (const auto& p : prompts) {
    f.pod(p.size());
    if (!p.empty()) f.bytes(p.data(), p.size() * sizeof(int64_t));
  }
  return f.h;
}

// The decisions of one step travel from group rank 0 to every rank through
// this; with no communicator (or a group of one) it does nothing.
class Agreement {
 public:
  explicit Agreement(Control* c) : c_(c && c->size() > 1 ? c : nullptr) {}
  bool decides() const { return !c_ || c_->rank() == 0; }
  void share(std::vector<int64_t>& buf) {
    if (c_ && !buf.empty()) c_->broadcast(buf.data(), buf.size(), 0);
  }
  // Runs `decide` on rank 0, which fills msg[1..]; msg[0] becomes its
  // outcome (0 or 1 as decide returns); every rank then holds rank 0's msg
  // (core/comm/leader.hpp: a failure on rank 0 fails every rank).
  template <typename Fn>
  void agree(std::vector<int64_t>& msg, int64_t step, Fn&& decide) {
    leader_decides(c_, msg, "generate: the agreement group at step " + std::to_string(step),
                   [&] { return decide() ? 1 : 0; });
  }

 private:
  Control* c_;
};

void check_logits(const std::vector<float>& logits, int64_t rows, int64_t vocab, int64_t step) {
  OSLO_CHECK(static_cast<int64_t>(logits.size()) == rows * vocab, OSLO_ERR_SHAPE,
             "generate: the model returned ", logits.size(), " logits at step ", step,
             ", expected rows x vocab = ", rows, " x ", vocab);
}

void check_no_nan(const float* s, int64_t n, int64_t row, int64_t step) {
  for (int64_t v = 0; v < n; ++v)
    OSLO_CHECK(!std::isnan(s[v]), OSLO_ERR_INVALID_ARGUMENT,
               "generate: the model returned NaN logits (row ", row, ", token ", v, ", step ", step,
               ")");
}

// HF's processors before the warpers, in _get_logits_processor's order:
// RepetitionPenaltyLogitsProcessor (prompt_ignore_length = the row's left
// padding), MinNewTokensLengthLogitsProcessor. `row` is the whole row so far
// (padding, prompt, generated); `generated` the number of new tokens in it.
void apply_processors(float* s, int64_t vocab, const std::vector<int64_t>& row, int64_t pad_len,
                      int64_t generated, const GenerateOptions& opt, std::vector<uint8_t>& seen) {
  if (opt.repetition_penalty != 1.0) {
    const float p = static_cast<float>(opt.repetition_penalty);
    seen.assign(static_cast<size_t>(vocab), 0);
    for (size_t i = static_cast<size_t>(pad_len); i < row.size(); ++i) seen[row[i]] = 1;
    for (int64_t v = 0; v < vocab; ++v)
      if (seen[v]) s[v] = s[v] < 0 ? s[v] * p : s[v] / p;
  }
  if (opt.min_new_tokens > 0 && generated < opt.min_new_tokens)
    for (int64_t e : opt.eos_token_ids) s[e] = -kInf;
}

// log_softmax of one row in float32 (computed in double, rounded once).
void log_softmax(const float* x, float* out, int64_t n) {
  float m = -kInf;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  if (m == -kInf) {
    for (int64_t i = 0; i < n; ++i) out[i] = -kInf;
    return;
  }
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - m);
  const double lse = m + std::log(sum);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<double>(x[i]) - lse);
}

int64_t argmax(const float* s, int64_t n) {
  int64_t best = 0;
  for (int64_t v = 1; v < n; ++v)
    if (s[v] > s[best]) best = v;
  return best;
}

// Indices of the k largest of v (k <= v.size()), largest first, ties to the
// lower index (torch.topk leaves the order of ties unspecified).
std::vector<int64_t> top_indices(const std::vector<float>& v, int64_t k) {
  std::vector<int64_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), int64_t(0));
  auto before = [&](int64_t a, int64_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
  idx.resize(static_cast<size_t>(k));
  return idx;
}

// The token of row `row` (whole: left padding pad_len, prompt, generated)
// at generation step t from its scores (modified): HF's processors, then
// greedy or the warpers and the draw of Philox stream `stream`.
int64_t pick(float* s, int64_t vocab, const std::vector<int64_t>& row, int64_t pad_len, int64_t t,
             const GenerateOptions& opt, uint64_t stream, std::vector<uint8_t>& seen) {
  check_no_nan(s, vocab, static_cast<int64_t>(stream), t);
  apply_processors(s, vocab, row, pad_len, t, opt, seen);
  if (!opt.do_sample) return argmax(s, vocab);
  warp_scores(s, vocab, opt.temperature, opt.top_k, opt.top_p);
  return sample_from_scores(s, vocab, sampling_uniform(opt.seed, stream, static_cast<uint64_t>(t)));
}

// Rows of the padded prompt batch.
struct Batch {
  int64_t size = 0;
  int64_t prompt_len = 0;       // longest prompt (HF's decoder_prompt_len)
  std::vector<int64_t> pad;     // left padding per prompt
  std::vector<int64_t> tokens;  // [size, prompt_len]
  std::vector<uint8_t> mask;    // [size, prompt_len]
};

Batch make_batch(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_token) {
  Batch b;
  b.size = static_cast<int64_t>(prompts.size());
  for (const auto& p : prompts) b.prompt_len = std::max<int64_t>(b.prompt_len, p.size());
  b.tokens.assign(b.size * b.prompt_len, pad_token);
  b.mask.assign(b.size * b.prompt_len, 0);
  for (int64_t i = 0; i < b.size; ++i) {
    const auto& p = prompts[i];
    const int64_t pad = b.prompt_len - static_cast<int64_t>(p.size());
    b.pad.push_back(pad);
    for (size_t j = 0; j < p.size(); ++j) {
      b.tokens[i * b.prompt_len + pad + j] = p[j];
      b.mask[i * b.prompt_len + pad + j] = 1;
    }
  }
  return b;
}

// The mask of every row after `len` positions: the prompt's, then ones.
std::vector<uint8_t> mask_of(const std::vector<uint8_t>& prompt_mask, int64_t rows,
                             int64_t prompt_len, int64_t len) {
  std::vector<uint8_t> m(static_cast<size_t>(rows * len), 1);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(&m[r * len], &prompt_mask[r * prompt_len], static_cast<size_t>(prompt_len));
  return m;
}

// ------------------------------------------------------------ greedy / sample

GenerateResult greedy_or_sample(CausalLM& model, const Batch& batch, const GenerateOptions& opt,
                                Agreement& agreement) {
  const int64_t rows = batch.size, vocab = model.vocab_size(), L0 = batch.prompt_len;
  const int64_t pad = effective_pad(opt);
  const bool has_eos = !opt.eos_token_ids.empty();
  GenerateResult res;
  res.tokens.resize(rows);
  std::vector<std::vector<int64_t>> row(rows);  // whole rows, for the processors
  for (int64_t r = 0; r < rows; ++r)
    row[r].assign(batch.tokens.begin() + r * L0, batch.tokens.begin() + (r + 1) * L0);
  std::vector<uint8_t> finished(rows, 0), seen;
  std::vector<float> scores(vocab);

  // Step t needs the logits on the host only when a processor or a warper
  // changes them; a plain greedy step asks the model for its choice alone
  // (append_argmax: no [rows, vocab] logits leave the device).
  auto needs_logits = [&](int64_t t) { return needs_scores(opt, t); };
  std::vector<float> logits;
  std::vector<CausalLM::Choice> choice;
  auto feed = [&](const std::vector<int64_t>& tokens, int64_t n, const std::vector<uint8_t>& mask,
                  int64_t t) {
    if (needs_logits(t)) {
      logits = model.append(tokens, n, mask);
    } else {
      choice = model.append_argmax(tokens, n, mask);
      OSLO_CHECK(static_cast<int64_t>(choice.size()) == rows, OSLO_ERR_SHAPE,
                 "generate: the model chose ", choice.size(), " tokens at step ", t, " for ", rows,
                 " rows");
    }
  };
  model.set_kv_dtype(opt.kv_dtype);
  model.reset(rows, L0 + opt.max_new_tokens);
  feed(batch.tokens, L0, batch.mask, 0);
  // msg: [outcome, token per row, finished flag per row]
  std::vector<int64_t> msg(1 + 2 * rows);
  for (int64_t t = 0;; ++t) {
    agreement.agree(msg, t, [&] {
      const bool full = needs_logits(t);
      if (full) check_logits(logits, rows, vocab, t);
      bool all_done = true;
      for (int64_t r = 0; r < rows; ++r) {
        int64_t tok = pad;
        if (!finished[r] && !full) {
          const CausalLM::Choice& c = choice[static_cast<size_t>(r)];
          OSLO_CHECK(!std::isnan(c.logit), OSLO_ERR_INVALID_ARGUMENT,
                     "generate: the model returned NaN logits (row ", r, ", token ", c.token,
                     ", step ", t, ")");
          tok = c.token;
        } else if (!finished[r]) {
          std::memcpy(scores.data(), &logits[r * vocab], vocab * sizeof(float));
          tok = pick(scores.data(), vocab, row[r], batch.pad[r], t, opt, r, seen);
        }
        const bool done = finished[r] || (has_eos && is_eos(opt, tok));
        msg[1 + r] = tok;
        msg[1 + rows + r] = done ? 1 : 0;
        all_done = all_done && done;
      }
      return all_done || t + 1 >= opt.max_new_tokens;
    });
    std::vector<int64_t> next(msg.begin() + 1, msg.begin() + 1 + rows);
    for (int64_t r = 0; r < rows; ++r) {
      if (!finished[r]) res.tokens[r].push_back(next[r]);
      row[r].push_back(next[r]);
      finished[r] = msg[1 + rows + r] != 0;
    }
    if (msg[0] == 1) break;
    feed(next, 1, mask_of(batch.mask, rows, L0, L0 + t + 1), t + 1);
  }
  return res;
}

// ---------------------------------------------------------------- beam search

struct Hyp {
  std::vector<int64_t> tokens;  // generated tokens
  float score = -kBig;
  bool finished = false;
};

// One prompt's state, as HF keeps it per batch item.
struct BeamState {
  std::vector<Hyp> running;  // num_beams, best first
  std::vector<Hyp> done;     // num_beams slots (HF's `sequences`/`beam_scores`)
  bool heuristic_unsatisfied = true;
};

GenerateResult beam_search(CausalLM& model, const Batch& batch, const GenerateOptions& opt,
                           Agreement& agreement) {
  const int64_t nb = opt.num_beams, B = batch.size, rows = B * nb;
  const int64_t vocab = model.vocab_size(), L0 = batch.prompt_len;
  const int64_t n_eos = static_cast<int64_t>(opt.eos_token_ids.size());
  const int64_t K = std::max<int64_t>(2, 1 + n_eos) * nb;  // beams_to_keep

  // Expanded prompt rows: row b*nb + j is prompt b.
  std::vector<int64_t> tokens0(rows * L0);
  std::vector<uint8_t> mask0(rows * L0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < nb; ++j) {
      std::memcpy(&tokens0[(b * nb + j) * L0], &batch.tokens[b * L0], L0 * sizeof(int64_t));
      std::memcpy(&mask0[(b * nb + j) * L0], &batch.mask[b * L0], static_cast<size_t>(L0));
    }

  std::vector<BeamState> st(B);
  for (auto& s : st) {
    s.running.resize(nb);
    for (int64_t j = 0; j < nb; ++j) s.running[j].score = j == 0 ? 0.f : -kBig;
    s.done.resize(nb);
  }

  model.set_kv_dtype(opt.kv_dtype);
  model.reset(rows, L0 + opt.max_new_tokens);
  std::vector<float> logits = model.append(tokens0, L0, mask0);
  std::vector<float> acc(nb * vocab), lsm(vocab), merged;
  std::vector<int64_t> full_row;
  std::vector<uint8_t> seen;
  // msg: [outcome, next token per row, source row per row]
  std::vector<int64_t> msg(1 + 2 * rows);
  for (int64_t t = 0;; ++t) {  // t = cur_len - decoder_prompt_len
    agreement.agree(msg, t, [&] {
      check_logits(logits, rows, vocab, t);
      const bool at_max = t + 1 >= opt.max_new_tokens;  // MaxLengthCriteria on cur_len + 1
      bool any_unsatisfied = false, all_finished = true, all_hit = true;
      // length ** length_penalty of the hypotheses finishing now, as Python
      // computes int ** float (a double), divided in float32 as torch does.
      const float div_now = static_cast<float>(std::pow(double(t + 1), opt.length_penalty));
      for (int64_t b = 0; b < B; ++b) {
        BeamState& s = st[b];
        // b. log-probabilities + processors + running scores, [nb * vocab]
        for (int64_t j = 0; j < nb; ++j) {
          const int64_t r = b * nb + j;
          const float* lg = &logits[r * vocab];
          check_no_nan(lg, vocab, r, t);
          log_softmax(lg, lsm.data(), vocab);
          if (opt.repetition_penalty != 1.0 || opt.min_new_tokens > 0) {
            full_row.assign(batch.tokens.begin() + b * L0, batch.tokens.begin() + (b + 1) * L0);
            full_row.insert(full_row.end(), s.running[j].tokens.begin(), s.running[j].tokens.end());
            apply_processors(lsm.data(), vocab, full_row, batch.pad[b], t, opt, seen);
          }
          const float base = s.running[j].score;
          for (int64_t v = 0; v < vocab; ++v) acc[j * vocab + v] = lsm[v] + base;
        }
        // c. top K continuations over all beams
        const std::vector<int64_t> top = top_indices(acc, K);
        std::vector<Hyp> cand(K);
        std::vector<uint8_t> hit(K);
        for (int64_t k = 0; k < K; ++k) {
          const int64_t j = top[k] / vocab, v = top[k] % vocab;
          cand[k].tokens = s.running[j].tokens;
          cand[k].tokens.push_back(v);
          cand[k].score = acc[top[k]];
          hit[k] = at_max || is_eos(opt, v);
          all_hit = all_hit && hit[k];
        }
        // e. the best num_beams continuations that did not stop keep running
        std::vector<float> run_scores(K);
        for (int64_t k = 0; k < K; ++k) run_scores[k] = cand[k].score + (hit[k] ? -kBig : -0.f);
        const std::vector<int64_t> keep = top_indices(run_scores, nb);
        std::vector<Hyp> running(nb);
        for (int64_t i = 0; i < nb; ++i) {
          const int64_t k = keep[i];
          running[i].tokens = cand[k].tokens;
          running[i].score = run_scores[k];
          const int64_t j = top[k] / vocab;
          msg[1 + b * nb + i] = cand[k].tokens.back();
          msg[1 + rows + b * nb + i] = b * nb + j;
        }
        // f. finished hypotheses: merge the top num_beams candidates that
        // stopped into the num_beams best finished so far
        bool full = opt.early_stopping == EarlyStopping::kTrue;
        for (const Hyp& h : s.done) full = full && h.finished;
        merged.assign(nb + K, 0.f);
        for (int64_t i = 0; i < nb; ++i) merged[i] = s.done[i].score;
        for (int64_t k = 0; k < K; ++k) {
          float f = cand[k].score / div_now;
          f += full ? -kBig : -0.f;
          f += !s.heuristic_unsatisfied ? -kBig : -0.f;
          const bool just_finished = hit[k] && k < nb;
          f += !just_finished ? -kBig : -0.f;
          merged[nb + k] = f;
        }
        const std::vector<int64_t> best = top_indices(merged, nb);
        std::vector<Hyp> done(nb);
        for (int64_t i = 0; i < nb; ++i) {
          const int64_t m = best[i];
          if (m < nb) {
            done[i] = s.done[m];
          } else {
            done[i].tokens = cand[m - nb].tokens;
            done[i].finished = hit[m - nb] && (m - nb) < nb;
          }
          done[i].score = merged[m];
        }
        s.done = std::move(done);
        s.running = std::move(running);
        // g. the early-stop heuristic at cur_len + 1
        const int64_t best_len =
            opt.early_stopping == EarlyStopping::kNever && opt.length_penalty > 0.0
                ? opt.max_new_tokens
                : t + 1;
        const float best_running =
            s.running[0].score / static_cast<float>(std::pow(double(best_len), opt.length_penalty));
        float worst_done = s.done[0].score;
        for (const Hyp& h : s.done) worst_done = std::min(worst_done, h.score);
        bool improvable = false;
        for (const Hyp& h : s.done)
          improvable = improvable || best_running > (h.finished ? worst_done : -kBig);
        s.heuristic_unsatisfied = s.heuristic_unsatisfied && improvable;
        any_unsatisfied = any_unsatisfied || s.heuristic_unsatisfied;
        for (const Hyp& h : s.done) all_finished = all_finished && h.finished;
      }
      const bool exists_open_beam = !(all_finished && opt.early_stopping == EarlyStopping::kTrue);
      return !(any_unsatisfied && exists_open_beam && !all_hit);
    });
    if (msg[0] == 1) break;
    std::vector<int64_t> next(msg.begin() + 1, msg.begin() + 1 + rows);
    std::vector<int64_t> src(msg.begin() + 1 + rows, msg.end());
    model.reorder(src);
    logits = model.append(next, 1, mask_of(mask0, rows, L0, L0 + t + 1));
  }

  // Rank 0's result to every rank: [length per prompt, score bits per prompt]
  // then the tokens.
  std::vector<int64_t> head(2 * B), body;
  if (agreement.decides()) {
    for (int64_t b = 0; b < B; ++b) {
      const Hyp& h = st[b].done[0];
      head[b] = static_cast<int64_t>(h.tokens.size());
      uint32_t bits;
      std::memcpy(&bits, &h.score, sizeof bits);
      head[B + b] = bits;
      body.insert(body.end(), h.tokens.begin(), h.tokens.end());
    }
  }
  agreement.share(head);
  int64_t total = 0;
  for (int64_t b = 0; b < B; ++b) total += head[b];
  body.resize(static_cast<size_t>(total));
  agreement.share(body);
  GenerateResult res;
  res.tokens.resize(B);
  res.sequence_scores.resize(B);
  int64_t at = 0;
  for (int64_t b = 0; b < B; ++b) {
    res.tokens[b].assign(body.begin() + at, body.begin() + at + head[b]);
    at += head[b];
    const uint32_t bits = static_cast<uint32_t>(head[B + b]);
    std::memcpy(&res.sequence_scores[b], &bits, sizeof bits);
  }
  return res;
}

}  // namespace

// ------------------------------------------------------------------- public

void validate_options(const GenerateOptions& o, int64_t vocab) {
  auto bad = [](auto&&... parts) { fail(OSLO_ERR_INVALID_ARGUMENT, "generate: ", parts...); };
  if (o.max_new_tokens < 1) bad("max_new_tokens must be >= 1, got ", o.max_new_tokens);
  if (o.min_new_tokens < 0) bad("min_new_tokens must be >= 0, got ", o.min_new_tokens);
  if (o.kv_dtype != OSLO_DTYPE_F32 && o.kv_dtype != OSLO_DTYPE_I8)
    fail(OSLO_ERR_DTYPE, "generate: kv_cache_dtype must be f32 or i8 (int8), got ",
         dtype_name(o.kv_dtype), " (", static_cast<int>(o.kv_dtype), ")");
  if (o.num_beams < 1) bad("num_beams must be >= 1, got ", o.num_beams);
  if (o.top_k < 0) bad("top_k must be >= 0 (0 = off), got ", o.top_k);
  if (!(o.top_p > 0.0 && o.top_p <= 1.0)) bad("top_p must be in (0, 1] (1 = off), got ", o.top_p);
  if (o.do_sample && !(o.temperature > 0.0 && std::isfinite(o.temperature)))
    bad("temperature must be > 0 and finite when sampling, got ", o.temperature);
  if (!(o.repetition_penalty > 0.0 && std::isfinite(o.repetition_penalty)))
    bad("repetition_penalty must be > 0 and finite (1 = off), got ", o.repetition_penalty);
  if (!std::isfinite(o.length_penalty))
    bad("length_penalty must be finite, got ", o.length_penalty);
  if (o.early_stopping != EarlyStopping::kFalse && o.early_stopping != EarlyStopping::kTrue &&
      o.early_stopping != EarlyStopping::kNever)
    bad("early_stopping must be False, True or \"never\", got ",
        static_cast<int>(o.early_stopping));
  if (o.pad_token_id < -1)
    bad("pad_token_id must be a token id or -1 (default), got ", o.pad_token_id);
  for (int64_t e : o.eos_token_ids)
    if (e < 0 || (vocab >= 0 && e >= vocab))
      bad("eos token id ", e, " is outside the vocabulary [0, ", vocab, ")");
  if (vocab >= 0 && o.pad_token_id >= vocab)
    bad("pad_token_id ", o.pad_token_id, " is outside the vocabulary [0, ", vocab, ")");
  if (o.num_beams > 1 && o.do_sample)
    fail(OSLO_ERR_NOT_SUPPORTED,
         "generate: beam sampling (num_beams > 1 with do_sample) is not supported; use "
         "num_beams = 1 to sample or do_sample = false for beam search");
  if (o.num_beams > 1 && vocab >= 0) {
    const int64_t k =
        std::max<int64_t>(2, 1 + static_cast<int64_t>(o.eos_token_ids.size())) * o.num_beams;
    if (k > o.num_beams * vocab)
      bad("beam search keeps ", k,
          " candidates per step (max(2, 1 + number of EOS ids) x "
          "num_beams) but num_beams x vocab is only ",
          o.num_beams * vocab);
  }
}

GenerateResult generate(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                        const GenerateOptions& opt, Control* agree) {
  int64_t vocab = -1;
  std::exception_ptr local_error;
  try {
    vocab = model.vocab_size();
    OSLO_CHECK(vocab > 0, OSLO_ERR_INVALID_ARGUMENT, "generate: the model's vocab_size is ", vocab);
    validate_options(opt, vocab);
    for (size_t i = 0; i < prompts.size(); ++i) {
      OSLO_CHECK(!prompts[i].empty(), OSLO_ERR_INVALID_ARGUMENT, "generate: prompt ", i,
                 " is empty (every prompt needs at least one token)");
      for (size_t j = 0; j < prompts[i].size(); ++j)
        OSLO_CHECK(prompts[i][j] >= 0 && prompts[i][j] < vocab, OSLO_ERR_INVALID_ARGUMENT,
                   "generate: prompt ", i, " token ", j, " is ", prompts[i][j],
                   ", outside the vocabulary [0, ", vocab, ")");
    }
  } catch (...) {  // shared below, so that every rank fails together
    local_error = std::current_exception();
  }
  // Every rank learns whether every rank is valid and has rank 0's prompts
  // and options, so that all of them fail or none does.
  if (agree && agree->size() > 1) {
    const int n = agree->size();
    int64_t mine[2] = {local_error ? 1 : 0, static_cast<int64_t>(fingerprint(prompts, opt))};
    std::vector<int64_t> all(2 * static_cast<size_t>(n));
    agree->all_gather(mine, all.data(), 2);
    if (local_error) std::rethrow_exception(local_error);
    for (int r = 0; r < n; ++r) {
      OSLO_CHECK(all[2 * r] == 0, OSLO_ERR_INVALID_ARGUMENT, "generate: rank ", r,
                 " of the agreement group rejected its prompts or options");
      OSLO_CHECK(all[2 * r + 1] == all[1], OSLO_ERR_INVALID_ARGUMENT, "generate: rank ", r,
                 " of the agreement group has other prompts or options than rank 0");
    }
  } else if (local_error) {
    std::rethrow_exception(local_error);
  }
  if (prompts.empty()) return GenerateResult{};

  Agreement agreement(agree);
  const Batch batch = make_batch(prompts, effective_pad(opt));
  return opt.num_beams > 1 ? beam_search(model, batch, opt, agreement)
                           : greedy_or_sample(model, batch, opt, agreement);
}

void warp_scores(float* s, int64_t n, double temperature, int64_t top_k, double top_p) {
  if (n <= 0) return;
  if (temperature != 1.0) {
    const float t = static_cast<float>(temperature);
    for (int64_t i = 0; i < n; ++i) s[i] = s[i] / t;
  }
  if (top_k != 0) {
    const int64_t k = std::min<int64_t>(std::max<int64_t>(top_k, 1), n);
    std::vector<float> v(s, s + n);
    std::nth_element(v.begin(), v.begin() + (k - 1), v.end(), std::greater<float>());
    const float kth = v[k - 1];
    for (int64_t i = 0; i < n; ++i)
      if (s[i] < kth) s[i] = -kInf;
  }
  if (top_p < 1.0) {
    std::vector<int64_t> idx(n);
    std::iota(idx.begin(), idx.end(), int64_t(0));
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return s[a] < s[b]; });
    const float mx = s[idx[n - 1]];
    if (mx == -kInf) return;
    std::vector<double> w(n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      w[i] = std::exp(static_cast<double>(s[idx[i]]) - mx);
      sum += w[i];
    }
    const float thresh = static_cast<float>(1.0 - top_p);
    double cum = 0;
    std::vector<uint8_t> remove(n, 0);
    for (int64_t i = 0; i + 1 < n; ++i) {  // the last (largest) is always kept
      cum += w[i] / sum;
      if (static_cast<float>(cum) <= thresh) remove[i] = 1;
    }
    for (int64_t i = 0; i < n; ++i)
      if (remove[i]) s[idx[i]] = -kInf;
  }
}

void philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint64_t p0 = uint64_t(0xD2511F53u) * c0;
    const uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

double sampling_uniform(uint64_t seed, uint64_t stream, uint64_t step) {
  const uint32_t ctr[4] = {uint32_t(step), uint32_t(step >> 32), uint32_t(stream),
                           uint32_t(stream >> 32)};
  const uint32_t key[2] = {uint32_t(seed), uint32_t(seed >> 32)};
  uint32_t x[4];
  philox4x32_10(ctr, key, x);
  const uint64_t bits = (uint64_t(x[1]) << 32 | x[0]) >> 11;
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);  // 2^-53
}

int64_t sample_from_scores(const float* s, int64_t n, double u) {
  float mx = -kInf;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, s[i]);
  OSLO_CHECK(mx > -kInf && std::isfinite(mx), OSLO_ERR_INVALID_ARGUMENT,
             "generate: no token can be sampled (every score is -inf or the largest is +inf/NaN)");
  double total = 0;
  for (int64_t i = 0; i < n; ++i)
    if (s[i] > -kInf) total += std::exp(static_cast<double>(s[i]) - mx);
  const double target = u * total;
  double cum = 0;
  int64_t last = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (!(s[i] > -kInf)) continue;
    cum += std::exp(static_cast<double>(s[i]) - mx);
    last = i;
    if (cum > target) return i;
  }
  return last;  // rounding: u * total landed at or past the final sum
}

bool needs_scores(const GenerateOptions& opt, int64_t generated) {
  return opt.do_sample || opt.repetition_penalty != 1.0 ||
         (opt.min_new_tokens > 0 && !opt.eos_token_ids.empty() && generated < opt.min_new_tokens);
}

int64_t choose_token(float* scores, int64_t vocab, const std::vector<int64_t>& tokens,
                     int64_t generated, const GenerateOptions& opt, uint64_t stream) {
  std::vector<uint8_t> seen;
  return pick(scores, vocab, tokens, 0, generated, opt, stream, seen);
}

}  // namespace oslo
