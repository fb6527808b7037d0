// The parts of the Hugging Face tokenizer.json pipeline (core/tokenizer/hf_*.cpp):
// typed JSON access with errors naming the file and the field, the pieces
// text is split into, and the interfaces of normalizers, pre-tokenizers,
// models, post-processors and decoders with their parsers. Internal.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/common/error.hpp"
#include "core/tokenizer/internal.hpp"
#include "core/tokenizer/regex.hpp"
#include "core/common/unicode.hpp"

namespace oslo {
namespace tok {
namespace hf {

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
enum class Prepend { kAlways, kFirst, kNever };

// NormalizedString::split: `matches` are sorted, non-overlapping byte ranges.
void split_by(const Piece& p, const std::vector<std::pair<size_t, size_t>>& matches,
              Behavior behavior, bool invert, Pieces& out);

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
                                                       const std::string& lit);

// A {"String": ...} or {"Regex": ...} pattern.
struct Pattern {
  std::string literal;
  std::unique_ptr<Regex> regex;
  std::vector<std::pair<size_t, size_t>> find(const std::string& s) const {
    return regex ? regex->find_all(s) : literal_matches(s, literal);
  }
};

Pattern parse_pattern(const Parser& P, const json& j, const std::string& where);
std::string replace_pattern(const std::string& s, const Pattern& pat, const std::string& content);

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
const ByteTable& byte_table();

// Component types Hugging Face has and oslo does not implement
// (OSLO_ERR_NOT_SUPPORTED rather than "unknown").
bool known_unsupported(const std::string& type);
// Metaspace's prepend_scheme (or the older add_prefix_space).
Prepend parse_prepend(const Parser& P, const json& j, const std::string& where);

// ------------------------------------------------------------- components --

struct Normalizer {
  virtual ~Normalizer() = default;
  virtual std::string apply(const std::string& s) const = 0;
};
std::unique_ptr<Normalizer> parse_normalizer(const Parser& P, const json& j,
                                             const std::string& where, int depth = 0);

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
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const Parser& P, const json& j,
                                                  const std::string& where, int depth = 0);

struct Model {
  virtual ~Model() = default;
  virtual void tokenize(const std::string& s, std::vector<int64_t>& out) const = 0;
  // Hugging Face's Model::get_vocab_size.
  virtual size_t size() const { return vocab.size(); }
  std::unordered_map<std::string, int32_t> vocab;
  std::unordered_map<int32_t, std::string> vocab_r;
  std::optional<std::string> unk_token;
};
std::unique_ptr<Model> parse_bpe(const Parser& P, const json& j, const std::string& where);
std::unique_ptr<Model> parse_wordpiece(const Parser& P, const json& j, const std::string& where);
std::unique_ptr<Model> parse_wordlevel(const Parser& P, const json& j, const std::string& where);
std::unique_ptr<Model> parse_unigram(const Parser& P, const json& j, const std::string& where);

struct PostProcessor {
  virtual ~PostProcessor() = default;
  virtual void process(std::vector<int64_t>& ids) const = 0;  // add_special_tokens only
};
// cls and sep receive the ids of a Bert/RobertaProcessing's tokens.
std::unique_ptr<PostProcessor> parse_post(const Parser& P, const json& j, const std::string& where,
                                          int64_t* cls, int64_t* sep, int depth = 0);

struct Decoder {
  virtual ~Decoder() = default;
  virtual void chain(std::vector<std::string>& tokens) const = 0;
};
std::unique_ptr<Decoder> parse_decoder(const Parser& P, const json& j, const std::string& where,
                                       int depth = 0);

}  // namespace hf
}  // namespace tok
}  // namespace oslo
