// launcher_test rank_exit, rank_signal, sigint, grace_period, second_sigint,
// launcher_killed: a failing rank or a stop signal ends every rank, with one
// line naming what happened, within the grace period.
#include "launcher_util.hpp"

namespace launcher_test {

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

}  // namespace launcher_test
