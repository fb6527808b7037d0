// Shared by the files of launcher_test (test_launcher.cpp says what it does):
// the checks, the helpers that read what the ranks wrote and follow their
// processes, Launch (one run of oslo-run, its output and exit), and the
// tests. Definitions in launcher_util.cpp.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace launcher_test {

using Clock = std::chrono::steady_clock;
using Strings = std::vector<std::string>;

// Generous bounds: the machine may be loaded; a hang still fails the test.
constexpr double kTimeout = 30;
// Tests whose ranks must stop on SIGTERM/SIGINT use this grace period and
// require the launcher to finish well before it: proof that the stop signal,
// not the SIGKILL escalation, ended the ranks.
constexpr double kLongGrace = 60;
constexpr double kWellBeforeGrace = 25;

inline std::string g_oslo_run, g_helper, g_dir;
inline int g_failures = 0;
inline bool g_skipped = false;  // the test cannot run here (exit 77: ctest SKIP_RETURN_CODE)

struct Fatal {};

#define CHECK(cond, ...)                                                            \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                            \
      std::fprintf(stderr, "\n");                                                   \
      ++g_failures;                                                                 \
    }                                                                               \
  } while (0)

#define REQUIRE(cond, ...)                   \
  do {                                       \
    int before = g_failures;                 \
    CHECK(cond, __VA_ARGS__);                \
    if (g_failures != before) throw Fatal(); \
  } while (0)

double seconds_since(Clock::time_point t);
void sleep_ms(int ms);
bool contains(const std::string& s, const std::string& needle);
int count_lines(const std::string& s);
// "exit N", "signal N", ... for a wait status.
std::string describe(int status);

// ---------------------------------------------------------------- files

bool read_file(const std::string& path, std::string* out);

Strings split_nul(const std::string& s);

std::map<std::string, std::string> read_env(int rank);

Strings read_args(int rank);

// Waits for the pid files of the given ranks.
std::vector<pid_t> wait_for_pids(int first, int count);

// Waits for DIR/NAME and returns the pid in it.
pid_t wait_for_pid_file(const std::string& name);

// A rank that ran rank_helper's "spawn" step: its own process, the child it
// started and that child's child.
struct Family {
  int rank = 0;
  pid_t leader = 0, child = 0, grandchild = 0;
};

std::vector<Family> wait_for_families(const std::vector<int>& ranks);

void remove_dir(const std::string& dir);

// ---------------------------------------------------------------- processes

// Kills and reaps every child of this process (the launcher, and ranks that
// were re-parented here). Never fails; leaves no process behind.
void kill_all_children();

// True when pid was a rank that the (dead) launcher reaped: a rank that
// outlived the launcher would be our child now.
bool reaped_by_launcher(pid_t pid);

// The state letter of /proc/PID/stat ('R', 'S', 'T', 'Z', ...), or 0 when
// there is no such process.
char process_state(pid_t pid);

// True when pid no longer runs: no such process, or a zombie (dead, only not
// reaped yet; Launch::wait reports zombies re-parented to us separately).
bool process_gone(pid_t pid, char* state);

// Every process of the families is gone (called after the launcher exited).
void check_families_gone(const std::vector<Family>& fams);

// Each rank is the leader of a process group of its own, not the launcher's,
// and what it started is in that group.
void check_process_groups(pid_t launcher, const std::vector<Family>& fams);

// Waits until pred(state of pid) holds; false after kTimeout.
bool wait_state(pid_t pid, const std::function<bool(char)>& pred);

// After the launcher is gone: it must have reaped every child it had.
void check_no_leftover_processes();

// Where oslo-run runs. Default: in our process group, stdin /dev/null.
struct Setup {
  bool own_group = false;  // in a process group of its own (not orphaned: we are its parent)
  std::string tty;         // else: session leader with this terminal as controlling
                           // terminal, stdin and stdout (stderr still a pipe)
};

class Launch {
 public:
  explicit Launch(const Strings& args, const Strings& extra_env = {}, const Setup& setup = {});
  ~Launch();
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  pid_t pid() const { return pid_; }

  // SIGKILLs the launcher itself and reaps it; its ranks are left alone.
  void kill_launcher();
  // Waits until oslo-run and everything else holding its stdout and stderr
  // have closed them; false after kTimeout. eof_seconds(): when, after start.
  bool wait_eof();
  double eof_seconds() const { return eof_seconds_; }

  const std::string& out() const { return bufs_[0]; }
  const std::string& err() const { return bufs_[1]; }
  int status() const { return status_; }
  double seconds() const { return seconds_; }

  // Waits until stderr contains needle; false after kTimeout.
  bool wait_stderr(const std::string& needle);

  // Waits for the launcher to exit (kills it after kTimeout and fails), then
  // checks that no process outlived it.
  void wait();

  void expect_exit(int code);

 private:
  void pump(int timeout_ms);

  pid_t pid_ = -1;
  int fds_[2] = {-1, -1};
  std::string bufs_[2];
  Clock::time_point start_;
  bool exited_ = false;
  int status_ = 0;
  double seconds_ = 0;
  double eof_seconds_ = 0;
};

// Checks the single failure line: names the rank, its local rank and pid, what happened.
void check_failure_line(const Launch& l, int rank, int local, pid_t pid, const std::string& what);

// Builds oslo-run arguments: options, then the helper with its rules.
Strings cmd(const Strings& options, const Strings& rules);

// The tests (test_launcher.cpp maps their names to them).
void test_env();                      // test_launcher_env.cpp
void test_env_multinode();            // test_launcher_env.cpp
void test_usage();                    // test_launcher_env.cpp
void test_missing_program();          // test_launcher_env.cpp
void test_success_args();             // test_launcher_env.cpp
void test_rank_exit();                // test_launcher_signals.cpp
void test_rank_signal();              // test_launcher_signals.cpp
void test_sigint();                   // test_launcher_signals.cpp
void test_grace_period();             // test_launcher_signals.cpp
void test_second_sigint();            // test_launcher_signals.cpp
void test_launcher_killed();          // test_launcher_signals.cpp
void test_pipe_eof();                 // test_launcher_groups.cpp
void test_grandchildren_rank_exit();  // test_launcher_groups.cpp
void test_grandchildren_signals();    // test_launcher_groups.cpp
void test_grandchild_noterm();        // test_launcher_groups.cpp
void test_leftovers();                // test_launcher_groups.cpp
void test_sigtstp();                  // test_launcher_groups.cpp
void test_terminal();                 // test_launcher_groups.cpp

}  // namespace launcher_test
