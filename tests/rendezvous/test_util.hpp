// Helpers for tests that run ranks as forked processes or threads, shared by
// tests/rendezvous and tests/gloo.
//
// cmocka reports a failed assertion by longjmp-ing out of the test, which
// skips C++ destructors; so children are tracked in a global list and killed
// by the per-test teardown (kill_children) instead of by RAII. A child never
// uses cmocka assertions (a longjmp in the child would run the remaining tests
// there): it returns an exit code, 0 meaning success.
#pragma once

#include <signal.h>
#include <sys/stat.h>
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

// Runs fn in a child process; its return value becomes the exit status. An
// oslo::Error escaping fn exits with 100 + status, any other exception with 99.
inline pid_t spawn(const std::function<int()>& fn) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    std::perror("fork");
    std::abort();
  }
  if (pid == 0) {
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

inline std::string temp_dir() { return oslo_test::temp_dir("oslo-test"); }
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
