// Hugging Face tokenizer.json: the pipeline of the `tokenizers` library
// (added tokens -> normalizer -> pre-tokenizer -> model -> post-processor;
// decoder for the way back), re-implemented step by step after its Rust
// sources so that ids match exactly. Offsets are not tracked: oslo needs ids.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "core/common/error.hpp"
#include "core/tokenizer/hf_pipeline.hpp"
#include "core/tokenizer/internal.hpp"

namespace oslo {
namespace tok {
namespace {

using namespace hf;

// --------------------------------------------------------------- tokenizer --

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

// transformers (5.x) rebuilds the normalizer, pre-tokenizer and decoder of
// some tokenizer classes in their constructors instead of taking
// tokenizer.json's. AutoTokenizer's ids are the reference, so oslo does the
// same for the classes of the models it runs:
//  - LlamaTokenizer: no normalizer, Metaspace with prepend_scheme "first"
//    ("always" with legacy: true, "never" with add_prefix_space: false), its
//    own decoder;
//  - Qwen2Tokenizer: NFC, Split with Qwen2's regex, ByteLevel without regex,
//    plain BPE. AutoTokenizer picks it for model_type "qwen2" whatever
//    tokenizer_config.json says (transformers' list of hub configs it
//    distrusts), so the folder's config.json model_type counts too.
const char* const kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// A token named in tokenizer_config.json: a string or {"content": ...}.
std::string config_token(const json& c, const char* key, const char* dflt) {
  auto it = c.find(key);
  if (it == c.end()) return dflt;
  const json* v = &*it;
  if (v->is_object() && v->contains("content")) v = &(*v)["content"];
  return v->is_string() ? v->get<std::string>() : dflt;
}

// The id tokenizer.json gives `token` (added tokens first, then a Unigram
// vocab list, where the last entry spelled so wins), or -1.
int64_t json_token_id(const json& j, const std::string& token) {
  auto at = j.find("added_tokens");
  if (at != j.end() && at->is_array())
    for (const json& t : *at)
      if (t.is_object() && t.value("content", json()) == token && t.contains("id") &&
          t["id"].is_number_unsigned())
        return t["id"].get<int64_t>();
  int64_t found = -1;
  auto m = j.find("model");
  if (m == j.end() || !m->is_object()) return found;
  auto v = m->find("vocab");
  if (v != m->end() && v->is_array())
    for (size_t i = 0; i < v->size(); ++i) {
      const json& e = (*v)[i];
      if (e.is_array() && !e.empty() && e[0] == token) found = static_cast<int64_t>(i);
    }
  return found;
}

// Returns the class whose pipeline was applied ("" if none).
std::string apply_class_overrides(json& j, std::string_view config) {
  if (config.empty() || !j.is_object()) return "";
  json c = json::parse(config.begin(), config.end(), nullptr, false);
  if (!c.is_object()) return "";
  std::string name;
  auto cls = c.find("tokenizer_class");
  if (cls != c.end() && cls->is_string()) name = cls->get<std::string>();
  auto mt = c.find(kModelTypeKey);
  if (mt != c.end() && mt->is_string() && mt->get<std::string>() == "qwen2")
    name = "Qwen2Tokenizer";
  if (name.size() > 4 && name.compare(name.size() - 4, 4, "Fast") == 0)
    name.resize(name.size() - 4);
  auto m = j.find("model");
  if (m == j.end() || !m->is_object()) return "";
  auto mt_it = m->find("type");
  const std::string mtype =
      mt_it != m->end() && mt_it->is_string() ? mt_it->get<std::string>() : std::string();
  auto flag = [&c](const char* key, bool dflt) {
    auto it = c.find(key);
    return it != c.end() && it->is_boolean() ? it->get<bool>() : dflt;
  };
  if (name == "LlamaTokenizer" && mtype == "BPE") {
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
  } else if (name == "Qwen2Tokenizer" && mtype == "BPE") {
    j["normalizer"] = {{"type", "NFC"}};
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers", json::array({{{"type", "Split"},
                                        {"pattern", {{"Regex", kQwen2Regex}}},
                                        {"behavior", "Isolated"},
                                        {"invert", false}},
                                       {{"type", "ByteLevel"},
                                        {"add_prefix_space", flag("add_prefix_space", false)},
                                        {"use_regex", false}}})}};
    j["decoder"] = {{"type", "ByteLevel"}};
    json& model = *m;
    model["unk_token"] = nullptr;
    model["continuing_subword_prefix"] = nullptr;
    model["end_of_word_suffix"] = nullptr;
    model["fuse_unk"] = false;
    model["byte_fallback"] = false;
    model["ignore_merges"] = false;
  } else if ((name == "XLMRobertaTokenizer" || name == "T5Tokenizer") && mtype == "Unigram") {
    const bool xlmr = name == "XLMRobertaTokenizer";
    // The charsmap of the file's Precompiled normalizer (alone or in a
    // Sequence) is all transformers keeps of it.
    json pre = nullptr;
    auto norm = j.find("normalizer");
    if (norm != j.end() && norm->is_object()) {
      std::vector<const json*> items{&*norm};
      auto seq = norm->find("normalizers");
      if (norm->value("type", json()) == "Sequence" && seq != norm->end() && seq->is_array())
        for (const json& x : *seq) items.push_back(&x);
      for (const json* x : items)
        if (x->is_object() && x->value("type", json()) == "Precompiled" &&
            x->contains("precompiled_charsmap")) {
          pre = *x;
          break;
        }
    }
    j["normalizer"] = pre;
    const char* scheme = !xlmr || flag("add_prefix_space", true) ? "always" : "never";
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", json::array({{{"type", "WhitespaceSplit"}},
                                                         {{"type", "Metaspace"},
                                                          {"replacement", "\xE2\x96\x81"},
                                                          {"prepend_scheme", scheme},
                                                          {"split", true}}})}};
    j["decoder"] = {
        {"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", scheme}};
    json& model = *m;
    model["unk_id"] = xlmr ? 3 : 2;
    model["byte_fallback"] = false;
    // XLM-R: <s> $A </s>; T5: $A </s> (the config's bos and eos tokens).
    const std::string bos = config_token(c, "bos_token", "<s>"),
                      eos = config_token(c, "eos_token", "</s>");
    const int64_t bos_id = json_token_id(j, bos), eos_id = json_token_id(j, eos);
    if ((bos_id >= 0 || !xlmr) && eos_id >= 0) {
      auto special = [](const std::string& t) {
        return json{{"SpecialToken", {{"id", t}, {"type_id", 0}}}};
      };
      auto entry = [](const std::string& t, int64_t id) {
        return json{{"id", t}, {"ids", json::array({id})}, {"tokens", json::array({t})}};
      };
      json single = json::array();
      json specials = json::object();
      if (xlmr) {
        single.push_back(special(bos));
        specials[bos] = entry(bos, bos_id);
      }
      single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
      single.push_back(special(eos));
      specials[eos] = entry(eos, eos_id);
      j["post_processor"] = {
          {"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", specials}};
    }
  } else {
    return "";
  }
  return name;
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
  const std::string klass = apply_class_overrides(j, config);
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
  else if (type == "WordLevel")
    model_ = parse_wordlevel(P, model, "model");
  else if (type == "Unigram")
    model_ = parse_unigram(P, model, "model");
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
  size_t model_size = model_->size();
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
  vocab_size_ = model_->size();
  for (auto& [content, id] : added_map_)
    if (!model_->vocab.count(content)) ++vocab_size_;

  // Special ids: what the files say, the config last.
  if (model_->unk_token)
    special_[static_cast<int>(SpecialToken::kUnk)] = token_to_id(*model_->unk_token).value_or(-1);
  special_[static_cast<int>(SpecialToken::kCls)] = cls;
  special_[static_cast<int>(SpecialToken::kSep)] = sep;
  // The class's constructor defaults, then what the config says.
  auto set_default = [this](SpecialToken which, const char* token) {
    special_[static_cast<int>(which)] = token_to_id(token).value_or(-1);
  };
  if (klass == "Qwen2Tokenizer") {
    for (SpecialToken w : {SpecialToken::kUnk, SpecialToken::kEos, SpecialToken::kPad})
      set_default(w, "<|endoftext|>");
  } else if (klass == "LlamaTokenizer") {
    set_default(SpecialToken::kUnk, "<unk>");
    set_default(SpecialToken::kBos, "<s>");
    set_default(SpecialToken::kEos, "</s>");
  } else if (klass == "T5Tokenizer") {
    set_default(SpecialToken::kEos, "</s>");
    set_default(SpecialToken::kUnk, "<unk>");
    set_default(SpecialToken::kPad, "<pad>");
  } else if (klass == "XLMRobertaTokenizer") {
    set_default(SpecialToken::kBos, "<s>");
    set_default(SpecialToken::kCls, "<s>");
    set_default(SpecialToken::kEos, "</s>");
    set_default(SpecialToken::kSep, "</s>");
    set_default(SpecialToken::kUnk, "<unk>");
    set_default(SpecialToken::kPad, "<pad>");
    set_default(SpecialToken::kMask, "<mask>");
  }
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
