// Shared by the two files of the staged communicator test (test_staged.cpp:
// the transports' suites through the staged path, and main;
// test_staged_layer.cpp: the staged layer's own behaviour and its faults): the transports,
// thread-rank groups of staged communicators on fake devices, and small helpers.
#pragma once

#include <signal.h>
#include <stdlib.h>

#include <atomic>

#include "core/rendezvous/file_store.hpp"
#include "tests/shm/shm_test_util.hpp"
#include "tests/staged/fake_device.hpp"
#include "transports/gloo/gloo_communicator.hpp"

// cmocka last: it defines a fail() macro that would clash with oslo::fail.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
// cmocka.h has no extern "C" of its own.
extern "C" {
// clang-format off
#include <cmocka.h>
// clang-format on
}

using namespace shmtest;
using stagedtest::DeviceMirror;
using stagedtest::FakeDevice;

namespace stagedtest {
enum class Kind { Shm, Gloo };
inline const char* kind_name(Kind k) {
  return k == Kind::Shm ? "shm" : "gloo";
}

// The suites' largest count: several shm pipeline chunks, not a multiple of
// anything (prime); smaller for gloo (its pipelining is its own tests'
// business; here every size and path goes through the staging the same way),
// so that the whole file stays within its time on two slow cores.
inline size_t big_for(Kind k) {
  return k == Kind::Shm ? 300007 : 100003;
}

inline int g_group = 0;
inline std::string next_prefix(Kind k) {
  return oslo::str("t/staged/", kind_name(k), "/", getpid(), "/", g_group++);
}

inline std::unique_ptr<Communicator> connect(Kind k, oslo::Store& store, const std::string& prefix,
                                             int r, int n, double timeout) {
  if (k == Kind::Shm) return oslo::create_shm_communicator(store, prefix, r, n, timeout);
  return oslo::create_gloo_communicator(store, prefix, r, n, timeout, "127.0.0.1");
}

template <typename F>
oslo_status status_of(F&& f, std::string* msg = nullptr) {
  try {
    f();
  } catch (const oslo::Error& e) {
    if (msg) *msg = e.what();
    return e.status();
  }
  return OSLO_OK;
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A group of thread ranks, each a staged communicator on its own fake device.
struct Group {
  oslo::HashStore store;
  std::string name;
  std::vector<std::unique_ptr<DeviceMirror>> ranks;
  DeviceMirror& operator[](int r) { return *ranks[static_cast<size_t>(r)]; }
};

// memory_check false: staged like a backend without a memory check.
inline std::unique_ptr<Group> make_group(Kind k, int n, double timeout, bool memory_check = true) {
  auto g = std::make_unique<Group>();
  g->name = next_prefix(k);
  g->ranks.resize(static_cast<size_t>(n));
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      try {
        g->ranks[static_cast<size_t>(r)] = std::make_unique<DeviceMirror>(
            connect(k, g->store, g->name, r, n, timeout), g->name, memory_check);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  for (auto& e : errors)
    if (!e.empty()) fail_msg("creating a %s group of %d: %s", kind_name(k), n, e.c_str());
  return g;
}

// Runs body(rank, mirror, checker) on one thread per rank and returns every
// failure ("" if none), the fake devices' violations included. A rank that
// fails aborts its communicator, so the others do not wait for the timeout.
inline std::string run_threads(Group& g,
                               const std::function<void(int, DeviceMirror&, Checker&)>& body) {
  const int n = static_cast<int>(g.ranks.size());
  std::vector<Checker> cks(static_cast<size_t>(n));
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      Checker& ck = cks[static_cast<size_t>(r)];
      ck.rank = r;
      try {
        body(r, g[r], ck);
      } catch (const std::exception& e) {
        ck.bad(std::string("exception: ") + e.what());
      }
      std::string v = g[r].device().violations();
      if (!v.empty()) ck.bad("fake device: " + v);
      if (ck.failures) g[r].abort();
    });
  for (auto& t : ts) t.join();
  std::string log;
  for (auto& ck : cks) log += ck.log;
  return log;
}

inline void assert_clean(const std::string& log) {
  if (!log.empty()) print_error("%s", log.c_str());
  assert_true(log.empty());
}

// The cases of test_staged_layer.cpp (run by test_staged.cpp's main).
void test_unit_construction(void**);
void test_unit_traffic(void**);
void test_unit_staging_reused(void**);
void test_unit_refusals_shm(void**);
void test_unit_refusals_gloo(void**);
void test_unit_overflowing_count(void**);
void test_unit_sabotaged_to_device_fails(void**);
void test_unit_sabotaged_to_host_fails(void**);
void test_fault_timeout_shm(void**);
void test_fault_timeout_gloo(void**);
void test_fault_abort_shm(void**);
void test_fault_abort_gloo(void**);

}  // namespace stagedtest
