// tokenizer.json decoders.
#include "core/tokenizer/hf_pipeline.hpp"

namespace oslo {
namespace tok {
namespace hf {
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
                                       int depth) {
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

}  // namespace hf
}  // namespace tok
}  // namespace oslo
