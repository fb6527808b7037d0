// The bulk conversions of core/common/dtype (to_f32 / from_f32, whose bf16
// paths use AVX2 where the CPU has it) against the scalar conversions one
// element at a time: every bf16 bit pattern, f32 bit patterns spread over
// the whole 32-bit range (NaNs, infinities, denormals, ties to even), and
// every length from 0 to 40 so each vector tail is exercised.
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/common/dtype.hpp"
// cmocka last: it defines a fail() macro.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" {
#include <cmocka.h>
}

namespace {

float as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void bf16_to_f32_all(void**) {
  std::vector<uint16_t> h(65536);
  for (uint32_t i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
  std::vector<float> got(h.size());
  oslo::to_f32(OSLO_DTYPE_BF16, h.data(), got.data(), h.size());
  for (uint32_t i = 0; i < 65536; ++i) {
    const float want = oslo::bf16_to_f32(h[i]);
    assert_memory_equal(&got[i], &want, 4);
  }
}

void f32_to_bf16_spread(void**) {
  // Step 4099 (odd, prime) visits every residue of the low 16 bits the
  // rounding looks at; the specials and ties are added by hand.
  std::vector<float> x;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4099)
    x.push_back(as_float(static_cast<uint32_t>(u)));
  for (uint32_t u : {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7f800001u, 0x7fc00000u,
                     0xffffffffu, 0x7fffffffu, 0x7f7fffffu, 0x7f7f8000u, 0x3f808000u, 0x3f818000u,
                     0x3f807fffu, 0x00008000u, 0x00018000u, 0x807fffffu, 0x7f808000u})
    x.push_back(as_float(u));
  std::vector<uint16_t> got(x.size());
  oslo::from_f32(OSLO_DTYPE_BF16, x.data(), got.data(), x.size());
  size_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (got[i] != oslo::f32_to_bf16(x[i])) ++bad;
  assert_int_equal(bad, 0);
}

void every_tail(void**) {
  std::vector<float> x(40);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 1.0f + static_cast<float>(i) / 3.0f;
  for (size_t n = 0; n <= x.size(); ++n) {
    std::vector<uint16_t> h(n + 1, 0xabcd);
    oslo::from_f32(OSLO_DTYPE_BF16, x.data(), h.data(), n);
    assert_int_equal(h[n], 0xabcd);  // nothing past n written
    std::vector<float> back(n + 1, -7.f);
    oslo::to_f32(OSLO_DTYPE_BF16, h.data(), back.data(), n);
    assert_true(back[n] == -7.f);
    for (size_t i = 0; i < n; ++i) {
      assert_int_equal(h[i], oslo::f32_to_bf16(x[i]));
      assert_true(back[i] == oslo::bf16_to_f32(h[i]));
    }
  }
}

}  // namespace

int main() {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bf16_to_f32_all),
      cmocka_unit_test(f32_to_bf16_spread),
      cmocka_unit_test(every_tail),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
