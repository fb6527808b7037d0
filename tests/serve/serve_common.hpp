// What the serving tests share: CMocka, and the groups' case lists.
#pragma once

#include <string>
#include <vector>

#include "core/common/error.hpp"

// CMocka last: its fail() macro must not meet the C++ headers.
extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
}

// Runs f and checks that it throws oslo::Error with `status`.
template <typename F>
void expect_error(F f, oslo_status status) {
  try {
    f();
  } catch (const oslo::Error& e) {
    assert_int_equal(e.status(), status);
    return;
  }
  fail_msg("no oslo::Error thrown");
}

std::vector<struct CMUnitTest> pool_tests();
std::vector<struct CMUnitTest> scheduler_tests();
std::vector<struct CMUnitTest> text_tests();
std::vector<struct CMUnitTest> engine_tests(const std::string& fixtures);
