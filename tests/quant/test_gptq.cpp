// Q4_G128 and the GPTQ/AWQ import. Without arguments: the format's table
// entries, known blocks, quantizer round trips, hostile bytes, and the
// conversion of hand-packed GPTQ/AWQ tensors (including act-order) and
// every named error. With a folder written by make_gptq_awq_fixtures.py:
// the weight source lists each quantized linear as one q4_g128 tensor and
// reads it (blocks, boxes, f32) equal to numpy's dequantization bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/checkpoint/safetensors.hpp"
#include "core/checkpoint/weight_source.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/quant/gptq_awq.hpp"
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
namespace st = oslo::safetensors;
using q::Format;

namespace {

std::string g_dir;

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

bool same_bits(float a, float b) {
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

void test_table(void**) {
  Format f;
  assert_true(q::parse_format("q4_g128", &f));
  assert_true(f == Format::Q4_G128);
  assert_string_equal(q::format_name(Format::Q4_G128), "q4_g128");
  assert_int_equal(q::block_elems(Format::Q4_G128), 128);
  assert_int_equal(q::block_bytes(Format::Q4_G128), 68);
  assert_true(q::is_quantized(Format::Q4_G128) && q::can_quantize(Format::Q4_G128));
  assert_true(q::can_quantize(Format::Q4_K) && q::can_quantize(Format::Q6_K));
  assert_false(q::has_gguf_type(Format::Q4_G128));
  assert_true(q::has_gguf_type(Format::Q4_K));
  expect_in(error_of([] { q::gguf_type_id(Format::Q4_G128); }, OSLO_ERR_NOT_SUPPORTED), "GGUF");
  for (uint32_t id = 0; id < 64; ++id)
    if (q::from_gguf_type_id(id, &f)) assert_true(f != Format::Q4_G128);
  assert_false(q::from_gguf_type_id(UINT32_MAX, &f));
  assert_int_equal(q::format_of_dtype(OSLO_DTYPE_Q4_G128), static_cast<int>(Format::Q4_G128));
  assert_int_equal(q::dtype_of_format(Format::Q4_G128), OSLO_DTYPE_Q4_G128);
  oslo_dtype dt;
  assert_true(oslo::dtype_parse("q4_g128", &dt));
  assert_int_equal(dt, OSLO_DTYPE_Q4_G128);
  assert_string_equal(oslo::dtype_name(OSLO_DTYPE_Q4_G128), "q4_g128");
  assert_true(oslo::dtype_is_block(OSLO_DTYPE_Q4_G128) && oslo::dtype_known(OSLO_DTYPE_Q4_G128));
  assert_false(oslo::dtype_valid(OSLO_DTYPE_Q4_G128));
  int64_t e, b;
  oslo::dtype_block(OSLO_DTYPE_Q4_G128, &e, &b);
  assert_int_equal(e, 128);
  assert_int_equal(b, 68);
  assert_int_equal(oslo::dtype_bytes(OSLO_DTYPE_Q4_G128, 512), 4 * 68);
  error_of([] { oslo::dtype_bytes(OSLO_DTYPE_Q4_G128, 100); }, OSLO_ERR_SHAPE);
  assert_int_equal(q::row_bytes(Format::Q4_G128, 384), 3 * 68);
  expect_in(error_of([] { q::row_bytes(Format::Q4_G128, 64, "w"); }, OSLO_ERR_INVALID_ARGUMENT),
            "q4_g128 block size 128");
  q::check_shard_range(Format::Q4_G128, "w", {8, 512}, 1, 128, 384);
  expect_in(error_of(
                [] {
                  q::check_shard_range(Format::Q4_G128, "w", {8, 512}, 1, 64, 256);
                },
                OSLO_ERR_INVALID_ARGUMENT),
            "128");
}

// A block built by hand decodes to (q - z) * d, element j in the low nibble
// of byte 4 + j and element j + 64 in its high nibble.
void test_known_block(void**) {
  uint8_t b[68];
  const uint16_t d = oslo::f32_to_f16(0.375f);
  b[0] = d & 0xff;
  b[1] = d >> 8;
  b[2] = 5;
  b[3] = 0;
  for (int j = 0; j < 64; ++j) b[4 + j] = static_cast<uint8_t>((j % 16) | (((j * 7) % 16) << 4));
  float y[128];
  q::dequantize_row(Format::Q4_G128, b, y, 128);
  for (int j = 0; j < 64; ++j) {
    assert_true(y[j] == static_cast<float>(j % 16 - 5) * 0.375f);
    assert_true(y[j + 64] == static_cast<float>((j * 7) % 16 - 5) * 0.375f);
  }
  q::check_blocks(Format::Q4_G128, b, 1, 128, "w");
  b[3] = 1;
  std::string m =
      error_of([&] { q::check_blocks(Format::Q4_G128, b, 1, 128, "blk.w"); }, OSLO_ERR_FORMAT);
  expect_in(m, "'blk.w'");
  expect_in(m, "reserved byte is 1");
  b[3] = 0;
  b[2] = 16;
  m = error_of([&] { q::check_blocks(Format::Q4_G128, b, 1, 128, "w"); }, OSLO_ERR_FORMAT);
  expect_in(m, "zero point 16");
  // The second group of the second row is named.
  std::vector<uint8_t> rows(4 * 68, 0);
  rows[3 * 68 + 3] = 9;
  m = error_of([&] { q::check_blocks(Format::Q4_G128, rows.data(), 2, 256, "w"); },
               OSLO_ERR_FORMAT);
  expect_in(m, "row 1, group 1");
  q::check_blocks(Format::Q8_0, rows.data(), 1, 32);  // other formats: any bytes
  error_of([&] { q::check_blocks(Format::Q4_G128, rows.data(), 1, 100); },
           OSLO_ERR_INVALID_ARGUMENT);
}

// The quantizer against the documented formula, computed here on its own,
// and the round-trip error bound (half a step inside the range).
void test_quantizer(void**) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<float> x(256);
    for (auto& v : x) v = nd(rng);
    if (trial % 4 == 1)
      for (auto& v : x) v = std::fabs(v);  // lo = 0: z = 0
    if (trial % 4 == 2)
      for (auto& v : x) v = -std::fabs(v) - 1;  // hi = 0: z = 15
    if (trial == 3) std::fill(x.begin(), x.end(), 0.0f);
    std::vector<uint8_t> b(2 * 68);
    q::quantize_row(Format::Q4_G128, x.data(), b.data(), 256);
    q::check_blocks(Format::Q4_G128, b.data(), 1, 256);
    std::vector<float> y(256);
    q::dequantize_row(Format::Q4_G128, b.data(), y.data(), 256);
    for (int g = 0; g < 2; ++g) {
      float lo = 0, hi = 0;
      for (int j = 0; j < 128; ++j)
        lo = std::min(lo, x[g * 128 + j]), hi = std::max(hi, x[g * 128 + j]);
      const float d = oslo::f16_to_f32(oslo::f32_to_f16((hi - lo) / 15.0f));
      const uint8_t* blk = b.data() + g * 68;
      assert_int_equal(blk[0] | (blk[1] << 8), oslo::f32_to_f16((hi - lo) / 15.0f));
      const int z = d > 0 ? static_cast<int>(std::nearbyint(-lo / d)) : 0;
      assert_int_equal(blk[2], std::min(15, std::max(0, z)));
      assert_int_equal(blk[3], 0);
      for (int j = 0; j < 128; ++j) {
        int want = 0;
        if (d > 0)
          want = std::min(
              15, std::max(0, static_cast<int>(std::nearbyint(x[g * 128 + j] / d)) + blk[2]));
        const int got = j < 64 ? blk[4 + j] & 15 : blk[4 + j - 64] >> 4;
        assert_int_equal(got, want);
        assert_true(std::fabs(y[g * 128 + j] - x[g * 128 + j]) <= 0.51f * d + 1e-3f * d + 1e-6f);
      }
    }
  }
  // Ties round to even: 0.5 and 1.5 steps.
  std::vector<float> t(128, 0.0f);
  t[0] = 15.0f;  // d = 1, z = 0
  t[1] = 2.5f;
  t[2] = 3.5f;
  std::vector<uint8_t> b(68);
  q::quantize_row(Format::Q4_G128, t.data(), b.data(), 128);
  assert_int_equal(b[4 + 1] & 15, 2);
  assert_int_equal(b[4 + 2] & 15, 4);
  // A range beyond f16 caps d at 65504; inf/NaN inputs are defined.
  t[0] = 1e9f;
  q::quantize_row(Format::Q4_G128, t.data(), b.data(), 128);
  assert_int_equal(b[0] | (b[1] << 8), 0x7bff);
  t[5] = NAN;
  t[6] = -INFINITY;
  q::quantize_row(Format::Q4_G128, t.data(), b.data(), 128);
  q::check_blocks(Format::Q4_G128, b.data(), 1, 128);
}

// Packs per the documented layouts (gptq_awq.hpp), independently of the
// converter: W[n][k] = s[g][n] * (q[n][k] - z[g][n]).
struct Packed {
  int64_t K, N;
  std::vector<int> qv, zv;  // q[n * K + k], z[g * N + n]
  std::vector<uint16_t> s;  // [K/128, N]
  std::vector<int32_t> qweight, qzeros, g_idx;
};

Packed make(int64_t K, int64_t N, bool awq, int zero_bias, uint32_t seed) {
  Packed p{K, N, {}, {}, {}, {}, {}, {}};
  std::mt19937 rng(seed);
  p.qv.resize(static_cast<size_t>(K * N));
  for (auto& v : p.qv) v = static_cast<int>(rng() % 16);
  const int64_t ng = K / 128;
  p.zv.resize(static_cast<size_t>(ng * N));
  for (auto& v : p.zv) v = static_cast<int>(rng() % 15) + 1;  // 1..15: fits the classic format
  for (int64_t i = 0; i < ng * N; ++i)
    p.s.push_back(oslo::f32_to_f16(0.01f * static_cast<float>(1 + rng() % 50)));
  static const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  if (!awq) {
    p.qweight.assign(static_cast<size_t>(K / 8 * N), 0);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n)
        p.qweight[(k / 8) * N + n] |=
            static_cast<int32_t>(static_cast<uint32_t>(p.qv[n * K + k]) << (4 * (k % 8)));
    p.qzeros.assign(static_cast<size_t>(ng * N / 8), 0);
    for (int64_t g = 0; g < ng; ++g)
      for (int64_t n = 0; n < N; ++n)
        p.qzeros[g * (N / 8) + n / 8] |= static_cast<int32_t>(
            static_cast<uint32_t>((p.zv[g * N + n] - zero_bias) & 15) << (4 * (n % 8)));
  } else {
    p.qweight.assign(static_cast<size_t>(K * N / 8), 0);
    p.qzeros.assign(static_cast<size_t>(ng * N / 8), 0);
    for (int64_t c = 0; c < N / 8; ++c)
      for (int i = 0; i < 8; ++i) {
        const int64_t n = 8 * c + order[i];
        for (int64_t k = 0; k < K; ++k)
          p.qweight[k * (N / 8) + c] |=
              static_cast<int32_t>(static_cast<uint32_t>(p.qv[n * K + k]) << (4 * i));
        for (int64_t g = 0; g < ng; ++g)
          p.qzeros[g * (N / 8) + c] |=
              static_cast<int32_t>(static_cast<uint32_t>(p.zv[g * N + n]) << (4 * i));
      }
  }
  for (int64_t k = 0; k < K; ++k) p.g_idx.push_back(static_cast<int32_t>(k / 128));
  return p;
}

q::PackedLinear view(const Packed& p, bool awq) {
  q::PackedLinear v;
  v.kind = awq ? q::PackedKind::Awq : q::PackedKind::Gptq;
  v.name = "model.layers.0.mlp.up_proj";
  v.in_features = p.K;
  v.out_features = p.N;
  v.qweight = p.qweight.data();
  v.qweight_shape = awq ? std::vector<int64_t>{p.K, p.N / 8} : std::vector<int64_t>{p.K / 8, p.N};
  v.qzeros = p.qzeros.data();
  v.qzeros_shape = {p.K / 128, p.N / 8};
  v.scales = p.s.data();
  v.scales_shape = {p.K / 128, p.N};
  if (!awq) {
    v.g_idx = p.g_idx.data();
    v.g_idx_shape = {p.K};
  }
  return v;
}

void check_values(const Packed& p, const std::vector<uint8_t>& rows, int64_t r0, int64_t nr,
                  const std::vector<int64_t>& perm) {
  const size_t rb = static_cast<size_t>(p.K / 128 * 68);
  std::vector<float> y(static_cast<size_t>(p.K));
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t n = r0 + r;
    q::dequantize_row(Format::Q4_G128, rows.data() + r * rb, y.data(), static_cast<uint64_t>(p.K));
    for (int64_t j = 0; j < p.K; ++j) {
      const int64_t k = perm.empty() ? j : perm[static_cast<size_t>(j)];
      const int64_t g = p.g_idx[static_cast<size_t>(k)];
      const float want = oslo::f16_to_f32(p.s[g * p.N + n]) *
                         static_cast<float>(p.qv[n * p.K + k] - p.zv[g * p.N + n]);
      assert_true(same_bits(y[static_cast<size_t>(j)], want));
    }
  }
}

void test_import(void**) {
  for (int variant = 0; variant < 3; ++variant) {  // gptq classic, gptq_v2, awq
    const bool awq = variant == 2;
    Packed p = make(256, 48, awq, variant == 0 ? 1 : 0, 100 + variant);
    q::PackedLinear v = view(p, awq);
    v.zeros_minus_one = variant == 0;
    const std::vector<int64_t> perm = q::act_order_permutation(v);
    assert_true(perm.empty());
    std::vector<uint8_t> rows(48 * 2 * 68);
    q::packed_to_q4_g128(v, perm, 0, 48, rows.data());
    q::check_blocks(Format::Q4_G128, rows.data(), 48, 256);
    check_values(p, rows, 0, 48, perm);
    std::vector<uint8_t> part(5 * 2 * 68);
    q::packed_to_q4_g128(v, perm, 17, 5, part.data());
    assert_memory_equal(part.data(), rows.data() + 17 * 2 * 68, part.size());
  }
  // Act-order: g_idx alternates groups; the permutation makes them contiguous.
  Packed p = make(256, 16, false, 1, 7);
  for (int64_t k = 0; k < 256; ++k) p.g_idx[static_cast<size_t>(k)] = static_cast<int32_t>(k % 2);
  q::PackedLinear v = view(p, false);
  const std::vector<int64_t> perm = q::act_order_permutation(v);
  assert_int_equal(perm.size(), 256);
  for (int64_t j = 0; j < 256; ++j)
    assert_int_equal(perm[static_cast<size_t>(j)], j < 128 ? 2 * j : 2 * (j - 128) + 1);
  std::vector<uint8_t> rows(16 * 2 * 68);
  q::packed_to_q4_g128(v, perm, 0, 16, rows.data());
  check_values(p, rows, 0, 16, perm);
  // Without the permutation the converter refuses a non-trivial g_idx.
  expect_in(error_of([&] { q::packed_to_q4_g128(v, {}, 0, 16, rows.data()); }, OSLO_ERR_FORMAT),
            "g_idx");
}

void test_import_errors(void**) {
  Packed p = make(256, 16, false, 1, 3);
  std::vector<uint8_t> rows(16 * 2 * 68);
  {
    q::PackedLinear v = view(p, false);
    v.group_size = 64;
    std::string m = error_of([&] { q::check_packed(v); }, OSLO_ERR_NOT_SUPPORTED);
    expect_in(m, "group_size 64");
    expect_in(m, "'model.layers.0.mlp.up_proj'");
    v.group_size = 32;
    expect_in(error_of([&] { q::check_packed(v); }, OSLO_ERR_NOT_SUPPORTED), "group_size 32");
  }
  {
    q::PackedLinear v = view(p, false);
    v.qweight_shape = {16, 32};
    expect_in(error_of([&] { q::check_packed(v); }, OSLO_ERR_SHAPE), "qweight");
    v = view(p, false);
    v.scales_shape = {3, 16};  // a group count disagreeing with K / 128
    expect_in(error_of([&] { q::check_packed(v); }, OSLO_ERR_SHAPE), "scales");
    v = view(p, false);
    v.qzeros_shape = {2, 3};
    expect_in(error_of([&] { q::check_packed(v); }, OSLO_ERR_SHAPE), "qzeros");
    v = view(p, false);
    v.g_idx_shape = {255};
    expect_in(error_of([&] { q::check_packed(v); }, OSLO_ERR_SHAPE), "g_idx");
    v = view(p, false);
    v.in_features = 192;
    error_of([&] { q::check_packed(v); }, OSLO_ERR_NOT_SUPPORTED);
    v = view(p, false);
    v.out_features = 12;
    error_of([&] { q::check_packed(v); }, OSLO_ERR_SHAPE);
    v = view(p, false);
    expect_in(error_of([&] { q::packed_to_q4_g128(v, {}, 10, 7, rows.data()); },
                       OSLO_ERR_INVALID_ARGUMENT),
              "outside");
  }
  {
    // The classic format's stored zero 15 means 16: q4_g128 cannot hold it.
    Packed z = p;
    z.qzeros[1] |= static_cast<int32_t>(0xFu << 8);  // group 0, output 10
    q::PackedLinear v = view(z, false);
    std::string m =
        error_of([&] { q::packed_to_q4_g128(v, {}, 0, 16, rows.data()); }, OSLO_ERR_FORMAT);
    expect_in(m, "zero point 16");
    expect_in(m, "output 10");
    v.zeros_minus_one = false;  // gptq_v2: 15 is 15
    q::packed_to_q4_g128(v, {}, 0, 16, rows.data());
  }
  {
    Packed g = p;
    g.g_idx[5] = 2;  // out of range
    q::PackedLinear v = view(g, false);
    expect_in(error_of([&] { q::act_order_permutation(v); }, OSLO_ERR_FORMAT), "g_idx[5] = 2");
    g.g_idx[5] = 1;  // group 1 gets 129 inputs
    v = view(g, false);
    expect_in(error_of([&] { q::act_order_permutation(v); }, OSLO_ERR_FORMAT), "127 inputs");
  }
}

// ---------------------------------------------------------------- fixtures

struct Ref {
  st::Reader rd;
  explicit Ref(const std::string& path) : rd(path) {}
  template <typename T>
  std::vector<T> get(const std::string& name) {
    const st::TensorInfo& ti = rd.at(name);
    std::vector<T> v(ti.nbytes() / sizeof(T));
    rd.read(ti, 0, ti.nbytes(), v.data());
    return v;
  }
};

void check_folder(const std::string& variant, Ref& ref, int* linears) {
  const std::string dir = g_dir + "/" + variant;
  oslo::WeightSource src(dir);
  int n = 0;
  for (const oslo::SourceTensor& t : src.tensors()) {
    assert_true(t.name.find(".qweight") == std::string::npos);
    assert_true(t.name.find(".qzeros") == std::string::npos);
    assert_true(t.name.find(".scales") == std::string::npos);
    assert_true(t.name.find(".g_idx") == std::string::npos);
    if (!t.quantized()) continue;
    ++n;
    assert_int_equal(t.quant, OSLO_DTYPE_Q4_G128);
    assert_true(t.dtype == st::Dtype::U8);
    assert_int_equal(t.shape.size(), 2);
    const int64_t N = t.shape[0], K = t.shape[1];
    assert_int_equal(t.nbytes(), static_cast<uint64_t>(N * (K / 128) * 68));
    src.check_tensor(t);
    const std::vector<float> want = ref.get<float>(t.name);
    const std::vector<uint16_t> want16 = ref.get<uint16_t>(t.name + ".f16");
    assert_int_equal(want.size(), static_cast<size_t>(N * K));
    std::vector<float> got(want.size());
    src.read_box(t, -1, 0, 0, st::Dtype::F32, got.data());
    for (size_t i = 0; i < got.size(); ++i) {
      if (!same_bits(got[i], want[i])) {
        std::fprintf(stderr, "%s %s: value %zu is %.9g, numpy %.9g\n", variant.c_str(),
                     t.name.c_str(), i, got[i], want[i]);
        assert_true(false);
      }
      // transformers' f16 dequantization is oslo's exact value rounded once.
      assert_int_equal(oslo::f32_to_f16(got[i]), want16[i]);
    }
    // Blocks: whole, a run of rows, and a run of groups along the row.
    const size_t rb = static_cast<size_t>(K / 128 * 68);
    std::vector<uint8_t> blocks(static_cast<size_t>(N) * rb);
    src.read_box(t, -1, 0, 0, st::Dtype::U8, blocks.data());
    q::check_blocks(Format::Q4_G128, blocks.data(), static_cast<uint64_t>(N),
                    static_cast<uint64_t>(K), t.name);
    std::vector<float> deq(want.size());
    q::dequantize_rows(Format::Q4_G128, blocks.data(), deq.data(), static_cast<uint64_t>(N),
                       static_cast<uint64_t>(K));
    assert_memory_equal(deq.data(), want.data(), want.size() * 4);
    std::vector<uint8_t> part(8 * rb);
    src.read_box(t, 0, 8, 8, st::Dtype::U8, part.data());
    assert_memory_equal(part.data(), blocks.data() + 8 * rb, part.size());
    if (K >= 256) {
      std::vector<uint8_t> cols(static_cast<size_t>(N) * 68);
      src.read_box(t, 1, 128, 128, st::Dtype::U8, cols.data());
      for (int64_t r = 0; r < N; ++r)
        assert_memory_equal(cols.data() + r * 68, blocks.data() + r * rb + 68, 68);
      std::vector<uint16_t> v16(static_cast<size_t>(N) * 128);
      src.read_box(t, 1, 128, 128, st::Dtype::F16, v16.data());
      for (int64_t r = 0; r < N; ++r)
        for (int64_t c = 0; c < 128; ++c)
          assert_int_equal(v16[r * 128 + c], oslo::f32_to_f16(want[r * K + 128 + c]));
    }
    expect_in(error_of([&] { src.read_box(t, 1, 0, 64, st::Dtype::U8, part.data()); },
                       OSLO_ERR_INVALID_ARGUMENT),
              "group of 128");
    error_of([&] { src.read_box(t, 0, 0, 1, st::Dtype::I32, part.data()); }, OSLO_ERR_DTYPE);
  }
  assert_int_equal(n, 14);
  // The dense tensors read as they are.
  const oslo::SourceTensor& e = src.at("model.embed_tokens.weight");
  assert_false(e.quantized());
  std::vector<float> emb(static_cast<size_t>(e.shape[0] * e.shape[1]));
  src.read_box(e, -1, 0, 0, st::Dtype::F32, emb.data());
  *linears += n;
}

void test_fixtures(void**) {
  if (g_dir.empty()) skip();
  Ref ref(g_dir + "/reference.safetensors");
  int linears = 0;
  for (const char* v : {"gptq", "gptq_v2", "awq"}) check_folder(v, ref, &linears);
  // Act-order: the source refuses that linear's blocks (U8), by name, and
  // reads its values (F32, whole and a box of inputs) as numpy's, bit for
  // bit, in input order; the converter with the permutation gives numpy's
  // values in permuted input order.
  {
    oslo::WeightSource src(g_dir + "/gptq_actorder");
    const std::string p = "model.layers.0.mlp.down_proj";
    const oslo::SourceTensor& t = src.at(p + ".weight");
    std::vector<float> buf(static_cast<size_t>(t.shape[0] * t.shape[1]));
    std::vector<uint8_t> raw(static_cast<size_t>(t.shape[0] * 2 * 68));
    std::string m = error_of([&] { src.read_box(t, -1, 0, 0, st::Dtype::U8, raw.data()); },
                             OSLO_ERR_NOT_SUPPORTED);
    expect_in(m, "act-order");
    expect_in(m, p);
    expect_in(m, "float dtype");
    const std::vector<float> act = ref.get<float>("act." + p + ".weight");
    src.read_box(t, -1, 0, 0, st::Dtype::F32, buf.data());
    for (size_t i = 0; i < buf.size(); ++i) assert_true(same_bits(buf[i], act[i]));
    std::vector<float> box(static_cast<size_t>(t.shape[0] * 100));
    src.read_box(t, 1, 37, 100, st::Dtype::F32, box.data());  // inputs [37, 137)
    for (int64_t n = 0; n < t.shape[0]; ++n)
      for (int64_t k = 0; k < 100; ++k)
        assert_true(same_bits(box[static_cast<size_t>(n * 100 + k)],
                              act[static_cast<size_t>(n * t.shape[1] + 37 + k)]));
    src.read_box(src.at("model.layers.0.mlp.up_proj.weight"), -1, 0, 0, st::Dtype::F32, buf.data());
    Ref ck(g_dir + "/gptq_actorder/model.safetensors");
    const std::vector<int32_t> qw = ck.get<int32_t>(p + ".qweight"),
                               qz = ck.get<int32_t>(p + ".qzeros"),
                               gi = ck.get<int32_t>(p + ".g_idx");
    const std::vector<uint16_t> sc = ck.get<uint16_t>(p + ".scales");
    q::PackedLinear v;
    v.name = p;
    v.in_features = 256;
    v.out_features = 128;
    v.qweight = qw.data();
    v.qweight_shape = {32, 128};
    v.qzeros = qz.data();
    v.qzeros_shape = {2, 16};
    v.scales = sc.data();
    v.scales_shape = {2, 128};
    v.g_idx = gi.data();
    v.g_idx_shape = {256};
    const std::vector<int64_t> perm = q::act_order_permutation(v);
    assert_int_equal(perm.size(), 256);
    std::vector<uint8_t> rows(128 * 2 * 68);
    q::packed_to_q4_g128(v, perm, 0, 128, rows.data());
    std::vector<float> y(256);
    const std::vector<float> want = ref.get<float>("act." + p + ".weight");
    for (int64_t n = 0; n < 128; ++n) {
      q::dequantize_row(Format::Q4_G128, rows.data() + n * 2 * 68, y.data(), 256);
      for (int64_t j = 0; j < 256; ++j)
        assert_true(
            same_bits(y[static_cast<size_t>(j)], want[n * 256 + perm[static_cast<size_t>(j)]]));
    }
  }
  std::string m =
      error_of([&] { oslo::WeightSource src(g_dir + "/gptq_g64"); }, OSLO_ERR_NOT_SUPPORTED);
  expect_in(m, "group_size 64");
  std::printf("fixtures: %d GPTQ/AWQ linears read equal to numpy bit for bit\n", linears);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_dir = argv[1];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table),         cmocka_unit_test(test_known_block),
      cmocka_unit_test(test_quantizer),     cmocka_unit_test(test_import),
      cmocka_unit_test(test_import_errors), cmocka_unit_test(test_fixtures),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
