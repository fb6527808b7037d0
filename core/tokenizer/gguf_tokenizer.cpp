// The tokenizer of a llama.cpp .gguf file, from its metadata: the
// equivalent tokenizer.json (and tokenizer_config.json) built in memory and
// read by the Hugging Face pipeline (hf_tokenizer.cpp), so that ids match
// llama.cpp's own tokenizer (llama-vocab.cpp):
//
//  - tokenizer.ggml.model "llama" (SentencePiece-style, tokens, scores,
//    token_type): llama.cpp merges the adjacent pair whose concatenation is
//    the highest-scoring token, falling back to <0xNN> byte tokens. As a BPE
//    model: every split of a normal token into two tokens is a merge, ranked
//    by the merged token's score (highest first); byte_fallback on; the
//    normalizer puts "\u2581" in front of the text (tokenizer.ggml.
//    add_space_prefix, default true: after special tokens too, as llama.cpp
//    does) and writes spaces as "\u2581"; decoding is LlamaTokenizer's.
//  - tokenizer.ggml.model "gpt2" (byte-level BPE: tokens and
//    tokenizer.ggml.merges): the pre-tokenizer named by tokenizer.ggml.pre
//    ("default"/"gpt-2", "llama-bpe"/"llama3", "qwen2"; others are
//    OSLO_ERR_NOT_SUPPORTED naming it).
//
// Control, user-defined and unknown tokens (token_type 3, 4, 2) are added
// tokens; BOS is put in front when tokenizer.ggml.add_bos_token says so
// (default: true for "llama", false for "gpt2"), EOS at the end with
// add_eos_token; bos/eos/unk/pad come from the *_token_id keys; the chat
// template is tokenizer.chat_template.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/checkpoint/gguf.hpp"
#include "core/common/error.hpp"
#include "core/tokenizer/internal.hpp"

namespace oslo {
namespace tok {
namespace {

using json = nlohmann::json;

const char* const kSpace = "\xE2\x96\x81";  // U+2581

// llama.cpp's token types (llama_token_type).
enum : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kByte = 6 };

const char* const kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

json special_entry(const std::string& t, int64_t id) {
  return json{{"id", t}, {"ids", json::array({id})}, {"tokens", json::array({t})}};
}

json special_item(const std::string& t) {
  return json{{"SpecialToken", {{"id", t}, {"type_id", 0}}}};
}

}  // namespace

std::unique_ptr<Tokenizer> make_gguf_tokenizer(const std::string& path) {
  const gguf::File g = gguf::File::open(path);
  const std::string where = quote_path(path);
  const std::string model = g.get_string("tokenizer.ggml.model", "");
  OSLO_CHECK(!model.empty(), OSLO_ERR_FORMAT, where,
             ": no tokenizer.ggml.model (the file carries no tokenizer)");
  OSLO_CHECK(model == "llama" || model == "gpt2", OSLO_ERR_NOT_SUPPORTED, where,
             ": tokenizer.ggml.model ", quote(model),
             " is not supported (oslo reads \"llama\" and \"gpt2\")");
  const std::vector<gguf::Value>& tokens = g.get_array("tokenizer.ggml.tokens");
  const size_t V = tokens.size();
  OSLO_CHECK(V > 0 && V < (size_t{1} << 31), OSLO_ERR_FORMAT, where, ": tokenizer.ggml.tokens has ",
             V, " tokens");
  std::vector<std::string> text(V);
  for (size_t i = 0; i < V; ++i) {
    OSLO_CHECK(tokens[i].type == gguf::ValueType::STRING, OSLO_ERR_FORMAT, where,
               ": tokenizer.ggml.tokens[", i, "] is not a string");
    text[i] = tokens[i].s;
  }
  std::vector<int64_t> type(V, kNormal);
  if (g.find("tokenizer.ggml.token_type")) {
    const std::vector<gguf::Value>& tt = g.get_array("tokenizer.ggml.token_type");
    OSLO_CHECK(tt.size() == V, OSLO_ERR_FORMAT, where, ": tokenizer.ggml.token_type has ",
               tt.size(), " entries for ", V, " tokens");
    for (size_t i = 0; i < V; ++i) {
      OSLO_CHECK(tt[i].is_signed() || tt[i].is_unsigned(), OSLO_ERR_FORMAT, where,
                 ": tokenizer.ggml.token_type[", i, "] is not an integer");
      type[i] = tt[i].is_signed() ? tt[i].i : static_cast<int64_t>(tt[i].u);
    }
  }
  auto token_id = [&](const char* key) -> int64_t {
    const std::string k = std::string("tokenizer.ggml.") + key;
    if (!g.find(k)) return -1;
    const int64_t id = g.get_int(k);
    if (id < 0 || static_cast<uint64_t>(id) >= V) {
      // llama.cpp writes -1 (as u32 0xFFFFFFFF) for "none".
      OSLO_CHECK(id == 0xFFFFFFFFll || id == -1, OSLO_ERR_FORMAT, where, ": ", k, " = ", id,
                 " is not a token id (", V, " tokens)");
      return -1;
    }
    return id;
  };
  const int64_t bos = token_id("bos_token_id"), eos = token_id("eos_token_id"),
                unk = token_id("unknown_token_id"), pad = token_id("padding_token_id");
  auto flag = [&](const char* key, bool dflt) {
    const std::string k = std::string("tokenizer.ggml.") + key;
    return g.find(k) ? g.get_bool(k) : dflt;
  };
  const bool add_bos = flag("add_bos_token", model == "llama") && bos >= 0;
  const bool add_eos = flag("add_eos_token", false) && eos >= 0;

  json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  json added = json::array();
  for (size_t i = 0; i < V; ++i)
    if (type[i] == kControl || type[i] == kUserDefined || type[i] == kUnknown)
      added.push_back({{"id", i},
                       {"content", text[i]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", type[i] != kUserDefined}});
  j["added_tokens"] = added;
  json vocab = json::object();
  for (size_t i = 0; i < V; ++i)
    if (!vocab.contains(text[i])) vocab[text[i]] = i;
  json bpe = {{"type", "BPE"},
              {"dropout", nullptr},
              {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr}};
  if (model == "llama") {
    std::vector<double> score(V, 0.0);
    if (g.find("tokenizer.ggml.scores")) {
      const std::vector<gguf::Value>& sc = g.get_array("tokenizer.ggml.scores");
      OSLO_CHECK(sc.size() == V, OSLO_ERR_FORMAT, where, ": tokenizer.ggml.scores has ", sc.size(),
                 " entries for ", V, " tokens");
      for (size_t i = 0; i < V; ++i) {
        OSLO_CHECK(sc[i].is_float(), OSLO_ERR_FORMAT, where, ": tokenizer.ggml.scores[", i,
                   "] is not a float");
        score[i] = sc[i].f;
      }
    }
    // Normal tokens by text (the first of duplicates, as llama.cpp's map).
    std::unordered_map<std::string, size_t> normal;
    for (size_t i = 0; i < V; ++i)
      if (type[i] == kNormal || type[i] == kUserDefined) normal.emplace(text[i], i);
    struct Merge {
      size_t merged, a, b;
    };
    std::vector<Merge> merges;
    for (const auto& kv : normal) {
      const std::string& s = kv.first;
      for (size_t cut = 1; cut < s.size(); ++cut) {
        auto a = normal.find(s.substr(0, cut));
        if (a == normal.end()) continue;
        auto b = normal.find(s.substr(cut));
        if (b == normal.end()) continue;
        merges.push_back({kv.second, a->second, b->second});
      }
    }
    std::sort(merges.begin(), merges.end(), [&](const Merge& x, const Merge& y) {
      if (score[x.merged] != score[y.merged]) return score[x.merged] > score[y.merged];
      if (x.merged != y.merged) return x.merged < y.merged;
      return x.a < y.a;
    });
    json mj = json::array();
    for (const Merge& m : merges) mj.push_back(json::array({text[m.a], text[m.b]}));
    bpe["unk_token"] = unk >= 0 ? json(text[static_cast<size_t>(unk)]) : json(nullptr);
    bpe["fuse_unk"] = true;
    bpe["byte_fallback"] = true;
    bpe["ignore_merges"] = false;
    bpe["vocab"] = vocab;
    bpe["merges"] = mj;
    json norms = json::array();
    if (flag("add_space_prefix", true)) norms.push_back({{"type", "Prepend"}, {"prepend", kSpace}});
    norms.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}});
    j["normalizer"] = {{"type", "Sequence"}, {"normalizers", norms}};
    j["pre_tokenizer"] = nullptr;
    json dec =
        json::array({{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                     {{"type", "ByteFallback"}},
                     {{"type", "Fuse"}}});
    if (flag("add_space_prefix", true))
      dec.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    j["decoder"] = {{"type", "Sequence"}, {"decoders", dec}};
  } else {
    const std::string pre = g.get_string("tokenizer.ggml.pre", "default");
    const char* regex = nullptr;
    bool ignore_merges = false;
    if (pre == "llama-bpe" || pre == "llama3") {
      regex = kLlama3Regex;
      ignore_merges = true;
    } else if (pre == "qwen2") {
      regex = kQwen2Regex;
    } else {
      OSLO_CHECK(pre == "default" || pre == "gpt-2" || pre == "gpt2", OSLO_ERR_NOT_SUPPORTED, where,
                 ": tokenizer.ggml.pre ", quote(pre),
                 " is not supported (oslo reads \"gpt-2\", \"default\", \"llama-bpe\", "
                 "\"qwen2\")");
    }
    const std::vector<gguf::Value>& mv = g.get_array("tokenizer.ggml.merges");
    json mj = json::array();
    for (size_t i = 0; i < mv.size(); ++i) {
      OSLO_CHECK(mv[i].type == gguf::ValueType::STRING, OSLO_ERR_FORMAT, where,
                 ": tokenizer.ggml.merges[", i, "] is not a string");
      mj.push_back(mv[i].s);
    }
    bpe["unk_token"] = nullptr;
    bpe["fuse_unk"] = false;
    bpe["byte_fallback"] = false;
    bpe["ignore_merges"] = ignore_merges;
    bpe["vocab"] = vocab;
    bpe["merges"] = mj;
    j["normalizer"] = pre == "qwen2" ? json{{"type", "NFC"}} : json(nullptr);
    if (regex)
      j["pre_tokenizer"] = {{"type", "Sequence"},
                            {"pretokenizers", json::array({{{"type", "Split"},
                                                            {"pattern", {{"Regex", regex}}},
                                                            {"behavior", "Isolated"},
                                                            {"invert", false}},
                                                           {{"type", "ByteLevel"},
                                                            {"add_prefix_space", false},
                                                            {"trim_offsets", true},
                                                            {"use_regex", false}}})}};
    else
      j["pre_tokenizer"] = {{"type", "ByteLevel"},
                            {"add_prefix_space", false},
                            {"trim_offsets", true},
                            {"use_regex", true}};
    j["decoder"] = {{"type", "ByteLevel"}};
  }
  j["model"] = bpe;
  json single = json::array(), specials = json::object();
  if (add_bos) {
    single.push_back(special_item(text[static_cast<size_t>(bos)]));
    specials[text[static_cast<size_t>(bos)]] = special_entry(text[static_cast<size_t>(bos)], bos);
  }
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (add_eos) {
    single.push_back(special_item(text[static_cast<size_t>(eos)]));
    specials[text[static_cast<size_t>(eos)]] = special_entry(text[static_cast<size_t>(eos)], eos);
  }
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", single},
                         {"pair", single},
                         {"special_tokens", specials}};
  // tokenizer_config.json's part: special tokens and the chat template.
  json cfg = json::object();
  cfg["clean_up_tokenization_spaces"] = false;
  if (bos >= 0) cfg["bos_token"] = text[static_cast<size_t>(bos)];
  if (eos >= 0) cfg["eos_token"] = text[static_cast<size_t>(eos)];
  if (unk >= 0) cfg["unk_token"] = text[static_cast<size_t>(unk)];
  if (pad >= 0) cfg["pad_token"] = text[static_cast<size_t>(pad)];
  if (const gguf::Value* ct = g.find("tokenizer.chat_template")) {
    OSLO_CHECK(ct->type == gguf::ValueType::STRING, OSLO_ERR_FORMAT, where,
               ": tokenizer.chat_template is not a string");
    cfg["chat_template"] = ct->s;
  }
  return Tokenizer::from_json(j.dump(), where + " (GGUF metadata)", cfg.dump());
}

}  // namespace tok
}  // namespace oslo
