// StagedCommunicator (core/comm/staged_communicator.hpp), as on the CPU: the
// host transports' own suites (tests/shm/shm_test_util.hpp: every collective,
// dtype and reduce op, in place and out of place, bitwise rank-order
// reductions, point to point) run through the staged path on a fake device
// (tests/staged/fake_device.hpp), over shm and over gloo, with ranks that are
// threads and ranks that are processes, and a peer SIGKILLed mid-collective.
// What the staged layer itself adds and its other faults are the cases of
// test_staged_layer.cpp, linked into this executable and run by its main.
//
// One executable; ctest runs it as several entries (a cmocka name filter
// each): test_threads_*, test_procs_*, test_unit_*, test_fault_*. The tests
// that fork (test_procs_*) create no communicator in the parent, which stays
// single-threaded while it forks.
#include "tests/staged/staged_common.hpp"

using namespace stagedtest;

namespace {

// ---- the transports' suites through the staged path ---------------------------

// What every rank checks after a suite: no copy touched the wrong memory
// (run_threads and procs_suite add the violations), the staging is one live
// buffer, grown a few times (not once per call).
void check_staging_after_suite(DeviceMirror& m, Checker& ck) {
  auto c = m.device().counters();
  SHM_EXPECT(ck, c.host_live == 1, "live staging buffers: ", c.host_live);
  SHM_EXPECT(ck, c.host_allocs < 16, c.host_allocs, " staging allocations for ", c.to_host_calls,
             " copies to the host");
  SHM_EXPECT(ck, c.to_host_calls > 400 && c.to_device_calls > 400, "copies: ", c.to_host_calls,
             " to the host, ", c.to_device_calls, " to the device");
}

// Once a rank has destroyed its staged communicator, its staging is freed,
// and so is every device buffer of the mirror.
void check_freed(DeviceMirror& m, Checker& ck) {
  m.close();
  auto c = m.device().counters();
  SHM_EXPECT(ck, c.host_live == 0 && c.host_frees == c.host_allocs,
             "staging left after destruction: ", c.host_live);
  SHM_EXPECT(ck, c.dev_live == 0, "device buffers left: ", c.dev_live);
}

// Every collective, dtype and reduce op (shmtest::full_suite) through the
// staged path, on n thread ranks.
void threads_suite(Kind k, int n) {
  auto g = make_group(k, n, 60.0);
  assert_string_equal(g->ranks[0]->transport(), k == Kind::Shm ? "staged/shm" : "staged/gloo/tcp");
  double t0 = now_s();
  assert_clean(run_threads(*g, [k](int, DeviceMirror& m, Checker& ck) {
    full_suite(m, ck, big_for(k));
    if (!ck.failures) check_staging_after_suite(m, ck);
  }));
  // Destroyed once every rank is done (a rank may still be in its last barrier).
  Checker ck;
  for (auto& m : g->ranks) check_freed(*m, ck);
  assert_clean(ck.log);
  print_message("%s, %d thread ranks: %.2f s\n", kind_name(k), n, now_s() - t0);
}

void test_threads_shm_1(void**) {
  threads_suite(Kind::Shm, 1);
}
void test_threads_shm_2(void**) {
  threads_suite(Kind::Shm, 2);
}
void test_threads_shm_3(void**) {
  threads_suite(Kind::Shm, 3);
}
void test_threads_shm_4(void**) {
  threads_suite(Kind::Shm, 4);
}
void test_threads_gloo_1(void**) {
  threads_suite(Kind::Gloo, 1);
}
void test_threads_gloo_2(void**) {
  threads_suite(Kind::Gloo, 2);
}
void test_threads_gloo_3(void**) {
  threads_suite(Kind::Gloo, 3);
}
void test_threads_gloo_4(void**) {
  threads_suite(Kind::Gloo, 4);
}

// ---- process ranks --------------------------------------------------------------

std::string g_dir;
int g_case = 0;

// One forked group: a FileStore in a fresh file (each child opens its own).
struct Case {
  Kind kind;
  std::string store_path, prefix;
  explicit Case(Kind k) : kind(k) {
    int id = g_case++;
    store_path = g_dir + "/store" + std::to_string(id);
    prefix = oslo::str("p/staged/", kind_name(k), "/", id);
  }
  ~Case() { unlink(store_path.c_str()); }
  std::unique_ptr<DeviceMirror> join(int r, int n, double timeout) const {
    static std::unique_ptr<oslo::FileStore> store;  // one per child process
    store = std::make_unique<oslo::FileStore>(store_path);
    return std::make_unique<DeviceMirror>(connect(kind, *store, prefix, r, n, timeout), prefix);
  }
};

// The suite on n rank processes.
void procs_suite(Kind k, int n) {
  Case cs(k);
  SharedReports reps(n);
  double t0 = now_s();
  auto pids = fork_ranks(n, [&](int r) {
    Checker ck;
    ck.rank = r;
    try {
      auto m = cs.join(r, n, 60.0);
      full_suite(*m, ck, big_for(k));
      if (!ck.failures) check_staging_after_suite(*m, ck);
      if (!ck.failures) check_freed(*m, ck);
      std::string v = m->device().violations();
      if (!v.empty()) ck.bad("fake device: " + v);
    } catch (const std::exception& e) {
      ck.bad(e.what());
    }
    reps[r].failures = ck.failures;
    set_msg(reps[r], ck.log);
    return ck.failures ? 1 : 0;
  });
  auto codes = reap(pids, 90);
  for (int r = 0; r < n; ++r) {
    if (reps[r].failures || codes[r] != 0)
      print_error("rank %d exit %d:\n%s", r, codes[r], reps[r].msg);
    assert_int_equal(codes[r], 0);
  }
  print_message("%s, %d process ranks: %.2f s\n", kind_name(k), n, now_s() - t0);
}

void test_procs_shm_2(void**) {
  procs_suite(Kind::Shm, 2);
}
void test_procs_shm_3(void**) {
  procs_suite(Kind::Shm, 3);
}
void test_procs_gloo_2(void**) {
  procs_suite(Kind::Gloo, 2);
}
void test_procs_gloo_3(void**) {
  procs_suite(Kind::Gloo, 3);
}

constexpr double kFaultTimeout = 2.0;

// Every rank loops over small and large staged all-reduces on device memory
// until a call fails; it records the status, the time and the message, and
// checks that the communicator is then broken for good.
int fault_loop(const Case& cs, int r, int n, SharedReports& reps) {
  std::unique_ptr<DeviceMirror> m;
  try {
    m = cs.join(r, n, kFaultTimeout);
  } catch (const oslo::Error& e) {
    set_msg(reps[r], std::string("create: ") + e.what());
    return 4;
  }
  FakeDevice& dev = m->device();
  oslo::StagedCommunicator& c = m->staged();
  const size_t small_n = 1024, big_n = 300000;
  float* small = static_cast<float*>(dev.alloc(small_n * sizeof(float)));
  float* big = static_cast<float*>(dev.alloc(big_n * sizeof(float)));
  std::fill(big, big + big_n, 1.0f);
  reps[r].ready_time = now_s();
  double end = now_s() + 20;
  try {
    for (long it = 0; now_s() < end; ++it) {
      std::fill(small, small + small_n, 1.0f);
      c.all_reduce(small, small, small_n, OSLO_DTYPE_F32, OSLO_REDUCE_SUM);
      if (small[5] != static_cast<float>(n)) {
        set_msg(reps[r], "wrong result");
        return 5;
      }
      if (it % 4 == 0) c.all_reduce(big, big, big_n, OSLO_DTYPE_F32, OSLO_REDUCE_MAX);
    }
  } catch (const oslo::Error& e) {
    reps[r].err_time = now_s();
    reps[r].status = e.status();
    set_msg(reps[r], e.what());
    try {
      c.barrier();
      return 6;
    } catch (const oslo::Error& e2) {
      if (e2.status() != OSLO_ERR_COMM && e2.status() != OSLO_ERR_TIMEOUT) return 7;
    }
    return dev.violations().empty() ? 0 : 8;
  }
  set_msg(reps[r], "the loop ended without an error");
  return 2;
}

// A rank of 3 SIGKILLed in the middle of staged all-reduces: every survivor
// fails with OSLO_ERR_COMM or OSLO_ERR_TIMEOUT within 2 x the timeout (never
// hangs), and its communicator stays broken.
void sigkill(Kind k) {
  const int n = 3, victim = 1;
  Case cs(k);
  SharedReports reps(n);
  auto pids = fork_ranks(n, [&](int r) { return fault_loop(cs, r, n, reps); });
  double end = now_s() + 15;
  for (bool ready = false; !ready;) {
    ready = true;
    for (int r = 0; r < n; ++r) ready &= reps[r].ready_time != 0;
    if (now_s() > end) {
      reap(pids, 0);
      fail_msg("ranks did not start: %s", reps[0].msg);
    }
    usleep(1000);
  }
  usleep(300 * 1000);
  kill(pids[victim], SIGKILL);
  double t_kill = now_s();
  auto codes = reap(pids, 4 * kFaultTimeout);
  assert_int_equal(codes[victim], -100 - SIGKILL);
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    double latency = reps[r].err_time - t_kill;
    print_message("%s rank %d: %.3f s after the kill: %s\n", kind_name(k), r, latency, reps[r].msg);
    assert_int_equal(codes[r], 0);
    assert_true(reps[r].status == OSLO_ERR_COMM || reps[r].status == OSLO_ERR_TIMEOUT);
    assert_true(latency > 0 && latency < 2 * kFaultTimeout);
  }
}

void test_procs_shm_sigkill(void**) {
  sigkill(Kind::Shm);
}
void test_procs_gloo_sigkill(void**) {
  sigkill(Kind::Gloo);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) cmocka_set_test_filter(argv[1]);
  char tmpl[] = "/tmp/oslo-staged-test-XXXXXX";
  if (!mkdtemp(tmpl)) return 1;
  g_dir = tmpl;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_threads_shm_1),
      cmocka_unit_test(test_threads_shm_2),
      cmocka_unit_test(test_threads_shm_3),
      cmocka_unit_test(test_threads_shm_4),
      cmocka_unit_test(test_threads_gloo_1),
      cmocka_unit_test(test_threads_gloo_2),
      cmocka_unit_test(test_threads_gloo_3),
      cmocka_unit_test(test_threads_gloo_4),
      cmocka_unit_test(test_procs_shm_2),
      cmocka_unit_test(test_procs_shm_3),
      cmocka_unit_test(test_procs_gloo_2),
      cmocka_unit_test(test_procs_gloo_3),
      cmocka_unit_test(test_procs_shm_sigkill),
      cmocka_unit_test(test_procs_gloo_sigkill),
      cmocka_unit_test(test_unit_construction),
      cmocka_unit_test(test_unit_traffic),
      cmocka_unit_test(test_unit_staging_reused),
      cmocka_unit_test(test_unit_refusals_shm),
      cmocka_unit_test(test_unit_refusals_gloo),
      cmocka_unit_test(test_unit_overflowing_count),
      cmocka_unit_test(test_unit_sabotaged_to_device_fails),
      cmocka_unit_test(test_unit_sabotaged_to_host_fails),
      cmocka_unit_test(test_fault_timeout_shm),
      cmocka_unit_test(test_fault_timeout_gloo),
      cmocka_unit_test(test_fault_abort_shm),
      cmocka_unit_test(test_fault_abort_gloo),
  };
  int rc = cmocka_run_group_tests(tests, nullptr, nullptr);
  rmdir(g_dir.c_str());
  return rc;
}
