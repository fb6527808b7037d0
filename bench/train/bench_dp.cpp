// Data parallelism's cost (issue 17): training steps through the Trainer
// (the causal-LM loss, its backward with the bucketed gradient reduction,
// clipping at 1.0, AdamW with ZeRO stage --zero), timed, with what the
// reduction left exposed after the backward. Prints one JSON line (data
// rank 0 of tensor rank 0).
//
//   bench_dp MODEL_DIR [--tp 1] [--seq 256] [--batch 4] [--steps 1] [--warmup 1]
//                      [--threads 1] [--zero 0] [--bucket-mb 25] [--dtype f32|bf16]
// Under oslo-run: WORLD_SIZE ranks, tensor size --tp, data size the rest.
// --batch is per data rank; each data rank draws its own rows.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/context/context.hpp"
#include "core/model/model.hpp"
#include "core/train/trainer.hpp"

using namespace oslo;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s MODEL_DIR [--tp N] [--seq N] [--batch N] [--steps N] [--warmup N] "
                 "[--threads N] [--zero 0|1|2|3] [--bucket-mb M] [--dtype f32|bf16]\n",
                 argv[0]);
    return 2;
  }
  int64_t seq = 256, batch = 4, steps = 1, warmup = 1;
  int threads = 1, tp = 1, zero = 0;
  double bucket_mb = 25;
  oslo_dtype dtype = OSLO_DTYPE_F32;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--dtype")
      dtype = v == "bf16" ? OSLO_DTYPE_BF16 : v == "f16" ? OSLO_DTYPE_F16 : OSLO_DTYPE_F32;
    else if (a == "--seq")
      seq = std::atol(v.c_str());
    else if (a == "--batch")
      batch = std::atol(v.c_str());
    else if (a == "--steps")
      steps = std::atol(v.c_str());
    else if (a == "--warmup")
      warmup = std::atol(v.c_str());
    else if (a == "--threads")
      threads = std::atoi(v.c_str());
    else if (a == "--tp")
      tp = std::atoi(v.c_str());
    else if (a == "--zero")
      zero = std::atoi(v.c_str());
    else if (a == "--bucket-mb")
      bucket_mb = std::atof(v.c_str());
  }
  try {
    const std::string cfg = "{\"tensor_parallel_size\": " + std::to_string(tp) +
                            ", \"num_threads\": " + std::to_string(threads) +
                            ", \"timeout_seconds\": 600}";
    Context ctx(Config::parse(cfg.c_str()));
    const int dp = ctx.topology().dp_size(), dr = ctx.topology().dp_rank();
    ModelLoadOptions lo;
    lo.dtype = dtype;
    auto m = Model::load(ctx, argv[1], lo);
    const int64_t V = m->config().vocab_size, n = batch * seq;
    // Token i of data rank d's batch: ((i + d n) * 2654435761 + 7) mod vocab
    // (data rank 0 holds bench_train's batch).
    std::vector<int64_t> ids(static_cast<size_t>(n)), mask(static_cast<size_t>(n), 1);
    for (int64_t i = 0; i < n; ++i)
      ids[static_cast<size_t>(i)] = static_cast<int64_t>(
          (static_cast<uint64_t>(i + dr * n) * 2654435761ull + 7ull) % static_cast<uint64_t>(V));
    TrainerOptions o;
    o.optimizer.lr = 1e-4;
    o.optimizer.weight_decay = 0.01;
    o.max_grad_norm = 1.0;
    o.data_parallel.zero_stage = zero;
    o.data_parallel.bucket_bytes = static_cast<int64_t>(bucket_mb * 1048576.0);
    Trainer tr(*m, o);
    const DataParallel& d = *tr.data_parallel();
    auto now = [] { return std::chrono::steady_clock::now(); };
    double best = 1e30, exposed = 0, loss = 0;
    for (int64_t i = 0; i < warmup + steps; ++i) {
      const auto t0 = now();
      TrainStepResult r = tr.train_step(ids, ids, mask, batch, seq);
      const double s = std::chrono::duration<double>(now() - t0).count();
      if (i >= warmup && s < best) {
        best = s;
        exposed = d.timing().waited_until - d.timing().backward_end;
        loss = r.mean_loss;
      }
    }
    // Memory per rank against the ZeRO formula for this dtype (f32
    // gradients): parameters P bytes, gradients 4 psi (stage 2: 4 psi / N),
    // AdamW's moments 8 psi and f32 masters of narrower parameters (stages
    // 1, 2: / N), plus the activations (the blocks' and the head's logits,
    // whose buffer their gradient reuses). ZeRO-3 also holds one unit whole
    // with its full gradient while it runs: DeepSpeed's memory estimator
    // (estimate_zero3_model_states_mem_needs) adds this largest layer's
    // parameters and gradients; reported as a separate term.
    double psi = 0, pbytes = 0, master = 0;
    for (const auto& p : m->tensors()) {
      psi += static_cast<double>(p.tensor.numel());
      pbytes += static_cast<double>(p.tensor.nbytes());
      if (p.tensor.dtype() != OSLO_DTYPE_F32) master += 4.0 * static_cast<double>(p.tensor.numel());
    }
    const double N = dp;
    const double grads = zero >= 2 ? 4 * psi / N : 4 * psi;
    const double state = zero >= 1 ? (8 * psi + master) / N : 8 * psi + master;
    // ZeRO-3: f32 masters of every parameter's part instead of the
    // parameters (the gathered block comes and goes with the activations).
    if (zero == 3) pbytes = 4 * psi / N;
    double largest_unit = 0;
    if (zero == 3) {
      std::vector<double> unit_bytes;
      const std::vector<int> units = zero_units(m->training());
      for (size_t i = 0; i < units.size(); ++i) {
        const auto& t = m->tensors()[i].tensor;
        if (static_cast<size_t>(units[i]) >= unit_bytes.size())
          unit_bytes.resize(static_cast<size_t>(units[i]) + 1, 0);
        unit_bytes[static_cast<size_t>(units[i])] +=
            static_cast<double>(t.nbytes()) + 4.0 * static_cast<double>(t.numel());
      }
      for (double b : unit_bytes) largest_unit = std::max(largest_unit, b);
    }
    const int64_t vocab_local = (V + tp - 1) / tp;
    const double head = static_cast<double>(n) * static_cast<double>(vocab_local) * 4;
    const double blocks = static_cast<double>(m->training().saved_activation_bytes());
    const double expected = pbytes + grads + state + blocks + head;
    const double with_unit = expected + largest_unit;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const double peak = static_cast<double>(ru.ru_maxrss) * 1024.0;
    if (ctx.topology().world_rank() == 0)
      std::printf(
          "{\"engine\": \"oslo\", \"dtype\": \"%s\", \"tp\": %d, \"dp\": %d, \"zero\": %d, "
          "\"bucket_mb\": %g, \"buckets\": %zu, \"threads\": %d, \"seq\": %lld, \"batch\": %lld, "
          "\"step_s\": %.3f, \"tokens_per_s\": %.1f, \"exposed_after_backward_s\": %.4f, "
          "\"loss\": %.4f, \"peak_rss_mib\": %.1f, \"expected_mib\": %.1f, "
          "\"formula_mib\": %.1f, \"activations_mib\": %.1f, \"peak_over_expected\": %.3f, "
          "\"largest_unit_mib\": %.1f, \"peak_over_expected_with_unit\": %.3f}\n",
          dtype_name(dtype), tp, dp, zero, bucket_mb, d.buckets().size(), threads,
          static_cast<long long>(seq), static_cast<long long>(batch), best,
          static_cast<double>(n) * dp / best, exposed, loss, peak / 1048576.0, expected / 1048576.0,
          (pbytes + grads + state) / 1048576.0, (blocks + head) / 1048576.0, peak / expected,
          largest_unit / 1048576.0, peak / with_unit);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_dp: %s\n", e.what());
    return 1;
  }
  return 0;
}
