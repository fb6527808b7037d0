// tokenizer.json pre-tokenizers.
#include "core/tokenizer/hf_pipeline.hpp"

namespace oslo {
namespace tok {
namespace hf {
const char* const kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct ByteLevelPre : PreTokenizer {
  bool add_prefix_space = true;
  std::unique_ptr<Regex> regex;  // null: use_regex false
  void split(const Piece& p, Pieces& out) const override {
    Piece q = p;
    if (add_prefix_space && (q.text.empty() || q.text[0] != ' ')) q.text.insert(0, " ");
    Pieces parts;
    if (regex) {
      split_by(q, regex->find_all(q.text), Behavior::kIsolated, false, parts);
    } else if (!q.text.empty()) {
      parts.push_back(q);
    }
    for (auto& r : parts) {
      r.text = byte_table().map(r.text);
      out.push_back(std::move(r));
    }
  }
};

struct SplitPre : PreTokenizer {
  Pattern pattern;
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  void split(const Piece& p, Pieces& out) const override {
    split_by(p, pattern.find(p.text), behavior, invert, out);
  }
};

struct BertPre : PreTokenizer {
  void split(const Piece& p, Pieces& out) const override {
    Pieces words;
    split_by(p, char_matches(p.text, is_whitespace), Behavior::kRemoved, false, words);
    for (auto& w : words)
      split_by(w, char_matches(w.text, is_ascii_or_unicode_punctuation), Behavior::kIsolated, false,
               out);
  }
};

struct WhitespaceSplitPre : PreTokenizer {
  void split(const Piece& p, Pieces& out) const override {
    split_by(p, char_matches(p.text, is_whitespace), Behavior::kRemoved, false, out);
  }
};

struct WhitespacePre : PreTokenizer {
  Regex re{"\\w+|[^\\w\\s]+", "Whitespace pre-tokenizer"};
  void split(const Piece& p, Pieces& out) const override {
    split_by(p, re.find_all(p.text), Behavior::kRemoved, true, out);
  }
};

struct PunctuationPre : PreTokenizer {
  Behavior behavior = Behavior::kIsolated;
  void split(const Piece& p, Pieces& out) const override {
    split_by(p, char_matches(p.text, is_ascii_or_unicode_punctuation), behavior, false, out);
  }
};

struct DigitsPre : PreTokenizer {
  bool individual = false;
  void split(const Piece& p, Pieces& out) const override {
    split_by(p, char_matches(p.text, [](uint32_t c) { return c >= '0' && c <= '9'; }),
             individual ? Behavior::kIsolated : Behavior::kContiguous, false, out);
  }
};

struct CharDelimiterPre : PreTokenizer {
  uint32_t delimiter = ' ';
  void split(const Piece& p, Pieces& out) const override {
    uint32_t d = delimiter;
    split_by(p, char_matches(p.text, [d](uint32_t c) { return c == d; }), Behavior::kRemoved, false,
             out);
  }
};

struct MetaspacePre : PreTokenizer {
  std::string rep;  // the replacement character, UTF-8
  Prepend scheme = Prepend::kAlways;
  bool split_ = true;
  void split(const Piece& p, Pieces& out) const override {
    Piece q{replace_all(p.text, " ", rep), -1, p.first};
    const bool starts = q.text.compare(0, rep.size(), rep) == 0;
    if (!starts && (scheme == Prepend::kAlways || (scheme == Prepend::kFirst && q.first)))
      q.text.insert(0, rep);
    if (split_)
      split_by(q, literal_matches(q.text, rep), Behavior::kMergedWithNext, false, out);
    else if (!q.text.empty())
      out.push_back(std::move(q));
  }
};

struct SequencePre : PreTokenizer {
  std::vector<std::unique_ptr<PreTokenizer>> items;
  void split(const Piece& p, Pieces& out) const override {
    Pieces cur{p};
    for (auto& t : items) t->apply(cur);
    for (auto& c : cur) out.push_back(std::move(c));
  }
};

Behavior parse_behavior(const Parser& P, const json& j, const std::string& where, Behavior dflt) {
  const json* b = P.get(j, "behavior");
  if (!b) return dflt;
  std::string s = P.string(*b, where + ".behavior");
  if (s == "Removed") return Behavior::kRemoved;
  if (s == "Isolated") return Behavior::kIsolated;
  if (s == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return Behavior::kMergedWithNext;
  if (s == "Contiguous") return Behavior::kContiguous;
  P.bad(where + ".behavior", "unknown split behavior ", quote(s));
}

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const Parser& P, const json& j,
                                                  const std::string& where, int depth) {
  if (depth > 8) P.bad(where, "pre-tokenizers nested too deeply");
  const std::string t = P.type(j, where);
  if (t == "ByteLevel") {
    auto p = std::make_unique<ByteLevelPre>();
    p->add_prefix_space = P.boolean(j, "add_prefix_space", where, true);
    if (P.boolean(j, "use_regex", where, true))
      p->regex = std::make_unique<Regex>(kGpt2Regex, "ByteLevel pre-tokenizer");
    return p;
  }
  if (t == "Split") {
    auto p = std::make_unique<SplitPre>();
    p->pattern = parse_pattern(P, P.need(j, "pattern", where), where + ".pattern");
    p->behavior = parse_behavior(P, j, where, Behavior::kIsolated);
    p->invert = P.boolean(j, "invert", where, false);
    return p;
  }
  if (t == "BertPreTokenizer") return std::make_unique<BertPre>();
  if (t == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPre>();
  if (t == "Whitespace") return std::make_unique<WhitespacePre>();
  if (t == "Punctuation") {
    auto p = std::make_unique<PunctuationPre>();
    p->behavior = parse_behavior(P, j, where, Behavior::kIsolated);
    return p;
  }
  if (t == "Digits") {
    auto p = std::make_unique<DigitsPre>();
    p->individual = P.boolean(j, "individual_digits", where, false);
    return p;
  }
  if (t == "CharDelimiterSplit") {
    auto p = std::make_unique<CharDelimiterPre>();
    p->delimiter = P.character(j, "delimiter", where);
    return p;
  }
  if (t == "Metaspace") {
    auto p = std::make_unique<MetaspacePre>();
    append_utf8(p->rep, P.character(j, "replacement", where));
    p->scheme = parse_prepend(P, j, where);
    p->split_ = P.boolean(j, "split", where, true);
    return p;
  }
  if (t == "Sequence") {
    auto p = std::make_unique<SequencePre>();
    const json& items = P.array(P.need(j, "pretokenizers", where), where + ".pretokenizers");
    for (size_t i = 0; i < items.size(); ++i)
      p->items.push_back(parse_pre_tokenizer(
          P, items[i], where + ".pretokenizers[" + std::to_string(i) + "]", depth + 1));
    return p;
  }
  if (known_unsupported(t)) P.unsupported(where, "pre-tokenizer ", quote(t));
  P.bad(where, "unknown pre_tokenizer type ", quote(t));
}

}  // namespace hf
}  // namespace tok
}  // namespace oslo
