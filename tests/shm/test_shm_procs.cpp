// shm transport with ranks that are forked processes sharing a FileStore:
// the collective suite across address spaces, and real faults: a rank
// SIGKILLed or SIGSTOPped in the middle of an all-reduce loop, a rank that
// exits without destroying its communicator, abort() from another thread of
// another process, a broadcast whose ranks name different roots. Finally,
// nothing may be left in /dev/shm.
#include <signal.h>
#include <stdlib.h>

#include <atomic>

#include "core/rendezvous/file_store.hpp"
#include "tests/shm/shm_test_util.hpp"

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

namespace {

constexpr double kFaultTimeout = 2.0;

std::string g_dir;
int g_case = 0;
std::vector<pid_t> g_all_pids;  // every rank process, for the /dev/shm check

struct Case {
  std::string store_path;
  std::string prefix;
  Case() {
    int id = g_case++;
    store_path = g_dir + "/store" + std::to_string(id);
    prefix = "p/shm/" + std::to_string(id);
  }
  ~Case() { unlink(store_path.c_str()); }
  std::unique_ptr<Communicator> join(int r, int n, double timeout) const {
    static std::unique_ptr<oslo::FileStore> store;  // one per child process
    store = std::make_unique<oslo::FileStore>(store_path);
    return oslo::create_shm_communicator(*store, prefix, r, n, timeout);
  }
};

std::vector<pid_t> spawn(int n, const std::function<int(int)>& body) {
  auto pids = fork_ranks(n, body);
  g_all_pids.insert(g_all_pids.end(), pids.begin(), pids.end());
  return pids;
}

bool wait_ready(SharedReports& reps, int n, double seconds) {
  double end = now_s() + seconds;
  for (;;) {
    bool all = true;
    for (int r = 0; r < n; ++r) all &= reps[r].ready_time != 0;
    if (all) return true;
    if (now_s() > end) return false;
    usleep(1000);
  }
}

bool contains(const char* s, const char* part) {
  return std::strstr(s, part) != nullptr;
}

void ops_procs(int n) {
  Case cs;
  SharedReports reps(n);
  auto pids = spawn(n, [&](int r) {
    Checker ck;
    ck.rank = r;
    try {
      auto c = cs.join(r, n, 60.0);
      full_suite(*c, ck, 300007);
    } catch (const std::exception& e) {
      ck.bad(e.what());
    }
    reps[r].failures = ck.failures;
    set_msg(reps[r], ck.log);
    reps[r].done = 1;
    return ck.failures ? 1 : 0;
  });
  auto codes = reap(pids, 90);
  for (int r = 0; r < n; ++r) {
    if (reps[r].failures || codes[r] != 0)
      print_error("rank %d exit %d:\n%s", r, codes[r], reps[r].msg);
    assert_int_equal(codes[r], 0);
  }
}

void test_procs_ops_2(void**) {
  ops_procs(2);
}
void test_procs_ops_3(void**) {
  ops_procs(3);
}

// Every rank loops over small and pipelined all-reduces until a call fails;
// it records the status, the time and the message.
int fault_loop(const Case& cs, int r, int n, SharedReports& reps) {
  std::unique_ptr<Communicator> c;
  try {
    c = cs.join(r, n, kFaultTimeout);
  } catch (const oslo::Error& e) {
    set_msg(reps[r], std::string("create: ") + e.what());
    return 4;
  }
  reps[r].ready_time = now_s();
  std::vector<float> small(1024, 1.0f), big(300000, 1.0f);
  double end = now_s() + 20;
  try {
    for (long it = 0; now_s() < end; ++it) {
      std::fill(small.begin(), small.end(), 1.0f);
      c->all_reduce(small.data(), small.data(), small.size(), OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
      if (small[5] != static_cast<float>(n)) {
        set_msg(reps[r], "wrong result");
        return 5;
      }
      if (it % 4 == 0)
        c->all_reduce(big.data(), big.data(), big.size(), OSLO_DTYPE_F32, OSLO_REDUCE_MAX);
    }
  } catch (const oslo::Error& e) {
    reps[r].err_time = now_s();
    reps[r].status = e.status();
    set_msg(reps[r], e.what());
    // Broken for good: the next call fails at once with the same status.
    try {
      c->barrier();
      return 6;
    } catch (const oslo::Error& e2) {
      if (e2.status() != e.status()) return 7;
    }
    return 0;
  }
  set_msg(reps[r], "the loop ended without an error");
  return 2;
}

// SIGKILL one rank mid-loop: every survivor fails with OSLO_ERR_COMM (its pid
// is watched) or OSLO_ERR_TIMEOUT, within 2 x timeout.
void kill_one(int n, int victim) {
  Case cs;
  SharedReports reps(n);
  auto pids = spawn(n, [&](int r) { return fault_loop(cs, r, n, reps); });
  bool ready = wait_ready(reps, n, 10);
  if (!ready) {
    reap(pids, 0);
    fail_msg("ranks did not start: %s", reps[0].msg);
  }
  usleep(300 * 1000);
  kill(pids[victim], SIGKILL);
  double t_kill = now_s();
  auto codes = reap(pids, 4 * kFaultTimeout);
  assert_int_equal(codes[victim], -100 - SIGKILL);
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    double latency = reps[r].err_time - t_kill;
    print_message("rank %d: %.3f s after the kill: %s\n", r, latency, reps[r].msg);
    assert_int_equal(codes[r], 0);
    assert_true(reps[r].status == OSLO_ERR_COMM || reps[r].status == OSLO_ERR_TIMEOUT);
    assert_true(latency < 2 * kFaultTimeout);
  }
}

void test_sigkill_2(void**) {
  kill_one(2, 1);
}
void test_sigkill_creator(void**) {
  kill_one(2, 0);
}
void test_sigkill_3(void**) {
  kill_one(3, 1);
}
void test_sigkill_4(void**) {
  kill_one(4, 3);
}

// SIGSTOP one rank: it is alive but frozen, so the others time out, within
// [timeout, 2 x timeout] of the stop, with OSLO_ERR_TIMEOUT naming it.
void stop_one(int n, int victim) {
  Case cs;
  SharedReports reps(n);
  auto pids = spawn(n, [&](int r) { return fault_loop(cs, r, n, reps); });
  bool ready = wait_ready(reps, n, 10);
  if (!ready) {
    reap(pids, 0);
    fail_msg("ranks did not start: %s", reps[0].msg);
  }
  usleep(300 * 1000);
  kill(pids[victim], SIGSTOP);
  double t_stop = now_s();
  // Survivors end on their own; the frozen one is killed by reap().
  std::vector<pid_t> survivors;
  for (int r = 0; r < n; ++r)
    if (r != victim) survivors.push_back(pids[r]);
  auto codes = reap(survivors, 4 * kFaultTimeout);
  reap({pids[victim]}, 0);
  std::string name = "rank " + std::to_string(victim);
  for (int r = 0, i = 0; r < n; ++r) {
    if (r == victim) continue;
    double latency = reps[r].err_time - t_stop;
    print_message("rank %d: %.3f s after the stop: %s\n", r, latency, reps[r].msg);
    assert_int_equal(codes[i++], 0);
    assert_int_equal(reps[r].status, OSLO_ERR_TIMEOUT);
    assert_true(contains(reps[r].msg, name.c_str()));
    assert_true(latency > 0.9 * kFaultTimeout && latency < 2 * kFaultTimeout);
  }
}

void test_sigstop_2(void**) {
  stop_one(2, 1);
}
void test_sigstop_3(void**) {
  stop_one(3, 2);
}

// A rank that exits without destroying its communicator (as after a crash
// that is not a signal): the peer waiting for it fails fast.
void test_exit_without_destroy(void**) {
  Case cs;
  SharedReports reps(2);
  auto pids = spawn(2, [&](int r) {
    auto c = cs.join(r, 2, 30.0);
    c->barrier();
    if (r == 1) _exit(0);  // no destructor
    reps[r].ready_time = now_s();
    try {
      c->barrier();
    } catch (const oslo::Error& e) {
      reps[r].err_time = now_s();
      reps[r].status = e.status();
      set_msg(reps[r], e.what());
    }
    c.reset();
    return 0;
  });
  auto codes = reap(pids, 10);
  print_message("rank 0: %.3f s: %s\n", reps[0].err_time - reps[0].ready_time, reps[0].msg);
  assert_int_equal(codes[0], 0);
  assert_int_equal(reps[0].status, OSLO_ERR_COMM);
  assert_true(contains(reps[0].msg, "died during barrier"));
  assert_true(reps[0].err_time - reps[0].ready_time < 1.0);
}

// A broadcast whose ranks name different roots fails on every rank (before,
// two ranks that each named themselves returned OK with different data).
// Ranks 0 .. n-2 name root 0, the last rank names itself; with n = 2 both
// believe they are the root. Small (one step) and large (pipelined) sizes.
void broadcast_root_mismatch(int n) {
  for (size_t count : {size_t(16), size_t(1) << 20}) {
    Case cs;
    SharedReports reps(n);
    auto pids = spawn(n, [&](int r) {
      auto c = cs.join(r, n, 10.0);
      std::vector<float> buf(count, static_cast<float>(r));
      const int root = r == n - 1 ? r : 0;
      reps[r].status = OSLO_OK;
      try {
        c->broadcast(buf.data(), count, OSLO_DTYPE_F32, root);
      } catch (const oslo::Error& e) {
        reps[r].status = e.status();
        set_msg(reps[r], e.what());
      }
      reps[r].done = 1;
      return 0;
    });
    auto codes = reap(pids, 30);
    for (int r = 0; r < n; ++r) {
      if (codes[r] != 0 || reps[r].status != OSLO_ERR_INVALID_ARGUMENT ||
          !contains(reps[r].msg, "mismatch") || !contains(reps[r].msg, "broadcast"))
        print_error("n=%d count=%zu rank %d: exit %d, %s: %s\n", n, count, r, codes[r],
                    oslo_status_string(static_cast<oslo_status>(reps[r].status)), reps[r].msg);
      assert_int_equal(codes[r], 0);
      assert_int_equal(reps[r].status, OSLO_ERR_INVALID_ARGUMENT);
      assert_true(contains(reps[r].msg, "mismatch"));
    }
  }
}

void test_broadcast_root_mismatch_2(void**) {
  broadcast_root_mismatch(2);
}
void test_broadcast_root_mismatch_3(void**) {
  broadcast_root_mismatch(3);
}

// abort() from a watchdog thread of rank 0 fails rank 0's pending recv and
// rank 1's pending barrier (in another process) with OSLO_ERR_COMM.
void test_abort_across_processes(void**) {
  Case cs;
  SharedReports reps(2);
  auto pids = spawn(2, [&](int r) {
    auto c = cs.join(r, 2, 30.0);
    reps[r].ready_time = now_s();
    std::thread watchdog;
    if (r == 0)
      watchdog = std::thread([&] {
        usleep(300 * 1000);
        c->abort();
      });
    try {
      char buf[64];
      if (r == 0)
        c->recv(buf, sizeof buf, 1);  // never sent
      else
        c->barrier();  // rank 0 never joins it
    } catch (const oslo::Error& e) {
      reps[r].err_time = now_s();
      reps[r].status = e.status();
      set_msg(reps[r], e.what());
    }
    if (watchdog.joinable()) watchdog.join();
    return 0;
  });
  auto codes = reap(pids, 10);
  for (int r = 0; r < 2; ++r) {
    print_message("rank %d: %.3f s: %s\n", r, reps[r].err_time - reps[r].ready_time, reps[r].msg);
    assert_int_equal(codes[r], 0);
    assert_int_equal(reps[r].status, OSLO_ERR_COMM);
    assert_true(contains(reps[r].msg, "aborted by rank 0"));
    assert_true(reps[r].err_time - reps[r].ready_time < 2.0);
  }
}

// A rank that never joins: the others' creation times out naming it, and the
// creator removes the segment.
void test_missing_rank(void**) {
  Case cs;
  SharedReports reps(3);
  auto pids = spawn(2, [&](int r) {
    try {
      cs.join(r, 3, 1.0);
    } catch (const oslo::Error& e) {
      reps[r].status = e.status();
      set_msg(reps[r], e.what());
    }
    return 0;
  });
  auto codes = reap(pids, 10);
  for (int r = 0; r < 2; ++r) {
    print_message("rank %d: %s\n", r, reps[r].msg);
    assert_int_equal(codes[r], 0);
    assert_true(reps[r].status == OSLO_ERR_TIMEOUT || reps[r].status == OSLO_ERR_COMM);
  }
  assert_int_equal(reps[0].status, OSLO_ERR_TIMEOUT);
  assert_true(contains(reps[0].msg, "rank(s) 2"));
}

// The creator is killed while the group is still forming (rank 2 never
// comes): the rank that already attached notices the death, fails, and
// removes the segment's name, so nothing is left in /dev/shm.
void test_creator_killed_during_create(void**) {
  Case cs;
  SharedReports reps(2);
  auto pids = spawn(2, [&](int r) {
    reps[r].ready_time = now_s();
    try {
      cs.join(r, 3, 30.0);
    } catch (const oslo::Error& e) {
      reps[r].err_time = now_s();
      reps[r].status = e.status();
      set_msg(reps[r], e.what());
    }
    return 0;
  });
  bool ready = wait_ready(reps, 2, 10);
  usleep(500 * 1000);  // rank 1 has attached and waits for the group
  kill(pids[0], SIGKILL);
  double t_kill = now_s();
  auto codes = reap(pids, 10);
  assert_true(ready);
  print_message("rank 1: %.3f s after the kill: %s\n", reps[1].err_time - t_kill, reps[1].msg);
  assert_int_equal(codes[1], 0);
  assert_int_equal(reps[1].status, OSLO_ERR_COMM);
  assert_true(contains(reps[1].msg, "died"));
  assert_true(reps[1].err_time - t_kill < 1.0);
  assert_true(leftover_segments(pids).empty());
}

void test_no_segments_left(void**) {
  std::vector<pid_t> pids = g_all_pids;
  pids.push_back(getpid());
  auto left = leftover_segments(pids);
  for (auto& s : left) print_error("left in /dev/shm: %s\n", s.c_str());
  assert_true(left.empty());
}

}  // namespace

int main(void) {
  char tmpl[] = "/tmp/oslo-shm-test-XXXXXX";
  if (!mkdtemp(tmpl)) return 1;
  g_dir = tmpl;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_procs_ops_2),
      cmocka_unit_test(test_procs_ops_3),
      cmocka_unit_test(test_sigkill_2),
      cmocka_unit_test(test_sigkill_creator),
      cmocka_unit_test(test_sigkill_3),
      cmocka_unit_test(test_sigkill_4),
      cmocka_unit_test(test_sigstop_2),
      cmocka_unit_test(test_sigstop_3),
      cmocka_unit_test(test_exit_without_destroy),
      cmocka_unit_test(test_broadcast_root_mismatch_2),
      cmocka_unit_test(test_broadcast_root_mismatch_3),
      cmocka_unit_test(test_abort_across_processes),
      cmocka_unit_test(test_missing_rank),
      cmocka_unit_test(test_creator_killed_during_create),
      cmocka_unit_test(test_no_segments_left),
  };
  int rc = cmocka_run_group_tests(tests, nullptr, nullptr);
  rmdir(g_dir.c_str());
  return rc;
}
