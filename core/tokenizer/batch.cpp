#include "core/tokenizer/batch.hpp"

#include <algorithm>
#include <limits>

#include "core/common/error.hpp"

namespace oslo {

namespace {

// The first n ids (Side::kRight keeps the head) or the last n.
std::vector<int64_t> cut(const std::vector<int64_t>& v, size_t n, Side side) {
  if (v.size() <= n) return v;
  return side == Side::kRight ? std::vector<int64_t>(v.begin(), v.begin() + n)
                              : std::vector<int64_t>(v.end() - n, v.end());
}

// Row `i` cut to o.max_length ids as Hugging Face truncates: the text's ids
// are cut to leave room for the special tokens, which are then added, so
// [CLS] ... [SEP] and BOS stay. The special tokens are what encoding with
// them adds around the ids encoded without them.
std::vector<int64_t> truncate(const Tokenizer& tok, std::string_view text, size_t i,
                              std::vector<int64_t> row, const BatchEncodeOptions& o) {
  if (!o.add_special_tokens) return cut(row, o.max_length, o.truncation_side);
  const std::vector<int64_t> plain = tok.encode(text, false);
  const size_t m = plain.size();
  OSLO_CHECK(m <= row.size(), OSLO_ERR_NOT_SUPPORTED, "text ", i, ": ", row.size(),
             " ids with special tokens but ", m, " without: cannot truncate around them");
  size_t p = 0;
  while (p + m <= row.size() && !std::equal(plain.begin(), plain.end(), row.begin() + p)) ++p;
  OSLO_CHECK(p + m <= row.size(), OSLO_ERR_NOT_SUPPORTED, "text ", i,
             ": the post-processor does not add its special tokens around the text's ids; "
             "cannot truncate around them");
  const size_t special = row.size() - m;
  OSLO_CHECK(o.max_length >= special, OSLO_ERR_INVALID_ARGUMENT, "text ", i, ": max_length ",
             o.max_length, " is shorter than its ", special, " special tokens");
  const std::vector<int64_t> kept = cut(plain, o.max_length - special, o.truncation_side);
  std::vector<int64_t> out(row.begin(), row.begin() + p);
  out.insert(out.end(), kept.begin(), kept.end());
  out.insert(out.end(), row.begin() + p + m, row.end());
  return out;
}

}  // namespace

BatchEncoding encode_batch(const Tokenizer& tok, const std::vector<std::string_view>& texts,
                           const BatchEncodeOptions& o) {
  OSLO_CHECK(!texts.empty(), OSLO_ERR_INVALID_ARGUMENT, "no texts; pass at least one");
  OSLO_CHECK(o.pad_id >= -1, OSLO_ERR_INVALID_ARGUMENT, "pad_id ", o.pad_id,
             " is negative (-1: the tokenizer's padding token)");
  const int64_t pad = o.pad_id >= 0 ? o.pad_id : tok.special_id(SpecialToken::kPad);
  OSLO_CHECK(pad >= 0, OSLO_ERR_INVALID_ARGUMENT,
             "the tokenizer has no padding token: set pad_id (e.g. to its EOS id)");
  OSLO_CHECK(o.max_length > 0 || (!o.truncation && !o.pad_to_max_length), OSLO_ERR_INVALID_ARGUMENT,
             "max_length is 0 but ", o.truncation ? "truncation" : "pad_to_max_length",
             " needs it (at least 1)");
  std::vector<std::vector<int64_t>> rows(texts.size());
  size_t longest = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    try {
      rows[i] = tok.encode(texts[i], o.add_special_tokens);
    } catch (const Error& e) {
      throw Error(e.status(), str("text ", i, ": ", e.what()));
    }
    if (o.max_length > 0 && rows[i].size() > o.max_length) {
      OSLO_CHECK(o.truncation, OSLO_ERR_INVALID_ARGUMENT, "text ", i, " has ", rows[i].size(),
                 " ids, more than max_length ", o.max_length,
                 " (oslo does not truncate unless truncation is set)");
      rows[i] = truncate(tok, texts[i], i, std::move(rows[i]), o);
    }
    longest = std::max(longest, rows[i].size());
  }
  BatchEncoding b;
  b.rows = rows.size();
  b.length = o.pad_to_max_length ? o.max_length : longest;
  OSLO_CHECK(b.length == 0 || b.rows <= std::numeric_limits<size_t>::max() / 8 / b.length,
             OSLO_ERR_OUT_OF_MEMORY, b.rows, " rows of ", b.length,
             " ids overflow the address space");
  b.ids.assign(b.rows * b.length, pad);
  b.mask.assign(b.rows * b.length, 0);
  for (size_t i = 0; i < b.rows; ++i) {
    const std::vector<int64_t>& r = rows[i];
    const size_t start = i * b.length + (o.padding_side == Side::kLeft ? b.length - r.size() : 0);
    std::copy(r.begin(), r.end(), b.ids.begin() + static_cast<ptrdiff_t>(start));
    std::fill_n(b.mask.begin() + static_cast<ptrdiff_t>(start), r.size(), int64_t{1});
  }
  return b;
}

}  // namespace oslo
