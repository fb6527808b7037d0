// Shared by the files of test_gloo (test_gloo.cpp says what it checks): the
// rendezvous server process, CHECK, running ranks as threads and as
// processes over a TcpStore, and the cases.
#pragma once

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "core/common/dtype.hpp"
#include "core/rendezvous/hash_store.hpp"
#include "core/rendezvous/local_address.hpp"
#include "core/rendezvous/tcp_store.hpp"
#include "transports/gloo/gloo_communicator.hpp"

#include "tests/rendezvous/rdzv_test_util.hpp"  // last: it includes cmocka.h

using oslo::Communicator;
using oslo::Deadline;
using oslo::TcpStore;
using test_util::status_of;

namespace gloo_test {

inline const char* kHost = "127.0.0.1";

// The rendezvous server for tests that fork ranks runs in its own process:
// forking while a server thread of this process may hold a lock (malloc's,
// or ASan's allocator's) can leave a child deadlocked forever. This process
// stays single-threaded while it forks.
class ServerProcess {
 public:
  ServerProcess() {
    int port_pipe[2], ctl_pipe[2];
    if (pipe(port_pipe) != 0 || pipe(ctl_pipe) != 0) std::abort();
    pid_ = fork();
    if (pid_ < 0) std::abort();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      close(port_pipe[0]);
      close(ctl_pipe[1]);
      int code = 0;
      try {
        TcpStore server(kHost, 0, true, Deadline(10));
        int port = server.port();
        if (write(port_pipe[1], &port, sizeof port) != sizeof port) code = 1;
        char c;
        while (read(ctl_pipe[0], &c, 1) > 0) {
        }  // until the parent closes its end
      } catch (...) {
        code = 2;
      }
      _exit(code);
    }
    close(port_pipe[1]);
    close(ctl_pipe[0]);
    ctl_ = ctl_pipe[1];
    if (read(port_pipe[0], &port_, sizeof port_) != sizeof port_) port_ = -1;
    close(port_pipe[0]);
  }
  ~ServerProcess() {
    close(ctl_);
    int st;
    waitpid(pid_, &st, 0);
  }
  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int ctl_ = -1;
  int port_ = -1;
};

// Counts a failed check in the caller's `failures` (c: the rank's communicator).
#define CHECK(cond, ...)                                                                       \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "rank %d: %s:%d: check failed: %s: ", c.rank(), __FILE__, __LINE__, \
                   #cond);                                                                     \
      std::fprintf(stderr, __VA_ARGS__);                                                       \
      std::fprintf(stderr, "\n");                                                              \
      ++failures;                                                                              \
    }                                                                                          \
  } while (0)

// True when b's `bytes` bytes are exactly a.
inline bool same(const std::vector<uint8_t>& a, const uint8_t* b, size_t bytes) {
  return a.size() == bytes && (bytes == 0 || std::memcmp(a.data(), b, bytes) == 0);
}

// ---- running ranks --------------------------------------------------------------

inline std::string unique_prefix(const char* name) {
  static std::atomic<int> counter{0};
  return std::string(name) + "." + std::to_string(counter++);
}

using RankFn = std::function<int(Communicator&, TcpStore&)>;

inline std::unique_ptr<Communicator> join(TcpStore& store, const std::string& prefix, int rank,
                                          int n, double timeout) {
  return oslo::create_gloo_communicator(store, prefix, rank, n, timeout, kHost);
}

// Ranks as threads of this process; returns the sum of their results (an
// exception counts as one failure).
inline int run_threads(int n, double timeout, const RankFn& fn) {
  TcpStore server(kHost, 0, true, Deadline(10));
  const std::string prefix = unique_prefix("threads");
  std::vector<int> results(static_cast<size_t>(n), 0);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      try {
        TcpStore store(kHost, server.port(), false, Deadline(10));
        auto comm = join(store, prefix, r, n, timeout);
        results[static_cast<size_t>(r)] = fn(*comm, store);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        results[static_cast<size_t>(r)] = 1;
      }
    });
  for (auto& t : ts) t.join();
  int sum = 0;
  for (int v : results) sum += v;
  return sum;
}

// Ranks as forked processes; returns their pids (in rank order). The caller
// waits for them.
inline std::vector<pid_t> spawn_ranks(int n, double timeout, int port, const std::string& prefix,
                                      const std::function<int(Communicator&, TcpStore&, int)>& fn) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r)
    pids.push_back(test_util::spawn([&, r]() -> int {
      TcpStore store(kHost, port, false, Deadline(10));
      auto comm = join(store, prefix, r, n, timeout);
      return fn(*comm, store, r);
    }));
  return pids;
}

inline int run_processes(int n, double timeout, const RankFn& fn) {
  ServerProcess server;
  auto pids = spawn_ranks(n, timeout, server.port(), unique_prefix("procs"),
                          [&](Communicator& c, TcpStore& s, int) { return fn(c, s); });
  int bad = 0;
  for (pid_t pid : pids) bad += test_util::wait_child(pid, 60) != 0;
  return bad;
}

// The cases (test_gloo.cpp lists them for cmocka).
// test_gloo_fault.cpp
void test_fault_sigkill_mid_allreduce(void**);
void test_fault_sigstop_times_out(void**);
void test_fault_abort_from_other_thread(void**);
void test_fault_send_never_received(void**);
void test_fault_send_recv_size_mismatch(void**);
void test_fault_destroy_flushes_sends(void**);
void test_fault_missing_rank(void**);
void test_fault_frozen_during_rendezvous(void**);

// test_gloo_misc.cpp
void test_processes_broadcast_root_mismatch_2(void**);
void test_processes_broadcast_root_mismatch_3(void**);
void test_processes_collective_mismatch_2(void**);
void test_processes_collective_mismatch_3(void**);
void test_misc_huge_timeout_late_peer(void**);
void test_misc_single_rank(void**);
void test_misc_local_address_towards(void**);
void test_misc_bad_local_address(void**);

// test_gloo_ops.cpp
void test_threads_2(void**);
void test_threads_3(void**);
void test_threads_4(void**);
void test_processes_2(void**);
void test_processes_3(void**);
void test_processes_4(void**);

}  // namespace gloo_test
