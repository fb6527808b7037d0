// End-to-end tests of oslo-run.
//
//   launcher_test OSLO_RUN RANK_HELPER TEST
//
// Each TEST starts oslo-run with rank_helper as the rank program, in a fresh
// temporary directory, and checks exit status, stderr and the ranks' files.
// The test process makes itself a child subreaper: ranks that outlive the
// launcher are re-parented to it, so "no rank is left" is checked exactly
// (every rank pid must have been reaped by the launcher) and leftovers are
// killed on the way out, whatever the outcome.

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

namespace {

using Clock = std::chrono::steady_clock;
using Strings = std::vector<std::string>;

// Generous bounds: the machine may be loaded; a hang still fails the test.
constexpr double kTimeout = 30;
// Tests whose ranks must stop on SIGTERM/SIGINT use this grace period and
// require the launcher to finish well before it: proof that the stop signal,
// not the SIGKILL escalation, ended the ranks.
constexpr double kLongGrace = 60;
constexpr double kWellBeforeGrace = 25;

std::string g_oslo_run, g_helper, g_dir;
int g_failures = 0;
bool g_skipped = false;  // the test cannot run here (exit 77: ctest SKIP_RETURN_CODE)

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

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

bool contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  if (WIFSTOPPED(status)) return "stopped by signal " + std::to_string(WSTOPSIG(status));
  return "status " + std::to_string(status);
}

// ---------------------------------------------------------------- files

bool read_file(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

Strings split_nul(const std::string& s) {
  Strings parts;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\0') {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return parts;
}

std::map<std::string, std::string> read_env(int rank) {
  std::string text;
  std::map<std::string, std::string> env;
  REQUIRE(read_file(g_dir + "/" + std::to_string(rank) + ".env", &text), "rank %d wrote no env",
          rank);
  for (const auto& kv : split_nul(text)) {
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

Strings read_args(int rank) {
  std::string text;
  REQUIRE(read_file(g_dir + "/" + std::to_string(rank) + ".args", &text), "rank %d wrote no args",
          rank);
  return split_nul(text);
}

// Waits for the pid files of the given ranks.
std::vector<pid_t> wait_for_pids(int first, int count) {
  std::vector<pid_t> pids(count, 0);
  auto start = Clock::now();
  for (int i = 0; i < count; ++i) {
    std::string text;
    while (!read_file(g_dir + "/" + std::to_string(first + i) + ".pid", &text)) {
      REQUIRE(seconds_since(start) < kTimeout, "rank %d did not start", first + i);
      sleep_ms(10);
    }
    pids[i] = std::atoi(text.c_str());
    REQUIRE(pids[i] > 0, "bad pid file for rank %d", first + i);
  }
  return pids;
}

// Waits for DIR/NAME and returns the pid in it.
pid_t wait_for_pid_file(const std::string& name) {
  auto start = Clock::now();
  std::string text;
  while (!read_file(g_dir + "/" + name, &text)) {
    REQUIRE(seconds_since(start) < kTimeout, "%s was not written", name.c_str());
    sleep_ms(10);
  }
  pid_t pid = std::atoi(text.c_str());
  REQUIRE(pid > 0, "bad pid file %s", name.c_str());
  return pid;
}

// A rank that ran rank_helper's "spawn" step: its own process, the child it
// started and that child's child.
struct Family {
  int rank = 0;
  pid_t leader = 0, child = 0, grandchild = 0;
};

std::vector<Family> wait_for_families(const std::vector<int>& ranks) {
  std::vector<Family> fams;
  for (int r : ranks) {
    Family f;
    f.rank = r;
    f.leader = wait_for_pid_file(std::to_string(r) + ".pid");
    f.child = wait_for_pid_file(std::to_string(r) + ".child");
    f.grandchild = wait_for_pid_file(std::to_string(r) + ".grandchild");
    fams.push_back(f);
  }
  return fams;
}

void remove_dir(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") unlink((dir + "/" + name).c_str());
    }
    closedir(d);
  }
  rmdir(dir.c_str());
}

// ---------------------------------------------------------------- processes

// Kills and reaps every child of this process (the launcher, and ranks that
// were re-parented here). Never fails; leaves no process behind.
void kill_all_children() {
  const pid_t self = getpid();
  for (;;) {
    if (DIR* d = opendir("/proc")) {
      while (dirent* e = readdir(d)) {
        pid_t pid = std::atoi(e->d_name);
        if (pid <= 0) continue;
        std::string stat;
        if (!read_file("/proc/" + std::string(e->d_name) + "/stat", &stat)) continue;
        size_t paren = stat.rfind(')');
        if (paren == std::string::npos) continue;
        char state = 0;
        int ppid = 0;
        if (std::sscanf(stat.c_str() + paren + 1, " %c %d", &state, &ppid) == 2 && ppid == self)
          kill(pid, SIGKILL);
      }
      closedir(d);
    }
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid < 0) return;  // ECHILD: none left
    if (pid == 0) sleep_ms(10);
  }
}

// True when pid was a rank that the (dead) launcher reaped: a rank that
// outlived the launcher would be our child now.
bool reaped_by_launcher(pid_t pid) {
  int status;
  pid_t r = waitpid(pid, &status, WNOHANG);
  return r < 0 && errno == ECHILD;
}

// The state letter of /proc/PID/stat ('R', 'S', 'T', 'Z', ...), or 0 when
// there is no such process.
char process_state(pid_t pid) {
  std::string stat;
  if (!read_file("/proc/" + std::to_string(pid) + "/stat", &stat)) return 0;
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return 0;
  return stat[paren + 2];
}

// True when pid no longer runs: no such process, or a zombie (dead, only not
// reaped yet; Launch::wait reports zombies re-parented to us separately).
bool process_gone(pid_t pid, char* state) {
  *state = 0;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  *state = process_state(pid);
  return *state == 0 || *state == 'Z' || *state == 'X';
}

// Every process of the families is gone (called after the launcher exited).
void check_families_gone(const std::vector<Family>& fams) {
  for (const Family& f : fams) {
    const std::pair<const char*, pid_t> procs[] = {
        {"process", f.leader}, {"child", f.child}, {"grandchild", f.grandchild}};
    for (const auto& p : procs) {
      char state;
      CHECK(process_gone(p.second, &state), "rank %d's %s (pid %d) outlived oslo-run (state %c)",
            f.rank, p.first, static_cast<int>(p.second), state ? state : '?');
    }
  }
}

// Each rank is the leader of a process group of its own, not the launcher's,
// and what it started is in that group.
void check_process_groups(pid_t launcher, const std::vector<Family>& fams) {
  const pid_t launcher_group = getpgid(launcher);
  for (const Family& f : fams) {
    CHECK(getpgid(f.leader) == f.leader, "rank %d (pid %d) is in process group %d, not its own",
          f.rank, static_cast<int>(f.leader), static_cast<int>(getpgid(f.leader)));
    CHECK(f.leader != launcher_group, "rank %d is in the launcher's process group", f.rank);
    CHECK(getpgid(f.child) == f.leader && getpgid(f.grandchild) == f.leader,
          "rank %d: child in group %d, grandchild in group %d, expected %d", f.rank,
          static_cast<int>(getpgid(f.child)), static_cast<int>(getpgid(f.grandchild)),
          static_cast<int>(f.leader));
  }
}

// Waits until pred(state of pid) holds; false after kTimeout.
bool wait_state(pid_t pid, const std::function<bool(char)>& pred) {
  auto start = Clock::now();
  while (!pred(process_state(pid))) {
    if (seconds_since(start) > kTimeout) return false;
    sleep_ms(10);
  }
  return true;
}

// After the launcher is gone: it must have reaped every child it had.
void check_no_leftover_processes() {
  int status;
  pid_t r = waitpid(-1, &status, WNOHANG);
  CHECK(r < 0 && errno == ECHILD, "a process outlived the launcher (waitpid gave %d)",
        static_cast<int>(r));
}

// Where oslo-run runs. Default: in our process group, stdin /dev/null.
struct Setup {
  bool own_group = false;  // in a process group of its own (not orphaned: we are its parent)
  std::string tty;         // else: session leader with this terminal as controlling
                           // terminal, stdin and stdout (stderr still a pipe)
};

class Launch {
 public:
  explicit Launch(const Strings& args, const Strings& extra_env = {}, const Setup& setup = {}) {
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    REQUIRE(pipe(out) == 0 && pipe(err) == 0, "pipe: %s", std::strerror(errno));
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(g_oslo_run.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    start_ = Clock::now();
    pid_ = fork();
    REQUIRE(pid_ >= 0, "fork: %s", std::strerror(errno));
    if (pid_ == 0) {
      int in = -1;
      if (!setup.tty.empty()) {
        setsid();
        in = open(setup.tty.c_str(), O_RDWR);
        if (in < 0 || ioctl(in, TIOCSCTTY, 0) != 0) _exit(121);
        dup2(in, 0);
        dup2(in, 1);
      } else {
        if (setup.own_group) setpgid(0, 0);
        in = open("/dev/null", O_RDONLY);
        dup2(in, 0);
        dup2(out[1], 1);
      }
      dup2(err[1], 2);
      for (int fd : {out[0], out[1], err[0], err[1], in}) close(fd);
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD}) signal(sig, SIG_DFL);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      for (const auto& kv : extra_env) putenv(const_cast<char*>(kv.c_str()));
      execv(argv[0], argv.data());
      std::fprintf(stderr, "launcher_test: exec %s: %s\n", argv[0], std::strerror(errno));
      _exit(120);
    }
    close(out[1]);
    close(err[1]);
    fds_[0] = out[0];
    fds_[1] = err[0];
    for (int fd : fds_) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  ~Launch() {
    if (!exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    for (int fd : fds_)
      if (fd >= 0) close(fd);
  }

  pid_t pid() const { return pid_; }

  // SIGKILLs the launcher itself and reaps it; its ranks are left alone.
  void kill_launcher() {
    kill(pid_, SIGKILL);
    int status;
    REQUIRE(waitpid(pid_, &status, 0) == pid_, "waitpid: %s", std::strerror(errno));
    exited_ = true;
  }
  // Waits until oslo-run and everything else holding its stdout and stderr
  // have closed them; false after kTimeout. eof_seconds(): when, after start.
  bool wait_eof() {
    while (fds_[0] >= 0 || fds_[1] >= 0) {
      if (seconds_since(start_) > kTimeout) return false;
      pump(20);
    }
    return true;
  }
  double eof_seconds() const { return eof_seconds_; }

  const std::string& out() const { return bufs_[0]; }
  const std::string& err() const { return bufs_[1]; }
  int status() const { return status_; }
  double seconds() const { return seconds_; }

  // Waits until stderr contains needle; false after kTimeout.
  bool wait_stderr(const std::string& needle) {
    auto start = Clock::now();
    while (!contains(bufs_[1], needle)) {
      if (seconds_since(start) > kTimeout) return false;
      pump(20);
    }
    return true;
  }

  // Waits for the launcher to exit (kills it after kTimeout and fails), then
  // checks that no process outlived it.
  void wait() {
    for (;;) {
      int status;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        status_ = status;
        seconds_ = seconds_since(start_);
        break;
      }
      if (seconds_since(start_) > kTimeout) {
        std::fprintf(stderr, "stderr so far:\n%s\n", bufs_[1].c_str());
        REQUIRE(false, "oslo-run did not exit within %g s", kTimeout);
      }
      pump(20);
    }
    pump(0);  // what it wrote before exiting (ranks may still hold the pipes)
    check_no_leftover_processes();
  }

  void expect_exit(int code) {
    CHECK(WIFEXITED(status_) && WEXITSTATUS(status_) == code,
          "oslo-run ended with %s, expected exit %d; stderr:\n%s", describe(status_).c_str(), code,
          err().c_str());
  }

 private:
  void pump(int timeout_ms) {
    pollfd p[2] = {{fds_[0], POLLIN, 0}, {fds_[1], POLLIN, 0}};
    if (poll(p, 2, timeout_ms) <= 0) return;
    for (int i = 0; i < 2; ++i) {
      char buf[4096];
      ssize_t n = -1;
      while (fds_[i] >= 0 && (n = read(fds_[i], buf, sizeof buf)) != 0) {
        if (n < 0) break;  // EAGAIN
        bufs_[i].append(buf, static_cast<size_t>(n));
      }
      if (fds_[i] >= 0 && n == 0) {  // EOF: every writer has closed it
        close(fds_[i]);
        fds_[i] = -1;
        if (fds_[1 - i] < 0) eof_seconds_ = seconds_since(start_);
      }
    }
  }

  pid_t pid_ = -1;
  int fds_[2] = {-1, -1};
  std::string bufs_[2];
  Clock::time_point start_;
  bool exited_ = false;
  int status_ = 0;
  double seconds_ = 0;
  double eof_seconds_ = 0;
};

// Builds oslo-run arguments: options, then the helper with its rules.
Strings cmd(const Strings& options, const Strings& rules) {
  Strings a = options;
  a.push_back(g_helper);
  a.push_back(g_dir);
  a.insert(a.end(), rules.begin(), rules.end());
  return a;
}

// ---------------------------------------------------------------- tests

// 1. torchrun environment on one node.
void test_env() {
  Launch l(cmd({"--nproc-per-node", "4"}, {}),
           {"RANK=99", "MASTER_PORT=1", "OSLO_LAUNCHER_TEST_PASSTHROUGH=a b=c"});
  l.wait();
  l.expect_exit(0);
  CHECK(l.err().empty(), "unexpected stderr: %s", l.err().c_str());
  std::string port;
  for (int r = 0; r < 4; ++r) {
    auto env = read_env(r);
    CHECK(env["RANK"] == std::to_string(r), "rank %d: RANK=%s", r, env["RANK"].c_str());
    CHECK(env["LOCAL_RANK"] == std::to_string(r), "rank %d: LOCAL_RANK=%s", r,
          env["LOCAL_RANK"].c_str());
    CHECK(env["WORLD_SIZE"] == "4", "rank %d: WORLD_SIZE=%s", r, env["WORLD_SIZE"].c_str());
    CHECK(env["LOCAL_WORLD_SIZE"] == "4", "rank %d: LOCAL_WORLD_SIZE=%s", r,
          env["LOCAL_WORLD_SIZE"].c_str());
    CHECK(env["GROUP_RANK"] == "0", "rank %d: GROUP_RANK=%s", r, env["GROUP_RANK"].c_str());
    CHECK(env["MASTER_ADDR"] == "127.0.0.1", "rank %d: MASTER_ADDR=%s", r,
          env["MASTER_ADDR"].c_str());
    CHECK(env["OSLO_RUN"] == "1", "rank %d: OSLO_RUN=%s", r, env["OSLO_RUN"].c_str());
    CHECK(env["OSLO_LAUNCHER_TEST_PASSTHROUGH"] == "a b=c", "rank %d: environment not passed on",
          r);
    if (r == 0) port = env["MASTER_PORT"];
    CHECK(env["MASTER_PORT"] == port, "rank %d: MASTER_PORT %s differs from rank 0's %s", r,
          env["MASTER_PORT"].c_str(), port.c_str());
  }
  int p = std::atoi(port.c_str());
  CHECK(p > 1 && p <= 65535 && port == std::to_string(p), "MASTER_PORT=%s is not a free port",
        port.c_str());
}

// 1b. Multi-node arithmetic and the other option spellings.
void test_env_multinode() {
  {
    Launch l(cmd(
        {"--nnodes", "2", "--node_rank=1", "--nproc-per-node=3", "--master-addr", "10.11.12.13"},
        {}));
    l.wait();
    l.expect_exit(0);
    for (int local = 0; local < 3; ++local) {
      int r = 3 + local;
      auto env = read_env(r);
      CHECK(env["RANK"] == std::to_string(r), "RANK=%s, expected %d", env["RANK"].c_str(), r);
      CHECK(env["LOCAL_RANK"] == std::to_string(local), "rank %d: LOCAL_RANK=%s", r,
            env["LOCAL_RANK"].c_str());
      CHECK(env["WORLD_SIZE"] == "6", "rank %d: WORLD_SIZE=%s", r, env["WORLD_SIZE"].c_str());
      CHECK(env["LOCAL_WORLD_SIZE"] == "3", "rank %d: LOCAL_WORLD_SIZE=%s", r,
            env["LOCAL_WORLD_SIZE"].c_str());
      CHECK(env["GROUP_RANK"] == "1", "rank %d: GROUP_RANK=%s", r, env["GROUP_RANK"].c_str());
      CHECK(env["MASTER_ADDR"] == "10.11.12.13", "rank %d: MASTER_ADDR=%s", r,
            env["MASTER_ADDR"].c_str());
      CHECK(env["MASTER_PORT"] == "29500", "rank %d: MASTER_PORT=%s (multi-node default 29500)", r,
            env["MASTER_PORT"].c_str());
    }
    struct stat st;
    CHECK(stat((g_dir + "/0.env").c_str(), &st) != 0, "node 1 started rank 0");
  }
  {
    Launch l(cmd({"--master_port=23456", "--nnodes=2", "--node-rank", "0", "--nproc_per_node", "2",
                  "--master_addr=node0.example", "--"},
                 {}));
    l.wait();
    l.expect_exit(0);
    for (int r = 0; r < 2; ++r) {
      auto env = read_env(r);
      CHECK(env["RANK"] == std::to_string(r), "RANK=%s, expected %d", env["RANK"].c_str(), r);
      CHECK(env["WORLD_SIZE"] == "4", "rank %d: WORLD_SIZE=%s", r, env["WORLD_SIZE"].c_str());
      CHECK(env["GROUP_RANK"] == "0", "rank %d: GROUP_RANK=%s", r, env["GROUP_RANK"].c_str());
      CHECK(env["MASTER_ADDR"] == "node0.example", "rank %d: MASTER_ADDR=%s", r,
            env["MASTER_ADDR"].c_str());
      CHECK(env["MASTER_PORT"] == "23456", "rank %d: MASTER_PORT=%s", r,
            env["MASTER_PORT"].c_str());
    }
  }
}

// Checks the single failure line: names the rank, its local rank and pid, what happened.
void check_failure_line(const Launch& l, int rank, int local, pid_t pid, const std::string& what) {
  const std::string who = "rank " + std::to_string(rank) + " (local " + std::to_string(local) +
                          ", pid " + std::to_string(pid) + ")";
  CHECK(contains(l.err(), "oslo-run: " + who + " " + what), "stderr does not say '%s %s':\n%s",
        who.c_str(), what.c_str(), l.err().c_str());
  CHECK(count_lines(l.err()) == 1, "expected one line on stderr, got:\n%s", l.err().c_str());
}

// 2. A rank exits non-zero while the others sleep.
void test_rank_exit() {
  Launch l(cmd({"--nproc-per-node", "4", "--grace-seconds", std::to_string(kLongGrace)},
               {"2=exit:3", "*=sleep"}));
  std::vector<pid_t> pids = wait_for_pids(0, 4);
  l.wait();
  l.expect_exit(3);
  CHECK(l.seconds() < kWellBeforeGrace, "took %.1f s: the ranks were not stopped by SIGTERM",
        l.seconds());
  check_failure_line(l, 2, 2, pids[2], "exited with status 3; stopping the other ranks");
  for (int r = 0; r < 4; ++r)
    CHECK(reaped_by_launcher(pids[r]), "rank %d (pid %d) outlived the launcher", r, pids[r]);
}

// 3. A rank kills itself with SIGKILL.
void test_rank_signal() {
  Launch l(cmd({"--nproc-per-node", "3", "--grace-seconds", std::to_string(kLongGrace)},
               {"1=kill:9", "*=sleep"}));
  std::vector<pid_t> pids = wait_for_pids(0, 3);
  l.wait();
  l.expect_exit(137);
  CHECK(l.seconds() < kWellBeforeGrace, "took %.1f s: the ranks were not stopped by SIGTERM",
        l.seconds());
  check_failure_line(l, 1, 1, pids[1], "was killed by signal 9 (SIGKILL)");
  for (int r = 0; r < 3; ++r)
    CHECK(reaped_by_launcher(pids[r]), "rank %d (pid %d) outlived the launcher", r, pids[r]);
}

// 4a. SIGINT to the launcher is forwarded.
void test_sigint() {
  Launch l(
      cmd({"--nproc-per-node", "3", "--grace-seconds", std::to_string(kLongGrace)}, {"*=sleep"}));
  std::vector<pid_t> pids = wait_for_pids(0, 3);
  auto sent = Clock::now();
  kill(l.pid(), SIGINT);
  l.wait();
  l.expect_exit(130);
  CHECK(seconds_since(sent) < kWellBeforeGrace, "took %.1f s: SIGINT was not forwarded",
        seconds_since(sent));
  CHECK(contains(l.err(), "received SIGINT"), "stderr:\n%s", l.err().c_str());
  for (int r = 0; r < 3; ++r)
    CHECK(reaped_by_launcher(pids[r]), "rank %d (pid %d) outlived the launcher", r, pids[r]);
}

// 4b. A rank that ignores SIGTERM is SIGKILLed after the grace period, both
// when the launcher gets SIGTERM and when another rank fails.
void test_grace_period() {
  const double grace = 1.5;
  {
    Launch l(
        cmd({"--nproc-per-node", "3", "--grace-seconds", "1.5"}, {"1=sleep-noterm", "*=sleep"}));
    std::vector<pid_t> pids = wait_for_pids(0, 3);
    auto sent = Clock::now();
    kill(l.pid(), SIGTERM);
    l.wait();
    double took = seconds_since(sent);
    l.expect_exit(143);
    CHECK(took >= grace - 0.1, "SIGKILL came %.2f s after SIGTERM, before the grace period", took);
    CHECK(took < grace + kWellBeforeGrace, "took %.1f s", took);
    CHECK(contains(l.err(), "received SIGTERM"), "stderr:\n%s", l.err().c_str());
    CHECK(contains(l.err(), "sending SIGKILL to 1 rank"), "stderr:\n%s", l.err().c_str());
    for (int r = 0; r < 3; ++r)
      CHECK(reaped_by_launcher(pids[r]), "rank %d (pid %d) outlived the launcher", r, pids[r]);
  }
  remove_dir(g_dir);
  mkdir(g_dir.c_str(), 0700);
  {
    Launch l(cmd({"--nproc-per-node", "3", "--grace_seconds=1.5"},
                 {"0=exit:5", "2=sleep-noterm", "*=sleep"}));
    std::vector<pid_t> pids = wait_for_pids(0, 3);
    l.wait();
    l.expect_exit(5);
    CHECK(l.seconds() >= grace - 0.1, "SIGKILL came before the grace period (%.2f s)", l.seconds());
    CHECK(contains(l.err(),
                   "rank 0 (local 0, pid " + std::to_string(pids[0]) + ") exited with status 5"),
          "stderr:\n%s", l.err().c_str());
    CHECK(contains(l.err(), "sending SIGKILL to 1 rank"), "stderr:\n%s", l.err().c_str());
    for (int r = 0; r < 3; ++r)
      CHECK(reaped_by_launcher(pids[r]), "rank %d (pid %d) outlived the launcher", r, pids[r]);
  }
}

// 4c. A second Ctrl-C kills at once, without waiting for the grace period.
void test_second_sigint() {
  Launch l(cmd({"--nproc-per-node", "2", "--grace-seconds", std::to_string(kLongGrace)},
               {"*=sleep-nostop"}));
  std::vector<pid_t> pids = wait_for_pids(0, 2);
  auto sent = Clock::now();
  kill(l.pid(), SIGINT);
  REQUIRE(l.wait_stderr("received SIGINT"), "no reaction to SIGINT; stderr:\n%s", l.err().c_str());
  kill(l.pid(), SIGINT);
  l.wait();
  l.expect_exit(130);
  CHECK(seconds_since(sent) < kWellBeforeGrace, "took %.1f s: second SIGINT did not kill",
        seconds_since(sent));
  CHECK(contains(l.err(), "received SIGINT again; sending SIGKILL to 2 ranks"), "stderr:\n%s",
        l.err().c_str());
  for (int r = 0; r < 2; ++r)
    CHECK(reaped_by_launcher(pids[r]), "rank %d (pid %d) outlived the launcher", r, pids[r]);
}

// 5. The launcher is SIGKILLed: the ranks die too (PR_SET_PDEATHSIG).
void test_launcher_killed() {
  std::vector<pid_t> pids;
  {
    Launch l(cmd({"--nproc-per-node", "3"}, {"*=sleep"}));
    pids = wait_for_pids(0, 3);
    l.kill_launcher();
  }
  // The orphaned ranks are now our children; they must die of SIGKILL soon.
  auto start = Clock::now();
  for (int r = 0; r < 3; ++r) {
    int status = 0;
    pid_t got;
    while ((got = waitpid(pids[r], &status, WNOHANG)) == 0 && seconds_since(start) < kTimeout)
      sleep_ms(10);
    CHECK(got == pids[r] && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
          "rank %d (pid %d): waitpid gave %d, %s; expected death by SIGKILL", r, pids[r],
          static_cast<int>(got), describe(status).c_str());
  }
}

// 6. Bad usage: exit 2 with a message, nothing started. --help / --version: 0.
void test_usage() {
  struct Case {
    Strings args;
    std::string message;
  };
  const Case cases[] = {
      {{"--nproc-per-node"}, "option --nproc-per-node requires a value"},
      {{"--nproc-per-node", "0", g_helper, g_dir}, "invalid value '0' for --nproc-per-node"},
      {{"--nproc-per-node", "two", g_helper, g_dir}, "invalid value 'two' for --nproc-per-node"},
      {{"--nproc_per_node=-1", g_helper, g_dir}, "invalid value '-1' for --nproc_per_node"},
      {{"--nproc-per-node", "2x", g_helper, g_dir}, "invalid value '2x'"},
      {{"--nproc-per-node=", g_helper, g_dir}, "invalid value ''"},
      {{"--nproc-per-node", "2"}, "no PROGRAM given"},
      {{"--nproc-per-node", "2", "--"}, "no PROGRAM given"},
      {{}, "no PROGRAM given"},
      {{"--bogus", g_helper, g_dir}, "unknown option '--bogus'"},
      {{"--nnodes", "2", "--node-rank", "2", g_helper, g_dir}, "--node-rank 2 must be less"},
      {{"--master-port", "70000", g_helper, g_dir}, "invalid value '70000' for --master-port"},
      {{"--grace-seconds", "-1", g_helper, g_dir}, "invalid value '-1' for --grace-seconds"},
  };
  for (const Case& c : cases) {
    Launch l(c.args);
    l.wait();
    std::string joined;
    for (const auto& a : c.args) joined += " '" + a + "'";
    CHECK(WIFEXITED(l.status()) && WEXITSTATUS(l.status()) == 2, "oslo-run%s: %s, expected exit 2",
          joined.c_str(), describe(l.status()).c_str());
    CHECK(contains(l.err(), "oslo-run: " + c.message), "oslo-run%s: stderr lacks '%s':\n%s",
          joined.c_str(), c.message.c_str(), l.err().c_str());
  }
  struct stat st;
  CHECK(stat((g_dir + "/0.pid").c_str(), &st) != 0, "a rank was started despite bad usage");

  for (const char* opt : {"--help", "-h"}) {
    Launch l({"--nproc-per-node", "2", opt, g_helper});
    l.wait();
    l.expect_exit(0);
    CHECK(contains(l.out(), "Usage: oslo-run"), "%s: stdout:\n%s", opt, l.out().c_str());
  }
  Launch v({"--version"});
  v.wait();
  v.expect_exit(0);
  CHECK(contains(v.out(), "oslo-run"), "--version: stdout:\n%s", v.out().c_str());
}

// 6b. PROGRAM missing (127) or not executable (126); no child is left.
void test_missing_program() {
  const std::string not_exec = g_dir + "/not-executable";
  {
    std::ofstream f(not_exec);
    f << "#!/bin/sh\nexit 0\n";
  }
  chmod(not_exec.c_str(), 0644);
  struct Case {
    std::string program;
    int code;
    std::string message;
  };
  const Case cases[] = {
      {"oslo-launcher-test-no-such-program", 127,
       "'oslo-launcher-test-no-such-program': command not found"},
      {g_dir + "/no-such-program", 127, "cannot run '" + g_dir + "/no-such-program'"},
      {not_exec, 126, "cannot run '" + not_exec + "': Permission denied"},
      {g_dir, 126, "cannot run '" + g_dir + "': Is a directory"},
  };
  for (const Case& c : cases) {
    Launch l({"--nproc-per-node", "2", c.program, "arg"});
    l.wait();
    CHECK(WIFEXITED(l.status()) && WEXITSTATUS(l.status()) == c.code, "%s: %s, expected exit %d",
          c.program.c_str(), describe(l.status()).c_str(), c.code);
    CHECK(contains(l.err(), "oslo-run: " + c.message), "%s: stderr lacks '%s':\n%s",
          c.program.c_str(), c.message.c_str(), l.err().c_str());
  }
}

// 7. All ranks succeed: exit 0, silent; PROGRAM found through PATH (skipping
// a missing directory and a non-executable file of the same name, as execvp
// does); arguments (spaces, empty, option-like, "--") reach the ranks unchanged.
void test_success_args() {
  const std::string helper_dir = g_helper.substr(0, g_helper.rfind('/'));
  const std::string helper_name = g_helper.substr(g_helper.rfind('/') + 1);
  {
    std::ofstream decoy(g_dir + "/" + helper_name);
    decoy << "#!/bin/sh\nexit 42\n";
  }
  chmod((g_dir + "/" + helper_name).c_str(), 0644);
  const char* path = std::getenv("PATH");
  const Strings extra = {" a  b ", "", "x\"y'z", "--nproc-per-node", "5", "-h", "--", "$HOME", "*"};
  Strings args = {"--nproc-per-node", "3", helper_name, g_dir, "*=exit:0", "--"};
  args.insert(args.end(), extra.begin(), extra.end());
  Launch l(args, {"PATH=/nonexistent-dir:" + g_dir + ":" + helper_dir + ":" +
                  (path ? path : "/usr/bin")});
  l.wait();
  l.expect_exit(0);
  CHECK(l.err().empty(), "unexpected stderr:\n%s", l.err().c_str());
  Strings expected = {g_dir, "*=exit:0", "--"};
  expected.insert(expected.end(), extra.begin(), extra.end());
  for (int r = 0; r < 3; ++r) {
    Strings got = read_args(r);
    std::string shown;
    for (const auto& a : got) shown += " [" + a + "]";
    CHECK(got == expected, "rank %d got arguments:%s", r, shown.c_str());
  }
}

// ---------------------------------------------------------------- process groups

// Empties the test directory between launches of one test.
void reset_dir() {
  remove_dir(g_dir);
  mkdir(g_dir.c_str(), 0700);
}

// 8. The reported bug: rank 0 is a shell running `sleep 50` when rank 1
// fails. oslo-run must exit with the failure, and the caller's pipes (which
// the sleep holds too) reach EOF with it, not 50 s later.
void test_pipe_eof() {
  const double grace = 5;  // the default
  {
    Launch l({"--nproc-per-node", "2", "sh", "-c",
              "if [ \"$RANK\" = 1 ]; then sleep 1; exit 7; fi; sleep 50"});
    REQUIRE(l.wait_eof(), "oslo-run's stdout/stderr still open after %g s; stderr:\n%s", kTimeout,
            l.err().c_str());
    l.wait();
    l.expect_exit(7);
    CHECK(l.eof_seconds() < grace + 10, "EOF after %.1f s", l.eof_seconds());
  }
  // The same with `sleep 50 &` in rank 0's shell (surely a grandchild), whose
  // pid is recorded; rank 1 fails once it is there.
  {
    const std::string script =
        "if [ \"$RANK\" = 1 ]; then i=0; while [ ! -e \"$1/sleep.pid\" ] && [ $i -lt 300 ]; do "
        "sleep 0.1; i=$((i + 1)); done; exit 7; fi; "
        "sleep 50 & echo $! > \"$1/sleep.tmp\"; mv \"$1/sleep.tmp\" \"$1/sleep.pid\"; wait";
    Launch l({"--nproc-per-node", "2", "sh", "-c", script, "sh", g_dir});
    const pid_t sleep_pid = wait_for_pid_file("sleep.pid");
    REQUIRE(l.wait_eof(), "oslo-run's stdout/stderr still open after %g s; stderr:\n%s", kTimeout,
            l.err().c_str());
    l.wait();
    l.expect_exit(7);
    CHECK(l.eof_seconds() < grace + 10, "EOF after %.1f s", l.eof_seconds());
    CHECK(contains(l.err(), "exited with status 7; stopping the other ranks"), "stderr:\n%s",
          l.err().c_str());
    char state;
    CHECK(process_gone(sleep_pid, &state), "rank 0's sleep (pid %d) outlived oslo-run (state %c)",
          static_cast<int>(sleep_pid), state ? state : '?');
  }
}

// 9. A rank fails while the others each run a child that runs a grandchild:
// SIGTERM to their process groups stops them all, long before the grace
// period; oslo-run exits with the failure and its pipes reach EOF.
void test_grandchildren_rank_exit() {
  Launch l(cmd({"--nproc-per-node", "3", "--grace-seconds", std::to_string(kLongGrace)},
               {"1=exit:7", "*=spawn,sleep"}));
  const std::vector<Family> fams = wait_for_families({0, 2});
  const pid_t failed = wait_for_pid_file("1.pid");
  REQUIRE(l.wait_eof(), "oslo-run's stdout/stderr still open after %g s; stderr:\n%s", kTimeout,
          l.err().c_str());
  l.wait();
  l.expect_exit(7);
  CHECK(l.eof_seconds() < kWellBeforeGrace,
        "EOF after %.1f s: the grandchildren were not stopped by SIGTERM", l.eof_seconds());
  check_failure_line(l, 1, 1, failed, "exited with status 7; stopping the other ranks");
  check_families_gone(fams);
}

// 10. SIGINT, SIGTERM, SIGHUP and SIGQUIT to oslo-run are forwarded to the
// ranks' process groups, grandchildren included.
void test_grandchildren_signals() {
  const std::pair<int, const char*> sigs[] = {
      {SIGINT, "SIGINT"}, {SIGTERM, "SIGTERM"}, {SIGHUP, "SIGHUP"}, {SIGQUIT, "SIGQUIT"}};
  for (const auto& sig : sigs) {
    reset_dir();
    Launch l(cmd({"--nproc-per-node", "2", "--grace-seconds", std::to_string(kLongGrace)},
                 {"*=spawn,sleep"}));
    const std::vector<Family> fams = wait_for_families({0, 1});
    check_process_groups(l.pid(), fams);
    auto sent = Clock::now();
    kill(l.pid(), sig.first);
    REQUIRE(l.wait_eof(), "%s: oslo-run's stdout/stderr still open after %g s; stderr:\n%s",
            sig.second, kTimeout, l.err().c_str());
    l.wait();
    l.expect_exit(128 + sig.first);
    CHECK(seconds_since(sent) < kWellBeforeGrace, "%s: took %.1f s: not forwarded to the groups",
          sig.second, seconds_since(sent));
    const std::string line =
        std::string("received ") + sig.second + "; forwarding it to 2 ranks' process groups";
    CHECK(contains(l.err(), line), "stderr lacks '%s':\n%s", line.c_str(), l.err().c_str());
    check_families_gone(fams);
  }
}

// 11. A grandchild that ignores SIGTERM, left alone in its rank's process
// group once the rank and its child have exited on SIGTERM, is SIGKILLed at
// the end of the grace period: when another rank fails, and when oslo-run
// gets SIGTERM.
void test_grandchild_noterm() {
  const double grace = 1.5;
  {
    Launch l(cmd({"--nproc-per-node", "2", "--grace-seconds", "1.5"},
                 {"1=exit:3", "0=spawn-noterm,sleep"}));
    const std::vector<Family> fams = wait_for_families({0});
    REQUIRE(l.wait_eof(), "oslo-run's stdout/stderr still open after %g s; stderr:\n%s", kTimeout,
            l.err().c_str());
    l.wait();
    l.expect_exit(3);
    CHECK(l.seconds() >= grace - 0.1, "SIGKILL came before the grace period (%.2f s)", l.seconds());
    CHECK(l.eof_seconds() < grace + 10, "EOF after %.1f s", l.eof_seconds());
    CHECK(contains(l.err(),
                   "the 1.5 s grace period after SIGTERM is over; sending SIGKILL to 1 "
                   "rank's process group"),
          "stderr:\n%s", l.err().c_str());
    check_families_gone(fams);
  }
  reset_dir();
  {
    Launch l(cmd({"--nproc-per-node", "2", "--grace-seconds", "1.5"}, {"*=spawn-noterm,sleep"}));
    const std::vector<Family> fams = wait_for_families({0, 1});
    auto sent = Clock::now();
    kill(l.pid(), SIGTERM);
    REQUIRE(l.wait_eof(), "oslo-run's stdout/stderr still open after %g s; stderr:\n%s", kTimeout,
            l.err().c_str());
    l.wait();
    const double took = seconds_since(sent);
    l.expect_exit(143);
    CHECK(took >= grace - 0.1, "SIGKILL came %.2f s after SIGTERM, before the grace period", took);
    CHECK(took < grace + 10, "took %.1f s", took);
    CHECK(contains(l.err(), "sending SIGKILL to 2 ranks' process groups"), "stderr:\n%s",
          l.err().c_str());
    check_families_gone(fams);
  }
}

// 12. Every rank exits 0 but leaves processes behind: oslo-run stops them
// (SIGTERM, then SIGKILL after the grace period), says so, and exits 0.
void test_leftovers() {
  {
    Launch l(cmd({"--nproc-per-node", "2", "--grace-seconds", std::to_string(kLongGrace)},
                 {"0=spawn,exit:0", "*=exit:0"}));
    const std::vector<Family> fams = wait_for_families({0});
    REQUIRE(l.wait_eof(), "oslo-run's stdout/stderr still open after %g s; stderr:\n%s", kTimeout,
            l.err().c_str());
    l.wait();
    l.expect_exit(0);
    CHECK(l.eof_seconds() < kWellBeforeGrace,
          "EOF after %.1f s: the leftovers were not stopped by SIGTERM", l.eof_seconds());
    CHECK(contains(l.err(),
                   "oslo-run: all ranks exited 0; stopping the processes left in 1 "
                   "rank's process group"),
          "stderr:\n%s", l.err().c_str());
    CHECK(count_lines(l.err()) == 1, "expected one line on stderr, got:\n%s", l.err().c_str());
    check_families_gone(fams);
  }
  reset_dir();
  {
    const double grace = 1.5;
    Launch l(cmd({"--nproc-per-node", "2", "--grace-seconds", "1.5"}, {"*=spawn-noterm,exit:0"}));
    const std::vector<Family> fams = wait_for_families({0, 1});
    REQUIRE(l.wait_eof(), "oslo-run's stdout/stderr still open after %g s; stderr:\n%s", kTimeout,
            l.err().c_str());
    l.wait();
    l.expect_exit(0);
    CHECK(l.seconds() >= grace - 0.1, "SIGKILL came before the grace period (%.2f s)", l.seconds());
    CHECK(l.eof_seconds() < grace + 10, "EOF after %.1f s", l.eof_seconds());
    CHECK(contains(l.err(), "sending SIGKILL to 2 ranks' process groups"), "stderr:\n%s",
          l.err().c_str());
    check_families_gone(fams);
  }
}

// 13. SIGTSTP (Ctrl-Z) stops the ranks with all they started, then oslo-run
// itself as the default action would (the shell sees a stopped job); SIGCONT
// (fg, bg) resumes them all. oslo-run runs in a process group of its own
// here: in an orphaned one the kernel would discard the stop.
void test_sigtstp() {
  Setup setup;
  setup.own_group = true;
  Launch l(cmd({"--nproc-per-node", "2", "--grace-seconds", std::to_string(kLongGrace)},
               {"*=spawn,sleep"}),
           {}, setup);
  const std::vector<Family> fams = wait_for_families({0, 1});
  kill(l.pid(), SIGTSTP);
  int status = 0;
  pid_t got;
  auto start = Clock::now();
  while ((got = waitpid(l.pid(), &status, WNOHANG | WUNTRACED)) == 0 &&
         seconds_since(start) < kTimeout)
    sleep_ms(10);
  REQUIRE(got == l.pid() && WIFSTOPPED(status) && WSTOPSIG(status) == SIGTSTP,
          "oslo-run: waitpid gave %d, %s; expected a stop by SIGTSTP", static_cast<int>(got),
          describe(status).c_str());
  for (const Family& f : fams) {
    for (pid_t pid : {f.leader, f.child, f.grandchild})
      CHECK(wait_state(pid, [](char c) { return c == 'T'; }),
            "rank %d: pid %d was not stopped (state %c)", f.rank, static_cast<int>(pid),
            process_state(pid));
  }
  kill(l.pid(), SIGCONT);
  for (const Family& f : fams) {
    for (pid_t pid : {f.leader, f.child, f.grandchild})
      CHECK(wait_state(pid, [](char c) { return c != 'T' && c != 't'; }),
            "rank %d: pid %d was not resumed (state %c)", f.rank, static_cast<int>(pid),
            process_state(pid));
  }
  auto sent = Clock::now();
  kill(l.pid(), SIGTERM);
  l.wait();
  l.expect_exit(143);
  CHECK(seconds_since(sent) < kWellBeforeGrace, "took %.1f s after SIGTERM", seconds_since(sent));
  check_families_gone(fams);
}

// 14. In a terminal (oslo-run is the session leader of a pseudo-terminal,
// which is its stdin and stdout): ranks in their background process groups
// can write to it; one that reads from it is stopped by SIGTTIN, which
// oslo-run reports; Ctrl-C reaches only the foreground group, oslo-run's, and
// oslo-run forwards it, so the ranks, the stopped one included, end at once.
void test_terminal() {
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0 || !ptsname(master)) {
    std::printf("skipped: no pseudo-terminal (%s)\n", std::strerror(errno));
    g_skipped = true;
    if (master >= 0) close(master);
    return;
  }
  const std::string tty = ptsname(master);
  fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK);
  std::string screen;
  auto read_screen = [&]() {
    char buf[4096];
    ssize_t n;
    while ((n = read(master, buf, sizeof buf)) > 0) screen.append(buf, static_cast<size_t>(n));
  };
  {
    Setup setup;
    setup.tty = tty;
    Launch l(cmd({"--nproc-per-node", "2", "--grace-seconds", std::to_string(kLongGrace)},
                 {"0=spawn,say:hello from rank 0,read", "1=spawn,say:hello from rank 1,sleep"}),
             {}, setup);
    const std::vector<Family> fams = wait_for_families({0, 1});
    auto start = Clock::now();
    while (!(contains(screen, "hello from rank 0") && contains(screen, "hello from rank 1")) &&
           seconds_since(start) < kTimeout) {
      read_screen();
      sleep_ms(10);
    }
    CHECK(contains(screen, "hello from rank 0") && contains(screen, "hello from rank 1"),
          "the ranks' output did not reach the terminal:\n%s", screen.c_str());
    REQUIRE(l.wait_stderr("was stopped by SIGTTIN"), "no word of rank 0's SIGTTIN; stderr:\n%s",
            l.err().c_str());
    const std::string who = "oslo-run: rank 0 (local 0, pid " + std::to_string(fams[0].leader) +
                            ") was stopped by SIGTTIN";
    CHECK(contains(l.err(), who), "stderr lacks '%s':\n%s", who.c_str(), l.err().c_str());
    CHECK(process_state(fams[0].leader) == 'T', "rank 0 is in state %c, expected T",
          process_state(fams[0].leader));
    auto sent = Clock::now();
    REQUIRE(write(master, "\x03", 1) == 1, "write to the terminal: %s", std::strerror(errno));
    l.wait();
    read_screen();
    l.expect_exit(130);
    CHECK(seconds_since(sent) < kWellBeforeGrace, "took %.1f s after Ctrl-C", seconds_since(sent));
    CHECK(contains(l.err(), "received SIGINT; forwarding it to 2 ranks' process groups"),
          "stderr:\n%s", l.err().c_str());
    check_families_gone(fams);
  }
  close(master);
}

const std::map<std::string, std::function<void()>>& tests() {
  static const std::map<std::string, std::function<void()>> t = {
      {"env", test_env},
      {"env_multinode", test_env_multinode},
      {"rank_exit", test_rank_exit},
      {"rank_signal", test_rank_signal},
      {"sigint", test_sigint},
      {"grace_period", test_grace_period},
      {"second_sigint", test_second_sigint},
      {"launcher_killed", test_launcher_killed},
      {"usage", test_usage},
      {"missing_program", test_missing_program},
      {"success_args", test_success_args},
      {"pipe_eof", test_pipe_eof},
      {"grandchildren_rank_exit", test_grandchildren_rank_exit},
      {"grandchildren_signals", test_grandchildren_signals},
      {"grandchild_noterm", test_grandchild_noterm},
      {"leftovers", test_leftovers},
      {"sigtstp", test_sigtstp},
      {"terminal", test_terminal},
  };
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 || !tests().count(argv[3])) {
    std::fprintf(stderr, "usage: launcher_test OSLO_RUN RANK_HELPER TEST\ntests:");
    for (const auto& t : tests()) std::fprintf(stderr, " %s", t.first.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  g_oslo_run = argv[1];
  g_helper = argv[2];
  if (g_helper.find('/') == std::string::npos) g_helper = "./" + g_helper;
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    std::perror("prctl(PR_SET_CHILD_SUBREAPER)");
    return 1;
  }
  // A closed pipe must not kill the test; inherited ignores must not leak into the launcher.
  signal(SIGPIPE, SIG_IGN);
  signal(SIGCHLD, SIG_DFL);

  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/oslo-run-test.XXXXXX";
  if (!mkdtemp(&templ[0])) {
    std::perror("mkdtemp");
    return 1;
  }
  g_dir = templ;

  auto start = Clock::now();
  try {
    tests().at(argv[3])();
  } catch (const Fatal&) {
  }
  kill_all_children();
  remove_dir(g_dir);
  const char* result = g_failures ? "FAILED" : g_skipped ? "skipped" : "passed";
  std::printf("launcher test %s: %s (%.2f s)\n", argv[3], result, seconds_since(start));
  return g_failures ? 1 : g_skipped ? 77 : 0;
}
