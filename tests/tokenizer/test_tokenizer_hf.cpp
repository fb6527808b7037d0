// Oracle test: every corpus sentence's ids, with and without special tokens,
// equal those of Hugging Face (transformers' AutoTokenizer, recorded by
// make_fixtures.py in <fixture>/reference.json), and so do the decodes of
// those ids (with and without skip_special_tokens), the vocabulary size, the
// special token ids and the first tokens' spellings.
// Usage: test_tokenizer_hf FIXTURE_DIR
#include <nlohmann/json.hpp>

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
using tok_test::show;

namespace {

std::string g_dir;
std::unique_ptr<oslo::Tokenizer> g_tok;
json g_ref;

std::string ids_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

int setup(void**) {
  std::string msg;
  int st = tok_test::status_of([&] { g_tok = oslo::Tokenizer::load(g_dir); }, &msg);
  if (st != OSLO_OK) {
    fprintf(stderr, "load %s: %s\n", g_dir.c_str(), msg.c_str());
    return -1;
  }
  g_ref = json::parse(tok_test::read_text(g_dir + "/reference.json"));
  return 0;
}

int teardown(void**) {
  g_tok.reset();
  return 0;
}

void test_encode(void**) {
  size_t n = 0, bad = 0;
  for (const auto& c : g_ref["cases"]) {
    const std::string text = c["text"];
    for (bool special : {true, false}) {
      auto want = c[special ? "ids" : "ids_plain"].get<std::vector<int64_t>>();
      std::vector<int64_t> got;
      std::string msg;
      int st = tok_test::status_of([&] { got = g_tok->encode(text, special); }, &msg);
      ++n;
      if (st != OSLO_OK || got != want) {
        if (++bad <= 10)
          fprintf(stderr, "encode(%s, special=%d):\n  got  %s %s\n  want %s\n", show(text).c_str(),
                  special, ids_str(got).c_str(), msg.c_str(), ids_str(want).c_str());
      }
    }
  }
  printf("%s: encode: %zu of %zu (sentence, add_special_tokens) pairs equal Hugging Face's\n",
         g_dir.c_str(), n - bad, n);
  assert_int_equal(bad, 0);
}

void test_decode(void**) {
  size_t n = 0, bad = 0;
  auto check = [&](const json& c) {
    auto ids = c["ids"].get<std::vector<int64_t>>();
    for (bool skip : {false, true}) {
      const std::string want = c[skip ? "decode_skip" : "decode"];
      std::string got, msg;
      int st =
          tok_test::status_of([&] { got = g_tok->decode(ids.data(), ids.size(), skip); }, &msg);
      ++n;
      if (st != OSLO_OK || got != want) {
        if (++bad <= 10)
          fprintf(stderr, "decode(%s, skip=%d):\n  got  %s %s\n  want %s\n",
                  ids_str(ids).substr(0, 200).c_str(), skip, show(got).c_str(), msg.c_str(),
                  show(want).c_str());
      }
    }
  };
  for (const auto& c : g_ref["cases"]) check(c);
  for (const auto& c : g_ref["decodes"]) check(c);
  printf("%s: decode: %zu of %zu decodes equal Hugging Face's\n", g_dir.c_str(), n - bad, n);
  assert_int_equal(bad, 0);
}

void test_vocab(void**) {
  assert_int_equal(g_tok->vocab_size(), g_ref["vocab_size"].get<size_t>());
  static const char* kNames[] = {"bos", "eos", "pad", "unk", "cls", "sep", "mask"};
  for (int k = 0; k < static_cast<int>(oslo::SpecialToken::kCount); ++k) {
    int64_t want = g_ref["special_ids"][kNames[k]];
    int64_t got = g_tok->special_id(static_cast<oslo::SpecialToken>(k));
    if (got != want)
      fprintf(stderr, "special %s: got %lld want %lld\n", kNames[k], (long long)got,
              (long long)want);
    assert_int_equal(got, want);
  }
  for (const auto& t : g_ref["tokens"]) {
    const std::string tok = t[0];
    const int64_t id = t[1];
    auto got = g_tok->token_to_id(tok);
    assert_true(got.has_value());
    assert_int_equal(*got, id);
    auto back = g_tok->id_to_token(id);
    assert_true(back.has_value());
    assert_string_equal(back->c_str(), tok.c_str());
  }
  assert_false(g_tok->token_to_id("no such token \x01\x02").has_value());
  assert_false(g_tok->id_to_token(1 << 30).has_value());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s FIXTURE_DIR\n", argv[0]);
    return 2;
  }
  g_dir = argv[1];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_encode),
      cmocka_unit_test(test_decode),
      cmocka_unit_test(test_vocab),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
