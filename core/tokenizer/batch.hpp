// Ragged batches: texts encoded into one padded [rows, length] matrix of ids
// and its attention mask, with Hugging Face's padding (longest or
// max_length, right or left) and truncation (to max_length, the special
// tokens kept, from the right or the left). oslo_tokenizer_encode_batch in
// oslo.h is its C face and every binding's batch encoding goes through it.
// pad_batch is the same padding and truncation for rows that are already
// ids (oslo_pad_batch); encode_batch pads through it, so both share one
// implementation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/tokenizer/tokenizer.hpp"

namespace oslo {

// Which end of a row padding fills or truncation cuts.
enum class Side { kRight = 0, kLeft = 1 };

// What encode_batch returns: ids and mask, row-major [rows, length]; the
// mask is 1 on real tokens, 0 on padding.
struct BatchEncoding {
  size_t rows = 0;
  size_t length = 0;
  std::vector<int64_t> ids;
  std::vector<int64_t> mask;
};

// Padding and truncation of a batch's rows.
struct PadOptions {
  Side padding_side = Side::kRight;
  // The id under padding, >= 0 (encode_batch also takes -1: the
  // tokenizer's PAD token, an error if it has none).
  int64_t pad_id = -1;
  // 0: no limit; else the most ids a row may hold.
  size_t max_length = 0;
  // A row longer than max_length is cut (true) or refused (false).
  bool truncation = false;
  // The end truncation removes ids from (encode_batch keeps the special
  // tokens).
  Side truncation_side = Side::kRight;
  // Rows padded to max_length rather than to the longest row.
  bool pad_to_max_length = false;
};

struct BatchEncodeOptions {
  bool add_special_tokens = true;
  PadOptions pad;
};

// A row of ids the caller owns, read during the call only.
struct IdRow {
  const int64_t* data = nullptr;
  size_t size = 0;
};

// Pads `rows` (at least one) into [rows, L] ids and mask: L is the longest
// row (after cutting rows longer than max_length when truncation is set) or
// max_length with pad_to_max_length. Errors (oslo::Error, messages naming
// the row by index): OSLO_ERR_INVALID_ARGUMENT (no rows, pad_id below 0,
// max_length 0 with truncation or pad_to_max_length, a row longer than
// max_length without truncation), OSLO_ERR_OUT_OF_MEMORY (rows * L
// overflows).
BatchEncoding pad_batch(const std::vector<IdRow>& rows, const PadOptions& o);

// Encodes `texts` (at least one) as described above. Errors (oslo::Error,
// messages naming the text by index): OSLO_ERR_INVALID_ARGUMENT (no texts,
// pad_id below -1, no pad id, max_length 0 with truncation or
// pad_to_max_length, a row longer than max_length without truncation,
// max_length shorter than a row's special tokens, text not UTF-8),
// OSLO_ERR_NOT_SUPPORTED (truncation of a row whose post-processor does not
// wrap the text's ids as they are), OSLO_ERR_OUT_OF_MEMORY.
BatchEncoding encode_batch(const Tokenizer& tok, const std::vector<std::string_view>& texts,
                           const BatchEncodeOptions& o);

}  // namespace oslo
