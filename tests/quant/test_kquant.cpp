// oslo's Q4_K and Q6_K quantizers against llama.cpp's: test_kquant FIXTURE
// reads the golden vectors written by make_kquant_refs.py (seeded inputs and
// the bytes ggml's quantize_row_q4_K_ref / _q6_K_ref made of them: the
// committed tests/quant/kquant_refs.bin, or a fresh file from the ggml on
// this machine) and checks that quant::quantize_row gives the same bytes,
// every one, and that dequantizing them reproduces the inputs within the
// format's error.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

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

std::string g_fixture;

struct Reader {
  std::vector<char> buf;
  size_t pos = 0;
  void take(void* dst, size_t n) {
    if (pos + n > buf.size()) {
      std::fprintf(stderr, "%s: truncated at byte %zu\n", g_fixture.c_str(), pos);
      assert_true(false);
    }
    std::memcpy(dst, buf.data() + pos, n);
    pos += n;
  }
  uint32_t u32() {
    uint8_t b[4];
    take(b, 4);
    return b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
  }
};

void test_golden(void**) {
  assert_false(g_fixture.empty());
  std::ifstream in(g_fixture, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", g_fixture.c_str());
    assert_true(false);
  }
  Reader rd;
  rd.buf.assign(std::istreambuf_iterator<char>(in), {});
  char magic[8];
  rd.take(magic, 8);
  assert_memory_equal(magic, "OSLOKQ01", 8);
  const uint32_t ncases = rd.u32();
  size_t blocks = 0;
  for (uint32_t c = 0; c < ncases; ++c) {
    uint8_t len;
    rd.take(&len, 1);
    std::string name(len, '\0');
    rd.take(&name[0], len);
    const uint32_t rows = rd.u32(), cols = rd.u32();
    std::vector<float> x(static_cast<size_t>(rows) * cols);
    rd.take(x.data(), x.size() * 4);
    for (Format f : {Format::Q4_K, Format::Q6_K}) {
      const uint64_t rb = q::row_bytes(f, cols, name);
      std::vector<uint8_t> want(rows * rb), got(rows * rb);
      rd.take(want.data(), want.size());
      for (uint32_t r = 0; r < rows; ++r)
        q::quantize_row(f, x.data() + static_cast<size_t>(r) * cols, got.data() + r * rb, cols);
      for (size_t i = 0; i < got.size(); ++i) {
        if (got[i] != want[i]) {
          const size_t bb = q::block_bytes(f);
          std::fprintf(
              stderr, "%s %s: byte %zu (row %zu, block %zu, offset %zu) is 0x%02x, ggml 0x%02x\n",
              q::format_name(f), name.c_str(), i, static_cast<size_t>(i / rb),
              static_cast<size_t>(i % rb / bb), static_cast<size_t>(i % rb % bb), got[i], want[i]);
          assert_true(false);
        }
      }
      blocks += got.size() / q::block_bytes(f);
      // The bytes decode to the inputs within a few steps of the scale, for
      // blocks whose scales are normal f16 numbers (not the 1e-6, 1e-30
      // and 1e9 cases, where llama.cpp's f16 scales underflow or overflow).
      {
        std::vector<float> y(x.size());
        q::dequantize_rows(f, got.data(), y.data(), rows, cols);
        for (size_t b = 0; b < x.size() / 256; ++b) {
          float amax = 0;
          for (size_t j = 0; j < 256; ++j) amax = std::fmax(amax, std::fabs(x[b * 256 + j]));
          if (amax < 1e-2f || amax > 1e5f) continue;
          const float tol = (f == Format::Q4_K ? 0.25f : 0.06f) * amax + 1e-30f;
          for (size_t j = 0; j < 256; ++j) {
            const float e = std::fabs(x[b * 256 + j] - y[b * 256 + j]);
            if (!(e <= tol)) {
              std::fprintf(stderr, "%s %s: value %zu: %g decodes to %g (tolerance %g)\n",
                           q::format_name(f), name.c_str(), b * 256 + j, x[b * 256 + j],
                           y[b * 256 + j], tol);
              assert_true(false);
            }
          }
        }
      }
    }
  }
  assert_int_equal(rd.pos, rd.buf.size());
  assert_true(ncases >= 10);
  std::printf("%s: %u cases, %zu K-quant blocks equal to ggml's bytes\n", g_fixture.c_str(), ncases,
              blocks);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_fixture = argv[1];
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_golden)};
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
