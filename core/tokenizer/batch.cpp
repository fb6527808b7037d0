#include "core/tokenizer/batch.hpp"

#include <algorithm>
#include <limits>

#include "core/common/error.hpp"

namespace oslo {

namespace {

// The first n ids of r (Side::kRight keeps the head) or the last n: the
// one truncation of rows of ids and of a text's ids.
IdRow cut(IdRow r, size_t n, Side side) {
  if (r.size <= n) return r;
  if (side == Side::kLeft) r.data += r.size - n;
  r.size = n;
  return r;
}

IdRow view(const std::vector<int64_t>& v) {
  return IdRow{v.data(), v.size()};
}

// The checks of the options alone, before any row is looked at.
void check_options(const PadOptions& o) {
  OSLO_CHECK(o.max_length > 0 || (!o.truncation && !o.pad_to_max_length), OSLO_ERR_INVALID_ARGUMENT,
             "max_length is 0 but ", o.truncation ? "truncation" : "pad_to_max_length",
             " needs it (at least 1)");
}

// Refuses row `i` of `size` ids when it is longer than max_length and
// truncation is off (`what`: "row" or "text").
void check_row_length(const PadOptions& o, const char* what, size_t i, size_t size) {
  OSLO_CHECK(o.max_length == 0 || size <= o.max_length || o.truncation, OSLO_ERR_INVALID_ARGUMENT,
             what, " ", i, " has ", size, " ids, more than max_length ", o.max_length,
             " (oslo does not truncate unless truncation is set)");
}

// Row `i` cut to o.pad.max_length ids as Hugging Face truncates: the text's ids
// are cut to leave room for the special tokens, which are then added, so
// [CLS] ... [SEP] and BOS stay. The special tokens are what encoding with
// them adds around the ids encoded without them.
std::vector<int64_t> truncate(const Tokenizer& tok, std::string_view text, size_t i,
                              std::vector<int64_t> row, const BatchEncodeOptions& o) {
  if (!o.add_special_tokens) {
    const IdRow k = cut(view(row), o.pad.max_length, o.pad.truncation_side);
    return std::vector<int64_t>(k.data, k.data + k.size);
  }
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
  OSLO_CHECK(o.pad.max_length >= special, OSLO_ERR_INVALID_ARGUMENT, "text ", i, ": max_length ",
             o.pad.max_length, " is shorter than its ", special, " special tokens");
  const IdRow kept = cut(view(plain), o.pad.max_length - special, o.pad.truncation_side);
  std::vector<int64_t> out(row.begin(), row.begin() + p);
  out.insert(out.end(), kept.data, kept.data + kept.size);
  out.insert(out.end(), row.begin() + p + m, row.end());
  return out;
}

}  // namespace

BatchEncoding pad_batch(const std::vector<IdRow>& rows, const PadOptions& o) {
  OSLO_CHECK(!rows.empty(), OSLO_ERR_INVALID_ARGUMENT, "no rows; pass at least one");
  OSLO_CHECK(o.pad_id >= 0, OSLO_ERR_INVALID_ARGUMENT, "pad_id ", o.pad_id,
             " is negative; set the id under padding (>= 0)");
  check_options(o);
  // Each row's kept span [begin, begin + size) after truncation.
  std::vector<IdRow> kept(rows.size());
  size_t longest = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    check_row_length(o, "row", i, rows[i].size);
    kept[i] = o.max_length > 0 ? cut(rows[i], o.max_length, o.truncation_side) : rows[i];
    longest = std::max(longest, kept[i].size);
  }
  BatchEncoding b;
  b.rows = rows.size();
  b.length = o.pad_to_max_length ? o.max_length : longest;
  OSLO_CHECK(b.length == 0 || b.rows <= std::numeric_limits<size_t>::max() / 8 / b.length,
             OSLO_ERR_OUT_OF_MEMORY, b.rows, " rows of ", b.length,
             " ids overflow the address space");
  b.ids.assign(b.rows * b.length, o.pad_id);
  b.mask.assign(b.rows * b.length, 0);
  for (size_t i = 0; i < b.rows; ++i) {
    const IdRow& r = kept[i];
    const size_t start = i * b.length + (o.padding_side == Side::kLeft ? b.length - r.size : 0);
    if (r.size) std::copy(r.data, r.data + r.size, b.ids.begin() + static_cast<ptrdiff_t>(start));
    std::fill_n(b.mask.begin() + static_cast<ptrdiff_t>(start), r.size, int64_t{1});
  }
  return b;
}

BatchEncoding encode_batch(const Tokenizer& tok, const std::vector<std::string_view>& texts,
                           const BatchEncodeOptions& o) {
  OSLO_CHECK(!texts.empty(), OSLO_ERR_INVALID_ARGUMENT, "no texts; pass at least one");
  OSLO_CHECK(o.pad.pad_id >= -1, OSLO_ERR_INVALID_ARGUMENT, "pad_id ", o.pad.pad_id,
             " is negative (-1: the tokenizer's padding token)");
  PadOptions p = o.pad;
  if (p.pad_id < 0) p.pad_id = tok.special_id(SpecialToken::kPad);
  OSLO_CHECK(p.pad_id >= 0, OSLO_ERR_INVALID_ARGUMENT,
             "the tokenizer has no padding token: set pad_id (e.g. to its EOS id)");
  check_options(p);
  std::vector<std::vector<int64_t>> rows(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    try {
      rows[i] = tok.encode(texts[i], o.add_special_tokens);
    } catch (const Error& e) {
      throw Error(e.status(), str("text ", i, ": ", e.what()));
    }
    check_row_length(p, "text", i, rows[i].size());
    // Truncated here around the special tokens; pad_batch then finds every
    // row within max_length.
    if (p.max_length > 0 && rows[i].size() > p.max_length)
      rows[i] = truncate(tok, texts[i], i, std::move(rows[i]), o);
  }
  std::vector<IdRow> views(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) views[i] = view(rows[i]);
  return pad_batch(views, p);
}

}  // namespace oslo
