// Temporary directories for C++ tests (shared by the checkpoint, rendezvous
// and gloo tests).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <stdlib.h>

namespace oslo_test {

// A fresh directory under TMPDIR (or /tmp) named <prefix>-XXXXXX.
inline std::string temp_dir(const char* prefix = "oslo-test") {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + prefix + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) {
    std::perror("mkdtemp");
    std::abort();
  }
  return buf.data();
}

inline void remove_tree(const std::string& dir) {
  std::string cmd = "rm -rf '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir.c_str());
}

}  // namespace oslo_test
