// The helpers of launcher_test (launcher_util.hpp): files the ranks write,
// processes and process groups, and Launch, one run of oslo-run.
#include "launcher_util.hpp"

namespace launcher_test {

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

Launch::Launch(const Strings& args, const Strings& extra_env, const Setup& setup) {
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

Launch::~Launch() {
  if (!exited_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  for (int fd : fds_)
    if (fd >= 0) close(fd);
}

void Launch::kill_launcher() {
  kill(pid_, SIGKILL);
  int status;
  REQUIRE(waitpid(pid_, &status, 0) == pid_, "waitpid: %s", std::strerror(errno));
  exited_ = true;
}

bool Launch::wait_eof() {
  while (fds_[0] >= 0 || fds_[1] >= 0) {
    if (seconds_since(start_) > kTimeout) return false;
    pump(20);
  }
  return true;
}

bool Launch::wait_stderr(const std::string& needle) {
  auto start = Clock::now();
  while (!contains(bufs_[1], needle)) {
    if (seconds_since(start) > kTimeout) return false;
    pump(20);
  }
  return true;
}

void Launch::wait() {
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

void Launch::expect_exit(int code) {
  CHECK(WIFEXITED(status_) && WEXITSTATUS(status_) == code,
        "oslo-run ended with %s, expected exit %d; stderr:\n%s", describe(status_).c_str(), code,
        err().c_str());
}

void Launch::pump(int timeout_ms) {
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

// Builds oslo-run arguments: options, then the helper with its rules.
Strings cmd(const Strings& options, const Strings& rules) {
  Strings a = options;
  a.push_back(g_helper);
  a.push_back(g_dir);
  a.insert(a.end(), rules.begin(), rules.end());
  return a;
}

// Checks the single failure line: names the rank, its local rank and pid, what happened.
void check_failure_line(const Launch& l, int rank, int local, pid_t pid, const std::string& what) {
  const std::string who = "rank " + std::to_string(rank) + " (local " + std::to_string(local) +
                          ", pid " + std::to_string(pid) + ")";
  CHECK(contains(l.err(), "oslo-run: " + who + " " + what), "stderr does not say '%s %s':\n%s",
        who.c_str(), what.c_str(), l.err().c_str());
  CHECK(count_lines(l.err()) == 1, "expected one line on stderr, got:\n%s", l.err().c_str());
}

}  // namespace launcher_test
