// The safetensors reader and writer: round trips of every dtype, 0-d and
// empty tensors, the reference implementation's golden bytes, every kind of
// corrupt header (OSLO_ERR_FORMAT naming file and tensor/field), I/O errors,
// byte-range reads, and atomic replacement.

#include <random>

#include "core/checkpoint/fs_util.hpp"
#include "core/checkpoint/safetensors.hpp"
#include "tests/checkpoint/ckpt_test_util.hpp"

// cmocka last: it defines a fail() macro that clashes with oslo::fail. It has
// no extern "C" of its own.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" {
// clang-format off
#include <cmocka.h>
// clang-format on
}

namespace st = oslo::safetensors;
using ckpt_test::contains;
using ckpt_test::status_of;

namespace {

std::string g_dir;

int setup(void**) {
  g_dir = ckpt_test::temp_dir();
  return 0;
}
int teardown(void**) {
  ckpt_test::remove_tree(g_dir);
  oslo::fsutil::set_fault_hook(nullptr);
  return 0;
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A file: 8-byte length (of `header`, or `n` if given), header, data.
std::string file_of(const std::string& header, const std::string& data = "",
                    uint64_t n = UINT64_MAX) {
  return le64(n == UINT64_MAX ? header.size() : n) + header + data;
}

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

// Writes `bytes` to a file and checks that both the file reader and the
// in-memory parser reject it with OSLO_ERR_FORMAT, naming the file and
// every `needles` substring.
void expect_format(const char* label, const std::string& bytes,
                   std::initializer_list<const char*> needles) {
  const std::string path = g_dir + "/bad.safetensors";
  ckpt_test::write_bytes(path, bytes);
  std::string msg;
  oslo_status s = status_of([&] { st::Reader r(path); }, &msg);
  if (s != OSLO_ERR_FORMAT)
    fprintf(stderr, "case '%s': status %d, message: %s\n", label, s, msg.c_str());
  assert_int_equal(s, OSLO_ERR_FORMAT);
  bool ok = contains(msg, path);
  for (const char* n : needles) ok = ok && contains(msg, n);
  if (!ok) fprintf(stderr, "case '%s': unexpected message: %s\n", label, msg.c_str());
  assert_true(ok);
  std::string msg2;
  assert_int_equal(status_of([&] { st::parse_buffer(bytes.data(), bytes.size(), "mem"); }, &msg2),
                   OSLO_ERR_FORMAT);
}

void expect_ok(const char* label, const std::string& bytes) {
  std::string msg;
  oslo_status s = status_of([&] { st::parse_buffer(bytes.data(), bytes.size(), "mem"); }, &msg);
  if (s != OSLO_OK) fprintf(stderr, "case '%s': rejected: %s\n", label, msg.c_str());
  assert_int_equal(s, OSLO_OK);
}

const char* kOne = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";

void test_roundtrip_all_dtypes(void**) {
  std::vector<std::string> datas;
  std::vector<st::WriteEntry> entries;
  datas.reserve(st::kDtypeCount);
  for (int i = 0; i < st::kDtypeCount; ++i) {
    st::Dtype dt = static_cast<st::Dtype>(i);
    std::vector<uint64_t> shape = {3, 5};
    if (st::dtype_bits(dt) == 4) shape = {2, 4};
    if (st::dtype_bits(dt) == 6) shape = {4};
    datas.push_back(random_bytes(st::tensor_nbytes(dt, shape), 100 + i));
    entries.push_back({std::string("t.") + st::dtype_name(dt), dt, shape, datas.back().data()});
  }
  std::map<std::string, std::string> meta{{"format", "pt"}, {"quote\"\n\x01 ü", "ß \\ /"}};
  const std::string path = g_dir + "/all.safetensors";
  st::write_file(path, entries, &meta);

  st::Reader r(path);
  assert_int_equal(r.tensors().size(), entries.size());
  assert_true(r.header().has_metadata);
  assert_true(r.header().metadata == meta);
  assert_int_equal(r.header().data_start() % 8, 0);
  for (size_t i = 0; i < entries.size(); ++i) {
    const st::TensorInfo& t = r.at(entries[i].name);
    assert_int_equal(static_cast<int>(t.dtype), static_cast<int>(entries[i].dtype));
    assert_true(t.shape == entries[i].shape);
    // Data is aligned to the element size (the reference writer's order).
    unsigned bits = st::dtype_bits(t.dtype);
    if (bits >= 8) assert_int_equal((r.header().data_start() + t.begin) % (bits / 8), 0);
    std::string got(t.nbytes(), '\0');
    r.read(t, 0, t.nbytes(), &got[0]);
    assert_true(got == datas[i]);
    // A sub-range.
    if (t.nbytes() > 3) {
      std::string part(2, '\0');
      r.read(t, 1, 2, &part[0]);
      assert_true(part == datas[i].substr(1, 2));
    }
  }
  // The in-memory serializer produces the same bytes as the file writer.
  assert_true(st::serialize(entries, &meta) == ckpt_test::read_bytes(path));
  // No temporary is left behind.
  for (const std::string& n : ckpt_test::list(g_dir)) assert_false(contains(n, ".tmp."));
}

void test_zero_d_and_empty(void**) {
  float scalar = 3.5f;
  std::vector<st::WriteEntry> entries = {
      {"scalar", st::Dtype::F32, {}, &scalar},
      {"empty", st::Dtype::F32, {0}, nullptr},
      {"empty2d", st::Dtype::BF16, {3, 0}, nullptr},
      {"empty_first", st::Dtype::I64, {0, 7}, nullptr},
  };
  const std::string path = g_dir + "/z.safetensors";
  st::write_file(path, entries);
  st::Reader r(path);
  assert_false(r.header().has_metadata);
  assert_int_equal(r.tensors().size(), 4);
  const st::TensorInfo& s = r.at("scalar");
  assert_true(s.shape.empty());
  assert_int_equal(s.nbytes(), 4);
  float back = 0;
  r.read(s, 0, 4, &back);
  assert_true(back == 3.5f);
  assert_int_equal(r.at("empty").nbytes(), 0);
  assert_true(r.at("empty2d").shape == std::vector<uint64_t>({3, 0}));
  assert_int_equal(r.at("empty_first").nbytes(), 0);
  r.read(r.at("empty"), 0, 0, nullptr);  // a 0-byte read is fine

  // A file with no tensors at all, with and without metadata.
  st::write_file(g_dir + "/none.safetensors", {});
  st::Reader none(g_dir + "/none.safetensors");
  assert_int_equal(none.tensors().size(), 0);
  assert_int_equal(none.header().data_size, 0);
  std::map<std::string, std::string> meta;
  st::write_file(g_dir + "/none2.safetensors", {}, &meta);
  st::Reader none2(g_dir + "/none2.safetensors");
  assert_true(none2.header().has_metadata);
  assert_true(none2.header().metadata.empty());
}

// Golden bytes from the reference implementation's own tests.
void test_reference_bytes(void**) {
  const float v[6] = {0, 1, 2, 3, 4, 5};
  std::string out = st::serialize({{"attn.0", st::Dtype::F32, {1, 2, 3}, v}});
  const unsigned char expect[] = {
      64, 0,  0,   0,   0,   0,   0,   0,   123, 34,  97,  116, 116, 110, 46,  48,
      34, 58, 123, 34,  100, 116, 121, 112, 101, 34,  58,  34,  70,  51,  50,  34,
      44, 34, 115, 104, 97,  112, 101, 34,  58,  91,  49,  44,  50,  44,  51,  93,
      44, 34, 100, 97,  116, 97,  95,  111, 102, 102, 115, 101, 116, 115, 34,  58,
      91, 48, 44,  50,  52,  93,  125, 125, 0,   0,   0,   0,   0,   0,   128, 63,
      0,  0,  0,   64,  0,   0,   64,  64,  0,   0,   128, 64,  0,   0,   160, 64};
  assert_int_equal(out.size(), sizeof expect);
  assert_memory_equal(out.data(), expect, sizeof expect);

  const unsigned char empty[] = {8, 0, 0, 0, 0, 0, 0, 0, 123, 125, 32, 32, 32, 32, 32, 32};
  out = st::serialize({});
  assert_int_equal(out.size(), sizeof empty);
  assert_memory_equal(out.data(), empty, sizeof empty);

  std::map<std::string, std::string> meta{{"framework", "pt"}};
  out = st::serialize({}, &meta);
  const std::string expect_meta =
      le64(40) + std::string("{\"__metadata__\":{\"framework\":\"pt\"}}     ");
  assert_true(out == expect_meta);
}

void test_corruptions(void**) {
  const std::string good = file_of(kOne, std::string(4, '\0'));
  expect_ok("good", good);
  expect_format("truncated data", good.substr(0, good.size() - 1), {"truncated"});
  expect_format("truncated header", good.substr(0, 20), {"exceeds the"});
  expect_format("shorter than 8", std::string("\x05\0\0", 3), {"too short"});
  expect_format("empty file", "", {"too short"});
  expect_format("length > file", file_of(kOne, std::string(4, '\0'), 1000), {"header length 1000"});
  expect_format("length > 1e8", file_of(kOne, std::string(4, '\0'), 100000001),
                {"limit of 100000000"});
  expect_format("length 2^64-1", file_of(kOne, "", UINT64_MAX - 1), {"limit of 100000000"});
  expect_format("zero length", file_of(""), {"not valid JSON"});
  expect_format("not JSON", file_of("{hello}"), {"not valid JSON"});
  expect_format("trailing comma", file_of("{\"__metadata__\":{},}"), {"not valid JSON"});
  expect_format("comment", file_of("{/**/}"), {"not valid JSON"});
  expect_format("two values", file_of("{}{}"), {"not valid JSON"});
  expect_format("trailing NUL", file_of(std::string("{}\0", 3)), {"not valid JSON"});
  expect_format("array", file_of("[]"), {"not a JSON object"});
  expect_format("string", file_of("\"x\""), {"not a JSON object"});
  expect_format("number", file_of("12"), {"not a JSON object"});
  expect_format("BOM", file_of("\xEF\xBB\xBF{}"), {"byte order mark"});
  expect_format("bad UTF-8", file_of("{\"\xff\":1}"), {"UTF-8"});
  expect_format("overlong UTF-8", file_of("{\"\xc0\xaf\":1}"), {"UTF-8"});
  expect_format("surrogate UTF-8", file_of("{\"\xed\xa0\x80\":1}"), {"UTF-8"});
  expect_format("lone surrogate escape", file_of(R"({"\ud800":{}})"), {"not valid JSON"});
  expect_format("raw control char", file_of("{\"\x01\":{}}"), {"not valid JSON"});

  auto one = [](const std::string& entry) { return std::string("{\"a\":") + entry + "}"; };
  expect_format("unknown dtype",
                file_of(one(R"({"dtype":"F33","shape":[1],"data_offsets":[0,4]})"), "0000"),
                {"tensor 'a'", "unknown dtype 'F33'"});
  expect_format("lowercase dtype",
                file_of(one(R"({"dtype":"f32","shape":[1],"data_offsets":[0,4]})"), "0000"),
                {"tensor 'a'", "unknown dtype 'f32'"});
  expect_format("dtype not string",
                file_of(one(R"({"dtype":5,"shape":[1],"data_offsets":[0,4]})"), "0000"),
                {"tensor 'a'", "dtype must be a string"});
  expect_format("negative shape",
                file_of(one(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})"), "0000"),
                {"tensor 'a'", "shape must hold non-negative integers", "-1"});
  expect_format("minus zero shape",
                file_of(one(R"({"dtype":"F32","shape":[-0],"data_offsets":[0,0]})")),
                {"tensor 'a'", "shape", "-0"});
  expect_format("float shape",
                file_of(one(R"({"dtype":"F32","shape":[1.0],"data_offsets":[0,4]})"), "0000"),
                {"tensor 'a'", "shape", "non-integer"});
  expect_format("exponent shape",
                file_of(one(R"({"dtype":"F32","shape":[1e0],"data_offsets":[0,4]})"), "0000"),
                {"tensor 'a'", "shape", "non-integer"});
  expect_format(
      "huge shape",
      file_of(one(R"({"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,0]})")),
      {"tensor 'a'", "shape"});
  expect_format("shape not array",
                file_of(one(R"({"dtype":"F32","shape":1,"data_offsets":[0,4]})"), "0000"),
                {"tensor 'a'", "shape must be an array"});
  expect_format("shape null",
                file_of(one(R"({"dtype":"F32","shape":null,"data_offsets":[0,4]})"), "0000"),
                {"tensor 'a'", "shape must be an array"});
  expect_format("nested shape",
                file_of(one(R"({"dtype":"F32","shape":[[1]],"data_offsets":[0,4]})"), "0000"),
                {"tensor 'a'", "shape must hold"});
  expect_format("3 offsets",
                file_of(one(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4,4]})"), "0000"),
                {"tensor 'a'", "more than 2"});
  expect_format("1 offset",
                file_of(one(R"({"dtype":"F32","shape":[1],"data_offsets":[0]})"), "0000"),
                {"tensor 'a'", "fewer than 2"});
  expect_format("negative offset",
                file_of(one(R"({"dtype":"F32","shape":[1],"data_offsets":[-4,0]})"), "0000"),
                {"tensor 'a'", "data_offsets must hold non-negative integers"});
  expect_format("offsets object",
                file_of(one(R"({"dtype":"F32","shape":[1],"data_offsets":{"0":0}})"), "0000"),
                {"tensor 'a'", "data_offsets must be an array"});
  expect_format("end before begin",
                file_of(one(R"({"dtype":"F32","shape":[0],"data_offsets":[4,0]})"), "0000"),
                {"tensor 'a'", "end before"});
  expect_format("not at 0",
                file_of(one(R"({"dtype":"F32","shape":[1],"data_offsets":[4,8]})"), "00000000"),
                {"tensor 'a'", "start at offset 0"});
  expect_format("hole",
                file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                        std::string(12, '\0')),
                {"tensor 'b'", "hole after byte 4"});
  expect_format("overlap",
                file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                        std::string(8, '\0')),
                {"tensor 'b'", "overlap"});
  expect_format("wrong length",
                file_of(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})"), "0000"),
                {"tensor 'a'", "hold 4 bytes", "need 8"});
  expect_format(
      "shape product overflow",
      file_of(one(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]})")),
      {"tensor 'a'", "overflows"});
  expect_format(
      "bytes overflow",
      file_of(one(R"({"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]})")),
      {"tensor 'a'", "overflows"});
  expect_format("sub-byte size",
                file_of(one(R"({"dtype":"F4","shape":[3],"data_offsets":[0,2]})"), "00"),
                {"tensor 'a'", "whole number of bytes"});
  expect_format("trailing bytes", good + "x", {"1 trailing bytes"});
  expect_format("missing dtype", file_of(one(R"({"shape":[1],"data_offsets":[0,4]})"), "0000"),
                {"tensor 'a'", "missing field 'dtype'"});
  expect_format("missing shape", file_of(one(R"({"dtype":"F32","data_offsets":[0,4]})"), "0000"),
                {"tensor 'a'", "missing field 'shape'"});
  expect_format("missing offsets", file_of(one(R"({"dtype":"F32","shape":[1]})"), "0000"),
                {"tensor 'a'", "missing field 'data_offsets'"});
  expect_format("empty entry", file_of(one("{}")), {"tensor 'a'", "missing field"});
  expect_format("extra key",
                file_of(one(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1})"), "0000"),
                {"tensor 'a'", "unknown field 'x'"});
  expect_format(
      "duplicate field",
      file_of(one(R"({"dtype":"F32","shape":[1],"shape":[1],"data_offsets":[0,4]})"), "0000"),
      {"tensor 'a'", "duplicate field 'shape'"});
  expect_format("entry not object", file_of(R"({"a":[1,2]})"), {"tensor 'a'", "must be an object"});
  expect_format("entry number", file_of(R"({"a":1})"), {"tensor 'a'", "must be an object"});
  expect_format("metadata int", file_of(R"({"__metadata__":{"k":1}})"),
                {"__metadata__ value of 'k' must be a string"});
  expect_format("metadata nested", file_of(R"({"__metadata__":{"k":{"x":"y"}}})"),
                {"__metadata__ value of 'k'"});
  expect_format("metadata array", file_of(R"({"__metadata__":["a"]})"),
                {"__metadata__ must be an object"});
  expect_format("metadata string", file_of(R"({"__metadata__":"x"})"),
                {"__metadata__ must be an object"});
  expect_format("duplicate metadata", file_of(R"({"__metadata__":{},"__metadata__":{}})"),
                {"duplicate field '__metadata__'"});
  // A deeply nested value stops at the first wrong token (no big DOM).
  expect_format("deep nesting", file_of("{\"a\":" + std::string(100000, '[')), {"tensor 'a'"});
}

// Things the reference parser accepts, which must be accepted too.
void test_reference_quirks(void**) {
  expect_ok("leading whitespace", file_of(std::string(" \t\n") + kOne, "0000"));
  expect_ok("trailing whitespace", file_of(std::string(kOne) + " \r\n\t", "0000"));
  expect_ok("metadata null", file_of(R"({"__metadata__":null})"));
  expect_ok("any entry order", file_of(R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                                       R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                                       "00000000"));
  expect_ok("empty tensors share offsets",
            file_of(R"({"e1":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                    R"("e2":{"dtype":"F64","shape":[3,0],"data_offsets":[0,0]},)"
                    R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                    "0000"));
  expect_ok(
      "zero dim then huge",
      file_of(
          R"({"a":{"dtype":"F32","shape":[0,4611686018427387904,4611686018427387904],"data_offsets":[0,0]}})"));
  expect_ok(
      "escapes in names",
      file_of(R"({"a\/b\u0000\ud83d\ude00":{"dtype":"U8","shape":[],"data_offsets":[0,1]}})", "x"));
  expect_ok("sub-byte dtypes",
            file_of(R"({"f4":{"dtype":"F4","shape":[2],"data_offsets":[0,1]},)"
                    R"("f6":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[1,4]}})",
                    "0000"));

  // A repeated tensor name or metadata key: the last one wins, as in serde.
  std::string dup = file_of(R"({"__metadata__":{"k":"1","k":"2"},)"
                            R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                            "0000");
  st::Header h = st::parse_buffer(dup.data(), dup.size(), "mem");
  assert_int_equal(h.tensors.size(), 1);
  assert_int_equal(static_cast<int>(h.find("a")->dtype), static_cast<int>(st::Dtype::I32));
  assert_true(h.metadata.at("k") == "2");

  // Entries come back sorted by offset.
  std::string order = file_of(R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                              R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                              "00000000");
  h = st::parse_buffer(order.data(), order.size(), "mem");
  assert_true(h.tensors[0].name == "a" && h.tensors[1].name == "b");
}

void test_io_errors(void**) {
  std::string msg;
  assert_int_equal(status_of([&] { st::Reader r(g_dir + "/missing.safetensors"); }, &msg),
                   OSLO_ERR_IO);
  assert_true(contains(msg, "missing.safetensors") && contains(msg, "No such file"));
  assert_int_equal(status_of([&] { st::Reader r(g_dir); }, &msg), OSLO_ERR_IO);
  assert_true(contains(msg, "not a regular file"));
  // A FIFO is refused without blocking on it.
  const std::string fifo = g_dir + "/fifo";
  assert_int_equal(mkfifo(fifo.c_str(), 0600), 0);
  assert_int_equal(status_of([&] { st::Reader r(fifo); }, &msg), OSLO_ERR_IO);
  assert_true(contains(msg, "not a regular file"));
  // Writing into a directory that does not exist.
  float x = 1;
  assert_int_equal(
      status_of(
          [&] {
            st::write_file(g_dir + "/no/such/dir/f.safetensors", {{"x", st::Dtype::F32, {}, &x}});
          },
          &msg),
      OSLO_ERR_IO);
  assert_true(contains(msg, "No such file"));
}

void test_read_ranges(void**) {
  std::string data = random_bytes(64, 7);
  const std::string path = g_dir + "/r.safetensors";
  st::write_file(
      path, {{"a", st::Dtype::U8, {64}, data.data()}, {"b", st::Dtype::F32, {2}, data.data()}});
  st::Reader r(path);
  const st::TensorInfo& a = r.at("a");
  char buf[64];
  r.read(a, 10, 5, buf);
  assert_memory_equal(buf, data.data() + 10, 5);
  r.read(a, 60, 4, buf);
  assert_memory_equal(buf, data.data() + 60, 4);
  assert_int_equal(r.bytes_read(), 9);
  assert_int_equal(r.read_calls(), 2);
  std::string msg;
  assert_int_equal(status_of([&] { r.read(a, 60, 5, buf); }, &msg), OSLO_ERR_INVALID_ARGUMENT);
  assert_true(contains(msg, "outside tensor 'a'"));
  assert_int_equal(status_of([&] { r.read(a, UINT64_MAX, 2, buf); }), OSLO_ERR_INVALID_ARGUMENT);
  assert_int_equal(status_of([&] { r.at("zzz"); }, &msg), OSLO_ERR_FORMAT);
  assert_true(contains(msg, "no tensor 'zzz'") && contains(msg, path));
  assert_null(r.find("zzz"));
  // The file shrinks after it was opened: a read past the new end fails.
  assert_int_equal(truncate(path.c_str(), 8 + static_cast<off_t>(r.header().header_size) + 16), 0);
  assert_int_equal(status_of([&] { r.read(a, 10, 10, buf); }, &msg), OSLO_ERR_FORMAT);
  assert_true(contains(msg, "unexpected end of file"));
}

void test_writer_errors(void**) {
  float x[4] = {1, 2, 3, 4};
  const std::string path = g_dir + "/w.safetensors";
  std::string msg;
  auto write = [&](std::vector<st::WriteEntry> e) { st::write_file(path, e); };
  assert_int_equal(status_of(
                       [&] {
                         write({{"a", st::Dtype::F32, {1}, x}, {"a", st::Dtype::F32, {1}, x}});
                       },
                       &msg),
                   OSLO_ERR_INVALID_ARGUMENT);
  assert_true(contains(msg, "duplicate tensor name 'a'"));
  assert_int_equal(status_of(
                       [&] {
                         write({{"__metadata__", st::Dtype::F32, {1}, x}});
                       },
                       &msg),
                   OSLO_ERR_INVALID_ARGUMENT);
  assert_int_equal(status_of(
                       [&] {
                         write({{"bad\xff", st::Dtype::F32, {1}, x}});
                       },
                       &msg),
                   OSLO_ERR_INVALID_ARGUMENT);
  assert_true(contains(msg, "UTF-8"));
  assert_int_equal(status_of(
                       [&] {
                         write({{"a", st::Dtype::F4, {3}, x}});
                       },
                       &msg),
                   OSLO_ERR_INVALID_ARGUMENT);
  assert_int_equal(status_of(
                       [&] {
                         write({{"a", st::Dtype::F32, {2}, nullptr}});
                       },
                       &msg),
                   OSLO_ERR_INVALID_ARGUMENT);
  assert_int_equal(status_of(
                       [&] {
                         write({{"a", st::Dtype::F32, {UINT64_MAX, 2}, x}});
                       },
                       &msg),
                   OSLO_ERR_INVALID_ARGUMENT);
  std::map<std::string, std::string> bad_meta{{"k", "\xc3"}};
  assert_int_equal(status_of([&] { st::write_file(path, {}, &bad_meta); }, &msg),
                   OSLO_ERR_INVALID_ARGUMENT);
  // Nothing was created.
  assert_true(ckpt_test::list(g_dir).empty());
}

void throwing_hook(const char* point, const std::string&) {
  if (std::string(point) == "atomic.before_rename")
    throw oslo::Error(OSLO_ERR_IO, "injected failure");
}

void test_atomic_replace(void**) {
  float a = 1, b = 2;
  const std::string path = g_dir + "/atomic.safetensors";
  st::write_file(path, {{"x", st::Dtype::F32, {}, &a}});
  const std::string before = ckpt_test::read_bytes(path);
  oslo::fsutil::set_fault_hook(throwing_hook);
  std::string msg;
  assert_int_equal(status_of(
                       [&] {
                         st::write_file(path, {{"x", st::Dtype::F32, {}, &b}});
                       },
                       &msg),
                   OSLO_ERR_IO);
  oslo::fsutil::set_fault_hook(nullptr);
  assert_true(contains(msg, "injected"));
  assert_true(ckpt_test::read_bytes(path) == before);
  assert_true(ckpt_test::list(g_dir) == std::vector<std::string>{"atomic.safetensors"});
  st::write_file(path, {{"x", st::Dtype::F32, {}, &b}});
  st::Reader r(path);
  float got = 0;
  r.read(r.at("x"), 0, 4, &got);
  assert_true(got == 2);
  assert_true(ckpt_test::list(g_dir) == std::vector<std::string>{"atomic.safetensors"});
}

}  // namespace

int main() {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_roundtrip_all_dtypes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_zero_d_and_empty, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reference_bytes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_corruptions, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reference_quirks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_io_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_read_ranges, setup, teardown),
      cmocka_unit_test_setup_teardown(test_writer_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_atomic_replace, setup, teardown),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
