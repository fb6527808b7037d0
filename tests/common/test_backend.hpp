// The backend the multi-rank suites run on, from the environment, as JSON
// members to splice into a context's config:
//   OSLO_TEST_BACKEND       "backend" (unset: the config's default, cpu);
//   OSLO_TEST_COMMUNICATOR  "communicator" (unset: the default, auto).
// With OSLO_TEST_BACKEND=guard the suites run on memory the host cannot read,
// through the staged host communicator, whose every buffer the guard checks
// is its own (tests/backend_plugin/CMakeLists.txt registers them so); with
// OSLO_TEST_BACKEND=cuda OSLO_TEST_COMMUNICATOR=host several ranks share
// one GPU (tools/gpu-check.sh).
#pragma once

#include <cstdlib>
#include <string>

namespace oslo_test {

// ", \"backend\": \"guard\", \"communicator\": \"host\"" or "" (values are
// the environment's, unquoted names only).
inline std::string test_backend_members() {
  std::string out;
  if (const char* b = std::getenv("OSLO_TEST_BACKEND"); b && *b)
    out += std::string(", \"backend\": \"") + b + "\"";
  if (const char* c = std::getenv("OSLO_TEST_COMMUNICATOR"); c && *c)
    out += std::string(", \"communicator\": \"") + c + "\"";
  return out;
}

}  // namespace oslo_test
