// Packed weight copies (Backend::pack_weight, made at a model's first
// inference run) against a model that keeps none (OSLO_PREPACK=0), through
// the C ABI in one process: the same logits before training, and after an
// optimizer step changed the weights in place the packed model's logits
// follow the new weights (its copies were dropped and made again) instead of
// staying with the old ones.
//
//   model_prepack_test MODEL_DIR
//
// bf16 weights, 2 x 12 tokens (products of 24 rows: the packed path, not
// the few-rows one). Where the backend packs nothing (a CPU without a bf16
// matmul) both models compute alike and the test still checks the step.
#include <cmath>
#include <cstdio>
#include <cstdlib>
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
  Run(const char* dir, const char* prepack, const char* init) {
    setenv("OSLO_PREPACK", prepack, 1);
    const std::string cfg = std::string("{\"num_threads\": 2, \"rank\": 0, \"world_size\": 1, ") +
                            "\"init_method\": \"file://" + init + "\"}";
    std::remove(init);
    must(oslo_context_create(cfg.c_str(), &ctx), "context");
    std::remove(init);
    oslo_model_options mo;
    must(oslo_model_options_init(&mo, OSLO_MODEL_OPTIONS_VERSION), "model options");
    mo.dtype = OSLO_DTYPE_BF16;
    must(oslo_model_load(ctx, dir, &mo, &m), "load");
    oslo_model_info info;
    must(oslo_model_get_info(m, &info, nullptr), "info");
    vocab = info.vocab_size;
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
  std::vector<float> logits(const std::vector<int64_t>& ids) {
    std::vector<float> out(ids.size() * static_cast<size_t>(vocab));
    must(oslo_model_forward(m, ids.data(), nullptr, nullptr, 2, 12, OSLO_MODEL_OUTPUT_LOGITS,
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

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR\n", argv[0]);
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
