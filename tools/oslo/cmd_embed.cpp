// oslo embed: sentence embeddings and their cosine similarity table.
#include "tools/oslo/cli.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace oslo_cli {

namespace {

const char* kEmbedHelp =
    "usage: oslo embed --model DIR [--sentence TEXT]... [--file F] [--json] [--no-normalize]\n"
    "                  [--dtype f32|bf16|f16] [--tokenizer DIR] [--tp N] [--pp N]\n"
    "                  [--threads N] [--device cpu|cuda[:N]] [--backend NAME]\n"
    "                  [--backend-options JSON] [--communicator auto|backend|host]\n"
    "                  [--timeout SECONDS]\n"
    "Sentence embeddings of an encoder model (mean pooling over the attention mask,\n"
    "then L2 normalisation, as sentence-transformers computes them). Sentences come\n"
    "from --sentence and from --file (one per line). Prints the cosine similarity\n"
    "table, or with --json the embeddings. --timeout (default: $OSLO_TIMEOUT, else\n"
    "300) fails the ranks when a peer stops.\n";

}  // namespace

int cmd_embed(int argc, char** argv) {
  Args a =
      parse(argc, argv, 2, {"json", "no-normalize", "help"}, model_options({"sentence", "file"}));
  if (a.has("help")) return std::printf("%s", kEmbedHelp), 0;
  if (!a.pos.empty()) die("unexpected argument \"" + a.pos[0] + "\" (see --help)", 2);
  std::vector<std::string> sents = a.all("sentence");
  if (a.has("file")) {
    std::ifstream f(a.get("file"));
    if (!f) die("cannot open " + a.get("file"));
    for (std::string line; std::getline(f, line);)
      if (!line.empty()) sents.push_back(line);
  }
  if (sents.empty()) die("give at least one --sentence or a --file", 2);
  oslo_context* ctx = context(a);
  oslo_model* m = load_model(ctx, a);
  oslo_tokenizer* tok = load_tokenizer(a, true);
  std::vector<std::vector<int64_t>> ids;
  size_t S = 0;
  for (const auto& s : sents) {
    ids.push_back(encode(tok, s, true));
    S = std::max(S, ids.back().size());
  }
  const int64_t B = static_cast<int64_t>(sents.size());
  std::vector<int64_t> flat(static_cast<size_t>(B) * S, 0), mask(flat.size(), 0);
  for (int64_t b = 0; b < B; ++b)
    for (size_t i = 0; i < ids[static_cast<size_t>(b)].size(); ++i) {
      flat[static_cast<size_t>(b) * S + i] = ids[static_cast<size_t>(b)][i];
      mask[static_cast<size_t>(b) * S + i] = 1;
    }
  oslo_model_info info;
  check(oslo_model_get_info(m, &info, nullptr), "info");
  const int64_t H = info.hidden_size;
  std::vector<float> e(static_cast<size_t>(B * H));
  check(oslo_model_embed(m, flat.data(), mask.data(), B, static_cast<int64_t>(S),
                         !a.has("no-normalize"), e.data(), e.size()),
        "embed");
  if (g_rank == 0) {
    if (a.has("json")) {
      std::printf("[");
      for (int64_t b = 0; b < B; ++b) {
        std::printf("%s[", b ? ",\n " : "");
        for (int64_t i = 0; i < H; ++i)
          std::printf("%s%.8g", i ? ", " : "", e[static_cast<size_t>(b * H + i)]);
        std::printf("]");
      }
      std::printf("]\n");
    } else {
      for (int64_t b = 0; b < B; ++b)
        std::printf("[%lld] %s\n", static_cast<long long>(b),
                    sents[static_cast<size_t>(b)].c_str());
      std::printf("\ncosine similarity\n     ");
      for (int64_t j = 0; j < B; ++j) std::printf(" [%2lld]", static_cast<long long>(j));
      std::printf("\n");
      for (int64_t i = 0; i < B; ++i) {
        std::printf("[%2lld] ", static_cast<long long>(i));
        for (int64_t j = 0; j < B; ++j) {
          double d = 0, ni = 0, nj = 0;
          for (int64_t k = 0; k < H; ++k) {
            const double x = e[static_cast<size_t>(i * H + k)],
                         y = e[static_cast<size_t>(j * H + k)];
            d += x * y;
            ni += x * x;
            nj += y * y;
          }
          std::printf(" %.2f", d / std::sqrt(ni * nj));
        }
        std::printf("\n");
      }
    }
  }
  oslo_tokenizer_destroy(tok);
  oslo_model_destroy(m);
  oslo_context_destroy(ctx);
  return 0;
}

}  // namespace oslo_cli
