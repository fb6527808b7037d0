// Hugging Face tokenizer.json: the pipeline of the `tokenizers` library
// (added tokens -> normalizer -> pre-tokenizer -> model -> post-processor;
// decoder for the way back), re-implemented step by step after its Rust
// sources so that ids match exactly. Offsets are not tracked: oslo needs ids.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/common/error.hpp"
#include "core/tokenizer/internal.hpp"
#include "core/tokenizer/regex.hpp"
#include "core/tokenizer/unicode.hpp"

namespace oslo {
namespace tok {
namespace {

using json = nlohmann::json;

// ---------------------------------------------------------------- parsing --

// Typed access to the JSON with errors naming the file and the field.
class Parser {
 public:
  explicit Parser(std::string name) : name_(std::move(name)) {}
  const std::string& name() const { return name_; }

  template <typename... Parts>
  [[noreturn]] void bad(const std::string& where, Parts&&... parts) const {
    fail(OSLO_ERR_FORMAT, name_, ": ", where, ": ", std::forward<Parts>(parts)...);
  }
  template <typename... Parts>
  [[noreturn]] void unsupported(const std::string& where, Parts&&... parts) const {
    fail(OSLO_ERR_NOT_SUPPORTED, name_, ": ", where, ": ", std::forward<Parts>(parts)...,
         " is not supported by oslo's tokenizers (see docs/TOKENIZERS.md)");
  }

  const json& object(const json& j, const std::string& where) const {
    if (!j.is_object()) bad(where, "expected an object, found ", type_name(j));
    return j;
  }
  const json& array(const json& j, const std::string& where) const {
    if (!j.is_array()) bad(where, "expected an array, found ", type_name(j));
    return j;
  }
  // The member, or nullptr if absent or null.
  const json* get(const json& o, const char* key) const {
    auto it = o.find(key);
    if (it == o.end() || it->is_null()) return nullptr;
    return &*it;
  }
  const json& need(const json& o, const char* key, const std::string& where) const {
    const json* v = get(o, key);
    if (!v) bad(where, "missing '", key, "'");
    return *v;
  }
  bool boolean(const json& o, const char* key, const std::string& where, bool dflt) const {
    const json* v = get(o, key);
    if (!v) return dflt;
    if (!v->is_boolean()) bad(where + "." + key, "expected true or false, found ", type_name(*v));
    return v->get<bool>();
  }
  std::string string(const json& v, const std::string& where) const {
    if (!v.is_string()) bad(where, "expected a string, found ", type_name(v));
    const std::string& s = v.get_ref<const std::string&>();
    if (invalid_utf8_at(s) != std::string::npos) bad(where, "string is not valid UTF-8");
    return s;
  }
  std::string string(const json& o, const char* key, const std::string& where) const {
    return string(need(o, key, where), where + "." + key);
  }
  std::optional<std::string> opt_string(const json& o, const char* key,
                                        const std::string& where) const {
    const json* v = get(o, key);
    if (!v) return std::nullopt;
    return string(*v, where + "." + key);
  }
  // A token id: an integer in [0, 2^31 - 1).
  int32_t id(const json& v, const std::string& where) const {
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u < static_cast<uint64_t>(INT32_MAX)) return static_cast<int32_t>(u);
    } else if (v.is_number_integer()) {
      int64_t i = v.get<int64_t>();
      if (i >= 0 && i < INT32_MAX) return static_cast<int32_t>(i);
    }
    bad(where, "expected a token id (an integer in [0, 2147483647)), found ", clip(v.dump(), 40));
  }
  uint64_t count(const json& o, const char* key, const std::string& where, uint64_t dflt) const {
    const json* v = get(o, key);
    if (!v) return dflt;
    if (v->is_number_unsigned()) return v->get<uint64_t>();
    if (v->is_number_integer() && v->get<int64_t>() >= 0) return v->get<uint64_t>();
    bad(where + "." + key, "expected a non-negative integer, found ", clip(v->dump(), 40));
  }
  // One Unicode character (replacement, content of Strip).
  uint32_t character(const json& o, const char* key, const std::string& where) const {
    std::string s = string(o, key, where);
    size_t i = 0;
    if (s.empty()) bad(where + "." + key, "expected one character, found an empty string");
    uint32_t cp = next_cp(s, i);
    if (i != s.size()) bad(where + "." + key, "expected one character, found ", quote(s));
    return cp;
  }
  std::string type(const json& o, const std::string& where) const {
    object(o, where);
    return string(o, "type", where);
  }

  static const char* type_name(const json& j) {
    switch (j.type()) {
      case json::value_t::null: return "null";
      case json::value_t::object: return "an object";
      case json::value_t::array: return "an array";
      case json::value_t::string: return "a string";
      case json::value_t::boolean: return "a boolean";
      case json::value_t::number_integer:
      case json::value_t::number_unsigned: return "an integer";
      case json::value_t::number_float: return "a number";
      default: return "a value";
    }
  }

 private:
  std::string name_;
};

// --------------------------------------------------------------- pieces --

// A part of the text on its way through the pipeline: either still text, or
// already a token (an added token). `first` is Hugging Face's "starts at
// offset 0 of the original text" (Metaspace's prepend_scheme "first").
struct Piece {
  std::string text;
  int32_t id = -1;
  bool first = false;
};
using Pieces = std::vector<Piece>;

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// NormalizedString::split: `matches` are sorted, non-overlapping byte ranges.
void split_by(const Piece& p, const std::vector<std::pair<size_t, size_t>>& matches,
              Behavior behavior, bool invert, Pieces& out) {
  const std::string& s = p.text;
  // (range, is_match) covering s, as Pattern::find_matches returns it.
  struct Part {
    size_t a, b;
    bool m;
  };
  std::vector<Part> parts;
  if (s.empty()) {
    parts.push_back({0, 0, false});
  } else {
    size_t prev = 0;
    for (auto& [a, b] : matches) {
      if (prev != a) parts.push_back({prev, a, false});
      parts.push_back({a, b, true});
      prev = b;
    }
    if (prev != s.size()) parts.push_back({prev, s.size(), false});
  }
  if (invert)
    for (auto& q : parts) q.m = !q.m;
  // (range, remove)
  std::vector<Part> res;
  switch (behavior) {
    case Behavior::kIsolated:
      for (auto& q : parts) res.push_back({q.a, q.b, false});
      break;
    case Behavior::kRemoved: res = parts; break;
    case Behavior::kContiguous: {
      bool prev_match = false;
      for (auto& q : parts) {
        if (q.m == prev_match && !res.empty())
          res.back().b = q.b;
        else
          res.push_back({q.a, q.b, false});
        prev_match = q.m;
      }
      break;
    }
    case Behavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (auto& q : parts) {
        if (q.m && !prev_match && !res.empty())
          res.back().b = q.b;
        else
          res.push_back({q.a, q.b, false});
        prev_match = q.m;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool prev_match = false;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->m && !prev_match && !res.empty())
          res.back().a = it->a;
        else
          res.push_back({it->a, it->b, false});
        prev_match = it->m;
      }
      std::reverse(res.begin(), res.end());
      break;
    }
  }
  for (auto& q : res) {
    if (q.m || q.b <= q.a) continue;  // removed, or empty (dropped by PreTokenizedString)
    out.push_back(Piece{s.substr(q.a, q.b - q.a), -1, p.first && q.a == 0});
  }
}

// Byte ranges of each character satisfying pred.
template <typename Pred>
std::vector<std::pair<size_t, size_t>> char_matches(const std::string& s, Pred pred) {
  std::vector<std::pair<size_t, size_t>> m;
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    uint32_t cp = next_cp(s, i);
    if (pred(cp)) m.emplace_back(start, i);
  }
  return m;
}

std::vector<std::pair<size_t, size_t>> literal_matches(const std::string& s,
                                                       const std::string& lit) {
  std::vector<std::pair<size_t, size_t>> m;
  if (lit.empty()) return m;
  for (size_t pos = s.find(lit); pos != std::string::npos; pos = s.find(lit, pos + lit.size()))
    m.emplace_back(pos, pos + lit.size());
  return m;
}

// A {"String": ...} or {"Regex": ...} pattern.
struct Pattern {
  std::string literal;
  std::unique_ptr<Regex> regex;
  std::vector<std::pair<size_t, size_t>> find(const std::string& s) const {
    return regex ? regex->find_all(s) : literal_matches(s, literal);
  }
};

Pattern parse_pattern(const Parser& P, const json& j, const std::string& where) {
  P.object(j, where);
  Pattern p;
  if (const json* s = P.get(j, "String")) {
    p.literal = P.string(*s, where + ".String");
  } else if (const json* r = P.get(j, "Regex")) {
    p.regex = std::make_unique<Regex>(P.string(*r, where + ".Regex"), P.name() + ": " + where);
  } else {
    P.bad(where, "expected {\"String\": ...} or {\"Regex\": ...}");
  }
  return p;
}

std::string replace_pattern(const std::string& s, const Pattern& pat, const std::string& content) {
  auto m = pat.find(s);
  if (m.empty()) return s;
  std::string out;
  size_t prev = 0;
  for (auto& [a, b] : m) {
    out.append(s, prev, a - prev);
    out += content;
    prev = b;
  }
  out.append(s, prev, std::string::npos);
  return out;
}

// ------------------------------------------------------------ normalizers --

struct Normalizer {
  virtual ~Normalizer() = default;
  virtual std::string apply(const std::string& s) const = 0;
};

bool is_chinese_char(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::string lowercase(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_lowercase(out, next_cp(s, i));
  return out;
}

std::string strip_marks(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    uint32_t cp = next_cp(s, i);
    if (!is_mark_nonspacing(cp)) out.append(s, start, i - start);
  }
  return out;
}

struct BertNormalizer : Normalizer {
  bool clean_text = true, chinese = true, strip_accents = true, lower = true;
  std::string apply(const std::string& s) const override {
    std::string t;
    t.reserve(s.size() + 8);
    for (size_t i = 0; i < s.size();) {
      size_t start = i;
      uint32_t cp = next_cp(s, i);
      if (clean_text) {
        if (cp == 0 || cp == 0xFFFD || is_control_bert(cp)) continue;
        if (is_whitespace(cp)) {
          t += ' ';
          continue;
        }
      }
      if (chinese && is_chinese_char(cp)) {
        t += ' ';
        t.append(s, start, i - start);
        t += ' ';
        continue;
      }
      t.append(s, start, i - start);
    }
    if (strip_accents) t = strip_marks(normalize(t, NormForm::kNFD));
    if (lower) t = lowercase(t);
    return t;
  }
};

struct UnicodeNormalizer : Normalizer {
  NormForm form;
  explicit UnicodeNormalizer(NormForm f) : form(f) {}
  std::string apply(const std::string& s) const override { return normalize(s, form); }
};

struct LowercaseNormalizer : Normalizer {
  std::string apply(const std::string& s) const override { return lowercase(s); }
};

struct StripAccentsNormalizer : Normalizer {
  std::string apply(const std::string& s) const override { return strip_marks(s); }
};

struct StripNormalizer : Normalizer {
  bool left = true, right = true;
  std::string apply(const std::string& s) const override {
    size_t a = 0, b = s.size();
    if (left) {
      for (size_t i = 0; i < s.size();) {
        size_t start = i;
        if (!is_whitespace(next_cp(s, i))) {
          a = start;
          break;
        }
        a = i;
      }
    }
    if (right) {
      size_t last_end = a;
      for (size_t i = a; i < s.size();) {
        if (!is_whitespace(next_cp(s, i))) last_end = i;
      }
      b = last_end;
    }
    return s.substr(a, b > a ? b - a : 0);
  }
};

struct ReplaceNormalizer : Normalizer {
  Pattern pattern;
  std::string content;
  std::string apply(const std::string& s) const override {
    return replace_pattern(s, pattern, content);
  }
};

struct PrependNormalizer : Normalizer {
  std::string prepend;
  std::string apply(const std::string& s) const override { return s.empty() ? s : prepend + s; }
};

// The GPT-2 byte <-> character table.
struct ByteTable {
  std::string byte_to_utf8[256];
  int16_t char_to_byte[0x200];
  ByteTable() {
    std::vector<int> bs;
    for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
    for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
    for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
    uint32_t cs[256];
    for (int b : bs) cs[b] = static_cast<uint32_t>(b);
    int n = 0;
    for (int b = 0; b < 256; ++b)
      if (std::find(bs.begin(), bs.end(), b) == bs.end()) cs[b] = 256 + n++;
    for (auto& v : char_to_byte) v = -1;
    for (int b = 0; b < 256; ++b) {
      append_utf8(byte_to_utf8[b], cs[b]);
      char_to_byte[cs[b]] = static_cast<int16_t>(b);
    }
  }
  std::string map(const std::string& s) const {
    std::string out;
    out.reserve(s.size() * 2);
    for (unsigned char c : s) out += byte_to_utf8[c];
    return out;
  }
};
const ByteTable& byte_table() {
  static const ByteTable t;
  return t;
}

struct ByteLevelNormalizer : Normalizer {
  std::string apply(const std::string& s) const override { return byte_table().map(s); }
};

struct SequenceNormalizer : Normalizer {
  std::vector<std::unique_ptr<Normalizer>> items;
  std::string apply(const std::string& s) const override {
    std::string t = s;
    for (auto& n : items) t = n->apply(t);
    return t;
  }
};

bool known_unsupported(const std::string& type) {
  static const char* kNames[] = {"Precompiled",    "Nmt",         "Unigram", "WordLevel",
                                 "UnicodeScripts", "FixedLength", "CTC",     "Punctuation_"};
  for (const char* n : kNames)
    if (type == n) return true;
  return false;
}

std::unique_ptr<Normalizer> parse_normalizer(const Parser& P, const json& j,
                                             const std::string& where, int depth = 0) {
  if (depth > 8) P.bad(where, "normalizers nested too deeply");
  const std::string t = P.type(j, where);
  if (t == "BertNormalizer") {
    auto n = std::make_unique<BertNormalizer>();
    n->clean_text = P.boolean(j, "clean_text", where, true);
    n->chinese = P.boolean(j, "handle_chinese_chars", where, true);
    n->lower = P.boolean(j, "lowercase", where, true);
    n->strip_accents = P.boolean(j, "strip_accents", where, n->lower);
    return n;
  }
  if (t == "NFC") return std::make_unique<UnicodeNormalizer>(NormForm::kNFC);
  if (t == "NFD") return std::make_unique<UnicodeNormalizer>(NormForm::kNFD);
  if (t == "NFKC") return std::make_unique<UnicodeNormalizer>(NormForm::kNFKC);
  if (t == "NFKD") return std::make_unique<UnicodeNormalizer>(NormForm::kNFKD);
  if (t == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (t == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  if (t == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (t == "Strip") {
    auto n = std::make_unique<StripNormalizer>();
    n->left = P.boolean(j, "strip_left", where, true);
    n->right = P.boolean(j, "strip_right", where, true);
    return n;
  }
  if (t == "Replace") {
    auto n = std::make_unique<ReplaceNormalizer>();
    n->pattern = parse_pattern(P, P.need(j, "pattern", where), where + ".pattern");
    n->content = P.string(j, "content", where);
    return n;
  }
  if (t == "Prepend") {
    auto n = std::make_unique<PrependNormalizer>();
    n->prepend = P.string(j, "prepend", where);
    return n;
  }
  if (t == "Sequence") {
    auto n = std::make_unique<SequenceNormalizer>();
    const json& items = P.array(P.need(j, "normalizers", where), where + ".normalizers");
    for (size_t i = 0; i < items.size(); ++i)
      n->items.push_back(parse_normalizer(
          P, items[i], where + ".normalizers[" + std::to_string(i) + "]", depth + 1));
    return n;
  }
  if (known_unsupported(t)) P.unsupported(where, "normalizer ", quote(t));
  P.bad(where, "unknown normalizer type ", quote(t));
}

// ---------------------------------------------------------- pre-tokenizers --

struct PreTokenizer {
  virtual ~PreTokenizer() = default;
  // Splits one text piece into `out` (empty pieces dropped).
  virtual void split(const Piece& p, Pieces& out) const = 0;
  void apply(Pieces& pieces) const {
    Pieces out;
    out.reserve(pieces.size() * 2);
    for (auto& p : pieces) {
      if (p.id >= 0)
        out.push_back(std::move(p));
      else
        split(p, out);
    }
    pieces.swap(out);
  }
};

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
      split_by(w, char_matches(w.text, is_bert_punctuation), Behavior::kIsolated, false, out);
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
    split_by(p, char_matches(p.text, is_bert_punctuation), behavior, false, out);
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

enum class Prepend { kAlways, kFirst, kNever };

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

Prepend parse_prepend(const Parser& P, const json& j, const std::string& where) {
  Prepend scheme = Prepend::kAlways;
  if (const json* s = P.get(j, "prepend_scheme")) {
    std::string v = P.string(*s, where + ".prepend_scheme");
    if (v == "always")
      scheme = Prepend::kAlways;
    else if (v == "first")
      scheme = Prepend::kFirst;
    else if (v == "never")
      scheme = Prepend::kNever;
    else
      P.bad(where + ".prepend_scheme", "unknown prepend scheme ", quote(v));
  }
  if (P.get(j, "add_prefix_space") && !P.boolean(j, "add_prefix_space", where, true))
    scheme = Prepend::kNever;
  return scheme;
}

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const Parser& P, const json& j,
                                                  const std::string& where, int depth = 0) {
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

// ----------------------------------------------------------------- models --

struct Model {
  virtual ~Model() = default;
  virtual void tokenize(const std::string& s, std::vector<int64_t>& out) const = 0;
  std::unordered_map<std::string, int32_t> vocab;
  std::unordered_map<int32_t, std::string> vocab_r;
  std::optional<std::string> unk_token;
};

void parse_vocab(const Parser& P, const json& j, const std::string& where, Model& m) {
  const json& v = P.object(P.need(j, "vocab", where), where + ".vocab");
  m.vocab.reserve(v.size());
  m.vocab_r.reserve(v.size());
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (invalid_utf8_at(it.key()) != std::string::npos)
      P.bad(where + ".vocab", "a token is not valid UTF-8");
    int32_t id = P.id(it.value(), where + ".vocab[" + quote(it.key(), '"', 60) + "]");
    m.vocab[it.key()] = id;
    m.vocab_r[id] = it.key();
  }
}

struct BPE : Model {
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<uint32_t, int32_t>> merges;
  std::optional<std::string> prefix, suffix;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
  int32_t unk_id = -1;
  int32_t byte_ids[256];

  struct Symbol {
    int32_t c;
    int32_t prev, next;
    size_t len;
  };

  const std::pair<uint32_t, int32_t>* merge(int32_t a, int32_t b) const {
    auto it = merges.find(static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32 |
                          static_cast<uint32_t>(b));
    return it == merges.end() ? nullptr : &it->second;
  }

  void tokenize(const std::string& w, std::vector<int64_t>& out) const override {
    if (w.empty()) return;
    if (ignore_merges) {
      auto it = vocab.find(w);
      if (it != vocab.end()) {
        out.push_back(it->second);
        return;
      }
    }
    // merge_word: initial symbols.
    std::vector<Symbol> sym;
    sym.reserve(w.size());
    auto add = [&sym](int32_t c, size_t len) {
      int32_t n = static_cast<int32_t>(sym.size());
      sym.push_back({c, n - 1, n + 1, len});
    };
    int32_t unk = -1;
    size_t unk_len = 0;
    std::string s;
    for (size_t i = 0; i < w.size();) {
      const size_t start = i;
      next_cp(w, i);
      const bool is_first = start == 0, is_last = i >= w.size();
      const size_t byte_len = i - start;
      s.assign(w, start, byte_len);
      if (!is_first && prefix) s.insert(0, *prefix);
      if (is_last && suffix) s += *suffix;
      auto it = vocab.find(s);
      if (it != vocab.end()) {
        if (unk >= 0) {
          add(unk, unk_len);
          unk = -1;
        }
        add(it->second, byte_len);
        continue;
      }
      if (byte_fallback) {
        bool all = true;
        for (unsigned char b : s) all = all && byte_ids[b] >= 0;
        if (all) {
          for (unsigned char b : s) add(byte_ids[b], 1);
          continue;
        }
      }
      if (unk_token) {
        if (unk >= 0 && fuse_unk) {
          unk_len += byte_len;
        } else {
          if (unk >= 0) add(unk, unk_len);
          unk = unk_id;
          unk_len = byte_len;
        }
      }
    }
    if (unk >= 0) add(unk, unk_len);
    if (sym.empty()) return;
    sym.back().next = -1;

    // merge_all: lowest rank first, then leftmost.
    struct M {
      size_t pos;
      uint32_t rank;
      int32_t new_id;
      bool operator<(const M& o) const {  // priority_queue pops the largest
        return rank != o.rank ? rank > o.rank : pos > o.pos;
      }
    };
    std::priority_queue<M> q;
    for (size_t i = 0; i + 1 < sym.size(); ++i)
      if (auto m = merge(sym[i].c, sym[i + 1].c)) q.push({i, m->first, m->second});
    while (!q.empty()) {
      M top = q.top();
      q.pop();
      Symbol& cur = sym[top.pos];
      if (cur.len == 0 || cur.next == -1) continue;
      const size_t next_pos = static_cast<size_t>(cur.next);
      const Symbol right = sym[next_pos];
      auto m = merge(cur.c, right.c);
      if (!m || m->second != top.new_id) continue;
      cur.c = top.new_id;
      cur.len += right.len;
      cur.next = right.next;
      sym[next_pos].len = 0;
      if (right.next >= 0 && static_cast<size_t>(right.next) < sym.size())
        sym[right.next].prev = static_cast<int32_t>(top.pos);
      if (cur.prev >= 0) {
        if (auto pm = merge(sym[cur.prev].c, cur.c))
          q.push({static_cast<size_t>(cur.prev), pm->first, pm->second});
      }
      if (cur.next >= 0 && static_cast<size_t>(cur.next) < sym.size()) {
        if (auto nm = merge(cur.c, sym[cur.next].c)) q.push({top.pos, nm->first, nm->second});
      }
    }
    for (auto& x : sym)
      if (x.len) out.push_back(x.c);
  }
};

std::unique_ptr<Model> parse_bpe(const Parser& P, const json& j, const std::string& where) {
  auto m = std::make_unique<BPE>();
  parse_vocab(P, j, where, *m);
  if (const json* d = P.get(j, "dropout")) {
    if (!d->is_number()) P.bad(where + ".dropout", "expected a number or null");
    if (d->get<double>() != 0.0) P.unsupported(where + ".dropout", "BPE dropout");
  }
  m->unk_token = P.opt_string(j, "unk_token", where);
  m->prefix = P.opt_string(j, "continuing_subword_prefix", where);
  m->suffix = P.opt_string(j, "end_of_word_suffix", where);
  if (m->prefix && m->prefix->empty()) m->prefix.reset();
  if (m->suffix && m->suffix->empty()) m->suffix.reset();
  m->fuse_unk = P.boolean(j, "fuse_unk", where, false);
  m->byte_fallback = P.boolean(j, "byte_fallback", where, false);
  m->ignore_merges = P.boolean(j, "ignore_merges", where, false);
  if (m->unk_token) {
    auto it = m->vocab.find(*m->unk_token);
    if (it == m->vocab.end())
      P.bad(where + ".unk_token", "unk token ", quote(*m->unk_token), " is not in the vocab");
    m->unk_id = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    snprintf(buf, sizeof buf, "<0x%02X>", b);
    auto it = m->vocab.find(buf);
    m->byte_ids[b] = it == m->vocab.end() ? -1 : it->second;
  }
  const json* merges = P.get(j, "merges");
  if (!merges) return m;
  P.array(*merges, where + ".merges");
  m->merges.reserve(merges->size());
  const std::string& pre = m->prefix ? *m->prefix : std::string();
  for (size_t i = 0; i < merges->size(); ++i) {
    const std::string w = where + ".merges[" + std::to_string(i) + "]";
    const json& e = (*merges)[i];
    std::string a, b;
    if (e.is_string()) {
      std::string s = P.string(e, w);
      size_t sp = s.find(' ');
      if (sp == std::string::npos) P.bad(w, "merge ", quote(s), " is not two tokens");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2) {
      a = P.string(e[0], w + "[0]");
      b = P.string(e[1], w + "[1]");
    } else {
      P.bad(w, "expected \"a b\" or [\"a\", \"b\"]");
    }
    auto ia = m->vocab.find(a), ib = m->vocab.find(b);
    if (ia == m->vocab.end()) P.bad(w, "merge token ", quote(a), " is not in the vocab");
    if (ib == m->vocab.end()) P.bad(w, "merge token ", quote(b), " is not in the vocab");
    std::string bb = b;
    if (!pre.empty()) {
      if (bb.compare(0, pre.size(), pre) != 0)
        P.bad(w, "merge token ", quote(b), " lacks the continuing_subword_prefix");
      bb = bb.substr(pre.size());
    }
    auto in = m->vocab.find(a + bb);
    if (in == m->vocab.end()) P.bad(w, "merged token ", quote(a + bb), " is not in the vocab");
    m->merges[static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32 |
              static_cast<uint32_t>(ib->second)] = {static_cast<uint32_t>(i), in->second};
  }
  return m;
}

struct WordPiece : Model {
  std::string prefix = "##";
  uint64_t max_chars = 100;
  size_t max_len = 0;  // bytes of the longest token
  int32_t unk_id = -1;
  void tokenize(const std::string& w, std::vector<int64_t>& out) const override {
    size_t nchars = 0;
    for (size_t i = 0; i < w.size(); next_cp(w, i)) ++nchars;
    if (nchars > max_chars) {
      out.push_back(unk_id);
      return;
    }
    const size_t mark = out.size();
    size_t start = 0;
    std::string sub;
    while (start < w.size()) {
      // No token is longer than max_len bytes: start the search there (the
      // result is the same; the cost no longer grows with the word).
      size_t end = w.size() - start > max_len ? start + max_len : w.size();
      while (end > start && end < w.size() && (static_cast<unsigned char>(w[end]) & 0xC0) == 0x80)
        --end;
      int32_t found = -1;
      while (start < end) {
        sub.clear();
        if (start > 0) sub = prefix;
        sub.append(w, start, end - start);
        auto it = vocab.find(sub);
        if (it != vocab.end()) {
          found = it->second;
          break;
        }
        // Back off one character.
        do {
          --end;
        } while (end > start && (static_cast<unsigned char>(w[end]) & 0xC0) == 0x80);
      }
      if (found < 0) {
        out.resize(mark);
        out.push_back(unk_id);
        return;
      }
      out.push_back(found);
      start = end;
    }
  }
};

std::unique_ptr<Model> parse_wordpiece(const Parser& P, const json& j, const std::string& where) {
  auto m = std::make_unique<WordPiece>();
  parse_vocab(P, j, where, *m);
  m->unk_token = P.opt_string(j, "unk_token", where);
  if (!m->unk_token) m->unk_token = "[UNK]";
  auto it = m->vocab.find(*m->unk_token);
  if (it == m->vocab.end())
    P.bad(where + ".unk_token", "unk token ", quote(*m->unk_token), " is not in the vocab");
  m->unk_id = it->second;
  if (auto p = P.opt_string(j, "continuing_subword_prefix", where)) m->prefix = *p;
  m->max_chars = P.count(j, "max_input_chars_per_word", where, 100);
  for (auto& kv : m->vocab) m->max_len = std::max(m->max_len, kv.first.size());
  return m;
}

// --------------------------------------------------------- post-processors --

struct PostProcessor {
  virtual ~PostProcessor() = default;
  virtual void process(std::vector<int64_t>& ids) const = 0;  // add_special_tokens only
};

struct TemplatePost : PostProcessor {
  // Ids before and after the sequence.
  std::vector<int64_t> before, after;
  void process(std::vector<int64_t>& ids) const override {
    ids.insert(ids.begin(), before.begin(), before.end());
    ids.insert(ids.end(), after.begin(), after.end());
  }
};

struct SequencePost : PostProcessor {
  std::vector<std::unique_ptr<PostProcessor>> items;
  void process(std::vector<int64_t>& ids) const override {
    for (auto& p : items) p->process(ids);
  }
};

struct NoPost : PostProcessor {
  void process(std::vector<int64_t>&) const override {}
};

struct SpecialPair {
  std::string token;
  int32_t id;
};

SpecialPair parse_pair(const Parser& P, const json& o, const char* key, const std::string& where) {
  const json& v = P.need(o, key, where);
  const std::string w = where + "." + key;
  if (!v.is_array() || v.size() != 2) P.bad(w, "expected [token, id]");
  return {P.string(v[0], w + "[0]"), P.id(v[1], w + "[1]")};
}

std::unique_ptr<PostProcessor> parse_post(const Parser& P, const json& j, const std::string& where,
                                          int64_t* cls, int64_t* sep, int depth = 0) {
  if (depth > 8) P.bad(where, "post-processors nested too deeply");
  const std::string t = P.type(j, where);
  if (t == "ByteLevel") return std::make_unique<NoPost>();
  if (t == "BertProcessing" || t == "RobertaProcessing") {
    auto p = std::make_unique<TemplatePost>();
    SpecialPair c = parse_pair(P, j, "cls", where), s = parse_pair(P, j, "sep", where);
    p->before.push_back(c.id);
    p->after.push_back(s.id);
    *cls = c.id;
    *sep = s.id;
    return p;
  }
  if (t == "TemplateProcessing") {
    auto p = std::make_unique<TemplatePost>();
    const json& single = P.array(P.need(j, "single", where), where + ".single");
    const json* specials = P.get(j, "special_tokens");
    if (specials) P.object(*specials, where + ".special_tokens");
    bool seen_seq = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const std::string w = where + ".single[" + std::to_string(i) + "]";
      const json& item = P.object(single[i], w);
      if (const json* seq = P.get(item, "Sequence")) {
        P.object(*seq, w + ".Sequence");
        std::string sid = P.string(*seq, "id", w + ".Sequence");
        if (sid != "A") P.bad(w, "the single template may only use sequence A, not ", quote(sid));
        if (seen_seq) P.bad(w, "sequence A appears twice");
        seen_seq = true;
      } else if (const json* sp = P.get(item, "SpecialToken")) {
        P.object(*sp, w + ".SpecialToken");
        std::string name = P.string(*sp, "id", w + ".SpecialToken");
        if (!specials || !specials->contains(name))
          P.bad(w, "special token ", quote(name), " is not in special_tokens");
        const json& st = P.object((*specials)[name], where + ".special_tokens." + name);
        const json& ids = P.array(P.need(st, "ids", where + ".special_tokens." + name),
                                  where + ".special_tokens." + name + ".ids");
        for (size_t k = 0; k < ids.size(); ++k) {
          int32_t id = P.id(ids[k], where + ".special_tokens." + name + ".ids");
          (seen_seq ? p->after : p->before).push_back(id);
        }
      } else {
        P.bad(w, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    if (!seen_seq) P.bad(where + ".single", "the template has no sequence A");
    return p;
  }
  if (t == "Sequence") {
    auto p = std::make_unique<SequencePost>();
    const json& items = P.array(P.need(j, "processors", where), where + ".processors");
    for (size_t i = 0; i < items.size(); ++i)
      p->items.push_back(parse_post(P, items[i], where + ".processors[" + std::to_string(i) + "]",
                                    cls, sep, depth + 1));
    return p;
  }
  if (known_unsupported(t)) P.unsupported(where, "post-processor ", quote(t));
  P.bad(where, "unknown post_processor type ", quote(t));
}

// ---------------------------------------------------------------- decoders --

struct Decoder {
  virtual ~Decoder() = default;
  virtual void chain(std::vector<std::string>& tokens) const = 0;
};

struct ByteLevelDec : Decoder {
  void chain(std::vector<std::string>& tokens) const override {
    const ByteTable& t = byte_table();
    std::string bytes;
    for (auto& tok : tokens) {
      std::string mine;
      bool ok = true;
      for (size_t i = 0; i < tok.size();) {
        uint32_t cp = next_cp(tok, i);
        if (cp >= 0x200 || t.char_to_byte[cp] < 0) {
          ok = false;
          break;
        }
        mine += static_cast<char>(t.char_to_byte[cp]);
      }
      bytes += ok ? mine : tok;
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

struct WordPieceDec : Decoder {
  std::string prefix = "##";
  bool cleanup = true;
  static std::string clean(std::string s) {
    static const std::pair<const char*, const char*> kRules[] = {
        {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
        {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
        {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (auto& [a, b] : kRules) s = replace_all(s, a, b);
    return s;
  }
  void chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (!prefix.empty() && t.compare(0, prefix.size(), prefix) == 0)
          t.erase(0, prefix.size());
        else
          t.insert(0, " ");
      }
      if (cleanup) t = clean(t);
    }
  }
};

struct MetaspaceDec : Decoder {
  std::string rep;
  Prepend scheme = Prepend::kAlways;
  void chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = replace_all(tokens[i], rep, i == 0 && scheme != Prepend::kNever ? "" : " ");
  }
};

struct ByteFallbackDec : Decoder {
  void chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (invalid_utf8_at(pending) == std::string::npos) {
        out.push_back(pending);
      } else {
        for (size_t k = 0; k < pending.size(); ++k) out.push_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (auto& t : tokens) {
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
        auto hex = [](char c) {
          if (c >= '0' && c <= '9') return c - '0';
          if (c >= 'a' && c <= 'f') return c - 'a' + 10;
          if (c >= 'A' && c <= 'F') return c - 'A' + 10;
          return -1;
        };
        int h = hex(t[3]), l = hex(t[4]);
        if (h >= 0 && l >= 0) byte = h * 16 + l;
      }
      if (byte >= 0) {
        pending += static_cast<char>(byte);
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens.swap(out);
  }
};

struct FuseDec : Decoder {
  void chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (auto& t : tokens) all += t;
    tokens.assign(1, all);
  }
};

struct StripDec : Decoder {
  uint32_t content = ' ';
  uint64_t start = 0, stop = 0;
  void chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::vector<std::pair<size_t, uint32_t>> chars;  // (byte offset, cp)
      for (size_t i = 0; i < t.size();) {
        size_t at = i;
        chars.emplace_back(at, next_cp(t, i));
      }
      size_t a = 0, b = chars.size();
      for (size_t i = 0; i < start && i < chars.size() && chars[i].second == content; ++i)
        a = i + 1;
      for (uint64_t i = 0; i < stop && i < chars.size(); ++i) {
        size_t idx = chars.size() - i - 1;
        if (chars[idx].second != content) break;
        b = idx;
      }
      if (b <= a) {
        t.clear();
        continue;
      }
      size_t from = chars[a].first, to = b < chars.size() ? chars[b].first : t.size();
      t = t.substr(from, to - from);
    }
  }
};

struct ReplaceDec : Decoder {
  Pattern pattern;
  std::string content;
  void chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) t = replace_pattern(t, pattern, content);
  }
};

struct BPEDec : Decoder {
  std::string suffix = "</w>";
  void chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = replace_all(tokens[i], suffix, i + 1 == tokens.size() ? "" : " ");
  }
};

struct SequenceDec : Decoder {
  std::vector<std::unique_ptr<Decoder>> items;
  void chain(std::vector<std::string>& tokens) const override {
    for (auto& d : items) d->chain(tokens);
  }
};

std::unique_ptr<Decoder> parse_decoder(const Parser& P, const json& j, const std::string& where,
                                       int depth = 0) {
  if (depth > 8) P.bad(where, "decoders nested too deeply");
  const std::string t = P.type(j, where);
  if (t == "ByteLevel") return std::make_unique<ByteLevelDec>();
  if (t == "WordPiece") {
    auto d = std::make_unique<WordPieceDec>();
    if (auto p = P.opt_string(j, "prefix", where)) d->prefix = *p;
    d->cleanup = P.boolean(j, "cleanup", where, true);
    return d;
  }
  if (t == "Metaspace") {
    auto d = std::make_unique<MetaspaceDec>();
    append_utf8(d->rep, P.character(j, "replacement", where));
    d->scheme = parse_prepend(P, j, where);
    return d;
  }
  if (t == "ByteFallback") return std::make_unique<ByteFallbackDec>();
  if (t == "Fuse") return std::make_unique<FuseDec>();
  if (t == "Strip") {
    auto d = std::make_unique<StripDec>();
    d->content = P.character(j, "content", where);
    d->start = P.count(j, "start", where, 0);
    d->stop = P.count(j, "stop", where, 0);
    return d;
  }
  if (t == "Replace") {
    auto d = std::make_unique<ReplaceDec>();
    d->pattern = parse_pattern(P, P.need(j, "pattern", where), where + ".pattern");
    d->content = P.string(j, "content", where);
    return d;
  }
  if (t == "BPEDecoder") {
    auto d = std::make_unique<BPEDec>();
    if (auto s = P.opt_string(j, "suffix", where)) d->suffix = *s;
    return d;
  }
  if (t == "Sequence") {
    auto d = std::make_unique<SequenceDec>();
    const json& items = P.array(P.need(j, "decoders", where), where + ".decoders");
    for (size_t i = 0; i < items.size(); ++i)
      d->items.push_back(
          parse_decoder(P, items[i], where + ".decoders[" + std::to_string(i) + "]", depth + 1));
    return d;
  }
  if (known_unsupported(t)) P.unsupported(where, "decoder ", quote(t));
  P.bad(where, "unknown decoder type ", quote(t));
}

// --------------------------------------------------------------- tokenizer --

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

// transformers (5.x) rebuilds part of the pipeline of some tokenizer
// classes from tokenizer_config.json instead of taking tokenizer.json's:
// LlamaTokenizer uses no normalizer, Metaspace with prepend_scheme "first"
// ("always" with legacy: true, "never" with add_prefix_space: false) and its
// own decoder. AutoTokenizer's ids are the reference, so oslo does the same.
void apply_class_overrides(json& j, std::string_view config) {
  if (config.empty() || !j.is_object()) return;
  json c = json::parse(config.begin(), config.end(), nullptr, false);
  if (!c.is_object()) return;
  auto cls = c.find("tokenizer_class");
  if (cls == c.end() || !cls->is_string()) return;
  const std::string name = cls->get<std::string>();
  if (name != "LlamaTokenizer" && name != "LlamaTokenizerFast") return;
  auto m = j.find("model");
  if (m == j.end() || !m->is_object() || m->value("type", std::string()) != "BPE") return;
  auto flag = [&c](const char* key, bool dflt) {
    auto it = c.find(key);
    return it != c.end() && it->is_boolean() ? it->get<bool>() : dflt;
  };
  const bool prefix = flag("add_prefix_space", true), legacy = flag("legacy", false);
  const char* scheme = !prefix ? "never" : legacy ? "always" : "first";
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"},
                        {"replacement", "\xE2\x96\x81"},
                        {"prepend_scheme", scheme},
                        {"split", false}};
  json dec = json::array(
      {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
       {{"type", "ByteFallback"}},
       {{"type", "Fuse"}}});
  if (prefix) dec.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  j["decoder"] = {{"type", "Sequence"}, {"decoders", dec}};
}

class HfTokenizer : public Tokenizer {
 public:
  HfTokenizer(std::string_view text, const std::string& name, std::string_view config);

  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(const int64_t* ids, size_t n, bool skip_special_tokens) const override;
  size_t vocab_size() const override { return vocab_size_; }
  std::optional<int64_t> token_to_id(std::string_view token) const override {
    std::string t(token);
    auto a = added_map_.find(t);
    if (a != added_map_.end()) return a->second;
    auto it = model_->vocab.find(t);
    if (it != model_->vocab.end()) return it->second;
    return std::nullopt;
  }
  std::optional<std::string> id_to_token(int64_t id) const override {
    if (id < 0 || id > INT32_MAX) return std::nullopt;
    auto a = added_r_.find(static_cast<int32_t>(id));
    if (a != added_r_.end()) return added_[a->second].content;
    auto it = model_->vocab_r.find(static_cast<int32_t>(id));
    if (it != model_->vocab_r.end()) return it->second;
    return std::nullopt;
  }

 private:
  void find_added(const Piece& p, const TokenTrie& trie, Pieces& out) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<PostProcessor> post_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<AddedToken> added_;
  std::unordered_map<std::string, int32_t> added_map_;  // content -> id
  std::unordered_map<int32_t, size_t> added_r_;         // id -> index in added_
  std::unordered_set<std::string> special_set_;
  TokenTrie trie_raw_, trie_norm_;  // values: index in added_
  size_t vocab_size_ = 0;
  bool clean_up_spaces_ = false;
};

HfTokenizer::HfTokenizer(std::string_view text, const std::string& name, std::string_view config) {
  Parser P(name);
  check_json_depth(text, name);
  if (!config.empty()) check_json_depth(config, name + " (tokenizer_config.json)");
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    fail(OSLO_ERR_FORMAT, name, ": invalid JSON: ", e.what());
  }
  P.object(j, "top level");
  if (const json* v = P.get(j, "version")) {
    std::string s = P.string(*v, "version");
    if (s != "1.0") P.bad("version", "unknown tokenizer.json version ", quote(s));
  }
  apply_class_overrides(j, config);
  const json& model = P.need(j, "model", "top level");
  P.object(model, "model");
  std::string type;
  if (const json* t = P.get(model, "type")) {
    type = P.string(*t, "model.type");
  } else if (P.get(model, "merges")) {
    type = "BPE";
  } else if (P.get(model, "continuing_subword_prefix")) {
    type = "WordPiece";
  } else {
    P.bad("model", "missing 'type'");
  }
  if (type == "BPE")
    model_ = parse_bpe(P, model, "model");
  else if (type == "WordPiece")
    model_ = parse_wordpiece(P, model, "model");
  else if (known_unsupported(type))
    P.unsupported("model", "model type ", quote(type));
  else
    P.bad("model.type", "unknown model type ", quote(type));

  if (const json* n = P.get(j, "normalizer")) normalizer_ = parse_normalizer(P, *n, "normalizer");
  if (const json* p = P.get(j, "pre_tokenizer")) pre_ = parse_pre_tokenizer(P, *p, "pre_tokenizer");
  int64_t cls = -1, sep = -1;
  if (const json* p = P.get(j, "post_processor"))
    post_ = parse_post(P, *p, "post_processor", &cls, &sep);
  if (const json* d = P.get(j, "decoder")) decoder_ = parse_decoder(P, *d, "decoder");

  // Added tokens, as AddedVocabulary::add_tokens assigns their ids.
  size_t model_size = model_->vocab.size();
  int64_t max_added = -1;
  if (const json* at = P.get(j, "added_tokens")) {
    P.array(*at, "added_tokens");
    for (size_t i = 0; i < at->size(); ++i) {
      const std::string w = "added_tokens[" + std::to_string(i) + "]";
      const json& e = P.object((*at)[i], w);
      AddedToken t;
      P.id(P.need(e, "id", w), w + ".id");  // validated; the id is recomputed as HF does
      t.content = P.string(e, "content", w);
      t.single_word = P.boolean(e, "single_word", w, false);
      t.lstrip = P.boolean(e, "lstrip", w, false);
      t.rstrip = P.boolean(e, "rstrip", w, false);
      t.normalized = P.boolean(e, "normalized", w, true);
      t.special = P.boolean(e, "special", w, false);
      if (t.content.empty()) continue;
      int64_t id;
      auto known = added_map_.find(t.content);
      auto in_model = model_->vocab.find(t.content);
      if (known != added_map_.end()) {
        id = known->second;
      } else if (in_model != model_->vocab.end()) {
        id = in_model->second;
      } else {
        if (max_added < 0)
          id = static_cast<int64_t>(model_size);
        else
          id = (max_added >= static_cast<int64_t>(model_size) || model_size == 0)
                   ? max_added + 1
                   : static_cast<int64_t>(model_size);
        if (id >= INT32_MAX) P.bad(w, "too many tokens");
      }
      t.id = static_cast<int32_t>(id);
      if (t.special) special_set_.insert(t.content);
      added_map_[t.content] = t.id;
      auto r = added_r_.find(t.id);
      if (r != added_r_.end()) {
        added_[r->second] = t;
      } else {
        added_r_[t.id] = added_.size();
        added_.push_back(t);
      }
      max_added = std::max<int64_t>(max_added, id);
    }
  }
  for (size_t i = 0; i < added_.size(); ++i) {
    const AddedToken& t = added_[i];
    if (t.normalized) {
      std::string pat = normalizer_ ? normalizer_->apply(t.content) : t.content;
      if (!pat.empty()) trie_norm_.add(pat, static_cast<int32_t>(i));
    } else {
      trie_raw_.add(t.content, static_cast<int32_t>(i));
    }
  }
  vocab_size_ = model_->vocab.size();
  for (auto& [content, id] : added_map_)
    if (!model_->vocab.count(content)) ++vocab_size_;

  // Special ids: what the files say, the config last.
  if (model_->unk_token)
    special_[static_cast<int>(SpecialToken::kUnk)] = token_to_id(*model_->unk_token).value_or(-1);
  special_[static_cast<int>(SpecialToken::kCls)] = cls;
  special_[static_cast<int>(SpecialToken::kSep)] = sep;
  if (!config.empty()) {
    apply_special_config(config, name);
    json c = json::parse(config.begin(), config.end(), nullptr, false);
    if (c.is_object()) {
      auto it = c.find("clean_up_tokenization_spaces");
      if (it != c.end() && it->is_boolean()) clean_up_spaces_ = it->get<bool>();
    }
  }
}

void HfTokenizer::find_added(const Piece& p, const TokenTrie& trie, Pieces& out) const {
  const std::string& s = p.text;
  if (trie.empty()) {
    if (!s.empty()) out.push_back(p);
    return;
  }
  auto is_word_end = [&](size_t end) {  // \w$ on s[..end]
    if (end == 0) return false;
    size_t i = end - 1;
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
    size_t k = i;
    return is_word_char(next_cp(s, k));
  };
  auto is_word_start = [&](size_t start) {  // ^\w on s[start..]
    if (start >= s.size()) return false;
    size_t k = start;
    return is_word_char(next_cp(s, k));
  };
  size_t start_offset = 0;
  auto emit_text = [&](size_t a, size_t b) {
    if (b > a) out.push_back(Piece{s.substr(a, b - a), -1, p.first && a == 0});
  };
  for (const auto& m : trie.find_all(s)) {
    size_t start = m.start, stop = m.end;
    const AddedToken& t = added_[static_cast<size_t>(m.value)];
    if (t.single_word) {
      bool start_space = start == 0 || !is_word_end(start);
      bool stop_space = stop == s.size() || !is_word_start(stop);
      if (!start_space || !stop_space) continue;
    }
    if (t.lstrip) {
      size_t ns = start;
      while (ns > 0) {
        size_t i = ns - 1;
        while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
        size_t k = i;
        if (!is_whitespace(next_cp(s, k))) break;
        ns = i;
      }
      start = std::max(ns, start_offset);
    }
    if (t.rstrip) {
      while (stop < s.size()) {
        size_t k = stop;
        if (!is_whitespace(next_cp(s, k))) break;
        stop = k;
      }
    }
    if (start_offset < start) emit_text(start_offset, start);
    out.push_back(Piece{s.substr(start, stop - start), t.id, false});
    start_offset = stop;
  }
  if (start_offset < s.size()) emit_text(start_offset, s.size());
}

std::vector<int64_t> HfTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  check_utf8(text, "text");
  Pieces pieces;
  Piece whole{std::string(text), -1, true};
  // 1. Added tokens matched on the raw text; 2. the rest normalized, then
  // added tokens matched on the normalized text.
  Pieces raw;
  find_added(whole, trie_raw_, raw);
  for (auto& p : raw) {
    if (p.id >= 0) {
      pieces.push_back(std::move(p));
      continue;
    }
    if (normalizer_) p.text = normalizer_->apply(p.text);
    if (p.text.empty()) continue;
    find_added(p, trie_norm_, pieces);
  }
  if (pre_) pre_->apply(pieces);
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 3 + 4);
  for (auto& p : pieces) {
    if (p.id >= 0)
      ids.push_back(p.id);
    else
      model_->tokenize(p.text, ids);
  }
  if (add_special_tokens && post_) post_->process(ids);
  return ids;
}

std::string HfTokenizer::decode(const int64_t* ids, size_t n, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] < 0)
      fail(OSLO_ERR_INVALID_ARGUMENT, "decode: ids[", i, "] = ", ids[i], " is negative");
    auto t = id_to_token(ids[i]);
    if (!t) continue;
    if (skip_special_tokens && special_set_.count(*t)) continue;
    tokens.push_back(std::move(*t));
  }
  std::string out;
  if (decoder_) {
    decoder_->chain(tokens);
    for (auto& t : tokens) out += t;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
  }
  if (clean_up_spaces_) out = clean_up_tokenization(std::move(out));
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> make_hf_tokenizer(std::string_view json_text, const std::string& name,
                                             std::string_view config_json) {
  return std::make_unique<HfTokenizer>(json_text, name, config_json);
}

}  // namespace tok
}  // namespace oslo
