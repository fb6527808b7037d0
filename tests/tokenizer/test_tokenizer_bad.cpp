// Bad, corrupt and hostile tokenizer files and inputs: each gives an
// oslo::Error with the expected status and a message naming the problem,
// never a crash or another exception.
// Usage: test_tokenizer_bad FIXTURES_DIR
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <random>

#include "core/tokenizer/tokenizer.hpp"
#include "tests/tokenizer/tok_test_util.hpp"

// cmocka last (its fail() macro clashes with oslo::fail).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" {
// clang-format off
#include <cmocka.h>
// clang-format on
}

using json = nlohmann::json;
using oslo::Tokenizer;
using tok_test::status_of;

namespace {

std::string g_fixtures, g_tmp;

int setup(void**) {
  char tmpl[] = "/tmp/oslo_tok_bad_XXXXXX";
  if (!mkdtemp(tmpl)) return -1;
  g_tmp = tmpl;
  return 0;
}
int teardown(void**) {
  std::string cmd = "rm -rf '" + g_tmp + "'";
  return system(cmd.c_str()) == 0 ? 0 : -1;
}

void write(const std::string& path, const std::string& bytes) {
  FILE* f = fopen(path.c_str(), "wb");
  assert_non_null(f);
  if (!bytes.empty()) assert_int_equal(fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  fclose(f);
}

bool contains(const std::string& s, const char* needle) {
  return s.find(needle) != std::string::npos;
}

// Loading `bytes` as a tokenizer.json file fails with `status` and a message
// holding every needle.
void expect_json(const char* label, const std::string& bytes, int status,
                 std::initializer_list<const char*> needles) {
  const std::string path = g_tmp + "/tokenizer.json";
  write(path, bytes);
  std::string msg;
  int st = status_of([&] { Tokenizer::load(path); }, &msg);
  bool ok = st == status;
  for (const char* n : needles) ok = ok && contains(msg, n);
  if (!ok)
    fprintf(stderr, "case '%s': status %d (want %d), message: %s\n", label, st, status,
            msg.c_str());
  assert_true(ok);
  // Also through from_json (no file).
  std::string msg2;
  int st2 = status_of([&] { Tokenizer::from_json(bytes, "mem"); }, &msg2);
  assert_int_equal(st2, status);
}

json base() {
  return json::parse(R"({
    "version": "1.0",
    "added_tokens": [{"id": 3, "content": "<s>", "single_word": false, "lstrip": false,
                      "rstrip": false, "normalized": false, "special": true}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [3], "tokens": ["<s>"]}}},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}
  })");
}

void test_base_is_valid(void**) {
  auto t = Tokenizer::from_json(base().dump(), "base");
  auto ids = t->encode("abab", true);
  assert_int_equal(ids.size(), 3);
  assert_int_equal(ids[0], 3);
  assert_int_equal(ids[1], 2);
  assert_int_equal(ids[2], 2);
  assert_string_equal(t->decode(ids.data(), ids.size(), true).c_str(), "abab");
}

void test_files(void**) {
  std::string msg;
  assert_int_equal(status_of([&] { Tokenizer::load(g_tmp + "/nope"); }, &msg), OSLO_ERR_IO);
  assert_true(contains(msg, "/nope"));
  const std::string empty_dir = g_tmp + "/emptydir";
  mkdir(empty_dir.c_str(), 0755);
  assert_int_equal(status_of([&] { Tokenizer::load(empty_dir); }, &msg), OSLO_ERR_IO);
  assert_true(contains(msg, "no tokenizer.json or tokenizer.model"));
  // A folder whose tokenizer_config.json is broken: named.
  const std::string d = g_tmp + "/cfg";
  mkdir(d.c_str(), 0755);
  write(d + "/tokenizer.json", base().dump());
  write(d + "/tokenizer_config.json", "{\"bos_token\": ");
  assert_int_equal(status_of([&] { Tokenizer::load(d); }, &msg), OSLO_ERR_FORMAT);
  assert_true(contains(msg, "tokenizer_config.json"));
  write(d + "/tokenizer_config.json", "{\"bos_token\": 5}");
  assert_int_equal(status_of([&] { Tokenizer::load(d); }, &msg), OSLO_ERR_FORMAT);
  assert_true(contains(msg, "bos_token"));
  write(d + "/tokenizer_config.json", "{\"bos_token\": {\"content\": \"<s>\"}}");
  std::unique_ptr<Tokenizer> t;
  assert_int_equal(status_of([&] { t = Tokenizer::load(d); }, &msg), OSLO_OK);
  assert_int_equal(t->special_id(oslo::SpecialToken::kBos), 3);
  assert_int_equal(t->special_id(oslo::SpecialToken::kEos), -1);
}

void test_json(void**) {
  const std::string good = tok_test::read_text(g_fixtures + "/gpt2_bpe/tokenizer.json");
  assert_true(good.size() > 1000);
  expect_json("empty file", "", OSLO_ERR_FORMAT, {"invalid JSON"});
  expect_json("truncated", good.substr(0, good.size() / 2), OSLO_ERR_FORMAT, {"invalid JSON"});
  expect_json("not an object", "[]", OSLO_ERR_FORMAT, {"expected an object"});
  expect_json("deep nesting", std::string(100000, '[') + std::string(100000, ']'), OSLO_ERR_FORMAT,
              {"nested deeper"});
  expect_json("deep objects",
              [] {
                std::string s;
                for (int i = 0; i < 5000; ++i) s += "{\"a\":";
                s += "1";
                for (int i = 0; i < 5000; ++i) s += "}";
                return s;
              }(),
              OSLO_ERR_FORMAT, {"nested deeper"});
  expect_json("huge number", R"({"model": {"type": "BPE", "vocab": {"a": 1e400}}})",
              OSLO_ERR_FORMAT, {"invalid JSON"});

  auto with = [](auto edit) {
    json j = base();
    edit(j);
    return j.dump();
  };
  expect_json("no model", with([](json& j) { j.erase("model"); }), OSLO_ERR_FORMAT,
              {"missing 'model'"});
  expect_json("model not object", with([](json& j) { j["model"] = 5; }), OSLO_ERR_FORMAT,
              {"model", "expected an object"});
  expect_json("version", with([](json& j) { j["version"] = "2.0"; }), OSLO_ERR_FORMAT,
              {"version", "2.0"});
  expect_json("unknown model", with([](json& j) { j["model"]["type"] = "Foo"; }), OSLO_ERR_FORMAT,
              {"unknown model type", "Foo"});
  expect_json("ctc", with([](json& j) {
                j["decoder"] = {{"type", "CTC"}};
              }),
              OSLO_ERR_NOT_SUPPORTED, {"CTC"});
  expect_json("unigram without vocab", with([](json& j) { j["model"]["type"] = "Unigram"; }),
              OSLO_ERR_FORMAT, {"model.vocab", "expected an array"});
  expect_json("unknown pre", with([](json& j) { j["pre_tokenizer"]["type"] = "Bar"; }),
              OSLO_ERR_FORMAT, {"unknown pre_tokenizer type", "Bar"});
  expect_json("scripts", with([](json& j) {
                j["pre_tokenizer"] = {{"type", "UnicodeScripts"}};
              }),
              OSLO_ERR_NOT_SUPPORTED, {"UnicodeScripts"});
  expect_json("precompiled without charsmap", with([](json& j) {
                j["normalizer"] = {{"type", "Precompiled"}};
              }),
              OSLO_ERR_FORMAT, {"normalizer", "precompiled_charsmap"});
  expect_json("fixed length", with([](json& j) {
                j["pre_tokenizer"] = {{"type", "FixedLength"}};
              }),
              OSLO_ERR_NOT_SUPPORTED, {"FixedLength"});
  expect_json("unknown normalizer", with([](json& j) { j["normalizer"]["type"] = 7; }),
              OSLO_ERR_FORMAT, {"normalizer.type", "expected a string"});
  expect_json("unknown decoder", with([](json& j) { j["decoder"]["type"] = "Baz"; }),
              OSLO_ERR_FORMAT, {"unknown decoder type", "Baz"});
  expect_json("unknown post", with([](json& j) { j["post_processor"]["type"] = "Q"; }),
              OSLO_ERR_FORMAT, {"unknown post_processor type"});
  expect_json("dropout", with([](json& j) { j["model"]["dropout"] = 0.1; }), OSLO_ERR_NOT_SUPPORTED,
              {"dropout"});
  expect_json("merge unknown token", with([](json& j) { j["model"]["merges"] = {"a c"}; }),
              OSLO_ERR_FORMAT, {"model.merges[0]", "'c'", "not in the vocab"});
  expect_json("merge result unknown", with([](json& j) { j["model"]["merges"] = {"b a"}; }),
              OSLO_ERR_FORMAT, {"model.merges[0]", "'ba'"});
  expect_json("merge not a pair", with([](json& j) { j["model"]["merges"] = {"ab"}; }),
              OSLO_ERR_FORMAT, {"model.merges[0]", "not two tokens"});
  expect_json("merge wrong type", with([](json& j) { j["model"]["merges"] = {5}; }),
              OSLO_ERR_FORMAT, {"model.merges[0]"});
  expect_json("merges not array", with([](json& j) { j["model"]["merges"] = "a b"; }),
              OSLO_ERR_FORMAT, {"model.merges", "expected an array"});
  expect_json("vocab string id", with([](json& j) { j["model"]["vocab"]["a"] = "0"; }),
              OSLO_ERR_FORMAT, {"model.vocab", "token id"});
  expect_json("vocab negative id", with([](json& j) { j["model"]["vocab"]["a"] = -1; }),
              OSLO_ERR_FORMAT, {"model.vocab", "token id"});
  expect_json("vocab huge id", with([](json& j) { j["model"]["vocab"]["a"] = 99999999999LL; }),
              OSLO_ERR_FORMAT, {"model.vocab", "token id"});
  expect_json("vocab float id", with([](json& j) { j["model"]["vocab"]["a"] = 1e30; }),
              OSLO_ERR_FORMAT, {"model.vocab", "token id"});
  expect_json("vocab not object", with([](json& j) { j["model"]["vocab"] = json::array(); }),
              OSLO_ERR_FORMAT, {"model.vocab"});
  expect_json("unk not in vocab", with([](json& j) { j["model"]["unk_token"] = "<unk>"; }),
              OSLO_ERR_FORMAT, {"unk_token", "<unk>"});
  expect_json("wordpiece unk missing", with([](json& j) {
                j["model"] = {{"type", "WordPiece"}, {"vocab", {{"a", 0}}}};
              }),
              OSLO_ERR_FORMAT, {"[UNK]"});
  expect_json("bad regex", with([](json& j) {
                j["pre_tokenizer"] = {{"type", "Split"},
                                      {"pattern", {{"Regex", "(unclosed"}}},
                                      {"behavior", "Isolated"}};
              }),
              OSLO_ERR_FORMAT, {"invalid regex", "(unclosed"});
  expect_json("bad behavior", with([](json& j) {
                j["pre_tokenizer"] = {
                    {"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}};
              }),
              OSLO_ERR_FORMAT, {"behavior", "Sideways"});
  expect_json("pattern neither", with([](json& j) {
                j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"X", 1}}}};
              }),
              OSLO_ERR_FORMAT, {"pattern"});
  expect_json("added content type", with([](json& j) { j["added_tokens"][0]["content"] = 5; }),
              OSLO_ERR_FORMAT, {"added_tokens[0].content"});
  expect_json("added flag type", with([](json& j) { j["added_tokens"][0]["lstrip"] = "yes"; }),
              OSLO_ERR_FORMAT, {"added_tokens[0].lstrip"});
  expect_json("added id huge", with([](json& j) { j["added_tokens"][0]["id"] = 1e300; }),
              OSLO_ERR_FORMAT, {"added_tokens[0].id"});
  expect_json("template missing special",
              with([](json& j) { j["post_processor"]["special_tokens"] = json::object(); }),
              OSLO_ERR_FORMAT, {"post_processor", "<s>"});
  expect_json("template no A", with([](json& j) { j["post_processor"]["single"] = json::array(); }),
              OSLO_ERR_FORMAT, {"no sequence A"});
  expect_json("metaspace replacement", with([](json& j) {
                j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "ab"}};
              }),
              OSLO_ERR_FORMAT, {"replacement", "one character"});
  expect_json("deep sequence", with([](json& j) {
                json d = {{"type", "NFC"}};
                for (int i = 0; i < 20; ++i)
                  d = {{"type", "Sequence"}, {"normalizers", json::array({d})}};
                j["normalizer"] = d;
              }),
              OSLO_ERR_FORMAT, {"nested too deeply"});
}

json unigram() {
  return json::parse(R"({
    "version": "1.0",
    "added_tokens": [],
    "normalizer": null,
    "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": true},
    "post_processor": null,
    "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": true},
    "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": false,
              "vocab": [["<unk>", 0.0], ["a", -1.0], ["b", -2.0], ["ab", -1.5], ["<0x63>", -3.0]]}
  })");
}

// Unigram and WordLevel models, the Precompiled normalizer: bad files are
// named OSLO_ERR_FORMAT; text a model cannot encode is OSLO_ERR_INVALID_ARGUMENT.
void test_unigram_wordlevel(void**) {
  auto ids_of = [](const json& j, const std::string& text) {
    return Tokenizer::from_json(j.dump(), "u")->encode(text, false);
  };
  assert_true(ids_of(unigram(), "ab") == (std::vector<int64_t>{3}));
  assert_true(ids_of(unigram(), "abcc") == (std::vector<int64_t>{3, 0}));  // unknown run fused
  json bf = unigram();
  bf["model"]["byte_fallback"] = true;
  assert_true(ids_of(bf, "abcc") == (std::vector<int64_t>{3, 4, 4}));

  auto with = [](auto edit) {
    json j = unigram();
    edit(j);
    return j.dump();
  };
  expect_json("unigram vocab not array", with([](json& j) {
                j["model"]["vocab"] = {{"a", 1}};
              }),
              OSLO_ERR_FORMAT, {"model.vocab", "expected an array"});
  expect_json("unigram entry not pair", with([](json& j) { j["model"]["vocab"][1] = {"a"}; }),
              OSLO_ERR_FORMAT, {"model.vocab[1]", "[token, score]"});
  expect_json("unigram score string", with([](json& j) {
                j["model"]["vocab"][2] = {"b", "-2"};
              }),
              OSLO_ERR_FORMAT, {"model.vocab[2]", "[token, score]"});
  expect_json("unigram token number", with([](json& j) {
                j["model"]["vocab"][2] = {7, -2.0};
              }),
              OSLO_ERR_FORMAT, {"model.vocab[2][0]", "expected a string"});
  expect_json("unigram unk_id out of range", with([](json& j) { j["model"]["unk_id"] = 5; }),
              OSLO_ERR_FORMAT, {"model.unk_id", "5", "5-token vocab"});
  expect_json("unigram unk_id negative", with([](json& j) { j["model"]["unk_id"] = -1; }),
              OSLO_ERR_FORMAT, {"model.unk_id"});
  expect_json("unigram unk_id string", with([](json& j) { j["model"]["unk_id"] = "0"; }),
              OSLO_ERR_FORMAT, {"model.unk_id"});
  expect_json("unigram unk_id empty vocab",
              with([](json& j) { j["model"]["vocab"] = json::array(); }), OSLO_ERR_FORMAT,
              {"model.unk_id", "empty vocab"});
  expect_json("unigram byte_fallback type", with([](json& j) { j["model"]["byte_fallback"] = 1; }),
              OSLO_ERR_FORMAT, {"model.byte_fallback"});
  expect_json("precompiled not base64", with([](json& j) {
                j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "abc$"}};
              }),
              OSLO_ERR_FORMAT, {"normalizer.precompiled_charsmap", "base64"});
  expect_json("precompiled number", with([](json& j) {
                j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", 5}};
              }),
              OSLO_ERR_FORMAT, {"normalizer.precompiled_charsmap", "base64 string"});
  expect_json("precompiled empty", with([](json& j) {
                j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", ""}};
              }),
              OSLO_ERR_FORMAT, {"normalizer.precompiled_charsmap", "corrupt precompiled charsmap"});
  // "CAAAAA..." = trie size 8, then only 4 bytes.
  expect_json(
      "precompiled truncated", with([](json& j) {
        j["normalizer"] = {
            {"type", "Sequence"},
            {"normalizers",
             json::array({{{"type", "Precompiled"}, {"precompiled_charsmap", "CAAAAAAAAAA="}}})}};
      }),
      OSLO_ERR_FORMAT, {"normalizer.normalizers[0].precompiled_charsmap", "does not fit"});

  // Text the model cannot encode: a named error, as Hugging Face raises one.
  std::string msg;
  json no_unk = unigram();
  no_unk["model"].erase("unk_id");
  auto t = Tokenizer::from_json(no_unk.dump(), "u");
  assert_true(t->encode("ab", false) == (std::vector<int64_t>{3}));
  assert_int_equal(status_of([&] { t->encode("abc", false); }, &msg), OSLO_ERR_INVALID_ARGUMENT);
  assert_true(contains(msg, "no unk_id"));
  no_unk["model"]["byte_fallback"] = true;  // Hugging Face needs unk_id even then
  t = Tokenizer::from_json(no_unk.dump(), "u");
  assert_int_equal(status_of([&] { t->encode("abc", false); }, &msg), OSLO_ERR_INVALID_ARGUMENT);

  json wl = json::parse(R"({"model": {"type": "WordLevel", "vocab": {"a": 0, "b": 1}},
                             "pre_tokenizer": {"type": "WhitespaceSplit"}})");
  t = Tokenizer::from_json(wl.dump(), "wl");
  assert_true(t->encode("a b a", false) == (std::vector<int64_t>{0, 1, 0}));
  assert_int_equal(status_of([&] { t->encode("a c", false); }, &msg), OSLO_ERR_INVALID_ARGUMENT);
  assert_true(contains(msg, "'c'") && contains(msg, "<unk>"));
  wl["model"]["unk_token"] = "b";
  t = Tokenizer::from_json(wl.dump(), "wl");
  assert_true(t->encode("a c", false) == (std::vector<int64_t>{0, 1}));
  wl["model"]["vocab"]["c"] = -3;
  expect_json("wordlevel bad id", wl.dump(), OSLO_ERR_FORMAT, {"model.vocab", "token id"});
  wl["model"]["vocab"] = json::array();
  expect_json("wordlevel vocab array", wl.dump(), OSLO_ERR_FORMAT, {"model.vocab"});
  wl["model"]["vocab"] = {{"a", 0}};
  wl["model"]["unk_token"] = 3;
  expect_json("wordlevel unk type", wl.dump(), OSLO_ERR_FORMAT, {"model.unk_token"});
}

void test_text(void**) {
  auto t = Tokenizer::load(g_fixtures + "/gpt2_bpe");
  std::string msg;
  for (const char* bad : {"\xff", "abc\xc3", "\xed\xa0\x80", "\xc0\xaf", "ok \xf4\x90\x80\x80"}) {
    assert_int_equal(status_of([&] { t->encode(bad, true); }, &msg), OSLO_ERR_INVALID_ARGUMENT);
    assert_true(contains(msg, "not valid UTF-8"));
  }
  assert_int_equal(status_of([&] { t->encode("abc\xc3", true); }, &msg), OSLO_ERR_INVALID_ARGUMENT);
  assert_true(contains(msg, "byte 3"));
  int64_t neg[] = {5, -1};
  assert_int_equal(status_of([&] { t->decode(neg, 2, false); }, &msg), OSLO_ERR_INVALID_ARGUMENT);
  assert_true(contains(msg, "ids[1]"));
  // Ids that name no token are skipped, as Hugging Face does.
  int64_t far[] = {1LL << 40, INT64_MAX};
  assert_string_equal(t->decode(far, 2, false).c_str(), "");
  // NUL bytes are text like any other.
  auto ids = t->encode(std::string("a\0b", 3), false);
  assert_true(ids.size() >= 2);
  auto back = t->decode(ids.data(), ids.size(), false);
  assert_int_equal(back.size(), 3);
  assert_memory_equal(back.data(), "a\0b", 3);
}

void test_model_file(void**) {
  const std::string good = tok_test::read_text(g_fixtures + "/llama2_spm/tokenizer.model");
  assert_true(good.size() > 1000);
  const std::string p = g_tmp + "/tokenizer.model";
  std::string msg;
  std::mt19937 rng(7);
  std::string junk(4096, '\0');
  for (auto& c : junk) c = static_cast<char>(rng());
  for (const std::string& bytes :
       {std::string(), junk, good.substr(0, good.size() / 2), good.substr(0, 10),
        std::string("\x0a\xff\xff\xff\xff\x0f", 6)}) {
    write(p, bytes);
    int st = status_of([&] { Tokenizer::load(p); }, &msg);
    if (st != OSLO_ERR_FORMAT)
      fprintf(stderr, "model of %zu bytes: %d %s\n", bytes.size(), st, msg.c_str());
    assert_int_equal(st, OSLO_ERR_FORMAT);
    assert_true(contains(msg, "tokenizer.model"));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s FIXTURES_DIR\n", argv[0]);
    return 2;
  }
  g_fixtures = argv[1];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_base_is_valid), cmocka_unit_test(test_files),
      cmocka_unit_test(test_json),          cmocka_unit_test(test_unigram_wordlevel),
      cmocka_unit_test(test_text),          cmocka_unit_test(test_model_file),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
