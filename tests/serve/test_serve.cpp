// core/serve's tests: test_serve pool|scheduler|text, test_serve engine FIXTURES_DIR.
#include <cstdio>
#include <string>

#include "tests/serve/serve_common.hpp"

int main(int argc, char** argv) {
  const std::string group = argc >= 2 ? argv[1] : "";
  std::vector<struct CMUnitTest> tests;
  if (group == "pool")
    tests = pool_tests();
  else if (group == "scheduler")
    tests = scheduler_tests();
  else if (group == "text")
    tests = text_tests();
  else if (group == "engine" && argc == 3)
    tests = engine_tests(argv[2]);
  else {
    fprintf(stderr, "usage: %s pool|scheduler|text | engine FIXTURES_DIR\n", argv[0]);
    return 2;
  }
  return _cmocka_run_group_tests(("serve_" + group).c_str(), tests.data(), tests.size(), nullptr,
                                 nullptr);
}
