// The training options of the C ABI (0.3) on one rank: oslo_train_options
// (its defaults, its checks at oslo_optimizer_create, that its settings
// reach the trainer), oslo 0.2's oslo_optimizer_options versions refused
// by name, and oslo_model_pipeline_stats (the model's last train step).
//   model_capi_train_test GPT2_TINY_DIR
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "oslo.h"

namespace {

int g_fail = 0;

void check(bool ok, const std::string& what) {
  if (!ok) ++g_fail;
  std::printf("%s: %s\n", what.c_str(), ok ? "ok" : "FAIL");
}

void ok_or_die(oslo_status st, const char* what) {
  if (st != OSLO_OK) {
    std::fprintf(stderr, "%s: %s: %s\n", what, oslo_status_string(st), oslo_last_error());
    std::exit(1);
  }
}

// `st` is `want` and the message names `needle`.
void named(oslo_status st, oslo_status want, const char* needle, const std::string& what) {
  const std::string msg = st == OSLO_OK ? "" : oslo_last_error();
  check(st == want && msg.find(needle) != std::string::npos,
        what + " -> " + oslo_status_string(st) + ": " + msg.substr(0, 200));
}

oslo_model* load(oslo_context* ctx, const std::string& path) {
  oslo_model* m = nullptr;
  ok_or_die(oslo_model_load(ctx, path.c_str(), nullptr, &m), "load");
  return m;
}

bool zeros(const double (&s)[3]) {
  return s[0] == 0 && s[1] == 0 && s[2] == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: model_capi_train_test GPT2_TINY_DIR\n");
    return 2;
  }
  const std::string fix = argv[1];
  oslo_context* ctx = nullptr;
  ok_or_die(oslo_context_create(nullptr, &ctx), "context");
  oslo_model* m = load(ctx, fix);

  // Versions: 0.3 restarts oslo_optimizer_options at 1; oslo 0.2's 2 to 4
  // (which held the training settings) are refused naming the tool.
  oslo_optimizer_options o;
  oslo_train_options t;
  for (unsigned v = 2; v <= 4; ++v)
    named(oslo_optimizer_options_init(&o, v), OSLO_ERR_INVALID_ARGUMENT, "migrate-0.3",
          "0.2's optimizer options version " + std::to_string(v) + " at _init");
  named(oslo_train_options_init(nullptr, OSLO_TRAIN_OPTIONS_VERSION), OSLO_ERR_INVALID_ARGUMENT,
        "NULL", "train_options_init(NULL)");
  named(oslo_train_options_init(&t, 0), OSLO_ERR_INVALID_ARGUMENT, "version",
        "train options version 0");
  named(oslo_train_options_init(&t, 2), OSLO_ERR_INVALID_ARGUMENT, "oslo_train_options",
        "unknown train options version");
  ok_or_die(oslo_optimizer_options_init(&o, OSLO_OPTIMIZER_OPTIONS_VERSION), "options_init");
  ok_or_die(oslo_train_options_init(&t, OSLO_TRAIN_OPTIONS_VERSION), "train_options_init");
  check(OSLO_OPTIMIZER_OPTIONS_VERSION == 1 && o.version == 1 && OSLO_TRAIN_OPTIONS_VERSION == 1 &&
            t.version == 1,
        "0.3's optimizer and train options start at version 1");
  check(t.grad_accum_steps == 1 && t.zero_stage == 0 && t.bucket_bytes == 25 << 20 &&
            t.micro_batches == 1 && t.pipeline_head_split == 0,
        "train defaults: no accumulation, no ZeRO, DDP's 25 MiB buckets, one micro-batch");
  {
    oslo_optimizer_options v4 = o;
    v4.version = 4;
    oslo_optimizer* x = nullptr;
    named(oslo_optimizer_create(m, &v4, nullptr, &x), OSLO_ERR_INVALID_ARGUMENT, "migrate-0.3",
          "0.2's optimizer options version 4 at create");
    check(x == nullptr, "version 4: no optimizer made");
  }

  // Each training setting is checked at create, named.
  struct Bad {
    void (*edit)(oslo_train_options&);
    oslo_status want;
    const char* needle;
    const char* what;
  };
  const Bad bads[] = {
      {[](oslo_train_options& b) { b.version = 0; }, OSLO_ERR_INVALID_ARGUMENT, "version",
       "train version 0"},
      {[](oslo_train_options& b) { b.version = 9; }, OSLO_ERR_INVALID_ARGUMENT, "unknown",
       "train version 9"},
      {[](oslo_train_options& b) { b.grad_accum_steps = 0; }, OSLO_ERR_INVALID_ARGUMENT,
       "grad_accum_steps", "no micro-batches per step"},
      {[](oslo_train_options& b) { b.zero_stage = 7; }, OSLO_ERR_INVALID_ARGUMENT, "zero_stage",
       "ZeRO stage 7"},
      {[](oslo_train_options& b) { b.bucket_bytes = 2; }, OSLO_ERR_INVALID_ARGUMENT, "bucket_bytes",
       "2-byte buckets"},
      {[](oslo_train_options& b) { b.pipeline_head_split = 1.5; }, OSLO_ERR_INVALID_ARGUMENT,
       "pipeline_head_split", "head split 1.5"},
      // One stage: the head split needs pipeline stages.
      {[](oslo_train_options& b) { b.pipeline_head_split = -1; }, OSLO_ERR_NOT_SUPPORTED,
       "pipeline stages", "head split on one stage"},
  };
  for (const Bad& b : bads) {
    oslo_train_options x;
    ok_or_die(oslo_train_options_init(&x, OSLO_TRAIN_OPTIONS_VERSION), "init");
    b.edit(x);
    oslo_optimizer* opt = nullptr;
    named(oslo_optimizer_create(m, &o, &x, &opt), b.want, b.needle, b.what);
    check(opt == nullptr, std::string(b.what) + ": no optimizer made");
  }

  // Both NULL: the defaults of both, one micro-batch per step.
  const std::vector<int64_t> ids = {5, 17, 42, 9, 3, 77, 12, 8};
  oslo_train_step_result r;
  {
    oslo_optimizer* opt = nullptr;
    ok_or_die(oslo_optimizer_create(m, nullptr, nullptr, &opt), "create with the defaults");
    ok_or_die(oslo_model_train_step(m, opt, ids.data(), nullptr, nullptr, 2, 4, &r), "step");
    check(r.stepped == 1 && r.step == 1 && r.lr == 1e-3, "defaults: every micro-batch steps");
    oslo_optimizer_destroy(opt);
  }
  // grad_accum_steps from the train options reaches the trainer.
  {
    oslo_train_options acc = t;
    acc.grad_accum_steps = 3;
    oslo_optimizer* opt = nullptr;
    ok_or_die(oslo_optimizer_create(m, &o, &acc, &opt), "create, 3 micro-batches per step");
    int stepped = 0;
    for (int i = 0; i < 3; ++i) {
      ok_or_die(oslo_model_train_step(m, opt, ids.data(), nullptr, nullptr, 2, 4, &r), "step");
      stepped = stepped * 10 + r.stepped;
    }
    check(stepped == 1 && r.step == 1, "grad_accum_steps 3: the third micro-batch steps");
    oslo_optimizer_destroy(opt);
  }

  // The pipeline statistics are the model's last train step's: zeros before
  // one and when it ran no schedule (one stage, one micro-batch), this
  // rank's seconds when it did (micro_batches 2; on one stage no bubble
  // beyond the rank's own overheads).
  named(oslo_model_pipeline_stats(nullptr, nullptr, nullptr, nullptr), OSLO_ERR_INVALID_ARGUMENT,
        "model", "pipeline_stats(NULL)");
  oslo_model* pm = load(ctx, fix);
  double s[3] = {-1, -1, -1};
  ok_or_die(oslo_model_pipeline_stats(pm, &s[0], &s[1], &s[2]), "pipeline_stats before");
  check(zeros(s), "pipeline stats: zeros before a train step");
  oslo_train_options two = t;
  two.micro_batches = 2;
  oslo_optimizer* po = nullptr;
  ok_or_die(oslo_optimizer_create(pm, &o, &two, &po), "optimizer with 2 micro-batches");
  ok_or_die(oslo_model_train_step(pm, po, ids.data(), nullptr, nullptr, 2, 4, &r),
            "train_step, 2 micro-batches");
  ok_or_die(oslo_model_pipeline_stats(pm, &s[0], &s[1], nullptr), "pipeline_stats after");
  ok_or_die(oslo_model_pipeline_stats(pm, nullptr, nullptr, &s[2]), "pipeline_stats bubble");
  check(s[0] > 0 && s[1] >= s[0] && s[2] >= 0 && s[2] < 1,
        "pipeline stats after 2 micro-batches: compute " + std::to_string(s[0]) + " s, wall " +
            std::to_string(s[1]) + " s, bubble " + std::to_string(s[2]));
  ok_or_die(oslo_model_pipeline_stats(m, &s[0], &s[1], &s[2]), "pipeline_stats other model");
  check(zeros(s), "pipeline stats: another model's are its own");
  ok_or_die(oslo_model_train_step(pm, nullptr, ids.data(), nullptr, nullptr, 2, 4, &r),
            "plain train_step");
  ok_or_die(oslo_model_pipeline_stats(pm, &s[0], &s[1], &s[2]), "pipeline_stats after plain");
  check(zeros(s), "pipeline stats: zeros after a step without schedule");
  // A step that fails leaves zeros too.
  ok_or_die(oslo_model_train_step(pm, po, ids.data(), nullptr, nullptr, 2, 4, &r), "step again");
  const std::vector<int64_t> none(8, -100);
  const oslo_status st = oslo_model_train_step(pm, po, ids.data(), none.data(), nullptr, 2, 4, &r);
  ok_or_die(oslo_model_pipeline_stats(pm, &s[0], &s[1], &s[2]), "pipeline_stats after a failure");
  check(st != OSLO_OK && zeros(s), "pipeline stats: zeros after a failed step");
  oslo_optimizer_destroy(po);
  oslo_model_destroy(pm);

  oslo_model_destroy(m);
  oslo_context_destroy(ctx);
  std::printf("model_capi_train: %s\n", g_fail ? "FAILED" : "passed");
  return g_fail ? 1 : 0;
}
