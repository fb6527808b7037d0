// EXPECT(cond, printf-format, ...): a failed check prints FAIL with the
// file, line and message and counts in oslo_test::g_fail; the test goes on
// and main returns non-zero when g_fail is. Safe from ranks that are
// threads (one lock around the print and the count).
#pragma once

#include <atomic>
#include <cstdio>
#include <mutex>

namespace oslo_test {

inline std::atomic<int> g_fail{0};
inline std::mutex g_expect_mu;

}  // namespace oslo_test

#define EXPECT(cond, ...)                                            \
  do {                                                               \
    if (!(cond)) {                                                   \
      std::lock_guard<std::mutex> expect_lk(oslo_test::g_expect_mu); \
      std::printf("FAIL %s:%d: ", __FILE__, __LINE__);               \
      std::printf(__VA_ARGS__);                                      \
      std::printf("\n");                                             \
      ++oslo_test::g_fail;                                           \
    }                                                                \
  } while (0)
