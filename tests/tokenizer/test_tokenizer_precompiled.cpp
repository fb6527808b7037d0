// The Precompiled normalizer (SentencePiece's precompiled charsmap, as
// tokenizer.json's XLM-R / T5 style tokenizers carry it) against Hugging
// Face's: every case of <fixture>/precompiled.json (tricky strings, random
// strings, the corpus; made by make_fixtures.py with tokenizers'
// normalizers.Precompiled) normalizes to HF's output. Also base64, grapheme
// clusters, and corrupt blobs (a named OSLO_ERR_FORMAT at load, never a
// crash or an out-of-bounds read at use; run under ASan in tools/test.sh).
// Usage: test_tokenizer_precompiled FIXTURE_DIR (the xlmr_unigram fixture)
#include <nlohmann/json.hpp>
#include <random>

#include "core/tokenizer/hf_pipeline.hpp"
#include "core/tokenizer/precompiled.hpp"
#include "core/common/unicode.hpp"
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
using oslo::tok::PrecompiledCharsmap;
using tok_test::show;
using tok_test::status_of;

namespace {

std::string g_dir;
std::string g_blob;  // the fixture's decoded charsmap

int setup(void**) {
  json j = json::parse(tok_test::read_text(g_dir + "/tokenizer.json"));
  json n = j["normalizer"];
  if (n["type"] == "Sequence") n = n["normalizers"][0];
  if (n["type"] != "Precompiled") {
    fprintf(stderr, "%s: no Precompiled normalizer\n", g_dir.c_str());
    return -1;
  }
  if (!oslo::tok::base64_decode(n["precompiled_charsmap"].get<std::string>(), g_blob)) return -1;
  return 0;
}

void test_base64(void**) {
  std::string out;
  const std::pair<const char*, const char*> good[] = {{"", ""},
                                                      {"Zg==", "f"},
                                                      {"Zm8=", "fo"},
                                                      {"Zm9v", "foo"},
                                                      {"Zm9vYg==", "foob"},
                                                      {"Zm9vYmE=", "fooba"},
                                                      {"Zm9vYmFy", "foobar"},
                                                      {"+/+/", "\xfb\xff\xbf"}};
  for (auto& [in, want] : good) {
    assert_true(oslo::tok::base64_decode(in, out));
    assert_string_equal(out.c_str(), want);
  }
  for (const char* bad :
       {"Zg=", "Zg", "Z===", "Zh==", "Zm9=", "Zm 9v", "Zm9v\n", "Zm=v", "====", "Zg==Zg==", "Zm9*"})
    assert_false(oslo::tok::base64_decode(bad, out));
}

void test_graphemes(void**) {
  auto ends = [](const std::string& s) { return oslo::tok::grapheme_ends(s); };
  assert_true(ends("").empty());
  assert_true(ends("ab") == (std::vector<size_t>{1, 2}));
  assert_true(ends("\r\n") == (std::vector<size_t>{2}));
  assert_true(ends("\n\r") == (std::vector<size_t>{1, 2}));
  assert_true(ends("e\xcc\x81x") == (std::vector<size_t>{3, 4}));  // e + U+0301
  // Man ZWJ woman: one cluster; two regional-indicator pairs: two clusters.
  assert_true(ends("\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9") == (std::vector<size_t>{11}));
  assert_true(ends("\xf0\x9f\x87\xab\xf0\x9f\x87\xb7\xf0\x9f\x87\xaf\xf0\x9f\x87\xb5") ==
              (std::vector<size_t>{8, 16}));
}

void test_equals_hf(void**) {
  PrecompiledCharsmap map(g_blob, "fixture");
  assert_true(map.trie_units() > 1000);
  const json cases = json::parse(tok_test::read_text(g_dir + "/precompiled.json"));
  size_t bad = 0, changed = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"], want = c["normalized"];
    const std::string got = map.normalize(text);
    changed += want != text;
    if (got != want && ++bad <= 10)
      fprintf(stderr, "normalize(%s):\n  got  %s\n  want %s\n", show(text).c_str(),
              show(got).c_str(), show(want).c_str());
  }
  printf("precompiled: %zu of %zu strings (%zu changed by it) normalize as Hugging Face's\n",
         cases.size() - bad, cases.size(), changed);
  assert_int_equal(bad, 0);
  assert_true(changed > 100);
}

void expect_corrupt(const std::string& blob, const char* needle) {
  std::string msg;
  int st = status_of([&] { PrecompiledCharsmap m(blob, "blob"); }, &msg);
  if (st != OSLO_ERR_FORMAT || msg.find(needle) == std::string::npos)
    fprintf(stderr, "status %d, message: %s (want '%s')\n", st, msg.c_str(), needle);
  assert_int_equal(st, OSLO_ERR_FORMAT);
  assert_true(msg.find("blob") != std::string::npos);
  assert_true(msg.find(needle) != std::string::npos);
}

void test_corrupt(void**) {
  expect_corrupt("", "header");
  expect_corrupt("\x04\x00\x00", "header");
  expect_corrupt(std::string("\x00\x00\x00\x00", 4), "trie size 0");
  expect_corrupt(std::string("\x05\x00\x00\x00\x01\x02\x03\x04\x05", 9), "trie size 5");
  expect_corrupt(g_blob.substr(0, g_blob.size() / 2), "does not fit");
  std::string b = g_blob;
  b[3] = '\x7f';
  expect_corrupt(b, "does not fit");
  expect_corrupt(g_blob + "\xff", "not valid UTF-8");
  // Random damage to the trie: a named error, or a map that works.
  std::mt19937 rng(11);
  const uint32_t trie_bytes = static_cast<unsigned char>(g_blob[0]) |
                              static_cast<unsigned char>(g_blob[1]) << 8 |
                              static_cast<unsigned char>(g_blob[2]) << 16;
  size_t rejected = 0, accepted = 0;
  const std::string probes[] = {"ｈｅｌｌｏ",
                                "e\xcc\x81",
                                "\r\n",
                                "\xef\xac\x81",
                                std::string("a\0b", 3),
                                "\xe2\x91\xa0",
                                "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9",
                                "abc"};
  for (int i = 0; i < 400; ++i) {
    std::string m = g_blob;
    for (int k = 0, n = 1 + static_cast<int>(rng() % 8); k < n; ++k) {
      size_t at = 4 + rng() % trie_bytes;
      m[at] = static_cast<char>(rng());
    }
    std::unique_ptr<PrecompiledCharsmap> map;
    std::string msg;
    int st = status_of([&] { map = std::make_unique<PrecompiledCharsmap>(m, "mutated"); }, &msg);
    if (st != OSLO_OK) {
      assert_int_equal(st, OSLO_ERR_FORMAT);
      ++rejected;
      continue;
    }
    ++accepted;
    for (const std::string& p : probes)
      assert_int_equal(status_of([&] { map->normalize(p); }), OSLO_OK);
  }
  printf("precompiled: %zu damaged blobs rejected, %zu usable\n", rejected, accepted);
}

// The Nmt normalizer maps characters one by one: every code point against
// the table Hugging Face's normalizers.Nmt() gives (tokenizers 0.23.3,
// recorded by running it on each code point).
void test_nmt(void**) {
  oslo::tok::hf::Parser P("nmt");
  auto n = oslo::tok::hf::parse_normalizer(P, json{{"type", "Nmt"}}, "normalizer");
  auto want = [](uint32_t c) -> std::string {
    if ((c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F ||
        c == 0x8F || c == 0x9F)
      return "";
    static const uint32_t kSpace[] = {0x09,   0x0A,   0x0C,   0x0D,   0x1680,
                                      0x200B, 0x200C, 0x200D, 0x200E, 0x200F,
                                      0x2028, 0x2029, 0x2581, 0xFEFF, 0xFFFD};
    for (uint32_t s : kSpace)
      if (c == s) return " ";
    std::string out;
    oslo::tok::append_utf8(out, c);
    return out;
  };
  size_t bad = 0;
  for (uint32_t c = 0; c < 0x110000; ++c) {
    if (c >= 0xD800 && c < 0xE000) continue;
    std::string s;
    oslo::tok::append_utf8(s, c);
    if (n->apply(s) != want(c) && ++bad <= 5) fprintf(stderr, "Nmt U+%04X differs\n", c);
  }
  assert_int_equal(bad, 0);
  assert_string_equal(n->apply("a\tb\x01"
                               "c\xe2\x80\x8b")
                          .c_str(),
                      "a bc ");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s FIXTURE_DIR\n", argv[0]);
    return 2;
  }
  g_dir = argv[1];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_base64),    cmocka_unit_test(test_graphemes),
      cmocka_unit_test(test_equals_hf), cmocka_unit_test(test_corrupt),
      cmocka_unit_test(test_nmt),
  };
  return cmocka_run_group_tests(tests, setup, nullptr);
}
