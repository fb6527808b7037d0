// SentencePiece tokenizer.model through libsentencepiece, with Hugging
// Face's LlamaTokenizer behaviour (transformers 5) around it: control and
// unknown pieces (<s>, </s>, <unk>) written in the text are matched as
// special tokens first; each remaining chunk is encoded by SentencePiece
// with its dummy prefix turned off and a "▁" put in front as the Metaspace
// pre-tokenizer does (prepend_scheme "first" by default: only a chunk at the
// start of the text; "always" with tokenizer_config.json's legacy: true;
// "never" with add_prefix_space: false; never when the chunk already starts
// with a space); BOS is added by default (add_bos_token / add_eos_token).
// Decoding is LlamaTokenizer's decoder chain: "▁" -> " ", <0xNN> byte
// pieces -> bytes (invalid sequences -> U+FFFD per byte), one leading space
// stripped.
#include <sentencepiece_processor.h>

#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/common/error.hpp"
#include "core/tokenizer/internal.hpp"
#include "core/tokenizer/unicode.hpp"

namespace oslo {
namespace tok {
namespace {

const char* const kSpace = "\xE2\x96\x81";  // U+2581

class SpTokenizer : public Tokenizer {
 public:
  SpTokenizer(const std::string& bytes, const std::string& name, std::string_view config) {
    auto st = sp_.LoadFromSerializedProto(bytes);
    if (!st.ok())
      fail(OSLO_ERR_FORMAT, name, ": not a SentencePiece model: ", clip(st.ToString(), 200));
    // The same model with normalizer_spec.add_dummy_prefix = false: a
    // protobuf message repeated at the end is merged into the first one, so
    // appending {field 3 (normalizer_spec): {field 3 (add_dummy_prefix): 0}}
    // overrides just that flag.
    st = raw_.LoadFromSerializedProto(bytes + std::string("\x1a\x02\x18\x00", 4));
    if (!st.ok())
      fail(OSLO_ERR_FORMAT, name, ": not a SentencePiece model: ", clip(st.ToString(), 200));
    const int n = sp_.GetPieceSize();
    if (n <= 0) fail(OSLO_ERR_FORMAT, name, ": SentencePiece model has no pieces");
    for (int id = 0; id < n; ++id) {
      if (sp_.IsControl(id) || sp_.IsUnknown(id)) {
        const std::string& p = sp_.IdToPiece(id);
        if (p.empty()) continue;
        special_ids_.insert(id);
        trie_.add(p, id);
      }
    }
    special_[static_cast<int>(SpecialToken::kBos)] = sp_.bos_id();
    special_[static_cast<int>(SpecialToken::kEos)] = sp_.eos_id();
    special_[static_cast<int>(SpecialToken::kPad)] = sp_.pad_id();
    special_[static_cast<int>(SpecialToken::kUnk)] = sp_.unk_id();
    for (auto& s : special_)
      if (s >= n) s = -1;
    if (!config.empty()) {
      apply_special_config(config, name);
      auto c = nlohmann::json::parse(config.begin(), config.end(), nullptr, false);
      if (c.is_object()) {
        auto b = c.find("add_bos_token");
        if (b != c.end() && b->is_boolean()) add_bos_ = b->get<bool>();
        auto e = c.find("add_eos_token");
        if (e != c.end() && e->is_boolean()) add_eos_ = e->get<bool>();
        auto cl = c.find("clean_up_tokenization_spaces");
        if (cl != c.end() && cl->is_boolean()) clean_up_spaces_ = cl->get<bool>();
        auto ap = c.find("add_prefix_space");
        if (ap != c.end() && ap->is_boolean()) add_prefix_space_ = ap->get<bool>();
        auto lg = c.find("legacy");
        if (lg != c.end() && lg->is_boolean()) legacy_ = lg->get<bool>();
      }
    }
  }

  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens) const override {
    check_utf8(text, "text");
    std::vector<int64_t> ids;
    const int64_t bos = special_id(SpecialToken::kBos), eos = special_id(SpecialToken::kEos);
    if (add_special_tokens && add_bos_ && bos >= 0) ids.push_back(bos);
    size_t prev = 0;
    for (const auto& m : trie_.find_all(text)) {
      chunk(text.substr(prev, m.start - prev), prev == 0, ids);
      ids.push_back(m.value);
      prev = m.end;
    }
    chunk(text.substr(prev), prev == 0, ids);
    if (add_special_tokens && add_eos_ && eos >= 0) ids.push_back(eos);
    return ids;
  }

  std::string decode(const int64_t* ids, size_t n, bool skip_special_tokens) const override {
    const int64_t size = sp_.GetPieceSize();
    // Replace("▁", " ") and ByteFallback, then Fuse and Strip(" ", 1, 0).
    std::string out, pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (invalid_utf8_at(pending) == std::string::npos)
        out += pending;
      else
        for (size_t k = 0; k < pending.size(); ++k) out += "\xEF\xBF\xBD";
      pending.clear();
    };
    for (size_t i = 0; i < n; ++i) {
      if (ids[i] < 0)
        fail(OSLO_ERR_INVALID_ARGUMENT, "decode: ids[", i, "] = ", ids[i], " is negative");
      if (ids[i] >= size) continue;
      const int id = static_cast<int>(ids[i]);
      if (skip_special_tokens && special_ids_.count(id)) continue;
      const int byte = sp_.IsByte(id) ? byte_value(sp_.IdToPiece(id)) : -1;
      if (byte >= 0) {
        pending += static_cast<char>(byte);
        continue;
      }
      flush();
      out += replace_all(sp_.IdToPiece(id), kSpace, " ");
    }
    flush();
    if (add_prefix_space_ && !out.empty() && out[0] == ' ') out.erase(0, 1);
    if (clean_up_spaces_) out = clean_up_tokenization(std::move(out));
    return out;
  }

  size_t vocab_size() const override { return static_cast<size_t>(sp_.GetPieceSize()); }
  std::optional<int64_t> token_to_id(std::string_view token) const override {
    int id = lookup(token);
    if (id < 0) return std::nullopt;
    return id;
  }
  std::optional<std::string> id_to_token(int64_t id) const override {
    if (id < 0 || id >= sp_.GetPieceSize()) return std::nullopt;
    return sp_.IdToPiece(static_cast<int>(id));
  }

 private:
  // The byte of a "<0xNN>" piece, or -1.
  static int byte_value(const std::string& p) {
    auto hex = [](char c) {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>') return -1;
    const int h = hex(p[3]), l = hex(p[4]);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
  }

  int lookup(std::string_view piece) const {
    int id = sp_.PieceToId(absl::string_view(piece.data(), piece.size()));
    if (id == sp_.unk_id() && piece != sp_.IdToPiece(id)) return -1;
    return id;
  }

  void chunk(std::string_view c, bool first, std::vector<int64_t>& ids) const {
    if (c.empty()) return;
    const bool prepend = add_prefix_space_ && (legacy_ || first) && c[0] != ' ';
    std::string text = prepend ? " " + std::string(c) : std::string(c);
    std::vector<int> out;
    auto st = raw_.Encode(absl::string_view(text.data(), text.size()), &out);
    if (!st.ok())
      fail(OSLO_ERR_INVALID_ARGUMENT,
           "SentencePiece could not encode the text: ", clip(st.ToString(), 200));
    ids.insert(ids.end(), out.begin(), out.end());
  }

  sentencepiece::SentencePieceProcessor sp_, raw_;  // raw_: no dummy prefix
  TokenTrie trie_;
  std::unordered_set<int> special_ids_;
  bool add_bos_ = true, add_eos_ = false, clean_up_spaces_ = false;
  bool add_prefix_space_ = true, legacy_ = false;
};

}  // namespace

std::unique_ptr<Tokenizer> make_sp_tokenizer(const std::string& model_bytes,
                                             const std::string& name,
                                             std::string_view config_json) {
  return std::make_unique<SpTokenizer>(model_bytes, name, config_json);
}

}  // namespace tok
}  // namespace oslo
