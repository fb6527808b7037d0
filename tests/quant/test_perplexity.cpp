// Perplexity of a model on a text, through the C ABI, loaded in each of the
// dtypes given: what tests/quant/test_quant_perplexity.sh compares (f32 vs
// q8_0 vs q4_0 on a model oslo trained on real text).
//
//   quant_perplexity MODEL TOKENIZER_DIR TEXT_FILE SEQ_LEN DTYPE...
//
// The text is tokenized once and cut into windows of SEQ_LEN tokens (the
// last partial one dropped); each window's tokens 1.. are scored by the
// logits at the previous position (log-softmax in double). Prints one line
// per dtype: "DTYPE ppl PPL tokens N".
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/common/dtype.hpp"
#include "oslo.h"

namespace {

void ok(oslo_status st, const char* what) {
  if (st == OSLO_OK) return;
  std::fprintf(stderr, "%s: %s\n", what, oslo_last_error());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s MODEL TOKENIZER_DIR TEXT_FILE SEQ_LEN DTYPE...\n", argv[0]);
    return 2;
  }
  const std::string model = argv[1], tokdir = argv[2], textf = argv[3];
  const int64_t S = std::atoll(argv[4]);
  std::ifstream f(textf);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  if (text.empty() || S < 2) return std::fprintf(stderr, "empty text or SEQ_LEN < 2\n"), 2;
  oslo_tokenizer* tok = nullptr;
  ok(oslo_tokenizer_load(tokdir.c_str(), &tok), "tokenizer");
  std::vector<int64_t> ids(text.size() + 16);
  size_t n = 0;
  ok(oslo_tokenizer_encode(tok, text.data(), text.size(), 0, ids.data(), ids.size(), &n),
     "encode");
  ids.resize(n);
  const int64_t W = static_cast<int64_t>(n) / S;
  if (W < 1) return std::fprintf(stderr, "text shorter than one window\n"), 2;
  oslo_context* ctx = nullptr;
  ok(oslo_context_create("{\"num_threads\": 2}", &ctx), "context");
  for (int i = 5; i < argc; ++i) {
    oslo_dtype dt;
    if (!oslo::dtype_parse(argv[i], &dt)) return std::fprintf(stderr, "bad dtype %s\n", argv[i]), 2;
    oslo_model_options o;
    ok(oslo_model_options_init(&o, OSLO_MODEL_OPTIONS_VERSION), "options");
    o.dtype = dt;
    oslo_model* m = nullptr;
    ok(oslo_model_load(ctx, model.c_str(), &o, &m), "load");
    oslo_model_info info;
    ok(oslo_model_get_info(m, &info, nullptr), "info");
    const int64_t V = info.vocab_size;
    std::vector<int64_t> mask(static_cast<size_t>(S), 1);
    std::vector<float> logits(static_cast<size_t>(S * V));
    double nll = 0;
    int64_t count = 0;
    for (int64_t w = 0; w < W; ++w) {
      const int64_t* x = ids.data() + w * S;
      ok(oslo_model_forward(m, x, mask.data(), nullptr, 1, S, OSLO_MODEL_OUTPUT_LOGITS,
                            logits.data(), logits.size()),
         "forward");
      for (int64_t t = 0; t + 1 < S; ++t) {
        const float* row = logits.data() + t * V;
        double mx = row[0];
        for (int64_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
        double z = 0;
        for (int64_t v = 0; v < V; ++v) z += std::exp(row[v] - mx);
        nll += std::log(z) + mx - row[x[t + 1]];
        ++count;
      }
    }
    std::printf("%s ppl %.6f tokens %lld\n", argv[i], std::exp(nll / static_cast<double>(count)),
                static_cast<long long>(count));
    oslo_model_destroy(m);
  }
  oslo_context_destroy(ctx);
  oslo_tokenizer_destroy(tok);
  return 0;
}
