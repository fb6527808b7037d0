// White-box tests of the options-struct versioning (core/capi/options.hpp)
// with made-up structs that already have two versions: a program compiled
// against version 1 (a smaller struct) must keep working with a library that
// knows version 2, and nothing may be read or written past its struct.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cstdint>
#include <cstring>

#include "core/capi/options.hpp"

// After oslo's headers: cmocka defines a fail() macro.
extern "C" {
#include <cmocka.h>
}

namespace {

// Version 2 appended `b` to version 1 {version, a}.
struct demo_options {
  unsigned int version;
  int a;
  int b;  // since version 2
};
struct demo_options_v1 {  // what a program compiled against version 1 has
  unsigned int version;
  int a;
};

const oslo::capi::OptionsHistory<demo_options, 2> kDemo = {
    "demo_options",
    "DEMO_OPTIONS_VERSION",
    {OSLO_OPTIONS_END(demo_options, a), OSLO_OPTIONS_END(demo_options, b)}};
OSLO_OPTIONS_LAST_FIELD(demo_options, b);

demo_options demo_defaults() {
  demo_options d;
  d.version = 2;
  d.a = 10;
  d.b = 20;
  return d;
}

// Version 2 appended `c`, which lands in version 1's tail padding: a version-1
// caller's struct has those bytes but never set them.
struct padded_options {
  unsigned int version;
  int64_t a;
  int b;
  int c;  // since version 2, at offset 20 < sizeof(version 1) == 24
};
struct padded_options_v1 {
  unsigned int version;
  int64_t a;
  int b;
};
static_assert(offsetof(padded_options, c) < sizeof(padded_options_v1), "test premise");
static_assert(sizeof(padded_options) == sizeof(padded_options_v1), "test premise");

const oslo::capi::OptionsHistory<padded_options, 2> kPadded = {
    "padded_options",
    "PADDED_OPTIONS_VERSION",
    {OSLO_OPTIONS_END(padded_options, b), OSLO_OPTIONS_END(padded_options, c)}};

padded_options padded_defaults() {
  padded_options d;
  std::memset(&d, 0, sizeof d);
  d.version = 2;
  d.a = 1;
  d.b = 2;
  d.c = 3;
  return d;
}

// Runs f, which must throw an oslo::Error with `status` mentioning `needle`.
template <typename F>
void expect_fail(F f, oslo_status status, const char* needle) {
  try {
    f();
  } catch (const oslo::Error& e) {
    if (e.status() != status || !std::strstr(e.what(), needle))
      fail_msg("got %s (\"%s\"), expected %s mentioning \"%s\"", oslo_status_string(e.status()),
               e.what(), oslo_status_string(status), needle);
    return;
  }
  fail_msg("no error, expected %s mentioning \"%s\"", oslo_status_string(status), needle);
}

void test_read_old_version(void**) {
  // The old struct sits at the end of a buffer: reading past it would read
  // the guard bytes (and ASan would flag it in the sanitizer build).
  unsigned char buf[64];
  std::memset(buf, 0x5a, sizeof buf);
  auto* v1 = reinterpret_cast<demo_options_v1*>(buf + sizeof buf - sizeof(demo_options_v1));
  v1->version = 1;
  v1->a = 7;
  demo_options got = oslo::capi::read_options(
      kDemo, demo_defaults(), reinterpret_cast<const demo_options*>(v1), "fn", "options");
  assert_int_equal(got.version, 2);
  assert_int_equal(got.a, 7);   // the caller's
  assert_int_equal(got.b, 20);  // version 1 has no b: the default
}

void test_read_current_version(void**) {
  demo_options o = {2, 7, 8};
  demo_options got = oslo::capi::read_options(kDemo, demo_defaults(), &o, "fn", "options");
  assert_int_equal(got.a, 7);
  assert_int_equal(got.b, 8);
}

void test_init_old_version_writes_only_its_fields(void**) {
  unsigned char buf[sizeof(demo_options_v1) + 16];
  std::memset(buf, 0x5a, sizeof buf);
  oslo::capi::init_options(kDemo, demo_defaults(), reinterpret_cast<demo_options*>(buf), 1, "fn");
  demo_options_v1 v1;
  std::memcpy(&v1, buf, sizeof v1);
  assert_int_equal(v1.version, 1);
  assert_int_equal(v1.a, 10);
  for (size_t i = sizeof(demo_options_v1); i < sizeof buf; ++i) assert_int_equal(buf[i], 0x5a);
}

void test_tail_padding_is_not_read(void**) {
  padded_options_v1 v1;
  std::memset(&v1, 0xff, sizeof v1);  // garbage in the padding, where version 2 has c
  v1.version = 1;
  v1.a = 40;
  v1.b = 50;
  padded_options got = oslo::capi::read_options(
      kPadded, padded_defaults(), reinterpret_cast<const padded_options*>(&v1), "fn", "options");
  assert_int_equal(got.a, 40);
  assert_int_equal(got.b, 50);
  assert_int_equal(got.c, 3);  // the default, not the padding's 0xffffffff
  // and init for version 1 leaves the padding alone
  std::memset(&v1, 0xee, sizeof v1);
  oslo::capi::init_options(kPadded, padded_defaults(), reinterpret_cast<padded_options*>(&v1), 1,
                           "fn");
  unsigned char tail[sizeof v1 - offsetof(padded_options, c)];
  std::memcpy(tail, reinterpret_cast<unsigned char*>(&v1) + offsetof(padded_options, c),
              sizeof tail);
  for (unsigned char t : tail) assert_int_equal(t, 0xee);
}

void test_bad_versions(void**) {
  demo_options o = {0, 1, 2};
  expect_fail([&] { oslo::capi::read_options(kDemo, demo_defaults(), &o, "create", "options"); },
              OSLO_ERR_INVALID_ARGUMENT, "version is 0");
  expect_fail([&] { oslo::capi::read_options(kDemo, demo_defaults(), &o, "create", "options"); },
              OSLO_ERR_INVALID_ARGUMENT, "demo_options_init(&options, DEMO_OPTIONS_VERSION)");
  o.version = 3;
  expect_fail([&] { oslo::capi::read_options(kDemo, demo_defaults(), &o, "create", "options"); },
              OSLO_ERR_INVALID_ARGUMENT, "version 3 is unknown");
  expect_fail(
      [&] {
        oslo::capi::read_options(kDemo, demo_defaults(), static_cast<const demo_options*>(nullptr),
                                 "create", "options");
      },
      OSLO_ERR_INVALID_ARGUMENT, "options is NULL");
  expect_fail([&] { oslo::capi::init_options(kDemo, demo_defaults(), &o, 0, "init"); },
              OSLO_ERR_INVALID_ARGUMENT, "version is 0");
  expect_fail([&] { oslo::capi::init_options(kDemo, demo_defaults(), &o, 3, "init"); },
              OSLO_ERR_INVALID_ARGUMENT, "versions 1 to 2");
}

}  // namespace

int main() {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_read_old_version),
      cmocka_unit_test(test_read_current_version),
      cmocka_unit_test(test_init_old_version_writes_only_its_fields),
      cmocka_unit_test(test_tail_padding_is_not_read),
      cmocka_unit_test(test_bad_versions),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
