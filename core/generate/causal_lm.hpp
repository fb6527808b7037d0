// What generation needs from a causal language model: feed new tokens for a
// batch of rows (each row one sequence: a prompt, or one beam), get the next
// token's logits, and reorder rows of the KV cache for beam search.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/common/error.hpp"
#include "oslo.h"

namespace oslo {

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  // Vocabulary size of the logits (the real one, without padding).
  virtual int64_t vocab_size() const = 0;
  // Starts a new batch of `rows` empty sequences able to grow to `max_len`
  // positions (prompt + generated). Drops any previous cache.
  virtual void reset(int64_t rows, int64_t max_len) = 0;
  // The KV cache's storage from the next reset() on: OSLO_DTYPE_F32, or
  // OSLO_DTYPE_I8 where the model keeps an int8 cache (one f32 scale per
  // token and KV head). The default keeps f32 only: anything else throws
  // OSLO_ERR_NOT_SUPPORTED.
  virtual void set_kv_dtype(oslo_dtype dt) {
    OSLO_CHECK(dt == OSLO_DTYPE_F32, OSLO_ERR_NOT_SUPPORTED,
               "this model keeps its KV cache in f32 only");
  }
  // Appends `n` tokens to every row. tokens is [rows, n] row-major; mask is
  // [rows, past + n] (1 = real token, 0 = padding) covering every position so
  // far including the new ones (left padding is how batched prompts of
  // different lengths are fed). Returns the logits of the last new position
  // of every row, [rows, vocab_size()] f32 row-major, bitwise identical on
  // every tensor-parallel rank. Collective over the tensor group.
  virtual std::vector<float> append(const std::vector<int64_t>& tokens, int64_t n,
                                    const std::vector<uint8_t>& mask) = 0;
  // The greedy choice of one row: the largest logit's token (the lowest
  // token among equal logits) and the logit; NaN when any logit of the row
  // is NaN (the token is then the first NaN's).
  struct Choice {
    int64_t token;
    float logit;
  };
  // As append(), but returns only every row's greedy choice: a model can
  // pick it where the logits live (each tensor-parallel rank over its slice
  // of the vocabulary, then one small exchange) instead of bringing
  // [rows, vocab] logits to the host. Identical on every rank. The default
  // takes the argmax of append()'s logits.
  virtual std::vector<Choice> append_argmax(const std::vector<int64_t>& tokens, int64_t n,
                                            const std::vector<uint8_t>& mask) {
    const std::vector<float> logits = append(tokens, n, mask);
    const int64_t V = vocab_size();
    const int64_t rows = V > 0 ? static_cast<int64_t>(logits.size()) / V : 0;
    std::vector<Choice> out(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      const float* p = logits.data() + r * V;
      Choice c{0, p[0]};
      for (int64_t v = 1; v < V && c.logit == c.logit; ++v)
        if (p[v] > c.logit || p[v] != p[v]) c = Choice{v, p[v]};
      out[static_cast<size_t>(r)] = c;
    }
    return out;
  }
  // Reorders the rows of the cache: new row i = old row src[i]
  // (src.size() == rows; indices may repeat).
  virtual void reorder(const std::vector<int64_t>& src) = 0;
  // Positions appended so far (the same for every row).
  virtual int64_t length() const = 0;
};

}  // namespace oslo
