// launcher_test env, env_multinode, usage, missing_program, success_args:
// the ranks' environment and arguments, and oslo-run's command line.
#include "launcher_util.hpp"

namespace launcher_test {

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

}  // namespace launcher_test
