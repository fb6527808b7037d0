// The GGUF reader (core/checkpoint/gguf). Without arguments: files built
// here byte by byte, valid (every value type, v2 and v3, alignment, views,
// getters) and hostile (truncated at every byte, bad magic and versions,
// huge counts, strings and arrays past the end, unknown value and tensor
// types, too many dims, misaligned, lying and overlapping offsets,
// duplicates, overflowing sizes, deep nesting, random corruption), each of
// which must be refused with a named OSLO_ERR_FORMAT (never a crash). With a
// folder written by test_gguf_compat.py: files from gguf-py's GGUFWriter
// read back and compared (metadata, tensor bytes, dequantized values).
// `--corpus DIR` replays a fuzz corpus; `--write-seeds DIR` writes its seeds.
#include <dirent.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/checkpoint/gguf.hpp"
#include "core/common/error.hpp"
#include "tests/common/temp_dir.hpp"
#include "tests/gguf/gguf_check.hpp"

// cmocka last: its fail() macro clashes with oslo::fail.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" {
// clang-format off
#include <cmocka.h>
// clang-format on
}

namespace gg = oslo::gguf;

namespace {

std::string g_dir;

// Little-endian byte builder.
struct Bytes {
  std::string b;
  Bytes& u8(uint8_t v) { return b.push_back(static_cast<char>(v)), *this; }
  Bytes& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  Bytes& u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  Bytes& str(const std::string& s) {
    u64(s.size());
    b += s;
    return *this;
  }
  Bytes& raw(const std::string& s) { return b += s, *this; }
};

struct TensorSpec {
  std::string name;
  uint32_t type;
  std::vector<uint64_t> dims;
  uint64_t offset;
  size_t nbytes;  // data bytes written at offset
};

// A file: header, `kvs` (already encoded: key, type, value), tensor infos,
// padding to `align`, then each tensor's bytes (byte k of a tensor is
// k * 7 + its index) at its offset; the file ends after the last one.
std::string make_file(uint32_t version, uint64_t n_kv, const std::string& kvs,
                      const std::vector<TensorSpec>& ts, uint64_t align = 32) {
  Bytes h;
  h.raw("GGUF").u32(version).u64(ts.size()).u64(n_kv).raw(kvs);
  for (const auto& t : ts) {
    h.str(t.name).u32(static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) h.u64(d);
    h.u32(t.type).u64(t.offset);
  }
  while (h.b.size() % align) h.u8(0);
  const size_t start = h.b.size();
  for (size_t i = 0; i < ts.size(); ++i) {
    const size_t at = start + ts[i].offset;
    if (h.b.size() < at + ts[i].nbytes) h.b.resize(at + ts[i].nbytes, '\0');
    for (size_t k = 0; k < ts[i].nbytes; ++k) h.b[at + k] = static_cast<char>(k * 7 + i);
  }
  return h.b;
}

// Every metadata value type, encoded: 17 pairs.
std::string all_kvs() {
  Bytes k;
  k.str("general.architecture").u32(8).str("llama");
  k.str("a.u8").u32(0).u8(200);
  k.str("a.i8").u32(1).u8(0x80);
  k.str("a.u16").u32(2).u8(0x34).u8(0x12);
  k.str("a.i16").u32(3).u8(0xff).u8(0xff);
  k.str("a.u32").u32(4).u32(4000000000u);
  k.str("a.i32").u32(5).u32(static_cast<uint32_t>(-7));
  k.str("a.f32").u32(6).u32(0x3fc00000);  // 1.5
  k.str("a.bool").u32(7).u8(1);
  k.str("a.u64").u32(10).u64(UINT64_MAX);
  k.str("a.i64").u32(11).u64(static_cast<uint64_t>(INT64_MIN));
  k.str("a.f64").u32(12).u64(0x400921fb54442d18ull);  // pi
  k.str("a.empty").u32(9).u32(4).u64(0);              // empty array of u32
  k.str("a.strings").u32(9).u32(8).u64(2).str("x").str("");
  k.str("a.nested").u32(9).u32(9).u64(2);  // [[1, 2], ["s"]]
  k.u32(5).u64(2).u32(1).u32(2);
  k.u32(8).u64(1).str("s");
  k.str("a.f64s").u32(9).u32(12).u64(1).u64(0x3ff0000000000000ull);
  k.str("general.alignment").u32(4).u32(32);
  return k.b;
}
constexpr uint64_t kAllKvs = 17;

std::vector<TensorSpec> some_tensors() {
  return {{"q8", 8, {64, 2}, 0, 4 * 34},       // 2 rows of 2 blocks
          {"f32", 0, {3}, 160, 12},            //
          {"q4k", 12, {256}, 192, 144},        //
          {"q6k", 14, {256, 1}, 352, 210},     //
          {"q40", 2, {32, 1, 1, 2}, 576, 36},  //
          {"bf16", 30, {5}, 640, 10}};
}

std::string good_file(uint32_t version = 3) {
  return make_file(version, kAllKvs, all_kvs(), some_tensors());
}

// Parses and expects OSLO_ERR_FORMAT whose message has every part.
void expect_refused(const std::string& bytes, std::initializer_list<const char*> parts) {
  try {
    gg::File::parse(bytes.data(), bytes.size(), "input");
  } catch (const oslo::Error& e) {
    if (e.status() != OSLO_ERR_FORMAT) {
      std::fprintf(stderr, "status %d: %s\n", e.status(), e.what());
      assert_true(false);
    }
    const std::string m = e.what();
    assert_true(m.rfind("input: ", 0) == 0);
    for (const char* p : parts) {
      if (m.find(p) == std::string::npos) {
        std::fprintf(stderr, "message '%s' lacks '%s'\n", m.c_str(), p);
        assert_true(false);
      }
    }
    return;
  }
  std::fprintf(stderr, "accepted, expected an error with '%s'\n", *parts.begin());
  assert_true(false);
}

void test_valid(void**) {
  for (uint32_t version : {2u, 3u}) {
    const std::string b = good_file(version);
    assert_true(gguf_check::check_buffer(reinterpret_cast<const uint8_t*>(b.data()), b.size()));
    gg::File f = gg::File::parse(b.data(), b.size(), "mem");
    assert_int_equal(f.version(), version);
    assert_int_equal(f.alignment(), 32);
    assert_int_equal(f.keys().size(), kAllKvs);
    assert_string_equal(f.keys()[0].c_str(), "general.architecture");
    assert_string_equal(f.get_string("general.architecture").c_str(), "llama");
    assert_int_equal(f.get_uint("a.u8"), 200);
    assert_int_equal(f.get_int("a.i8"), -128);
    assert_int_equal(f.get_int("a.u16"), 0x1234);
    assert_int_equal(f.get_int("a.i16"), -1);
    assert_int_equal(f.get_uint("a.u32"), 4000000000u);
    assert_int_equal(f.get_int("a.i32"), -7);
    assert_true(f.get_float("a.f32") == 1.5);
    assert_true(f.get_bool("a.bool"));
    assert_true(f.get_uint("a.u64") == UINT64_MAX);
    assert_true(f.get_int("a.i64") == INT64_MIN);
    assert_true(f.get_float("a.f64") == 3.141592653589793);
    assert_int_equal(f.get_array("a.empty").size(), 0);
    assert_true(f.find("a.empty")->elem_type == gg::ValueType::U32);
    const auto& s = f.get_array("a.strings");
    assert_int_equal(s.size(), 2);
    assert_string_equal(s[0].s.c_str(), "x");
    const auto& n = f.get_array("a.nested");
    assert_int_equal(n.size(), 2);
    assert_int_equal(n[0].array[1].i, 2);
    assert_string_equal(n[1].array[0].s.c_str(), "s");
    assert_int_equal(f.get_int("missing", 42), 42);
    assert_string_equal(f.get_string("missing", "d").c_str(), "d");
    assert_true(f.get_float("missing", 0.25) == 0.25);
    // Getter errors name the file and key.
    const auto getter_error = [&](auto&& fn, const char* part) {
      try {
        fn();
      } catch (const oslo::Error& e) {
        assert_int_equal(e.status(), OSLO_ERR_FORMAT);
        assert_non_null(std::strstr(e.what(), "mem: "));
        assert_non_null(std::strstr(e.what(), part));
        return;
      }
      assert_true(false);
    };
    getter_error([&] { f.get_string("a.u8"); }, "'a.u8' is u8, not a string");
    getter_error([&] { f.get_int("a.u64"); }, "exceeds int64");
    getter_error([&] { f.get_uint("a.i8"); }, "negative");
    getter_error([&] { f.get_float("a.i32"); }, "not a float");
    getter_error([&] { f.get_bool("nope"); }, "'nope' is missing");
    getter_error([&] { f.get_array("a.bool"); }, "not an array");
    getter_error([&] { f.get_int("a.f32", 1); }, "not an integer");
    getter_error([&] { f.tensor("nope"); }, "no tensor named 'nope'");
    // Tensors and views.
    assert_int_equal(f.tensors().size(), 6);
    const gg::TensorInfo& q8 = f.tensor("q8");
    assert_true(q8.format == oslo::quant::Format::Q8_0);
    assert_int_equal(q8.nbytes, 136);
    assert_int_equal(q8.elements, 128);
    assert_int_equal(q8.rows(), 2);
    assert_true((q8.shape() == std::vector<uint64_t>{2, 64}));
    const gg::TensorView v = f.view(f.tensor("q40"));
    assert_int_equal(v.nbytes, 36);
    assert_true((v.shape == std::vector<uint64_t>{2, 1, 1, 32}));
    assert_ptr_equal(v.data, reinterpret_cast<const uint8_t*>(b.data()) + f.data_start() + 576);
    assert_int_equal(v.data[5], 5 * 7 + 4);
    std::vector<float> out(256);
    f.dequantize(f.tensor("bf16"), out.data());
  }
  // A file with no tensors may end without padding.
  Bytes k;
  k.str("x").u32(7).u8(0);
  const std::string tiny = make_file(3, 1, k.b, {}, 1);
  gg::File f = gg::File::parse(tiny.data(), tiny.size(), "tiny");
  assert_false(f.get_bool("x"));
  assert_int_equal(f.tensors().size(), 0);
}

void test_open(void**) {
  const std::string dir = oslo_test::temp_dir("oslo-gguf");
  const std::string path = dir + "/m.gguf";
  const std::string b = good_file();
  {
    std::ofstream o(path, std::ios::binary);
    o << b;
  }
  {
    gg::File f = gg::File::open(path);
    assert_int_equal(f.file_size(), b.size());
    gg::File moved = std::move(f);
    const gg::TensorView v = moved.view(moved.tensor("f32"));
    assert_int_equal(v.data[1], 1 * 7 + 1);  // byte 1 of tensor 1
    assert_memory_equal(v.data, b.data() + moved.data_start() + 160, 12);
  }
  const auto io_error = [](const std::string& p, const char* part) {
    try {
      gg::File::open(p);
    } catch (const oslo::Error& e) {
      assert_int_equal(e.status(), OSLO_ERR_IO);
      assert_non_null(std::strstr(e.what(), part));
      return;
    }
    assert_true(false);
  };
  io_error(dir + "/missing.gguf", "cannot open GGUF file");
  io_error(dir, "not a regular file");
  { std::ofstream o(dir + "/empty.gguf", std::ios::binary); }
  try {
    gg::File::open(dir + "/empty.gguf");
    assert_true(false);
  } catch (const oslo::Error& e) {
    assert_int_equal(e.status(), OSLO_ERR_FORMAT);
    assert_non_null(std::strstr(e.what(), "empty.gguf: truncated"));
  }
  oslo_test::remove_tree(dir);
}

void test_truncated(void**) {
  const std::string b = good_file();
  for (size_t n = 0; n < b.size(); ++n) {
    const std::string cut = b.substr(0, n);
    if (gguf_check::check_buffer(reinterpret_cast<const uint8_t*>(cut.data()), cut.size())) {
      std::fprintf(stderr, "a file truncated to %zu of %zu bytes was accepted\n", n, b.size());
      assert_true(false);
    }
  }
  expect_refused(b.substr(0, 2), {"truncated", "magic"});
  expect_refused(b.substr(0, 10), {"truncated", "tensor count", "offset 8"});
  expect_refused(b.substr(0, b.size() - 1), {"'bf16'", "past the end of the file"});
}

void test_header(void**) {
  std::string b = good_file();
  std::string m = b;
  m[0] = 'g';
  expect_refused(m, {"not a GGUF file", "'gGUF'"});
  expect_refused(make_file(1, kAllKvs, all_kvs(), some_tensors()), {"version 1", "2 and 3"});
  expect_refused(make_file(4, kAllKvs, all_kvs(), some_tensors()), {"unsupported GGUF version 4"});
  expect_refused(make_file(0x03000000u, kAllKvs, all_kvs(), some_tensors()), {"big-endian"});
  // Counts no file could hold: refused before allocating anything.
  expect_refused(make_file(3, uint64_t{1} << 62, all_kvs(), some_tensors()),
                 {"metadata count 4611686018427387904"});
  Bytes h;
  h.raw("GGUF").u32(3).u64(UINT64_MAX).u64(0);
  expect_refused(h.b, {"tensor count 18446744073709551615"});
  // A count that fits the file's size but not its content: truncated.
  expect_refused(make_file(3, kAllKvs + 3, all_kvs(), some_tensors()), {""});
}

void test_metadata_errors(void**) {
  // One pair and 32 bytes after it (so that the count passes its check).
  const auto one = [](const Bytes& k) { return make_file(3, 1, k.b + std::string(32, '\0'), {}); };
  Bytes k;
  k.str("k").u32(13).u8(0);
  expect_refused(one(k), {"metadata 'k'", "unknown value type 13"});
  k = Bytes();
  k.str("k").u32(8).u64(1000);
  expect_refused(one(k), {"metadata 'k'", "length 1000", "past the end"});
  k = Bytes();
  k.u64(UINT64_MAX);
  expect_refused(one(k), {"metadata pair 0 key", "length 18446744073709551615"});
  k = Bytes();
  k.str("k").u32(9).u32(8).u64(uint64_t{1} << 61);
  expect_refused(one(k), {"metadata 'k'", "2305843009213693952 elements of string"});
  k = Bytes();
  k.str("k").u32(9).u32(0).u64(100).u8(1).u8(2);
  expect_refused(one(k), {"metadata 'k'", "cannot fit"});
  k = Bytes();
  k.str("k").u32(9).u32(77).u64(1);
  expect_refused(one(k), {"unknown value type 77"});
  k = Bytes();
  k.str("k").u32(7).u8(2);
  expect_refused(one(k), {"metadata 'k'", "bool value 2"});
  Bytes two;
  two.str("dup").u32(0).u8(1).str("dup").u32(0).u8(2);
  expect_refused(make_file(3, 2, two.b, {}), {"duplicate metadata key 'dup'"});
  // Nested deeper than kMaxArrayDepth.
  k = Bytes();
  k.str("deep").u32(9);
  for (int d = 0; d < gg::kMaxArrayDepth + 1; ++d) k.u32(9).u64(1);
  k.u32(0).u64(0);
  expect_refused(one(k), {"metadata 'deep'", "nested deeper"});
  // More array elements than the per-file limit: refused before allocating.
  k = Bytes();
  k.str("big").u32(9).u32(0).u64(gg::kMaxMetadataValues + 1);
  k.b.resize(k.b.size() + gg::kMaxMetadataValues + 1, '\0');
  expect_refused(one(k), {"metadata 'big'", "limit of 8388608"});
  // general.alignment: u32, a power of two.
  k = Bytes();
  k.str("general.alignment").u32(10).u64(32);
  expect_refused(one(k), {"'general.alignment' is u64, not u32"});
  k = Bytes();
  k.str("general.alignment").u32(4).u32(48);
  expect_refused(one(k), {"general.alignment 48 is not a power of two"});
  k = Bytes();
  k.str("general.alignment").u32(4).u32(0);
  expect_refused(one(k), {"general.alignment 0"});
}

void test_tensor_errors(void**) {
  const std::string kvs = all_kvs();
  const auto with = [&](std::vector<TensorSpec> ts) { return make_file(3, kAllKvs, kvs, ts); };
  std::vector<TensorSpec> ts = some_tensors();
  ts[2].type = 13;
  expect_refused(with(ts), {"tensor 'q4k'", "type Q5_K (13)", "does not read"});
  ts = some_tensors();
  ts[0].type = 1234;
  expect_refused(with(ts), {"tensor 'q8' has type 1234, which"});
  ts = some_tensors();
  ts[1].dims = {1, 1, 1, 1, 3};
  expect_refused(with(ts), {"tensor 'f32'", "5 dimensions"});
  ts = some_tensors();
  ts[1].offset = 168;  // not a multiple of 32
  expect_refused(with(ts), {"tensor 'f32'", "offset 168", "alignment 32"});
  ts = some_tensors();
  ts[1].offset = 1 << 20;  // past the end
  ts[1].nbytes = 0;
  expect_refused(with(ts), {"tensor 'f32'", "past the end of the file"});
  ts = some_tensors();
  ts[1].offset = UINT64_MAX - 31;  // a multiple of 32 where offset + size wraps
  ts[1].nbytes = 0;
  expect_refused(with(ts), {"tensor 'f32'", "past the end of the file"});
  ts = some_tensors();
  ts[5].offset = 352;  // inside q6k
  ts[5].nbytes = 0;
  expect_refused(with(ts), {"overlap", "'q6k'", "'bf16'"});
  ts = some_tensors();
  ts[3].name = "q8";
  expect_refused(with(ts), {"duplicate tensor name 'q8'"});
  ts = some_tensors();
  ts[0].dims = {48, 2};  // not whole blocks
  expect_refused(with(ts), {"tensor 'q8'", "row length 48", "block size 32"});
  ts = some_tensors();
  ts[1].dims = {uint64_t{1} << 40, uint64_t{1} << 40};
  expect_refused(with(ts), {"tensor 'f32'", "overflow"});
  ts = some_tensors();
  ts[2].dims = {};  // a quantized scalar
  expect_refused(with(ts), {"tensor 'q4k'", "scalar"});
  // Alignment 64 from the metadata: offset 32 is then misaligned.
  Bytes k;
  k.str("general.alignment").u32(4).u32(64);
  expect_refused(make_file(3, 1, k.b, {{"t", 0, {8}, 32, 32}}, 64), {"offset 32", "alignment 64"});
  const std::string ok = make_file(3, 1, k.b, {{"t", 0, {8}, 64, 32}}, 64);
  gg::File f = gg::File::parse(ok.data(), ok.size(), "a64");
  assert_int_equal(f.alignment(), 64);
  assert_int_equal(f.data_start() % 64, 0);
  // A name string past the end.
  Bytes h;
  h.raw("GGUF").u32(3).u64(1).u64(0).u64(500).raw(std::string(30, 'n'));
  expect_refused(h.b, {"tensor info 0 name", "length 500"});
}

// Random corruption of a valid file: whatever happens, a named error or a
// file whose invariants hold (check_buffer aborts otherwise).
void test_random_corruption(void**) {
  const std::string base = good_file();
  std::mt19937 rng(35);
  int accepted = 0;
  for (int round = 0; round < 4000; ++round) {
    std::string b = base;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t at = rng() % b.size();
      switch (rng() % 3) {
        case 0: b[at] = static_cast<char>(rng() & 0xff); break;
        case 1: b[at] = static_cast<char>(b[at] ^ (1 << (rng() % 8))); break;
        default: b.resize(at); break;
      }
      if (b.empty()) break;
    }
    accepted += gguf_check::check_buffer(reinterpret_cast<const uint8_t*>(b.data()), b.size());
  }
  std::printf("random corruption: %d of 4000 variants accepted (all invariants held)\n", accepted);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    assert_true(false);
  }
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, 4) == 0;
}

void test_gguf_py_files(void**) {
  if (g_dir.empty()) skip();
  std::istringstream names(slurp(g_dir + "/files.txt"));
  std::string name;
  int files = 0, tensors = 0;
  size_t values = 0;
  while (names >> name) {
    const gg::File f = gg::File::open(g_dir + "/" + name + ".gguf");
    const std::string want = slurp(g_dir + "/" + name + ".expected");
    const std::string got = gguf_check::dump(f);
    if (got != want) {
      std::fprintf(stderr, "%s: oslo reads\n%s\ngguf-py wrote\n%s\n", name.c_str(), got.c_str(),
                   want.c_str());
      assert_true(false);
    }
    assert_string_equal(f.get_string("general.architecture").c_str(), "llama");
    assert_true(f.get_uint("t.u64") == UINT64_MAX);
    assert_true(f.get_int("t.i64") == INT64_MIN);
    assert_true(f.get_float("t.f64") == 2.718281828459045);
    assert_int_equal(f.get_int("llama.context_length"), 4096);
    assert_string_equal(f.get_array("tokenizer.ggml.tokens")[2].s.c_str(), "\xe2\x96\x81the");
    assert_int_equal(f.get_array("t.nested.deep")[0].array[1].array.size(), 2);
    for (const gg::TensorInfo& t : f.tensors()) {
      const std::string bytes = slurp(g_dir + "/" + name + "." + t.name + ".bytes");
      const gg::TensorView v = f.view(t);
      assert_int_equal(v.nbytes, bytes.size());
      assert_memory_equal(v.data, bytes.data(), bytes.size());
      const std::string deq = slurp(g_dir + "/" + name + "." + t.name + ".deq");
      assert_int_equal(deq.size(), t.elements * 4);
      std::vector<float> mine(t.elements), ref(t.elements);
      std::memcpy(ref.data(), deq.data(), deq.size());
      f.dequantize(t, mine.data());
      for (size_t i = 0; i < mine.size(); ++i) {
        if (!same_float(mine[i], ref[i])) {
          std::fprintf(stderr, "%s %s: value %zu is %.9g, gguf-py %.9g\n", name.c_str(),
                       t.name.c_str(), i, mine[i], ref[i]);
          assert_true(false);
        }
      }
      values += mine.size();
      ++tensors;
    }
    ++files;
  }
  std::printf("gguf-py files: %d files, %d tensors, %zu values equal\n", files, tensors, values);
  assert_int_equal(files, 3);
}

// Replays a corpus (tests/gguf/corpus: seeds and fuzzer finds): files named
// ok-* must be accepted, bad-* refused, any file either accepted with all
// invariants holding or refused with a named OSLO_ERR_FORMAT.
int replay(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (!d) return std::perror(dir.c_str()), 2;
  while (struct dirent* e = readdir(d))
    if (e->d_name[0] != '.') names.push_back(e->d_name);
  closedir(d);
  std::sort(names.begin(), names.end());
  int failures = 0, accepted = 0;
  for (const std::string& n : names) {
    std::ifstream in(dir + "/" + n, std::ios::binary);
    const std::string b((std::istreambuf_iterator<char>(in)), {});
    const bool ok = gguf_check::check_buffer(reinterpret_cast<const uint8_t*>(b.data()), b.size());
    accepted += ok;
    if ((n.rfind("ok-", 0) == 0 && !ok) || (n.rfind("bad-", 0) == 0 && ok)) {
      std::fprintf(stderr, "FAIL %s: %s\n", n.c_str(), ok ? "accepted" : "refused");
      ++failures;
    }
  }
  std::printf("corpus: %zu files, %d accepted, %d failures\n", names.size(), accepted, failures);
  return failures || names.size() < 3 ? 1 : 0;
}

// Writes the seed files of the corpus.
int write_seeds(const std::string& dir) {
  const auto put = [&](const char* name, const std::string& b) {
    std::ofstream(dir + "/" + name, std::ios::binary) << b;
  };
  put("ok-v3.gguf", good_file(3));
  put("ok-v2.gguf", good_file(2));
  Bytes k;
  k.str("general.alignment").u32(4).u32(64);
  put("ok-align64.gguf", make_file(3, 1, k.b, {{"t", 0, {8}, 64, 32}}, 64));
  std::vector<TensorSpec> ts = some_tensors();
  ts[5].offset = 352;
  ts[5].nbytes = 0;
  put("bad-overlap.gguf", make_file(3, kAllKvs, all_kvs(), ts));
  ts = some_tensors();
  ts[2].type = 13;
  put("bad-q5k.gguf", make_file(3, kAllKvs, all_kvs(), ts));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--corpus") return replay(argv[2]);
  if (argc == 3 && std::string(argv[1]) == "--write-seeds") return write_seeds(argv[2]);
  if (argc > 1) g_dir = argv[1];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_valid),
      cmocka_unit_test(test_open),
      cmocka_unit_test(test_truncated),
      cmocka_unit_test(test_header),
      cmocka_unit_test(test_metadata_errors),
      cmocka_unit_test(test_tensor_errors),
      cmocka_unit_test(test_random_corruption),
      cmocka_unit_test(test_gguf_py_files),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
