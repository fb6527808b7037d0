// For tests/cli/test_cli_train_ids.sh: writes the token ids `oslo train`
// trains on for a text corpus, as JSON lines {"input_ids": [...]}, one per
// document: a .txt is one document, a .jsonl one per non-blank line's
// "text" (run_clm's documents); each is tokenized through the C API with
// the tokenizer's special tokens and followed by its EOS, as docs/CLI.md
// says the text path does.
// Usage: oslo_test_tokenize TOKENIZER_DIR IN.txt|IN.jsonl OUT.jsonl
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "oslo.h"

namespace {

int fail(const std::string& msg) {
  std::fprintf(stderr, "oslo_test_tokenize: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) return fail("usage: oslo_test_tokenize TOKENIZER_DIR IN OUT");
  oslo_tokenizer* tok = nullptr;
  if (oslo_tokenizer_load(argv[1], &tok) != OSLO_OK) return fail(oslo_last_error());
  int64_t eos = -1;
  if (oslo_tokenizer_special_id(tok, OSLO_SPECIAL_TOKEN_EOS, &eos) != OSLO_OK || eos < 0)
    return fail("no EOS token");
  const std::string in = argv[2];
  std::vector<std::string> docs;
  std::ifstream f(in, std::ios::binary);
  if (!f) return fail("cannot open " + in);
  if (in.size() > 6 && in.compare(in.size() - 6, 6, ".jsonl") == 0) {
    for (std::string line; std::getline(f, line);)
      if (line.find_first_not_of(" \t\r") != std::string::npos)
        docs.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
  } else {
    std::stringstream ss;
    ss << f.rdbuf();
    docs.push_back(ss.str());
  }
  std::ofstream out(argv[3], std::ios::binary);
  for (const std::string& d : docs) {
    if (d.empty()) continue;
    size_t n = 0;
    if (oslo_tokenizer_encode(tok, d.data(), d.size(), 1, nullptr, 0, &n) != OSLO_OK)
      return fail(oslo_last_error());
    std::vector<int64_t> ids(n);
    if (oslo_tokenizer_encode(tok, d.data(), d.size(), 1, ids.data(), n, &n) != OSLO_OK)
      return fail(oslo_last_error());
    ids.push_back(eos);
    out << nlohmann::json{{"input_ids", ids}}.dump() << "\n";
  }
  oslo_tokenizer_destroy(tok);
  return out ? 0 : fail("cannot write " + std::string(argv[3]));
}
