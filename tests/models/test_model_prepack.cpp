// Packed weight copies (Backend::pack_weight, made at a model's first
// inference run) against a model that keeps none (OSLO_PREPACK=0), through
// the C ABI in one process: the same logits before training, and after an
// optimizer step changed the weights in place the packed model's logits
// follow the new weights (its copies were dropped and made again) instead of
// staying with the old ones.
//
//   model_prepack_test MODEL_DIR
//   model_prepack_test MODEL_DIR q4_0|q8_0|q4_k
//
// bf16 weights, 2 x 12 tokens (products of 24 rows: the packed path, not
// the few-rows one). Where the backend packs nothing (a CPU without a bf16
// matmul) both models compute alike and the test still checks the step.
//
// With a block dtype (quantized at load): the default (OSLO_PREPACK unset:
// block-quantized weights packed) against OSLO_PREPACK=0, for 2 x 12 tokens
// and four times for 2 x 1 (the few-rows products of a decode step: the
// CPU's eight-row kernels). The integer sums are the same, only the f32 accumulation order
// differs: logits within 1e-4 of the largest |logit| and the same greedy
// token wherever the top two differ by more than that. The context's info
// log must name the packed copies (so the default did pack), and the
// config's "prepack" key must decide when OSLO_PREPACK is unset ("none":
// no copies) and yield to it when set.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "oslo.h"

namespace {

int g_fail = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAIL", what.c_str());
  if (!ok) ++g_fail;
}

void must(oslo_status st, const char* what) {
  if (st == OSLO_OK) return;
  std::fprintf(stderr, "%s: %s: %s\n", what, oslo_status_string(st), oslo_last_error());
  std::exit(1);
}

struct Run {
  oslo_context* ctx = nullptr;
  oslo_model* m = nullptr;
  oslo_optimizer* opt = nullptr;
  int64_t vocab = 0;
  Run(const char* dir, const char* prepack, const char* init, oslo_dtype dtype = OSLO_DTYPE_BF16,
      const char* cfg_prepack = nullptr) {
    if (prepack)
      setenv("OSLO_PREPACK", prepack, 1);
    else
      unsetenv("OSLO_PREPACK");
    const std::string cfg =
        std::string("{\"num_threads\": 2, \"rank\": 0, \"world_size\": 1, ") +
        (cfg_prepack ? std::string("\"prepack\": \"") + cfg_prepack + "\", " : std::string()) +
        "\"init_method\": \"file://" + init + "\"}";
    std::remove(init);
    must(oslo_context_create(cfg.c_str(), &ctx), "context");
    std::remove(init);
    oslo_model_options mo;
    must(oslo_model_options_init(&mo, OSLO_MODEL_OPTIONS_VERSION), "model options");
    mo.dtype = dtype;
    must(oslo_model_load(ctx, dir, &mo, &m), "load");
    oslo_model_info info;
    must(oslo_model_get_info(m, &info, nullptr), "info");
    vocab = info.vocab_size;
    if (dtype != OSLO_DTYPE_BF16) return;  // quantized: inference only
    oslo_optimizer_options oo;
    must(oslo_optimizer_options_init(&oo, OSLO_OPTIMIZER_OPTIONS_VERSION), "optimizer options");
    oo.kind = OSLO_OPTIMIZER_SGD;
    oo.lr = 0.5;
    must(oslo_optimizer_create(m, &oo, nullptr, &opt), "optimizer");
  }
  ~Run() {
    oslo_optimizer_destroy(opt);
    oslo_model_destroy(m);
    oslo_context_destroy(ctx);
  }
  std::vector<float> logits(const std::vector<int64_t>& ids, int64_t batch = 2) {
    std::vector<float> out(ids.size() * static_cast<size_t>(vocab));
    must(oslo_model_forward(m, ids.data(), nullptr, nullptr, batch,
                            static_cast<int64_t>(ids.size()) / batch, OSLO_MODEL_OUTPUT_LOGITS,
                            out.data(), out.size()),
         "forward");
    return out;
  }
  void step(const std::vector<int64_t>& ids) {
    oslo_train_step_result r;
    must(oslo_model_train_step(m, opt, ids.data(), nullptr, nullptr, 2, 12, &r), "train step");
  }
};

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
  return d;
}

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, std::fabs(double(x)));
  return m;
}

// Packed (the default) against plain quantized weights (module comment).
int quantized(const char* dir, const char* name) {
  const oslo_dtype dt = std::string(name) == "q4_0"   ? OSLO_DTYPE_Q4_0
                        : std::string(name) == "q8_0" ? OSLO_DTYPE_Q8_0
                        : std::string(name) == "q4_k" ? OSLO_DTYPE_Q4_K
                                                      : OSLO_DTYPE_F32;
  if (dt == OSLO_DTYPE_F32) {
    std::fprintf(stderr, "unknown dtype %s (q4_0, q8_0 or q4_k)\n", name);
    return 2;
  }
  // Runs fn with the info log on and stderr caught; returns what it wrote.
  auto info_log = [](const std::function<void()>& fn) {
    std::FILE* f = std::tmpfile();
    if (!f) std::exit(2);
    std::fflush(stderr);
    const int keep = dup(2);
    dup2(fileno(f), 2);
    setenv("OSLO_LOG_LEVEL", "info", 1);
    fn();
    std::fflush(stderr);
    dup2(keep, 2);
    close(keep);
    unsetenv("OSLO_LOG_LEVEL");
    std::string text;
    std::rewind(f);
    for (int c; (c = std::fgetc(f)) != EOF;) text.push_back(static_cast<char>(c));
    std::fclose(f);
    return text;
  };
  const std::string kPacked = "model: packed copies of";
  // Whether a model loaded with the config's "prepack" cfg (nullptr: none
  // given) and OSLO_PREPACK env (nullptr: unset) says that it packed.
  auto packs = [&](const char* env, const char* cfg) {
    return info_log([&] {
             Run r(dir, env, "/tmp/oslo-prepack-test-s", dt, cfg);
             r.logits({1, 2}, 2);
           }).find(kPacked) != std::string::npos;
  };
  check(!packs(nullptr, "none"), std::string(name) + ": config \"prepack\": \"none\" packs none");
  check(packs(nullptr, "quantized"),
        std::string(name) + ": config \"prepack\": \"quantized\" packs");
  check(packs("1", "none"), std::string(name) + ": OSLO_PREPACK=1 overrides the config's \"none\"");
  check(!packs("0", "all"), std::string(name) + ": OSLO_PREPACK=0 overrides the config's \"all\"");
  std::vector<int64_t> ids(24);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 37 + 5) % 50);
  std::vector<std::vector<float>> got[2];
  size_t V = 0;
  // The default run (OSLO_PREPACK unset, no "prepack" key).
  const std::string log = info_log([&] {
    Run packed(dir, nullptr, "/tmp/oslo-prepack-test-q", dt);
    V = static_cast<size_t>(packed.vocab);
    got[0].push_back(packed.logits(ids));
    for (int64_t t = 0; t < 4; ++t) got[0].push_back(packed.logits({ids[t], ids[t + 1]}, 2));
  });
  check(log.find(kPacked) != std::string::npos,
        std::string("the default run packed the ") + name +
            " weights (its info log: " + log.substr(0, 400) + ")");
  {
    Run plain(dir, "0", "/tmp/oslo-prepack-test-r", dt);
    got[1].push_back(plain.logits(ids));
    for (int64_t t = 0; t < 4; ++t) got[1].push_back(plain.logits({ids[t], ids[t + 1]}, 2));
  }
  for (size_t c = 0; c < got[0].size(); ++c) {
    const auto &p = got[0][c], &q = got[1][c];
    const double scale = max_abs(q), d = max_diff(p, q), tol = 1e-4 * scale;
    check(d <= tol, std::string(name) + " call " + std::to_string(c) + ": packed and plain " +
                        "logits within " + std::to_string(tol) + " (max diff " + std::to_string(d) +
                        ", max |logit| " + std::to_string(scale) + ")");
    int64_t same = 0, rows = 0;
    for (size_t r = 0; r < q.size() / V; ++r) {
      const float* a = p.data() + r * V;
      const float* b = q.data() + r * V;
      size_t ia = 0, ib = 0;
      for (size_t v = 1; v < V; ++v) {
        if (a[v] > a[ia]) ia = v;
        if (b[v] > b[ib]) ib = v;
      }
      double second = -1e30;
      for (size_t v = 0; v < V; ++v)
        if (v != ib) second = std::max(second, double(b[v]));
      if (double(b[ib]) - second <= tol) continue;  // a tie within the tolerance
      ++rows;
      same += ia == ib;
    }
    check(rows > 0 && same == rows, std::string(name) + " call " + std::to_string(c) +
                                        ": greedy tokens equal (" + std::to_string(same) + " of " +
                                        std::to_string(rows) + " rows)");
  }
  std::printf("%s\n", g_fail ? "FAILED" : "PASSED");
  return g_fail ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3) return quantized(argv[1], argv[2]);
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [q4_0|q8_0|q4_k]\n", argv[0]);
    return 2;
  }
  std::vector<int64_t> ids(24);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 37 + 5) % 50);
  Run packed(argv[1], "1", "/tmp/oslo-prepack-test-a");
  Run plain(argv[1], "0", "/tmp/oslo-prepack-test-b");
  const auto p1 = packed.logits(ids), q1 = plain.logits(ids);
  const double before = max_diff(p1, q1);
  // Both are bf16 products with f32 accumulation; only the weight's layout
  // in memory differs.
  check(before <= 1e-3,
        "packed and plain logits agree before training (max diff " + std::to_string(before) + ")");
  packed.step(ids);
  plain.step(ids);
  const auto p2 = packed.logits(ids), q2 = plain.logits(ids);
  const double moved = max_diff(q2, q1), after = max_diff(p2, q2);
  check(moved > 0.05, "the step moved the logits (max change " + std::to_string(moved) + ")");
  check(after <= 1e-3 + 1e-2 * moved,
        "after the step the packed model follows the new weights (max diff " +
            std::to_string(after) + ", the step moved them by " + std::to_string(moved) + ")");
  std::printf("%s\n", g_fail ? "FAILED" : "PASSED");
  return g_fail ? 1 : 0;
}
