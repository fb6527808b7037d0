// What generation needs from a causal language model: feed new tokens for a
// batch of rows (each row one sequence: a prompt, or one beam), get the next
// token's logits, and reorder rows of the KV cache for beam search.
#pragma once

#include <cstdint>
#include <vector>

namespace oslo {

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  // Vocabulary size of the logits (the real one, without padding).
  virtual int64_t vocab_size() const = 0;
  // Starts a new batch of `rows` empty sequences able to grow to `max_len`
  // positions (prompt + generated). Drops any previous cache.
  virtual void reset(int64_t rows, int64_t max_len) = 0;
  // Appends `n` tokens to every row. tokens is [rows, n] row-major; mask is
  // [rows, past + n] (1 = real token, 0 = padding) covering every position so
  // far including the new ones (left padding is how batched prompts of
  // different lengths are fed). Returns the logits of the last new position
  // of every row, [rows, vocab_size()] f32 row-major, bitwise identical on
  // every tensor-parallel rank. Collective over the tensor group.
  virtual std::vector<float> append(const std::vector<int64_t>& tokens, int64_t n,
                                    const std::vector<uint8_t>& mask) = 0;
  // Reorders the rows of the cache: new row i = old row src[i]
  // (src.size() == rows; indices may repeat).
  virtual void reorder(const std::vector<int64_t>& src) = 0;
  // Positions appended so far (the same for every row).
  virtual int64_t length() const = 0;
};

}  // namespace oslo
