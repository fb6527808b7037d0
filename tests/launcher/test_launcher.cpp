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
//
// The tests are in test_launcher_env.cpp, test_launcher_signals.cpp and
// test_launcher_groups.cpp; the helpers in launcher_util.hpp / .cpp.
#include "launcher_util.hpp"

namespace launcher_test {
namespace {

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
}  // namespace launcher_test

using namespace launcher_test;

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
