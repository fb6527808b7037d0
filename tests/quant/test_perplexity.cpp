// Perplexity of a model on a text, loaded in each of the dtypes given: what
// tests/quant/test_quant_perplexity.sh compares (f32 vs q8_0 vs q4_0 on a
// model oslo trained on real text, and the KV cache in f32 vs int8).
//
//   quant_perplexity MODEL TOKENIZER_DIR TEXT_FILE SEQ_LEN DTYPE...
//
// The text is tokenized once and cut into windows of SEQ_LEN tokens (the
// last partial one dropped); each window's tokens 1.. are scored by the
// logits at the previous position (log-softmax in double). A plain DTYPE
// (f32, q8_0, ...) runs each window as one forward through the C ABI;
// DTYPE+kv_f32 and DTYPE+kv_i8 feed the window one token at a time through
// the model's KV cache (generation's path, the cache in f32 or int8).
// Prints one line per dtype: "DTYPE ppl PPL tokens N".
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/common/dtype.hpp"
#include "core/context/config.hpp"
#include "core/context/context.hpp"
#include "core/model/model.hpp"
#include "oslo.h"

namespace {

void ok(oslo_status st, const char* what) {
  if (st == OSLO_OK) return;
  std::fprintf(stderr, "%s: %s\n", what, oslo_last_error());
  std::exit(1);
}

// -log p(next) from a row of logits, in double.
double nll_of(const float* row, int64_t V, int64_t next) {
  double mx = row[0];
  for (int64_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
  double z = 0;
  for (int64_t v = 0; v < V; ++v) z += std::exp(row[v] - mx);
  return std::log(z) + mx - row[next];
}

// The windows scored one token at a time through the KV cache in kv.
double cached_nll(const std::string& model, oslo_dtype wdt, oslo_dtype kv,
                  const std::vector<int64_t>& ids, int64_t W, int64_t S, int64_t* count) {
  // One thread: a decode step of this tiny model is a few microseconds of
  // work per op, where a second thread only adds barriers (and ctest -j2
  // runs another test beside it).
  oslo::Context ctx(oslo::Config::parse("{\"num_threads\": 1}"));
  oslo::ModelLoadOptions lo;
  lo.dtype = wdt;
  auto m = oslo::Model::load(ctx, model, lo);
  oslo::InferenceRunner& run = m->inference();
  const int64_t V = m->config().vocab_size;
  run.set_kv_dtype(kv);
  double nll = 0;
  for (int64_t w = 0; w < W; ++w) {
    const int64_t* x = ids.data() + w * S;
    run.reset(1, S);
    for (int64_t t = 0; t + 1 < S; ++t) {
      const std::vector<uint8_t> mask(static_cast<size_t>(t + 1), 1);
      const std::vector<float> logits = run.append({x[t]}, 1, mask);
      nll += nll_of(logits.data(), V, x[t + 1]);
      ++*count;
    }
  }
  return nll;
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
  ok(oslo_tokenizer_encode(tok, text.data(), text.size(), 0, ids.data(), ids.size(), &n), "encode");
  ids.resize(n);
  const int64_t W = static_cast<int64_t>(n) / S;
  if (W < 1) return std::fprintf(stderr, "text shorter than one window\n"), 2;
  oslo_context* ctx = nullptr;
  ok(oslo_context_create("{\"num_threads\": 2}", &ctx), "context");
  for (int i = 5; i < argc; ++i) {
    oslo_dtype dt;
    std::string name = argv[i];
    const size_t plus = name.find('+');
    if (plus != std::string::npos) {
      const std::string cache = name.substr(plus + 1);
      if (!oslo::dtype_parse(name.substr(0, plus).c_str(), &dt) ||
          (cache != "kv_f32" && cache != "kv_i8"))
        return std::fprintf(stderr, "bad dtype %s\n", argv[i]), 2;
      int64_t count = 0;
      double nll = 0;
      try {
        nll = cached_nll(model, dt, cache == "kv_i8" ? OSLO_DTYPE_I8 : OSLO_DTYPE_F32, ids, W, S,
                         &count);
      } catch (const std::exception& e) {
        return std::fprintf(stderr, "%s: %s\n", argv[i], e.what()), 1;
      }
      std::printf("%s ppl %.6f tokens %lld\n", argv[i], std::exp(nll / static_cast<double>(count)),
                  static_cast<long long>(count));
      continue;
    }
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
        nll += nll_of(logits.data() + t * V, V, x[t + 1]);
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
