// launcher_test pipe_eof, grandchildren_*, grandchild_noterm, leftovers,
// sigtstp, terminal: what the ranks start (their process groups) ends with
// them, and the launcher behaves in a terminal.
#include "launcher_util.hpp"

namespace launcher_test {

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

}  // namespace launcher_test
