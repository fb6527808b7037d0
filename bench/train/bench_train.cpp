// One training step of a causal LM (the causal-LM loss over a random batch,
// its backward, clip_grad_norm 1.0 and an AdamW step), timed: the oslo side
// of bench/train/run.sh. Prints one JSON line.
//
//   bench_train MODEL_DIR [--seq 256] [--batch 4] [--steps 1] [--warmup 1]
//                         [--threads N]
// Under oslo-run the ranks form one tensor-parallel group of WORLD_SIZE.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/context/context.hpp"
#include "core/model/model.hpp"
#include "core/train/optimizer.hpp"

using namespace oslo;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s MODEL_DIR [--seq N] [--batch N] [--steps N] [--warmup N] "
                 "[--threads N] [--checkpoint-activations 0|1] [--dtype f32|bf16|f16]\n",
                 argv[0]);
    return 2;
  }
  int64_t seq = 256, batch = 4, steps = 1, warmup = 1;
  int threads = 2;
  bool ckpt = false;
  oslo_dtype dtype = OSLO_DTYPE_F32;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--dtype") {
      const std::string d = argv[i + 1];
      dtype = d == "bf16" ? OSLO_DTYPE_BF16 : d == "f16" ? OSLO_DTYPE_F16 : OSLO_DTYPE_F32;
      continue;
    }
    const long v = std::atol(argv[i + 1]);
    if (a == "--seq")
      seq = v;
    else if (a == "--batch")
      batch = v;
    else if (a == "--steps")
      steps = v;
    else if (a == "--warmup")
      warmup = v;
    else if (a == "--threads")
      threads = static_cast<int>(v);
    else if (a == "--checkpoint-activations")
      ckpt = v != 0;
  }
  const char* ws = std::getenv("WORLD_SIZE");
  const int tp = ws ? std::atoi(ws) : 1;
  try {
    const std::string cfg = "{\"tensor_parallel_size\": " + std::to_string(tp) +
                            ", \"num_threads\": " + std::to_string(threads) +
                            ", \"timeout_seconds\": 600}";
    Context ctx(Config::parse(cfg.c_str()));
    ModelLoadOptions lo;
    lo.dtype = dtype;
    auto m = Model::load(ctx, argv[1], lo);
    const int64_t V = m->config().vocab_size, n = batch * seq;
    // The batch torch_reference.py builds too: token i of the flattened
    // batch is (i * 2654435761 + 7) mod vocab.
    std::vector<int64_t> ids(static_cast<size_t>(n)), mask(static_cast<size_t>(n), 1);
    for (int64_t i = 0; i < n; ++i)
      ids[static_cast<size_t>(i)] = static_cast<int64_t>(
          (static_cast<uint64_t>(i) * 2654435761ull + 7ull) % static_cast<uint64_t>(V));
    OptimizerOptions o;
    o.lr = 1e-4;
    o.weight_decay = 0.01;
    Optimizer opt(*m, o);
    m->training().set_activation_checkpointing(ckpt);
    double t_loss = 0, t_clip = 0, t_opt = 0;  // of the last step
    auto now = [] { return std::chrono::steady_clock::now(); };
    auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    auto step = [&] {
      const auto t0 = now();
      m->training().zero_grad();
      const float loss = m->training().loss_backward(ids, ids, mask, batch, seq);
      const auto t1 = now();
      clip_grad_norm(*m, 1.0);
      const auto t2 = now();
      opt.step(o.lr);
      const auto t3 = now();
      t_loss = secs(t0, t1);
      t_clip = secs(t1, t2);
      t_opt = secs(t2, t3);
      return loss;
    };
    for (int64_t i = 0; i < warmup; ++i) step();
    double best = 1e30, total = 0;
    float loss = 0;
    for (int64_t i = 0; i < steps; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      loss = step();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, s);
      total += s;
    }
    // Memory: parameters + gradients + AdamW's two moments (f32) + f32
    // masters of bf16/f16 parameters + the activations: the blocks' (kept
    // for the backward) and the head's (this rank's logits and their
    // gradient, f32), against the peak RSS.
    size_t pbytes = 0, numel = 0;
    for (const auto& p : m->tensors()) {
      pbytes += p.tensor.nbytes();
      numel += static_cast<size_t>(p.tensor.numel());
    }
    const double state_bytes =
        12.0 * static_cast<double>(numel) + static_cast<double>(opt.master_bytes());
    const int64_t vocab_local = (V + tp - 1) / tp;
    const double head = 2.0 * static_cast<double>(n) * static_cast<double>(vocab_local) * 4;
    const double blocks = static_cast<double>(m->training().saved_activation_bytes());
    const double expected = (static_cast<double>(pbytes) + state_bytes + blocks + head) / (1 << 20);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const double peak = static_cast<double>(ru.ru_maxrss) / 1024.0;
    if (ctx.topology().tp_rank() == 0)
      std::printf(
          "{\"engine\": \"oslo\", \"dtype\": \"%s\", \"tp\": %d, \"threads\": %d, \"seq\": %lld, "
          "\"batch\": "
          "%lld, \"step_s\": %.3f, \"tokens_per_s\": %.1f, \"loss\": %.4f, "
          "\"fwd_bwd_s\": %.3f, \"clip_s\": %.3f, \"optimizer_s\": %.3f, "
          "\"checkpointing\": %s, \"params_mib\": %.1f, \"activations_mib\": %.1f, "
          "\"head_activations_mib\": %.1f, \"peak_rss_mib\": %.1f, "
          "\"peak_over_expected\": %.3f}\n",
          dtype_name(dtype), tp, threads, static_cast<long long>(seq),
          static_cast<long long>(batch), best, static_cast<double>(n) / best, loss, t_loss, t_clip,
          t_opt, ckpt ? "true" : "false", pbytes / 1048576.0, blocks / 1048576.0, head / 1048576.0,
          peak, peak / expected);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
