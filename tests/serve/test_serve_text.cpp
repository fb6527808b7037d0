// Streamed text with stop strings. The decoder is a byte-level toy: each
// token is a byte string (some hold half of a UTF-8 character), a decode
// concatenates them and writes an incomplete or invalid sequence as U+FFFD,
// as a byte-level BPE decode with errors="replace" does; a second decoder
// drops the space of the first token, as SentencePiece's does. The pieces
// must be whole characters, and all of them together exactly the full
// decode up to the first stop string.
#include <random>
#include <string>

#include "core/serve/text_stream.hpp"
#include "tests/serve/serve_common.hpp"

using oslo::serve::TextStream;

namespace {

const std::vector<std::string> kTokens = {
    "a",        "b",    " ",    "ab", "\xC3", "\xA9",  // é split in two
    "\xE2\x82", "\xAC",                                // € split 2 + 1
    "\xF0\x9F", "\x98", "\x80",                        // 😀 split 2 + 1 + 1
    "STOP",     "ST",   "OP",   "\n", "x\n",  " wo",  "rld", "\xFF"};

// Length of the valid UTF-8 character at s[i], or 0 if none starts there.
size_t char_len(const std::string& s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  return n;
}

std::string replace_invalid(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = char_len(s, i);
    if (n) {
      out.append(s, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = char_len(s, i);
    if (!n) return false;
    i += n;
  }
  return true;
}

std::string bytes_of(const int64_t* ids, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += kTokens[static_cast<size_t>(ids[i])];
  return s;
}

TextStream::Decode byte_decoder() {
  return [](const int64_t* ids, size_t n) { return replace_invalid(bytes_of(ids, n)); };
}

TextStream::Decode sp_decoder() {  // drops the string's leading space
  return [](const int64_t* ids, size_t n) {
    std::string s = replace_invalid(bytes_of(ids, n));
    return !s.empty() && s[0] == ' ' ? s.substr(1) : s;
  };
}

std::vector<int64_t> ids_of(std::initializer_list<int> v) {
  return {v.begin(), v.end()};
}

struct Run {
  std::vector<std::string> pieces;
  std::string text;
  bool stopped = false;
  std::string stop;
};

Run run(const std::vector<int64_t>& ids, std::vector<std::string> stops,
        TextStream::Decode d = byte_decoder()) {
  TextStream ts(std::move(d), std::move(stops));
  Run r;
  for (int64_t id : ids) {
    TextStream::Piece p = ts.push(id);
    r.pieces.push_back(p.text);
    r.text += p.text;
    if (p.stopped) {
      r.stopped = true;
      r.stop = p.stop;
      break;
    }
  }
  if (!r.stopped) r.text += ts.flush();
  assert_string_equal(ts.text().c_str(), r.text.c_str());
  return r;
}

void test_split_characters(void**) {
  // "aé€😀": é, € and 😀 come out whole, on the token that completes them.
  const Run r = run(ids_of({0, 4, 5, 6, 7, 8, 9, 10}), {});
  assert_string_equal(r.text.c_str(), "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
  const std::vector<std::string> want = {"a", "", "\xC3\xA9",        "", "\xE2\x82\xAC",
                                         "",  "", "\xF0\x9F\x98\x80"};
  assert_int_equal(r.pieces.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    assert_string_equal(r.pieces[i].c_str(), want[i].c_str());
}

void test_incomplete_at_end(void**) {
  // A request that ends inside a character: flush writes what the decoder
  // writes (U+FFFD).
  const Run r = run(ids_of({0, 4}), {});
  assert_string_equal(r.text.c_str(), "a\xEF\xBF\xBD");
}

void test_stop_across_tokens(void**) {
  // "ab" "ST" "OP" "a": STOP is split over two tokens; nothing of it, nor
  // after it, is released.
  Run r = run(ids_of({3, 12, 13, 0}), {"STOP"});
  assert_true(r.stopped);
  assert_string_equal(r.stop.c_str(), "STOP");
  assert_string_equal(r.text.c_str(), "ab");
  assert_int_equal(r.pieces.size(), 3);
  assert_string_equal(r.pieces[1].c_str(), "");  // "ST" held back
  // A held-back start that turns out not to be a stop is released.
  r = run(ids_of({12, 0, 1}), {"STOP"});
  assert_false(r.stopped);
  assert_string_equal(r.text.c_str(), "STab");
  assert_string_equal(r.pieces[0].c_str(), "");
  assert_string_equal(r.pieces[1].c_str(), "STa");
  // Held back at the end, never completed: released by flush.
  r = run(ids_of({0, 12}), {"STOP"});
  assert_string_equal(r.text.c_str(), "aST");
  // The earliest stop wins; a stop inside one token cuts that token.
  r = run(ids_of({0, 15, 11}), {"STOP", "\n"});
  assert_true(r.stopped);
  assert_string_equal(r.stop.c_str(), "\n");
  assert_string_equal(r.text.c_str(), "ax");
  // A stop made of a character split over tokens.
  r = run(ids_of({0, 6, 7, 1}), {"\xE2\x82\xAC"});
  assert_true(r.stopped);
  assert_string_equal(r.text.c_str(), "a");
}

void test_leading_space_decoder(void**) {
  // " wo" "rld" with a decoder that drops a string's first space: the
  // window keeps the text after the first token right.
  const Run r = run(ids_of({0, 16, 17}), {}, sp_decoder());
  assert_string_equal(r.text.c_str(), "a world");
  assert_string_equal(r.pieces[1].c_str(), " wo");
}

void test_empty_stop_refused(void**) {
  expect_error([] { TextStream(byte_decoder(), {"ok", ""}); }, OSLO_ERR_INVALID_ARGUMENT);
  expect_error([] { TextStream(nullptr, {}); }, OSLO_ERR_INVALID_ARGUMENT);
}

// Random token strings and stop strings: the streamed text is the full
// decode cut before the first stop string, in whole characters.
void test_random_against_full_decode(void**) {
  std::mt19937_64 rng(11);
  const std::vector<std::string> stop_pool = {
      "STOP", "ab", "\n", "b a", "\xC3\xA9", "O", "\xF0\x9F\x98\x80", "rldrld"};
  for (int round = 0; round < 4000; ++round) {
    std::vector<int64_t> ids(1 + rng() % 14);
    for (auto& x : ids) x = static_cast<int64_t>(rng() % (kTokens.size() - 1));  // no \xFF
    std::vector<std::string> stops;
    for (int k = static_cast<int>(rng() % 3); k > 0; --k)
      stops.push_back(stop_pool[rng() % stop_pool.size()]);
    const std::string full = replace_invalid(bytes_of(ids.data(), ids.size()));
    size_t cut = std::string::npos;
    for (const auto& s : stops) cut = std::min(cut, full.find(s));
    const Run r = run(ids, stops);
    const std::string want = cut == std::string::npos ? full : full.substr(0, cut);
    if (r.text != want)
      fail_msg("round %d: streamed '%s', want '%s'", round, r.text.c_str(), want.c_str());
    assert_int_equal(r.stopped, cut != std::string::npos);
    for (const auto& p : r.pieces)
      if (!valid_utf8(p)) fail_msg("round %d: a piece is not whole UTF-8 characters", round);
  }
}

}  // namespace

std::vector<struct CMUnitTest> text_tests() {
  return {
      cmocka_unit_test(test_split_characters),   cmocka_unit_test(test_incomplete_at_end),
      cmocka_unit_test(test_stop_across_tokens), cmocka_unit_test(test_leading_space_decoder),
      cmocka_unit_test(test_empty_stop_refused), cmocka_unit_test(test_random_against_full_decode),
  };
}
