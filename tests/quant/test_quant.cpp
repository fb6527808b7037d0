// The block formats of core/quant. Without arguments: the format table,
// sizes, hand-made blocks with known values, quantize/dequantize round-trip
// bounds and every error case. With a folder (written by test_quant_ref.py
// from gguf-py, llama.cpp's Python package): oslo's quantize bytes and
// dequantized values equal gguf-py's, bit for bit, case by case.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/quant/quant.hpp"

// cmocka last: its fail() macro clashes with oslo::fail.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" {
// clang-format off
#include <cmocka.h>
// clang-format on
}

namespace q = oslo::quant;
using q::Format;

namespace {

std::string g_dir;  // the reference folder, when given

template <typename F>
std::string error_of(F&& f, oslo_status want) {
  try {
    f();
  } catch (const oslo::Error& e) {
    if (e.status() != want) {
      std::fprintf(stderr, "status %d, want %d: %s\n", e.status(), want, e.what());
      assert_true(false);
    }
    return e.what();
  }
  std::fprintf(stderr, "no error, want status %d\n", want);
  assert_true(false);
  return "";
}

void expect_in(const std::string& msg, const std::string& part) {
  if (msg.find(part) == std::string::npos) {
    std::fprintf(stderr, "message '%s' lacks '%s'\n", msg.c_str(), part.c_str());
    assert_true(false);
  }
}

void test_table(void**) {
  const struct {
    Format f;
    const char* name;
    uint32_t id;
    size_t elems, bytes;
  } want[] = {{Format::F32, "f32", 0, 1, 4},       {Format::F16, "f16", 1, 1, 2},
              {Format::BF16, "bf16", 30, 1, 2},    {Format::Q8_0, "q8_0", 8, 32, 34},
              {Format::Q4_0, "q4_0", 2, 32, 18},   {Format::Q4_K, "q4_k", 12, 256, 144},
              {Format::Q6_K, "q6_k", 14, 256, 210}};
  // Every format but oslo's own q4_g128 (no GGUF id; tests/quant/test_gptq.cpp).
  assert_int_equal(sizeof(want) / sizeof(want[0]) + 1, q::kFormatCount);
  for (const auto& w : want) {
    assert_string_equal(q::format_name(w.f), w.name);
    Format f;
    assert_true(q::parse_format(w.name, &f));
    assert_true(f == w.f);
    assert_int_equal(q::gguf_type_id(w.f), w.id);
    assert_true(q::from_gguf_type_id(w.id, &f));
    assert_true(f == w.f);
    assert_int_equal(q::block_elems(w.f), w.elems);
    assert_int_equal(q::block_bytes(w.f), w.bytes);
    assert_int_equal(q::is_quantized(w.f), w.elems > 1);
  }
  Format f;
  assert_false(q::parse_format("Q8_0", &f));  // exact, lower case
  assert_false(q::parse_format("q5_k", &f));
  assert_false(q::from_gguf_type_id(13, &f));  // Q5_K
  assert_false(q::from_gguf_type_id(99, &f));
  assert_string_equal(q::gguf_type_name(13).c_str(), "Q5_K");
  assert_string_equal(q::gguf_type_name(16).c_str(), "IQ2_XXS");
  assert_string_equal(q::gguf_type_name(30).c_str(), "BF16");
  assert_string_equal(q::gguf_type_name(1000).c_str(), "type 1000");
  assert_string_equal(q::format_name(static_cast<Format>(77)), "unknown");
  assert_true(q::can_quantize(Format::Q8_0) && q::can_quantize(Format::Q4_0));
  assert_true(q::can_quantize(Format::Q4_K) && q::can_quantize(Format::Q6_K));
}

void test_sizes(void**) {
  assert_int_equal(q::row_bytes(Format::Q8_0, 4096), 128 * 34);
  assert_int_equal(q::row_bytes(Format::Q4_0, 64), 36);
  assert_int_equal(q::row_bytes(Format::Q4_K, 512), 288);
  assert_int_equal(q::row_bytes(Format::Q6_K, 256), 210);
  assert_int_equal(q::row_bytes(Format::BF16, 3), 6);
  assert_int_equal(q::row_bytes(Format::Q8_0, 0), 0);
  assert_int_equal(q::tensor_bytes(Format::Q4_K, {3, 2, 256}), 6 * 144);
  assert_int_equal(q::tensor_bytes(Format::F32, {}), 4);
  std::string m = error_of([] { q::row_bytes(Format::Q4_K, 300, "blk.0.attn_q.weight"); },
                           OSLO_ERR_INVALID_ARGUMENT);
  expect_in(m, "'blk.0.attn_q.weight'");
  expect_in(m, "row length 300");
  expect_in(m, "q4_k block size 256");
  m = error_of([] { q::row_bytes(Format::Q8_0, 33); }, OSLO_ERR_INVALID_ARGUMENT);
  expect_in(m, "row length 33");
  m = error_of([] { q::tensor_bytes(Format::Q8_0, {}, "s"); }, OSLO_ERR_INVALID_ARGUMENT);
  expect_in(m, "scalar");
  m = error_of(
      [] {
        q::tensor_bytes(Format::F32, {UINT64_MAX / 2, 4}, "big");
      },
      OSLO_ERR_INVALID_ARGUMENT);
  expect_in(m, "overflow");
  m = error_of([] { q::row_bytes(Format::F32, UINT64_MAX / 2); }, OSLO_ERR_INVALID_ARGUMENT);
  expect_in(m, "overflow");
  float dst[32];
  uint8_t buf[64] = {};
  error_of([&] { q::dequantize_row(Format::Q4_0, buf, dst, 31); }, OSLO_ERR_INVALID_ARGUMENT);
  error_of([&] { q::quantize_row(Format::Q8_0, dst, buf, 16); }, OSLO_ERR_INVALID_ARGUMENT);
  std::vector<float> x(512, 1.0f);
  std::vector<uint8_t> out(420);
  m = error_of([&] { q::quantize_row(Format::Q6_K, x.data(), out.data(), 300); },
               OSLO_ERR_INVALID_ARGUMENT);
  expect_in(m, "q6_k block size 256");
  error_of([&] { q::quantize_row(Format::Q4_K, x.data(), out.data(), 128); },
           OSLO_ERR_INVALID_ARGUMENT);
}

void test_shard_ranges(void**) {
  const std::vector<uint64_t> shape = {64, 4096};
  q::check_shard_range(Format::Q8_0, "w", shape, 1, 0, 2048);
  q::check_shard_range(Format::Q8_0, "w", shape, 1, 2048, 4096);
  q::check_shard_range(Format::Q4_K, "w", shape, 1, 1024, 1280);
  q::check_shard_range(Format::Q4_K, "w", shape, 0, 3, 17);  // whole rows: any cut
  q::check_shard_range(Format::F32, "w", shape, 1, 1, 3);
  std::string m = error_of(
      [&] { q::check_shard_range(Format::Q4_K, "blk.3.ffn_down.weight", shape, 1, 0, 1000); },
      OSLO_ERR_INVALID_ARGUMENT);
  expect_in(m, "'blk.3.ffn_down.weight'");
  expect_in(m, "[0, 1000)");
  expect_in(m, "256");
  expect_in(m, "q4_k");
  m = error_of([&] { q::check_shard_range(Format::Q8_0, "w", shape, 1, 16, 48); },
               OSLO_ERR_INVALID_ARGUMENT);
  expect_in(m, "[16, 48)");
  expect_in(m, "32");
  m = error_of([&] { q::check_shard_range(Format::Q8_0, "w", shape, 1, 0, 4128); },
               OSLO_ERR_INVALID_ARGUMENT);
  expect_in(m, "extent 4096");
  error_of([&] { q::check_shard_range(Format::Q8_0, "w", shape, 0, 5, 4); },
           OSLO_ERR_INVALID_ARGUMENT);
  m = error_of([&] { q::check_shard_range(Format::Q8_0, "w", shape, 2, 0, 1); },
               OSLO_ERR_INVALID_ARGUMENT);
  expect_in(m, "2 dimensions");
}

void put16(uint8_t* p, uint16_t v) {
  p[0] = v & 0xff;
  p[1] = v >> 8;
}

// Blocks written by hand from llama.cpp's layouts, with their values.
void test_known_blocks(void**) {
  float y[256];
  // Q8_0: d = 0.5 (f16 0x3800), q = j - 16.
  uint8_t b8[34];
  put16(b8, 0x3800);
  for (int j = 0; j < 32; ++j) b8[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  q::dequantize_row(Format::Q8_0, b8, y, 32);
  for (int j = 0; j < 32; ++j) assert_true(y[j] == 0.5f * (j - 16));
  // Q4_0: d = 2 (0x4000); byte j holds element j (low) and j + 16 (high).
  uint8_t b4[18];
  put16(b4, 0x4000);
  for (int j = 0; j < 16; ++j) b4[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  q::dequantize_row(Format::Q4_0, b4, y, 32);
  for (int j = 0; j < 16; ++j) {
    assert_true(y[j] == 2.0f * (j - 8));
    assert_true(y[j + 16] == 2.0f * (15 - j - 8));
  }
  // Q4_K: d = 1, dmin = 0.5; sub-block s has scale s + 1 and min 2 s
  // (6-bit packing: s < 4 in bytes 0..7; s >= 4 low 4 bits in bytes 8..11,
  // high 2 bits in the top of bytes 0..7); all nibbles 3.
  uint8_t bk[144] = {};
  put16(bk, 0x3c00);
  put16(bk + 2, 0x3800);
  int sc[8], mn[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = s + 1 + (s >= 4 ? 40 : 0);  // above 15: exercises the high bits
    mn[s] = 2 * s + (s >= 6 ? 33 : 0);
  }
  uint8_t* scales = bk + 4;
  for (int s = 0; s < 4; ++s) {
    scales[s] = static_cast<uint8_t>(sc[s] | ((sc[s + 4] >> 4) << 6));
    scales[s + 4] = static_cast<uint8_t>(mn[s] | ((mn[s + 4] >> 4) << 6));
    scales[s + 8] = static_cast<uint8_t>((sc[s + 4] & 0xF) | ((mn[s + 4] & 0xF) << 4));
  }
  for (int j = 0; j < 128; ++j) bk[16 + j] = 0x53;  // low nibble 3, high 5
  q::dequantize_row(Format::Q4_K, bk, y, 256);
  for (int i = 0; i < 256; ++i) {
    const int s = i / 32, nib = (s % 2 == 0) ? 3 : 5;
    assert_true(y[i] == 1.0f * sc[s] * nib - 0.5f * mn[s]);
  }
  // Q6_K: d = 0.25 (0x3400), scales[k] = k - 8; element e of each half
  // (128) takes 4 low bits from ql and 2 high bits from qh; set all q = 33
  // (ql nibbles 1, qh pairs 2): values 0.25 * sc * 1.
  uint8_t b6[210] = {};
  for (int j = 0; j < 128; ++j) b6[j] = 0x11;
  for (int j = 0; j < 64; ++j) b6[128 + j] = 0xAA;
  for (int k = 0; k < 16; ++k) b6[192 + k] = static_cast<uint8_t>(static_cast<int8_t>(k - 8));
  put16(b6 + 208, 0x3400);
  q::dequantize_row(Format::Q6_K, b6, y, 256);
  for (int i = 0; i < 256; ++i) assert_true(y[i] == 0.25f * (i / 16 - 8) * 1.0f);
}

// Quantize then dequantize stays within half a step (q8_0) or a step
// (q4_0) of the input, and the passthrough formats round as dtype.hpp.
void test_round_trip(void**) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> x(1024), y(1024);
  for (auto& v : x) v = nd(rng);
  std::vector<uint8_t> b(q::row_bytes(Format::F32, 1024));
  for (Format f : {Format::Q8_0, Format::Q4_0}) {
    q::quantize_row(f, x.data(), b.data(), 1024);
    q::dequantize_row(f, b.data(), y.data(), 1024);
    for (size_t blk = 0; blk < 32; ++blk) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[blk * 32 + j]));
      const float step = f == Format::Q8_0 ? amax / 127 : amax / 8;
      for (int j = 0; j < 32; ++j) {
        const float err = std::fabs(x[blk * 32 + j] - y[blk * 32 + j]);
        assert_true(err <= (f == Format::Q8_0 ? 0.51f : 1.01f) * step + 1e-3f * amax);
      }
    }
  }
  q::quantize_row(Format::BF16, x.data(), b.data(), 1024);
  q::dequantize_row(Format::BF16, b.data(), y.data(), 1024);
  for (size_t i = 0; i < 1024; ++i) assert_true(y[i] == oslo::bf16_to_f32(oslo::f32_to_bf16(x[i])));
  q::quantize_row(Format::F16, x.data(), b.data(), 1024);
  q::dequantize_rows(Format::F16, b.data(), y.data(), 4, 256);
  for (size_t i = 0; i < 1024; ++i) assert_true(y[i] == oslo::f16_to_f32(oslo::f32_to_f16(x[i])));
  // Zeros give d = 0 and zeros back; inf/NaN inputs are defined (no UB).
  std::vector<float> z(32, 0.0f);
  q::quantize_row(Format::Q4_0, z.data(), b.data(), 32);
  for (int j = 2; j < 18; ++j) assert_int_equal(b[j], 0x88);
  z[3] = INFINITY;
  z[4] = NAN;
  q::quantize_row(Format::Q8_0, z.data(), b.data(), 32);
  q::quantize_row(Format::Q4_0, z.data(), b.data(), 32);
}

std::vector<char> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    assert_true(false);
  }
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;  // bit for bit: -0 differs from +0
}

void test_reference(void**) {
  if (g_dir.empty()) skip();
  std::ifstream list(g_dir + "/cases.txt");
  assert_true(static_cast<bool>(list));
  std::string line;
  int cases = 0, quantized = 0;
  size_t values = 0;
  bool seen[q::kFormatCount] = {};
  while (std::getline(list, line)) {
    if (line.empty()) continue;
    std::istringstream ls(line);
    std::string name, fname;
    uint64_t rows = 0, cols = 0;
    int has_input = 0;
    ls >> name >> fname >> rows >> cols >> has_input;
    Format f;
    assert_true(q::parse_format(fname, &f));
    seen[static_cast<int>(f)] = true;
    const uint64_t rb = q::row_bytes(f, cols, name);
    const std::vector<char> qb = slurp(g_dir + "/" + name + ".q");
    const std::vector<char> deq = slurp(g_dir + "/" + name + ".deq");
    assert_int_equal(qb.size(), rows * rb);
    assert_int_equal(deq.size(), rows * cols * 4);
    std::vector<float> want(rows * cols), got(rows * cols);
    std::memcpy(want.data(), deq.data(), deq.size());
    q::dequantize_rows(f, qb.data(), got.data(), rows, cols);
    for (size_t i = 0; i < got.size(); ++i) {
      if (!same_float(got[i], want[i])) {
        std::fprintf(stderr, "%s: dequantized value %zu is %.9g, gguf-py %.9g\n", name.c_str(), i,
                     got[i], want[i]);
        assert_true(false);
      }
    }
    values += got.size();
    if (has_input) {
      const std::vector<char> in = slurp(g_dir + "/" + name + ".in");
      assert_int_equal(in.size(), rows * cols * 4);
      std::vector<float> x(rows * cols);
      std::memcpy(x.data(), in.data(), in.size());
      std::vector<char> mine(rows * rb);
      for (uint64_t r = 0; r < rows; ++r)
        q::quantize_row(f, x.data() + r * cols, mine.data() + r * rb, cols);
      for (size_t i = 0; i < mine.size(); ++i) {
        if (mine[i] != qb[i]) {
          std::fprintf(stderr, "%s: quantized byte %zu (block %zu) is 0x%02x, gguf-py 0x%02x\n",
                       name.c_str(), i, static_cast<size_t>(i % rb / q::block_bytes(f)),
                       mine[i] & 0xff, qb[i] & 0xff);
          assert_true(false);
        }
      }
      ++quantized;
    }
    ++cases;
  }
  std::printf("reference: %d cases (%d quantized bit for bit), %zu values dequantized equal\n",
              cases, quantized, values);
  for (int i = 0; i < q::kFormatCount; ++i)
    assert_true(seen[i] || !q::has_gguf_type(static_cast<Format>(i)));
  assert_true(cases >= 100);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_dir = argv[1];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table),        cmocka_unit_test(test_sizes),
      cmocka_unit_test(test_shard_ranges), cmocka_unit_test(test_known_blocks),
      cmocka_unit_test(test_round_trip),   cmocka_unit_test(test_reference),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
