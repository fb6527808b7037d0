// Deterministic fuzzing (a fixed seed; fast): structural and byte-level
// mutations of tokenizer.json files, random byte strings and random Unicode
// text through every fixture tokenizer, random ids through decode. Nothing
// may crash, hang or throw anything but oslo::Error (std::bad_alloc aside).
// tools/test.sh runs it under AddressSanitizer + UndefinedBehaviorSanitizer.
// Usage: test_tokenizer_fuzz FIXTURES_DIR [ITERATION_SCALE]
#include <nlohmann/json.hpp>
#include <random>

#include "core/tokenizer/tokenizer.hpp"
#include "tests/tokenizer/tok_test_util.hpp"

using json = nlohmann::json;
using oslo::Tokenizer;

// Appends cp as UTF-8.
void oslo_tok_append(std::string& s, uint32_t cp);

namespace {

std::mt19937_64 rng(20261123);
size_t g_failures = 0;

size_t pick(size_t n) {
  return n ? static_cast<size_t>(rng() % n) : 0;
}

// Runs body; anything but success, oslo::Error or bad_alloc is a failure.
template <typename F>
bool run(const char* what, F&& body) {
  try {
    body();
    return true;
  } catch (const oslo::Error&) {
    return false;
  } catch (const std::bad_alloc&) {
    return false;
  } catch (const std::exception& e) {
    fprintf(stderr, "FAIL %s: non-oslo exception: %s\n", what, e.what());
    ++g_failures;
    return false;
  }
}

const uint32_t kInteresting[] = {
    0x20,   0x09,    0x0A,    0x0D,    0x00,    0x27,    0x2E,     0x41,   0x61,
    0x7A,   0x30,    0x39,    0x85,    0xA0,    0xE9,    0x301,    0x308,  0x130,
    0x3A3,  0x3C2,   0x4E2D,  0x6587,  0x3042,  0xAC00,  0x200B,   0x200D, 0xFE0F,
    0xFEFF, 0xFFFD,  0x2581,  0x1F600, 0x1F468, 0x1F3FD, 0x10FFFF, 0xE000, 0x2028,
    0x3000, 0x2B820, 0x2B920, 0x0E01,  0x0627,  0x05D0,  0x0915,   0x094D, 0x1100};

std::string random_text() {
  std::string s;
  const size_t n = pick(48);
  for (size_t i = 0; i < n; ++i) {
    uint32_t cp;
    switch (pick(4)) {
      case 0: cp = kInteresting[pick(sizeof kInteresting / sizeof *kInteresting)]; break;
      case 1: cp = 0x20 + static_cast<uint32_t>(pick(0x5F)); break;
      case 2: cp = static_cast<uint32_t>(pick(0x800)); break;
      default:
        cp = static_cast<uint32_t>(pick(0x110000));
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0x41;
    }
    oslo_tok_append(s, cp);
  }
  // Special tokens spelled in the text now and then.
  static const char* kSpecial[] = {
      "<s>",    "</s>",        "<unk>", "[CLS]", "[SEP]", "<|endoftext|>", "<|begin_of_text|>",
      "<tool>", "<|im_start|>"};
  if (pick(3) == 0) {
    size_t at = pick(s.size() + 1);
    while (at < s.size() && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) ++at;
    s.insert(at, kSpecial[pick(9)]);
  }
  return s;
}

std::string random_bytes() {
  std::string s(pick(40), '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

void exercise(const Tokenizer& t, const char* what) {
  for (int k = 0; k < 4; ++k) {
    std::string text = pick(2) ? random_text() : random_bytes();
    std::vector<int64_t> ids;
    if (run(what, [&] { ids = t.encode(text, pick(2)); })) {
      run(what, [&] { t.decode(ids.data(), ids.size(), pick(2)); });
    }
  }
  std::vector<int64_t> ids(pick(20));
  for (auto& id : ids) id = static_cast<int64_t>(pick(t.vocab_size() + 10));
  run(what, [&] { t.decode(ids.data(), ids.size(), pick(2)); });
}

json random_value() {
  switch (pick(12)) {
    case 0: return nullptr;
    case 1: return -1;
    case 2: return 1e300;
    case 3: return 4294967296LL;
    case 4: return "";
    case 5: return std::string(pick(3000), 'a');
    case 6: return json::array();
    case 7: return json::object();
    case 8: return true;
    case 9: return "\xe2\x96\x81";
    case 10: return json::array({"a", "b"});
    default: return static_cast<int64_t>(pick(100));
  }
}

void collect(json& j, std::vector<json*>& out) {
  out.push_back(&j);
  if (j.is_object() || j.is_array())
    for (auto& v : j) collect(v, out);
}

// Mutates a few nodes of j (structure kept as JSON).
void mutate(json& j) {
  const size_t n = 1 + pick(3);
  for (size_t k = 0; k < n; ++k) {
    std::vector<json*> nodes;
    collect(j, nodes);
    json* target = nodes[pick(nodes.size())];
    switch (pick(4)) {
      case 0: *target = random_value(); break;
      case 1:
        if (target->is_object() && !target->empty()) {
          auto it = target->begin();
          std::advance(it, static_cast<long>(pick(target->size())));
          target->erase(it);
        }
        break;
      case 2:
        if (target->is_string()) *target = target->get<std::string>() + random_text();
        break;
      default:
        if (target->is_object() && target->contains("type"))
          (*target)["type"] =
              json::array({"BPE", "WordPiece", "Sequence", "ByteLevel", "Split", "Metaspace",
                           "Replace", "Strip", "BertNormalizer", "TemplateProcessing", "Unigram",
                           "WordLevel", "Precompiled", "WhitespaceSplit", "Nope"})[pick(15)];
    }
  }
}

// A small tokenizer.json using many components.
const char* kSmall = R"({
  "version": "1.0",
  "added_tokens": [
    {"id": 10, "content": "<s>", "single_word": false, "lstrip": true, "rstrip": true, "normalized": false, "special": true},
    {"id": 11, "content": "Hey", "single_word": true, "lstrip": false, "rstrip": false, "normalized": true, "special": false}],
  "normalizer": {"type": "Sequence", "normalizers": [
    {"type": "NFKC"}, {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "},
    {"type": "Prepend", "prepend": "▁"}, {"type": "Strip", "strip_left": false, "strip_right": true},
    {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true}]},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"String": "x"}, "behavior": "MergedWithNext", "invert": false},
    {"type": "Digits", "individual_digits": true}, {"type": "Punctuation", "behavior": "Contiguous"},
    {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true},
    {"type": "WhitespaceSplit"}, {"type": "Whitespace"}, {"type": "CharDelimiterSplit", "delimiter": "q"}]},
  "post_processor": {"type": "Sequence", "processors": [{"type": "ByteLevel"},
    {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 10]}]},
  "decoder": {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
    {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 2},
    {"type": "Metaspace", "replacement": "▁", "add_prefix_space": true},
    {"type": "WordPiece", "prefix": "##", "cleanup": true}, {"type": "BPEDecoder", "suffix": "</w>"},
    {"type": "ByteLevel"}]},
  "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
    "continuing_subword_prefix": "##", "end_of_word_suffix": "</w>", "ignore_merges": true,
    "vocab": {"<unk>": 0, "a": 1, "</s>": 2, "##b": 3, "a##b": 4, "ab": 5, "<0x41>": 6, "▁": 7, "c</w>": 8, "##c</w>": 9, "abc": 12, "abc</w>": 13},
    "merges": ["a ##b", ["ab", "##c</w>"]]}
})";

// Small Unigram (with Precompiled: a charsmap mapping "A" to "a" and "x" to
// "yz", built by hand as a darts-clone double array) and WordLevel files.
const char* kSmallUnigram = R"({
  "version": "1.0",
  "added_tokens": [{"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
  "normalizer": {"type": "Sequence", "normalizers": [
    {"type": "Precompiled", "precompiled_charsmap": "%CHARSMAP%"},
    {"type": "Strip", "strip_left": false, "strip_right": true},
    {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "▁"}]},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"},
    {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}]},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<unk>", "type_id": 0}}],
    "special_tokens": {"<unk>": {"id": "<unk>", "ids": [0], "tokens": ["<unk>"]}}},
  "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
  "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": true,
    "vocab": [["<unk>", 0.0], ["▁", -1.0], ["a", -2.0], ["▁a", -1.5], ["yz", -3.0], ["<0x41>", -4.0], ["<0xE2>", -4.0], ["z", -2.5], ["", -1.0]]}
})";
const char* kSmallWordLevel = R"({
  "version": "1.0",
  "added_tokens": [],
  "normalizer": {"type": "Lowercase"},
  "pre_tokenizer": {"type": "Whitespace"},
  "post_processor": null,
  "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
  "model": {"type": "WordLevel", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "a": 1, "b": 2, ".": 3}}
})";

// A darts-clone double array holding "A" -> "a" and "x" -> "yz" (base64).
std::string tiny_charsmap() {
  // Units: 0 root (offset 1: children at 1 ^ c); 1^'A' = 64: label 'A', leaf
  // flag, offset 0 -> value unit at 64 ^ 0... darts puts the value at the
  // position the child's offset leads to: use offset 128 (64 ^ 128 = 192).
  std::vector<uint32_t> u(256, 0);
  auto unit = [](uint32_t label, bool leaf, uint32_t offset) {
    return (offset << 10) | (leaf ? 1u << 8 : 0u) | label;
  };
  u[0] = unit(0, false, 1);
  u[1 ^ 'A'] = unit('A', true, (1 ^ 'A') ^ 200);
  u[200] = 0x80000000u | 0;  // value: offset 0 in the strings
  u[1 ^ 'x'] = unit('x', true, (1 ^ 'x') ^ 201);
  u[201] = 0x80000000u | 2;  // value: offset 2
  std::string blob;
  auto put = [&blob](uint32_t v) {
    for (int k = 0; k < 4; ++k) blob += static_cast<char>(v >> (8 * k) & 0xFF);
  };
  put(static_cast<uint32_t>(u.size() * 4));
  for (uint32_t v : u) put(v);
  blob += std::string("a\0yz\0", 5);
  static const char* kB64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < blob.size(); i += 3) {
    uint32_t v = static_cast<unsigned char>(blob[i]) << 16;
    if (i + 1 < blob.size()) v |= static_cast<unsigned char>(blob[i + 1]) << 8;
    if (i + 2 < blob.size()) v |= static_cast<unsigned char>(blob[i + 2]);
    out += kB64[v >> 18 & 63];
    out += kB64[v >> 12 & 63];
    out += i + 1 < blob.size() ? kB64[v >> 6 & 63] : '=';
    out += i + 2 < blob.size() ? kB64[v & 63] : '=';
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FIXTURES_DIR [SCALE]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const int scale = argc > 2 ? atoi(argv[2]) : 1;
  size_t loaded = 0, rejected = 0, texts = 0;

  // 1. The small all-components tokenizer, then structural mutations of it.
  const json small = json::parse(kSmall);
  {
    auto t = Tokenizer::from_json(kSmall, "small");
    for (int i = 0; i < 300 * scale; ++i, ++texts) exercise(*t, "small");
  }
  for (int i = 0; i < 3000 * scale; ++i) {
    json j = small;
    mutate(j);
    std::unique_ptr<Tokenizer> t;
    if (run("mutated small", [&] { t = Tokenizer::from_json(j.dump(), "fuzz"); })) {
      ++loaded;
      exercise(*t, "mutated small");
    } else {
      ++rejected;
    }
  }
  // 1b. The small Unigram (Precompiled) and WordLevel files, then mutations.
  {
    std::string uni = kSmallUnigram;
    uni.replace(uni.find("%CHARSMAP%"), 10, tiny_charsmap());
    auto u = Tokenizer::from_json(uni, "small unigram");
    // The hand-made charsmap works: "A" -> "a", "x" -> "yz".
    auto ids = u->encode("A x", false);
    if (ids != std::vector<int64_t>{3, 1, 4}) {
      fprintf(stderr, "FAIL small unigram: unexpected ids\n");
      ++g_failures;
    }
    for (const std::string& text : {uni, std::string(kSmallWordLevel)}) {
      const json base = json::parse(text);
      auto t = Tokenizer::from_json(text, "small");
      for (int i = 0; i < 150 * scale; ++i, ++texts) exercise(*t, "small unigram/wordlevel");
      for (int i = 0; i < 1000 * scale; ++i) {
        json j = base;
        mutate(j);
        std::unique_ptr<Tokenizer> m;
        if (run("mutated small unigram/wordlevel",
                [&] { m = Tokenizer::from_json(j.dump(), "fuzz"); })) {
          ++loaded;
          exercise(*m, "mutated small unigram/wordlevel");
        } else {
          ++rejected;
        }
      }
    }
  }
  // 2. Byte-level mutations of the small JSON text.
  const std::string small_text = small.dump();
  for (int i = 0; i < 1000 * scale; ++i) {
    std::string s = small_text;
    for (size_t k = 0, n = 1 + pick(4); k < n; ++k) {
      switch (pick(3)) {
        case 0: s[pick(s.size())] = static_cast<char>(rng()); break;
        case 1: s.erase(pick(s.size()), pick(8)); break;
        default: s.insert(pick(s.size()), 1, "{}[]\",:0\\"[pick(9)]);
      }
    }
    std::unique_ptr<Tokenizer> t;
    if (run("byte-mutated small", [&] { t = Tokenizer::from_json(s, "fuzz"); })) {
      ++loaded;
      exercise(*t, "byte-mutated small");
    } else {
      ++rejected;
    }
  }
  // 3. Every fixture: random text, and a few mutations of its tokenizer.json.
  for (const char* name :
       {"gpt2_bpe", "llama3_bpe", "qwen2_bpe", "minilm", "llama2_fast", "llama2_spm",
        "xlmr_unigram", "unigram_raw", "t5_unigram", "wordlevel"}) {
    std::unique_ptr<Tokenizer> t;
    if (!run(name, [&] { t = Tokenizer::load(dir + "/" + name); }) || !t) {
      fprintf(stderr, "FAIL cannot load fixture %s\n", name);
      ++g_failures;
      continue;
    }
    for (int i = 0; i < 500 * scale; ++i, ++texts) exercise(*t, name);
    const std::string path = dir + "/" + name + "/tokenizer.json";
    const std::string text = tok_test::read_text(path);
    if (text.empty()) continue;
    const json orig = json::parse(text);
    for (int i = 0; i < 8 * scale; ++i) {
      json j = orig;
      // Mutate outside the big vocab/merges mostly: pick a top-level part.
      const char* parts[] = {"normalizer", "pre_tokenizer", "post_processor",
                             "decoder",    "added_tokens",  "model"};
      const char* part = parts[pick(6)];
      if (j.contains(part) && std::string(part) != "model") {
        mutate(j[part]);
      } else {
        json& m = j["model"];
        for (auto it = m.begin(); it != m.end(); ++it)
          if (it.key() != "vocab" && it.key() != "merges" && pick(2)) *it = random_value();
        if (m.contains("merges") && m["merges"].is_array() && !m["merges"].empty())
          m["merges"][pick(m["merges"].size())] = random_value();
        // A Unigram vocab entry, or its score.
        if (m.contains("vocab") && m["vocab"].is_array() && !m["vocab"].empty()) {
          json& e = m["vocab"][pick(m["vocab"].size())];
          if (pick(2) && e.is_array() && e.size() == 2)
            e[1] = json::array({-1e300, 0.0, 5.0, -0.5})[pick(4)];
          else
            e = random_value();
        }
      }
      std::unique_ptr<Tokenizer> u;
      if (run(name, [&] { u = Tokenizer::from_json(j.dump(), name); })) {
        ++loaded;
        exercise(*u, name);
      } else {
        ++rejected;
      }
    }
  }
  printf(
      "tokenizer fuzz: %zu mutated files loaded, %zu rejected with oslo::Error, %zu text "
      "rounds; %zu failures\n",
      loaded, rejected, texts, g_failures);
  return g_failures ? 1 : 0;
}

void oslo_tok_append(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}
