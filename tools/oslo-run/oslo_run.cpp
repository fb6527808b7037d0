// oslo-run: starts the ranks of one node of an oslo job, with the environment
// torchrun sets, and supervises them. Each rank runs in a process group of its
// own, and "stopping a rank" means its whole group, so what a rank started (a
// wrapper script's real program, background helpers) goes with it. When one
// rank fails the others are stopped (SIGTERM to every rank's group, then
// SIGKILL after a grace period); SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to
// the launcher are forwarded to the groups the same way, and SIGTSTP (Ctrl-Z)
// stops them with the launcher. The job ends when every rank has been reaped
// and every rank's group is empty. Ranks get PR_SET_PDEATHSIG(SIGKILL), so
// they do not outlive a killed launcher, and the launcher is a child subreaper,
// so orphans in the groups stay its children.
//
// Events come from one signalfd (SIGCHLD and the stop signals are blocked
// before the first fork, so nothing is lost between fork and the loop) and a
// poll() timeout for the grace period; there is no busy waiting (only while
// stopping, groups whose leader is gone are checked every 100 ms). See README.md.

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifndef OSLO_RUN_VERSION
#define OSLO_RUN_VERSION "unknown"
#endif

extern char** environ;

namespace {

constexpr int kExitLauncherError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNotExecutable = 126;
constexpr int kExitNotFound = 127;

constexpr int kMaxProcPerNode = 4096;
constexpr int kMaxNodes = 1 << 20;
constexpr int kDefaultMultiNodePort = 29500;
constexpr double kMaxGraceSeconds = 86400;

const char kUsage[] =
    "Usage: oslo-run [OPTIONS] [--] PROGRAM [ARGS...]\n"
    "\n"
    "Starts --nproc-per-node copies (ranks) of PROGRAM on this node with the\n"
    "environment torchrun sets and supervises them: when a rank fails, the\n"
    "others are stopped, each with all the processes it started (every rank runs\n"
    "in a process group of its own). PROGRAM is looked up in PATH; ARGS pass\n"
    "through as is.\n"
    "\n"
    "Options (--opt=VALUE also works, and '_' may replace '-' in names):\n"
    "  --nproc-per-node N  ranks on this node (default 1)\n"
    "  --nnodes M          number of nodes (default 1)\n"
    "  --node-rank R       rank of this node, 0 <= R < M (default 0)\n"
    "  --master-addr A     address of the node running rank 0 (default 127.0.0.1)\n"
    "  --master-port P     rendezvous port (default: a free port when --nnodes is\n"
    "                      1, else 29500)\n"
    "  --grace-seconds S   time the ranks' process groups get to exit after\n"
    "                      SIGTERM/SIGINT before SIGKILL (default 5)\n"
    "  -h, --help          print this help and exit\n"
    "  --version           print the version and exit\n"
    "\n"
    "Each rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,\n"
    "MASTER_ADDR, MASTER_PORT and OSLO_RUN=1.\n"
    "\n"
    "Exit status: 0 when all ranks exit 0; else the exit status of the first rank\n"
    "that failed, or 128+N if it was killed by signal N; 128+N when oslo-run\n"
    "itself got signal N (130 SIGINT, 143 SIGTERM, 129 SIGHUP, 131 SIGQUIT);\n"
    "2 usage error; 126 PROGRAM not executable; 127 PROGRAM not found; 1 other\n"
    "launcher error.\n";

void print_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// One write per message so that lines do not interleave with the ranks' output.
void print_error(const char* fmt, ...) {
  char buf[1024] = "oslo-run: ";
  const size_t prefix = std::strlen(buf);
  va_list ap;
  va_start(ap, fmt);
  int n = std::vsnprintf(buf + prefix, sizeof buf - prefix - 1, fmt, ap);
  va_end(ap);
  size_t len = prefix + (n < 0 ? 0 : static_cast<size_t>(n));
  if (len > sizeof buf - 2) len = sizeof buf - 2;  // truncated
  buf[len++] = '\n';
  for (size_t off = 0; off < len;) {
    ssize_t w = write(STDERR_FILENO, buf + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
}

const char* signal_abbrev(int sig) {
#define OSLO_RUN_SIG(name) \
  { SIG##name, "SIG" #name }
  static const struct {
    int sig;
    const char* name;
  } kNames[] = {
      OSLO_RUN_SIG(HUP),  OSLO_RUN_SIG(INT),    OSLO_RUN_SIG(QUIT), OSLO_RUN_SIG(ILL),
      OSLO_RUN_SIG(TRAP), OSLO_RUN_SIG(ABRT),   OSLO_RUN_SIG(BUS),  OSLO_RUN_SIG(FPE),
      OSLO_RUN_SIG(KILL), OSLO_RUN_SIG(USR1),   OSLO_RUN_SIG(SEGV), OSLO_RUN_SIG(USR2),
      OSLO_RUN_SIG(PIPE), OSLO_RUN_SIG(ALRM),   OSLO_RUN_SIG(TERM), OSLO_RUN_SIG(STKFLT),
      OSLO_RUN_SIG(CHLD), OSLO_RUN_SIG(CONT),   OSLO_RUN_SIG(STOP), OSLO_RUN_SIG(TSTP),
      OSLO_RUN_SIG(TTIN), OSLO_RUN_SIG(TTOU),   OSLO_RUN_SIG(URG),  OSLO_RUN_SIG(XCPU),
      OSLO_RUN_SIG(XFSZ), OSLO_RUN_SIG(VTALRM), OSLO_RUN_SIG(PROF), OSLO_RUN_SIG(WINCH),
      OSLO_RUN_SIG(IO),   OSLO_RUN_SIG(PWR),    OSLO_RUN_SIG(SYS),
  };
#undef OSLO_RUN_SIG
  for (const auto& n : kNames)
    if (n.sig == sig) return n.name;
  return nullptr;
}

// "SIGKILL", "SIGRTMIN+3", or "" for a number without a name.
std::string signal_name(int sig) {
  if (const char* s = signal_abbrev(sig)) return s;
  if (sig >= SIGRTMIN && sig <= SIGRTMAX) return "SIGRTMIN+" + std::to_string(sig - SIGRTMIN);
  return "";
}

double monotonic_seconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// ---------------------------------------------------------------- arguments

struct Options {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: not given
  double grace_seconds = 5;
  std::vector<std::string> command;  // PROGRAM ARGS...
};

enum class ParseResult { kRun, kHelp, kVersion, kError };

// A decimal integer in [lo, hi], digits only (no sign, no spaces).
bool parse_int(const std::string& s, long lo, long hi, int* out) {
  if (s.empty() || s.size() > 12) return false;
  long v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

bool parse_seconds(const std::string& s, double* out) {
  if (s.empty() || !((s[0] >= '0' && s[0] <= '9') || s[0] == '.')) return false;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v) || v < 0 || v > kMaxGraceSeconds)
    return false;
  *out = v;
  return true;
}

ParseResult parse_args(int argc, char** argv, Options* opt, std::string* err) {
  int i = 1;
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") return ParseResult::kHelp;
    if (arg == "--version") return ParseResult::kVersion;
    if (arg.size() < 2 || arg[0] != '-') break;  // PROGRAM

    std::string spelled = arg, value;
    bool inline_value = false;
    const size_t eq = arg.find('=');
    if (arg.compare(0, 2, "--") == 0 && eq != std::string::npos) {
      spelled = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      inline_value = true;
    }
    std::string name = spelled;
    for (size_t k = 2; k < name.size(); ++k)
      if (name[k] == '_') name[k] = '-';

    static const char* const kValued[] = {"--nproc-per-node", "--nnodes",      "--node-rank",
                                          "--master-addr",    "--master-port", "--grace-seconds"};
    bool known = false;
    for (const char* k : kValued) known = known || name == k;
    if (!known) {
      *err = "unknown option '" + spelled + "'";
      return ParseResult::kError;
    }
    if (!inline_value) {
      if (i + 1 >= argc) {
        *err = "option " + spelled + " requires a value";
        return ParseResult::kError;
      }
      value = argv[++i];
    }

    bool ok = true;
    std::string expected;
    if (name == "--nproc-per-node") {
      ok = parse_int(value, 1, kMaxProcPerNode, &opt->nproc_per_node);
      expected = "an integer from 1 to " + std::to_string(kMaxProcPerNode);
    } else if (name == "--nnodes") {
      ok = parse_int(value, 1, kMaxNodes, &opt->nnodes);
      expected = "an integer from 1 to " + std::to_string(kMaxNodes);
    } else if (name == "--node-rank") {
      ok = parse_int(value, 0, kMaxNodes - 1, &opt->node_rank);
      expected = "an integer >= 0";
    } else if (name == "--master-addr") {
      ok = !value.empty();
      opt->master_addr = value;
      expected = "a host name or address";
    } else if (name == "--master-port") {
      ok = parse_int(value, 1, 65535, &opt->master_port);
      expected = "a port from 1 to 65535";
    } else {  // --grace-seconds
      ok = parse_seconds(value, &opt->grace_seconds);
      expected =
          "a number of seconds from 0 to " + std::to_string(static_cast<int>(kMaxGraceSeconds));
    }
    if (!ok) {
      *err = "invalid value '" + value + "' for " + spelled + ": expected " + expected;
      return ParseResult::kError;
    }
  }
  for (; i < argc; ++i) opt->command.emplace_back(argv[i]);

  if (opt->command.empty()) {
    *err = "no PROGRAM given";
    return ParseResult::kError;
  }
  if (opt->node_rank >= opt->nnodes) {
    *err = "--node-rank " + std::to_string(opt->node_rank) + " must be less than --nnodes " +
           std::to_string(opt->nnodes);
    return ParseResult::kError;
  }
  if (static_cast<long long>(opt->nnodes) * opt->nproc_per_node > INT_MAX) {
    *err = "--nnodes times --nproc-per-node is too large";
    return ParseResult::kError;
  }
  return ParseResult::kRun;
}

// ---------------------------------------------------------------- program lookup

// Finds PROGRAM as execvp would: names with a '/' are used as they are, others
// are searched in PATH. Returns 0 with *path set, or the exit code after
// printing why not.
int resolve_program(const std::string& prog, std::string* path) {
  struct stat st;
  if (prog.find('/') != std::string::npos) {
    if (stat(prog.c_str(), &st) != 0) {
      int e = errno;
      print_error("cannot run '%s': %s", prog.c_str(), std::strerror(e));
      return e == ENOENT || e == ENOTDIR ? kExitNotFound : kExitNotExecutable;
    }
    if (S_ISDIR(st.st_mode)) {
      print_error("cannot run '%s': %s", prog.c_str(), std::strerror(EISDIR));
      return kExitNotExecutable;
    }
    if (access(prog.c_str(), X_OK) != 0) {
      print_error("cannot run '%s': %s", prog.c_str(), std::strerror(errno));
      return kExitNotExecutable;
    }
    *path = prog;
    return 0;
  }
  if (!prog.empty()) {
    const char* env_path = std::getenv("PATH");
    std::string search = env_path ? env_path : "/usr/local/bin:/bin:/usr/bin";
    std::string not_executable;
    size_t start = 0;
    for (;;) {
      size_t colon = search.find(':', start);
      std::string dir =
          search.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
      std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + prog;
      if (stat(candidate.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
        if (access(candidate.c_str(), X_OK) == 0) {
          *path = candidate;
          return 0;
        }
        if (not_executable.empty()) not_executable = candidate;
      }
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
    if (!not_executable.empty()) {
      print_error("cannot run '%s' (found %s): %s", prog.c_str(), not_executable.c_str(),
                  std::strerror(EACCES));
      return kExitNotExecutable;
    }
  }
  print_error("'%s': command not found (not a file and not in PATH)", prog.c_str());
  return kExitNotFound;
}

// ---------------------------------------------------------------- master port

// Binds port 0 on the address and returns the port the kernel chose, or -1.
int bound_port(const sockaddr* sa, socklen_t len) {
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int port = -1;
  sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (bind(fd, sa, len) == 0 && getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &sl) == 0) {
    if (ss.ss_family == AF_INET)
      port = ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    else if (ss.ss_family == AF_INET6)
      port = ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  }
  close(fd);
  return port > 0 ? port : -1;
}

// A port that is free right now on the master address (so that parallel jobs
// on one host do not collide). Falls back to the wildcard address when the
// master address is not local. Returns -1 after printing an error.
int pick_free_port(const std::string& addr) {
  addrinfo hints;
  std::memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(addr.c_str(), "0", &hints, &res);
  if (rc != 0) {
    print_error("cannot resolve master address '%s': %s", addr.c_str(), gai_strerror(rc));
    return -1;
  }
  int port = -1;
  for (addrinfo* ai = res; ai && port < 0; ai = ai->ai_next)
    port = bound_port(ai->ai_addr, ai->ai_addrlen);
  freeaddrinfo(res);
  if (port < 0) {
    sockaddr_in any4;
    std::memset(&any4, 0, sizeof any4);
    any4.sin_family = AF_INET;
    any4.sin_addr.s_addr = htonl(INADDR_ANY);
    port = bound_port(reinterpret_cast<sockaddr*>(&any4), sizeof any4);
  }
  if (port < 0) print_error("cannot find a free port for MASTER_PORT: %s", std::strerror(errno));
  return port;
}

// ---------------------------------------------------------------- supervisor

// While stopping, groups whose leader is gone are checked this often: their
// last member need not be our child, so its exit may not reach us as SIGCHLD.
constexpr int kGroupPollMs = 100;
// After SIGKILL, how long to wait for leaderless groups to empty before giving
// up on members that cannot be killed (another user's, or unreaped zombies).
constexpr double kKillWaitSeconds = 10;

struct Rank {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;             // the rank's own process; also its process group id
  bool running = false;       // pid not reaped yet
  bool group = false;         // the process group may still have members
  bool told_stopped = false;  // a SIGTTIN/SIGTTOU stop was reported
};

// "1 rank's process group" / "3 ranks' process groups"
std::string groups_of(int n) {
  return std::to_string(n) + (n == 1 ? " rank's process group" : " ranks' process groups");
}

int poll_ms(double seconds) {
  double ms = std::ceil(seconds * 1000);
  return ms < 0 ? 0 : ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

class Supervisor {
 public:
  Supervisor(const Options& opt, std::string path, int master_port)
      : opt_(opt), path_(std::move(path)), master_port_(master_port) {}
  ~Supervisor() {
    if (sfd_ >= 0) close(sfd_);
  }

  int run();

 private:
  bool setup_signals();
  bool start_ranks();
  std::vector<std::string> rank_environment(const Rank& r) const;
  void handle_stop_signal(int sig);
  void suspend();
  void reap();
  void on_rank_exit(Rank* r, int status);
  void on_rank_stopped(Rank* r, int sig);
  void begin_stop(int sig);
  void escalate(const char* why);
  int signal_groups(int sig);
  int forget_empty_groups();

  const Options& opt_;
  const std::string path_;
  const int master_port_;
  std::vector<Rank> ranks_;
  int running_ = 0;  // ranks not reaped yet

  sigset_t old_mask_;
  int sfd_ = -1;

  bool stopping_ = false;  // the ranks have been asked to stop
  bool killed_ = false;    // ... and sent SIGKILL
  int stop_sig_ = 0;       // what they were asked with
  double kill_at_ = 0;     // when SIGKILL follows
  double killed_at_ = 0;   // when it was sent
  int launcher_sig_ = 0;   // oslo-run got this stop signal first
  int exit_code_ = 0;
};

bool Supervisor::setup_signals() {
  // An inherited SIG_IGN for SIGCHLD would make the kernel reap the ranks.
  signal(SIGCHLD, SIG_DFL);
  // Processes of a rank whose parent exits (a wrapper script's background job)
  // are re-parented to oslo-run instead of init: they stay in reach, their
  // process groups stay in this session, and their zombies are reaped here, so
  // that an emptied process group is seen as empty. Best effort (Linux >= 3.4).
  prctl(PR_SET_CHILD_SUBREAPER, 1);

  sigset_t events;
  sigemptyset(&events);
  sigaddset(&events, SIGCHLD);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP}) {
    // Like shells and Python: a stop signal ignored by whoever started us
    // (e.g. SIGINT for `cmd &`, SIGHUP under nohup) stays ignored.
    struct sigaction sa;
    if (sigaction(sig, nullptr, &sa) == 0 && sa.sa_handler == SIG_IGN) continue;
    sigaddset(&events, sig);
  }
  sigset_t block = events;
  // EPIPE instead of dying on a closed stderr; never read, the ranks get
  // their own fresh pending set and the original mask.
  sigaddset(&block, SIGPIPE);
  if (sigprocmask(SIG_BLOCK, &block, &old_mask_) != 0) {
    print_error("sigprocmask: %s", std::strerror(errno));
    return false;
  }
  sfd_ = signalfd(-1, &events, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd_ < 0) {
    print_error("signalfd: %s", std::strerror(errno));
    return false;
  }
  return true;
}

std::vector<std::string> Supervisor::rank_environment(const Rank& r) const {
  const std::pair<const char*, std::string> vars[] = {
      {"RANK", std::to_string(r.rank)},
      {"LOCAL_RANK", std::to_string(r.local_rank)},
      {"WORLD_SIZE", std::to_string(opt_.nnodes * opt_.nproc_per_node)},
      {"LOCAL_WORLD_SIZE", std::to_string(opt_.nproc_per_node)},
      {"GROUP_RANK", std::to_string(opt_.node_rank)},
      {"MASTER_ADDR", opt_.master_addr},
      {"MASTER_PORT", std::to_string(master_port_)},
      {"OSLO_RUN", "1"},
  };
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    bool ours = false;
    for (const auto& v : vars) {
      size_t n = std::strlen(v.first);
      ours = ours || (std::strncmp(*e, v.first, n) == 0 && (*e)[n] == '=');
    }
    if (!ours) env.emplace_back(*e);
  }
  for (const auto& v : vars) env.push_back(std::string(v.first) + "=" + v.second);
  return env;
}

bool Supervisor::start_ranks() {
  std::vector<char*> argv;
  for (const auto& a : opt_.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // What execvp does for a file without a #! line: run it with /bin/sh.
  std::vector<char*> sh_argv = {const_cast<char*>("sh"), const_cast<char*>(path_.c_str())};
  sh_argv.insert(sh_argv.end(), argv.begin() + 1, argv.end());

  const pid_t launcher = getpid();
  ranks_.resize(opt_.nproc_per_node);
  std::fflush(nullptr);
  for (int i = 0; i < opt_.nproc_per_node; ++i) {
    Rank& r = ranks_[i];
    r.local_rank = i;
    r.rank = opt_.node_rank * opt_.nproc_per_node + i;
    const std::vector<std::string> env = rank_environment(r);
    std::vector<char*> envp;
    for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);

    pid_t pid = fork();
    if (pid == 0) {
      // A process group of its own, so that the rank can be stopped together
      // with whatever it starts. Set in both processes: whichever runs first,
      // the group exists before the parent may signal it and before exec.
      if (setpgid(0, 0) != 0) {
        print_error("rank %d: setpgid: %s", r.rank, std::strerror(errno));
        _exit(kExitLauncherError);
      }
      // Die with the launcher, also when it died before prctl took effect.
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != launcher) _exit(kExitLauncherError);
      sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
      execve(path_.c_str(), argv.data(), envp.data());
      int e = errno;
      if (e == ENOEXEC) execve("/bin/sh", sh_argv.data(), envp.data());
      print_error("rank %d: cannot run '%s': %s", r.rank, path_.c_str(), std::strerror(e));
      _exit(e == ENOENT ? kExitNotFound : kExitNotExecutable);
    }
    if (pid < 0) {
      print_error("cannot start rank %d: fork: %s", r.rank, std::strerror(errno));
      return false;
    }
    // EACCES when the child has exec'd already: it did setpgid itself first.
    setpgid(pid, pid);
    r.pid = pid;
    r.running = true;
    r.group = true;
    ++running_;
  }
  return true;
}

// Sends sig (0: none, just a check) to the process group of every rank that
// may still have one; returns how many groups exist. A group is forgotten
// once it is found empty and never signalled again: its id may be reused then.
// Until that, the id cannot be reused, as the kernel keeps it while any
// member, zombies included, is left; the leader is one until we reap it.
int Supervisor::signal_groups(int sig) {
  int n = 0;
  for (Rank& r : ranks_) {
    if (!r.group) continue;
    if (kill(-r.pid, sig) == 0 || errno != ESRCH) {
      ++n;  // EPERM: members exist, but not one could be signalled
    } else if (r.running) {
      // Not reached (setpgid in both processes); signal the rank at least.
      if (kill(r.pid, sig) == 0) ++n;
    } else {
      r.group = false;
    }
  }
  return n;
}

// Forgets the groups found empty; returns how many groups are left whose
// leader has been reaped (the leftovers of ranks that exited).
int Supervisor::forget_empty_groups() {
  int leaderless = 0;
  for (Rank& r : ranks_) {
    if (!r.group || r.running) continue;
    if (kill(-r.pid, 0) == 0 || errno != ESRCH)
      ++leaderless;
    else
      r.group = false;
  }
  return leaderless;
}

void Supervisor::begin_stop(int sig) {
  stopping_ = true;
  stop_sig_ = sig;
  kill_at_ = monotonic_seconds() + opt_.grace_seconds;
  if (signal_groups(sig) > 0) {
    // As systemd does: members stopped by job control (Ctrl-Z, or SIGTTIN for
    // reading the terminal) act on the signal only once they are continued.
    signal_groups(SIGCONT);
  }
}

void Supervisor::escalate(const char* why) {
  killed_ = true;
  killed_at_ = monotonic_seconds();
  const int n = signal_groups(0);
  if (n > 0) print_error("%s; sending SIGKILL to %s", why, groups_of(n).c_str());
  signal_groups(SIGKILL);
}

void Supervisor::handle_stop_signal(int sig) {
  const std::string name = signal_name(sig);
  if (stopping_) {
    if (!killed_) {
      std::string why = "received " + name + " again";
      if (launcher_sig_ == 0) why = "received " + name + " while stopping";
      escalate(why.c_str());
    }
    return;
  }
  launcher_sig_ = sig;
  exit_code_ = 128 + sig;
  print_error("received %s; forwarding it to %s (SIGKILL after %g s)", name.c_str(),
              groups_of(signal_groups(0)).c_str(), opt_.grace_seconds);
  begin_stop(sig);
}

// SIGTSTP (Ctrl-Z): the ranks are not in the terminal's foreground process
// group, so they are stopped here; then oslo-run stops itself by the default
// action, so that the shell sees a stopped job. The SIGCONT of `fg` or `bg`
// resumes oslo-run, which resumes the ranks. (In an orphaned process group the
// kernel discards the stop; then the ranks are resumed at once.)
void Supervisor::suspend() {
  signal_groups(SIGTSTP);
  sigset_t tstp;
  sigemptyset(&tstp);
  sigaddset(&tstp, SIGTSTP);
  raise(SIGTSTP);                            // pending: it is blocked
  sigprocmask(SIG_UNBLOCK, &tstp, nullptr);  // delivered: stopped until SIGCONT
  sigprocmask(SIG_BLOCK, &tstp, nullptr);
  signal_groups(SIGCONT);
}

void Supervisor::on_rank_exit(Rank* r, int status) {
  r->running = false;
  --running_;
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (ok || stopping_) return;  // exits caused by our own stop are not news

  std::string what;
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    exit_code_ = 128 + sig;
    std::string detail = signal_name(sig);
    if (WCOREDUMP(status)) detail += detail.empty() ? "core dumped" : ", core dumped";
    what = "was killed by signal " + std::to_string(sig);
    if (!detail.empty()) what += " (" + detail + ")";
  } else {
    exit_code_ = WEXITSTATUS(status);
    what = "exited with status " + std::to_string(exit_code_);
  }
  print_error("rank %d (local %d, pid %d) %s%s", r->rank, r->local_rank, static_cast<int>(r->pid),
              what.c_str(), running_ > 0 ? "; stopping the other ranks" : "");
  begin_stop(SIGTERM);
}

// A rank's own process was stopped. Terminal I/O is the case worth a word:
// a rank is in a background process group of the terminal, so reading from
// it (or writing under `stty tostop`) stops the rank until it is continued.
void Supervisor::on_rank_stopped(Rank* r, int sig) {
  if ((sig != SIGTTIN && sig != SIGTTOU) || r->told_stopped) return;
  r->told_stopped = true;
  print_error(
      "rank %d (local %d, pid %d) was stopped by %s: ranks run in process groups of their own, "
      "which cannot read from the terminal (nor write to it under 'stty tostop')",
      r->rank, r->local_rank, static_cast<int>(r->pid), signal_name(sig).c_str());
}

void Supervisor::reap() {
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG | WUNTRACED);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) return;
    // Only ranks not yet reaped are matched: their pids cannot have been reused.
    Rank* rank = nullptr;
    for (Rank& r : ranks_) {
      if (r.running && r.pid == pid) {
        rank = &r;
        break;
      }
    }
    // Other children are orphans of the ranks re-parented to us (we are a
    // subreaper), or were inherited from whoever exec'd us: reaped, ignored.
    if (!rank) continue;
    if (WIFSTOPPED(status))
      on_rank_stopped(rank, WSTOPSIG(status));
    else
      on_rank_exit(rank, status);
  }
}

int Supervisor::run() {
  if (!setup_signals()) return kExitLauncherError;
  if (!start_ranks()) {
    exit_code_ = kExitLauncherError;
    begin_stop(SIGTERM);
  }

  // The job ends when every rank has been reaped and every rank's process
  // group is empty: what the ranks started is stopped with them.
  for (;;) {
    const int leaderless = forget_empty_groups();
    if (running_ == 0 && leaderless == 0) break;
    if (running_ == 0 && !stopping_) {
      print_error("all ranks exited 0; stopping the processes left in %s (SIGKILL after %g s)",
                  groups_of(leaderless).c_str(), opt_.grace_seconds);
      begin_stop(SIGTERM);
      continue;
    }

    const double now = monotonic_seconds();
    int timeout_ms = -1;
    if (stopping_ && !killed_) {
      if (now >= kill_at_) {
        char why[160];
        std::snprintf(why, sizeof why, "the %g s grace period after %s is over", opt_.grace_seconds,
                      signal_name(stop_sig_).c_str());
        escalate(why);
        continue;
      }
      timeout_ms = poll_ms(kill_at_ - now);
    }
    if (killed_ && running_ == 0) {
      // Only leaderless groups are left; ranks themselves are waited for.
      if (now >= killed_at_ + kKillWaitSeconds) {
        print_error("processes are left in %s %g s after SIGKILL; not waiting for them",
                    groups_of(leaderless).c_str(), kKillWaitSeconds);
        break;
      }
    }
    if (stopping_ && leaderless > 0 && (timeout_ms < 0 || timeout_ms > kGroupPollMs))
      timeout_ms = kGroupPollMs;

    pollfd pfd = {sfd_, POLLIN, 0};
    int rc = poll(&pfd, 1, timeout_ms);
    if (rc < 0 && errno != EINTR) {
      print_error("poll: %s", std::strerror(errno));
      if (!killed_) escalate("internal error");
    }
    // Stop signals first: if the ranks got one too (a `kill` of the whole
    // session, a batch system signalling every process of the job), their
    // exits then count as an interrupt, not as rank failures.
    signalfd_siginfo si;
    while (read(sfd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
      const int sig = static_cast<int>(si.ssi_signo);
      if (sig == SIGTSTP)
        suspend();
      else if (sig != SIGCHLD)
        handle_stop_signal(sig);
    }
    reap();
  }
  return exit_code_;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  std::string err;
  switch (parse_args(argc, argv, &opt, &err)) {
    case ParseResult::kHelp: std::fputs(kUsage, stdout); return 0;
    case ParseResult::kVersion: std::printf("oslo-run (oslo) %s\n", OSLO_RUN_VERSION); return 0;
    case ParseResult::kError:
      print_error("%s\nTry 'oslo-run --help' for more information.", err.c_str());
      return kExitUsage;
    case ParseResult::kRun: break;
  }

  std::string path;
  if (int rc = resolve_program(opt.command[0], &path)) return rc;

  int port = opt.master_port;
  if (port == 0) {
    port = opt.nnodes == 1 ? pick_free_port(opt.master_addr) : kDefaultMultiNodePort;
    if (port < 0) return kExitLauncherError;
  }

  Supervisor supervisor(opt, path, port);
  return supervisor.run();
}
