// Helpers for tests that run ranks as forked processes or threads, shared by
// tests/rendezvous and tests/gloo.
//
// The fork rule: a process forks only while it has exactly one thread.
// A thread alive at fork() may hold a lock (malloc's, stdio's, ASan's
// allocator's) that then stays locked forever in the child, which deadlocks
// at random. So a test that runs threads joins every one of them (and
// destroys every in-process TcpStore server: it runs a thread) before it
// forks, and a TcpStore server that forked children talk to runs in a process
// of its own, forked while the test process was still single-threaded.
// spawn() enforces the rule (assert_single_threaded) and aborts the whole
// test program with a message naming the threads otherwise.
//
// cmocka reports a failed assertion by longjmp-ing out of the test, which
// skips C++ destructors; so children are tracked in a global list and killed
// by the per-test teardown (kill_children) instead of by RAII. A child never
// uses cmocka assertions (a longjmp in the child would run the remaining tests
// there): it returns an exit code, 0 meaning success.
#pragma once

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/common/error.hpp"
#include "tests/common/temp_dir.hpp"

// cmocka defines a macro named fail(), which would break oslo::fail and
// std::basic_ios::fail: it must come after every C++ header, so test files
// include this header last.
// cmocka.h has no extern "C" of its own.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
extern "C" {
#include <cmocka.h>
}

namespace test_util {

inline std::vector<pid_t>& children() {
  static std::vector<pid_t> pids;
  return pids;
}

// Thread ids of this process: the entries of /proc/self/task.
inline std::vector<pid_t> thread_ids() {
  std::vector<pid_t> tids;
  DIR* d = opendir("/proc/self/task");
  if (!d) {
    std::perror("test_util: opendir /proc/self/task");
    std::abort();
  }
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') tids.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
  closedir(d);
  return tids;
}

// One line of /proc/self/task/<tid>/<file> ("" if unreadable).
inline std::string task_file(pid_t tid, const char* file) {
  std::string path = "/proc/self/task/" + std::to_string(tid) + "/" + file;
  std::string line;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[256];
    if (std::fgets(buf, sizeof buf, f)) line = buf;
    std::fclose(f);
  }
  while (!line.empty() && line.back() == '\n') line.pop_back();
  return line;
}

// Aborts, naming the other threads, with why forking now breaks the rule.
[[noreturn]] inline void fork_rule_broken(const char* what, const std::vector<pid_t>& tids,
                                          const char* why) {
  std::fprintf(stderr,
               "test_util: %s: fork() with %zu threads alive in process %d, %s. Other threads:",
               what, tids.size(), getpid(), why);
  for (pid_t t : tids) {
    if (t == gettid()) continue;
    std::string sc = task_file(t, "syscall");  // "running", or the number and arguments
    std::fprintf(stderr, " %d (%s, syscall: %s)", t, task_file(t, "comm").c_str(),
                 sc.substr(0, sc.find(' ')).c_str());
  }
  std::fprintf(stderr,
               ".\nA child forked while another thread runs can inherit a lock held by that "
               "thread and deadlock. Join every thread and destroy every in-process TcpStore "
               "server before forking; run a server that forked children use in its own "
               "process (see the fork rule in tests/rendezvous/rdzv_test_util.hpp).\n");
  std::fflush(stderr);
  std::abort();
}

// The fork rule's check: aborts unless this process has exactly one thread.
// A thread that was just joined may stay listed for a moment while the kernel
// tears it down (it runs no user code any more), hence the grace period.
inline void assert_single_threaded(const char* what) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (;;) {
    std::vector<pid_t> tids = thread_ids();
    if (tids.size() == 1) return;
    if (std::chrono::steady_clock::now() >= end)
      fork_rule_broken(what, tids, "which must have exactly one");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Forks; the child runs fn and _exits with its result (see spawn). The child
// dies with this process, so that nothing outlives a test program that
// crashed or was killed by a ctest timeout.
inline pid_t fork_child(const std::function<int()>& fn) {
  std::fflush(nullptr);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    std::perror("fork");
    std::abort();
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(98);  // the parent died before prctl
    int rc;
    try {
      rc = fn();
    } catch (const oslo::Error& e) {
      std::fprintf(stderr, "child %d: oslo::Error %d: %s\n", getpid(), e.status(), e.what());
      rc = 100 + e.status();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child %d: exception: %s\n", getpid(), e.what());
      rc = 99;
    }
    std::fflush(nullptr);
    _exit(rc);
  }
  children().push_back(pid);
  return pid;
}

// Runs fn in a child process; its return value becomes the exit status. An
// oslo::Error escaping fn exits with 100 + status, any other exception with 99.
// Aborts if this process has more than one thread (the fork rule).
inline pid_t spawn(const std::function<int()>& fn) {
  assert_single_threaded("test_util::spawn");
  return fork_child(fn);
}

// The one exception to the fork rule, for a test of what a child inherits
// from a process that runs a TcpStore server thread: like spawn, but forks
// beside other threads once every one of them is blocked in poll() (where an
// idle server thread holds no lock). The caller makes sure that nothing can
// wake them before the fork: no request in flight, no get/wait parked on the
// server. Aborts if they are not all in poll() within 5 s.
inline pid_t spawn_beside_idle_threads(const std::function<int()>& fn) {
  auto in_poll = [](pid_t tid) {
    long nr = std::strtol(task_file(tid, "syscall").c_str(), nullptr, 10);
    (void)nr;
#ifdef SYS_poll
    if (nr == SYS_poll) return true;
#endif
#ifdef SYS_ppoll
    if (nr == SYS_ppoll) return true;
#endif
    return false;
  };
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    std::vector<pid_t> tids = thread_ids();
    bool idle = true;
    for (pid_t t : tids)
      if (t != gettid() && !in_poll(t)) idle = false;
    if (idle) break;
    if (std::chrono::steady_clock::now() >= end)
      fork_rule_broken("test_util::spawn_beside_idle_threads", tids,
                       "not all of them blocked in poll()");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return fork_child(fn);
}

// Waits for a child; returns its exit status, 128 + signal if it was killed,
// or -1 if it did not end within timeout_s (it is then SIGKILLed).
inline int wait_child(pid_t pid, double timeout_s) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  int rc = -1;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (r < 0) break;
    if (std::chrono::steady_clock::now() >= end) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      std::fprintf(stderr, "child %d did not finish within %.1f s; killed\n", pid, timeout_s);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  auto& v = children();
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] == pid) {
      v.erase(v.begin() + static_cast<long>(i));
      break;
    }
  return rc;
}

// SIGSTOPs a child and returns once it is really stopped (kill() only queues
// the signal).
inline void stop_child(pid_t pid) {
  kill(pid, SIGSTOP);
  int status = 0;
  waitpid(pid, &status, WUNTRACED);
}

// cmocka teardown: kills and reaps every child a test left behind.
inline int kill_children(void**) {
  for (pid_t pid : children()) {
    kill(pid, SIGCONT);  // a stopped child would not die until continued
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
  }
  children().clear();
  return 0;
}

inline std::string temp_dir() {
  return oslo_test::temp_dir("oslo-test");
}
using oslo_test::remove_tree;

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

inline std::vector<uint8_t> bytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

// Runs fn and returns the status of the oslo::Error it throws (OSLO_OK if it
// returns), storing the message in *msg.
template <typename Fn>
oslo_status status_of(Fn&& fn, std::string* msg = nullptr) {
  try {
    fn();
  } catch (const oslo::Error& e) {
    if (msg) *msg = e.what();
    return e.status();
  }
  return OSLO_OK;
}

}  // namespace test_util
