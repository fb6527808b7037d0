// A toy CausalLM for the generation tests: the next token's logits are a
// deterministic function of the row's real tokens (mask 1) so far,
//
//     logits = A[t_n] + B[t_{n-1}, or V when n == 1] + C[n % P]
//
// with the tables of tests/generate/reference.json (the same model that
// make_reference.py runs through Hugging Face's generate). Every sum is exact
// in float32, so the logits equal torch's bit for bit. The "cache" is each
// row's history, so a wrong reorder() gives wrong logits. It checks what
// generate feeds it (shapes, that the mask only grows, max_len) and can be
// told to misbehave: perturb its logits, return NaN or throw at a step.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/common/error.hpp"
#include "core/generate/causal_lm.hpp"

namespace gen_test {

struct Tables {
  int64_t vocab = 0, period = 0;
  std::vector<float> a, b, c;  // [V, V], [V + 1, V], [P, V]
};

class ToyLM : public oslo::CausalLM {
 public:
  explicit ToyLM(const Tables* t) : t_(t) {}

  // Adds `delta` to the logit of token (argmax + 1) % V of every row: other
  // logits than the reference model's (what rank 1 gets in the agreement
  // tests).
  double perturb = 0;
  int64_t nan_at_step = -1;     // append number (0 = the prompt) returning NaN
  int64_t throw_at_step = -1;   // append number throwing OSLO_ERR_COMM
  bool ignore_reorder = false;  // a broken cache
  int64_t wrong_size_at_step = -1;

  int64_t appends = 0;  // append calls since the last reset
  int64_t reorders = 0;

  int64_t vocab_size() const override { return t_->vocab; }

  void reset(int64_t rows, int64_t max_len) override {
    OSLO_CHECK(rows > 0 && max_len > 0, OSLO_ERR_INVALID_ARGUMENT, "toy: reset(", rows, ", ",
               max_len, ")");
    rows_ = rows;
    max_len_ = max_len;
    tok_.assign(rows, {});
    mask_.assign(rows, {});
    appends = 0;
    reorders = 0;
  }

  std::vector<float> append(const std::vector<int64_t>& tokens, int64_t n,
                            const std::vector<uint8_t>& mask) override {
    const int64_t past = length();
    OSLO_CHECK(n >= 1 && static_cast<int64_t>(tokens.size()) == rows_ * n, OSLO_ERR_SHAPE,
               "toy: tokens");
    OSLO_CHECK(static_cast<int64_t>(mask.size()) == rows_ * (past + n), OSLO_ERR_SHAPE,
               "toy: mask");
    OSLO_CHECK(past + n <= max_len_, OSLO_ERR_INVALID_ARGUMENT, "toy: beyond max_len");
    const int64_t step = appends++;
    if (step == throw_at_step) oslo::fail(OSLO_ERR_COMM, "toy: peer lost at step ", step);
    const int64_t V = t_->vocab;
    std::vector<float> out(rows_ * V);
    for (int64_t r = 0; r < rows_; ++r) {
      for (int64_t i = 0; i < past; ++i)
        OSLO_CHECK(mask[r * (past + n) + i] == mask_[r][i], OSLO_ERR_INVALID_ARGUMENT,
                   "toy: the mask of an old position changed");
      for (int64_t i = 0; i < n; ++i) {
        const int64_t tk = tokens[r * n + i];
        OSLO_CHECK(tk >= 0 && tk < V, OSLO_ERR_INVALID_ARGUMENT, "toy: token ", tk);
        tok_[r].push_back(tk);
        mask_[r].push_back(mask[r * (past + n) + past + i]);
      }
      logits_of(r, &out[r * V]);
      if (perturb != 0) {
        int64_t best = 0;
        for (int64_t v = 1; v < V; ++v)
          if (out[r * V + v] > out[r * V + best]) best = v;
        out[r * V + (best + 1) % V] += static_cast<float>(perturb);
      }
      if (step == nan_at_step) out[r * V + 1] = std::numeric_limits<float>::quiet_NaN();
    }
    if (step == wrong_size_at_step) out.pop_back();
    return out;
  }

  void reorder(const std::vector<int64_t>& src) override {
    OSLO_CHECK(static_cast<int64_t>(src.size()) == rows_, OSLO_ERR_SHAPE, "toy: reorder size");
    ++reorders;
    if (ignore_reorder) return;
    std::vector<std::vector<int64_t>> t(rows_);
    std::vector<std::vector<uint8_t>> m(rows_);
    for (int64_t i = 0; i < rows_; ++i) {
      OSLO_CHECK(src[i] >= 0 && src[i] < rows_, OSLO_ERR_INVALID_ARGUMENT, "toy: reorder index");
      t[i] = tok_[src[i]];
      m[i] = mask_[src[i]];
    }
    tok_ = std::move(t);
    mask_ = std::move(m);
  }

  int64_t length() const override { return rows_ ? static_cast<int64_t>(tok_[0].size()) : 0; }

  // What row r was fed so far: tokens and mask.
  const std::vector<int64_t>& fed_tokens(int64_t r) const { return tok_[r]; }
  const std::vector<uint8_t>& fed_mask(int64_t r) const { return mask_[r]; }

  // The logits of a row given its real tokens (what the model computes).
  static void logits_for(const Tables& t, const std::vector<int64_t>& real, float* out) {
    const int64_t V = t.vocab, n = static_cast<int64_t>(real.size());
    const int64_t last = real[n - 1], prev = n >= 2 ? real[n - 2] : V;
    const int64_t pos = n % t.period;
    for (int64_t v = 0; v < V; ++v)
      out[v] = (t.a[last * V + v] + t.b[prev * V + v]) + t.c[pos * V + v];
  }

 private:
  void logits_of(int64_t r, float* out) const {
    std::vector<int64_t> real;
    for (size_t i = 0; i < tok_[r].size(); ++i)
      if (mask_[r][i]) real.push_back(tok_[r][i]);
    OSLO_CHECK(!real.empty(), OSLO_ERR_INVALID_ARGUMENT, "toy: a row has no real token");
    logits_for(*t_, real, out);
  }

  const Tables* t_;
  int64_t rows_ = 0, max_len_ = 0;
  std::vector<std::vector<int64_t>> tok_;
  std::vector<std::vector<uint8_t>> mask_;
};

}  // namespace gen_test
