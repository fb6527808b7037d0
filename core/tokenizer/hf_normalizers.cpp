// tokenizer.json normalizers.
#include "core/tokenizer/hf_pipeline.hpp"
#include "core/tokenizer/precompiled.hpp"

namespace oslo {
namespace tok {
namespace hf {
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

// BertNormalizer's strip_accents drops nonspacing marks (Mn); the
// StripAccents normalizer drops every mark (unicode-normalization's
// is_combining_mark: Mn, Mc, Me).
std::string strip_marks(const std::string& s, bool all_marks) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    uint32_t cp = next_cp(s, i);
    if (!(all_marks ? is_mark(cp) : is_mark_nonspacing(cp))) out.append(s, start, i - start);
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
        if (cp == 0 || cp == 0xFFFD || is_other_but_tab_newline(cp)) continue;
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
    if (strip_accents) t = strip_marks(normalize(t, NormForm::kNFD), false);
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
  std::string apply(const std::string& s) const override { return strip_marks(s, true); }
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

struct ByteLevelNormalizer : Normalizer {
  std::string apply(const std::string& s) const override { return byte_table().map(s); }
};

// SentencePiece's "nmt" rules as Hugging Face's Nmt normalizer has them: C0
// controls but tab, LF, FF and CR, and DEL, U+008F, U+009F removed; those
// four and a few separators, ZW*, bidi marks, U+2581, BOM and U+FFFD become
// a space.
struct NmtNormalizer : Normalizer {
  std::string apply(const std::string& s) const override {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      const size_t start = i;
      const uint32_t c = next_cp(s, i);
      if ((c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F ||
          c == 0x8F || c == 0x9F)
        continue;
      if (c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D || c == 0x1680 ||
          (c >= 0x200B && c <= 0x200F) || c == 0x2028 || c == 0x2029 || c == 0x2581 ||
          c == 0xFEFF || c == 0xFFFD) {
        out += ' ';
        continue;
      }
      out.append(s, start, i - start);
    }
    return out;
  }
};

struct PrecompiledNormalizer : Normalizer {
  std::unique_ptr<PrecompiledCharsmap> map;
  std::string apply(const std::string& s) const override { return map->normalize(s); }
};

struct SequenceNormalizer : Normalizer {
  std::vector<std::unique_ptr<Normalizer>> items;
  std::string apply(const std::string& s) const override {
    std::string t = s;
    for (auto& n : items) t = n->apply(t);
    return t;
  }
};

std::unique_ptr<Normalizer> parse_normalizer(const Parser& P, const json& j,
                                             const std::string& where, int depth) {
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
  if (t == "Nmt") return std::make_unique<NmtNormalizer>();
  if (t == "Precompiled") {
    auto n = std::make_unique<PrecompiledNormalizer>();
    const std::string w = where + ".precompiled_charsmap";
    const json& v = P.need(j, "precompiled_charsmap", where);
    if (!v.is_string()) P.bad(w, "expected a base64 string, found ", Parser::type_name(v));
    std::string blob;
    if (!base64_decode(v.get_ref<const std::string&>(), blob)) P.bad(w, "not valid base64");
    n->map = std::make_unique<PrecompiledCharsmap>(blob, P.name() + ": " + w);
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

}  // namespace hf
}  // namespace tok
}  // namespace oslo
