// Replays the regression corpus (tests/checkpoint/corpus) through the
// safetensors parser: files named ok-* must be accepted, bad-* rejected, and
// any file either accepted with all invariants holding or rejected with
// OSLO_ERR_FORMAT. Usage: test_st_corpus CORPUS_DIR
#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/checkpoint/ckpt_test_util.hpp"
#include "tests/checkpoint/st_check.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  std::vector<std::string> names;
  DIR* d = opendir(argv[1]);
  if (!d) {
    std::perror(argv[1]);
    return 2;
  }
  while (struct dirent* e = readdir(d))
    if (e->d_name[0] != '.') names.push_back(e->d_name);
  closedir(d);
  std::sort(names.begin(), names.end());
  int failures = 0, accepted = 0;
  for (const std::string& n : names) {
    const std::string bytes = ckpt_test::read_bytes(std::string(argv[1]) + "/" + n);
    bool ok = st_check::check_buffer(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    accepted += ok;
    bool want_ok = n.compare(0, 3, "ok-") == 0, want_bad = n.compare(0, 4, "bad-") == 0;
    if ((want_ok && !ok) || (want_bad && ok)) {
      std::fprintf(stderr, "FAIL %s: %s\n", n.c_str(), ok ? "accepted" : "rejected");
      ++failures;
    }
  }
  std::printf("%zu corpus files, %d accepted, %d failures\n", names.size(), accepted, failures);
  if (names.empty()) return 1;
  return failures ? 1 : 0;
}
