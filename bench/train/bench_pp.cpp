// Pipeline parallelism's speed (issue 18): training steps through the
// Trainer with the batch cut into --micro micro-batches and run through the
// context's pipeline stages in 1F1B order (Model::pipeline_loss_backward),
// timed; with the bubble the stages measured and the 1F1B theory. Prints
// one JSON line (world rank 0; the loss and the bubble are the same on
// every rank).
//
//   bench_pp MODEL_DIR [--seq 128] [--batch 8] [--micro 1] [--layers A,B,...]
//                      [--steps 1] [--warmup 1] [--threads 1] [--head-split F]
// --head-split: TrainerOptions::pipeline_head_split (-1: by the stages'
// costs); the "these stages" bubble is then the head-split schedule's.
// Under oslo-run: WORLD_SIZE ranks, all pipeline stages (tensor and data
// size 1); alone: one stage.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/common/error.hpp"
#include "core/context/context.hpp"
#include "core/model/model.hpp"
#include "core/pipeline/schedule.hpp"
#include "core/train/trainer.hpp"

using namespace oslo;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s MODEL_DIR [--seq N] [--batch N] [--micro M] [--layers A,B,...] "
                 "[--virtual V] [--steps N] [--warmup N] [--threads N] [--head-split F]\n",
                 argv[0]);
    return 2;
  }
  int64_t seq = 128, batch = 8, steps = 1, warmup = 1;
  int threads = 1, micro = 1, virt = 1;
  double head_split = 0;
  std::vector<int> layers;
  std::string layers_text = "uniform";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--seq")
      seq = std::atol(v.c_str());
    else if (a == "--batch")
      batch = std::atol(v.c_str());
    else if (a == "--micro")
      micro = std::atoi(v.c_str());
    else if (a == "--steps")
      steps = std::atol(v.c_str());
    else if (a == "--warmup")
      warmup = std::atol(v.c_str());
    else if (a == "--threads")
      threads = std::atoi(v.c_str());
    else if (a == "--virtual")
      virt = std::atoi(v.c_str());
    else if (a == "--head-split")
      head_split = std::atof(v.c_str());
    else if (a == "--layers") {
      layers_text = v;
      for (size_t at = 0; at < v.size();) {
        size_t end = v.find(',', at);
        if (end == std::string::npos) end = v.size();
        layers.push_back(std::atoi(v.substr(at, end - at).c_str()));
        at = end + 1;
      }
    }
  }
  try {
    const char* ws = std::getenv("WORLD_SIZE");
    const int world = ws ? std::atoi(ws) : 1;
    std::string cfg =
        "{\"tensor_parallel_size\": 1, \"pipeline_parallel_size\": " + std::to_string(world) +
        ", \"num_threads\": " + std::to_string(threads) + ", \"timeout_seconds\": 600";
    if (!ws)
      cfg += ", \"rank\": 0, \"world_size\": 1, \"init_method\": \"file:///tmp/oslo-bench-pp-" +
             std::to_string(::getpid()) + "\"";
    Context ctx(Config::parse((cfg + "}").c_str()));
    ModelLoadOptions lo;
    lo.dtype = OSLO_DTYPE_F32;
    lo.pipeline_layers = layers;
    lo.virtual_stages = virt;
    auto m = Model::load(ctx, argv[1], lo);
    const int64_t V = m->config().vocab_size, n = batch * seq;
    // bench_train's batch: token i is (i * 2654435761 + 7) mod vocab.
    std::vector<int64_t> ids(static_cast<size_t>(n)), mask(static_cast<size_t>(n), 1);
    for (int64_t i = 0; i < n; ++i)
      ids[static_cast<size_t>(i)] = static_cast<int64_t>(
          (static_cast<uint64_t>(i) * 2654435761ull + 7ull) % static_cast<uint64_t>(V));
    TrainerOptions o;
    o.optimizer.lr = 1e-4;
    o.optimizer.weight_decay = 0.01;
    o.max_grad_norm = 1.0;
    o.micro_batches = micro;
    o.pipeline_head_split = head_split;
    Trainer tr(*m, o);
    auto now = [] { return std::chrono::steady_clock::now(); };
    double best = 1e30, loss = 0, bubble = 0, compute = 0;
    for (int64_t i = 0; i < warmup + steps; ++i) {
      const auto t0 = now();
      TrainStepResult r = tr.train_step(ids, ids, mask, batch, seq);
      const double s = std::chrono::duration<double>(now() - t0).count();
      if (i >= warmup && s < best) {
        best = s;
        loss = r.mean_loss;
        bubble = tr.pipeline_stats().bubble;
        compute = tr.pipeline_stats().compute_s;
      }
    }
    const int p = m->pipeline_size();
    // Each stage's compute seconds, to every rank: the bubble the schedule
    // gives these unequal stages (simulate_pipeline, backward twice the
    // forward, no transfer time) next to the equal-stage theory.
    // (Host values: the pipeline group's control messages, as bit patterns.)
    int64_t mine = 0;
    std::memcpy(&mine, &compute, sizeof mine);
    std::vector<int64_t> bits(static_cast<size_t>(p), 0);
    ctx.control(OSLO_GROUP_PIPELINE).all_gather(&mine, bits.data(), 1);
    std::vector<double> per(static_cast<size_t>(p), 0.0);
    for (int q = 0; q < p; ++q) std::memcpy(&per[q], &bits[q], sizeof(double));
    // Megatron-LM's bubble, (p - 1) / (v m) of the ideal time, as a
    // fraction of the step: (p - 1) / (v m + p - 1) (v = 1: 1F1B's).
    const double theory =
        micro > 1 || p > 1 ? (p - 1.0) / (static_cast<double>(virt) * micro + p - 1.0) : 0.0;
    // The schedule simulated for these stages: each rank's measured compute
    // cut over its virtual stages' forwards and backwards (and rank 0's
    // HEAD ops) in proportion to the costs run_pipeline plans with
    // (Model::pipeline_costs).
    const int64_t head_rows = tr.pipeline_stats().head_rows;
    double staged = 0;
    if (p > 1) {
      const PipelineCosts est = m->training().pipeline_costs(static_cast<double>(head_rows) /
                                                             static_cast<double>(n / micro));
      const int S = p * virt;
      std::vector<double> rank(static_cast<size_t>(p), 0.0);
      for (int s = 0; s < S; ++s)
        rank[static_cast<size_t>(s % p)] +=
            est.forward[static_cast<size_t>(s)] + est.backward[static_cast<size_t>(s)];
      if (head_rows > 0) rank[0] += 3 * est.head;
      PipeSimOptions so;
      std::vector<double> fc, bc;
      for (int s = 0; s < S; ++s) {
        const double k = per[static_cast<size_t>(s % p)] / rank[static_cast<size_t>(s % p)];
        fc.push_back(est.forward[static_cast<size_t>(s)] * k);
        bc.push_back(est.backward[static_cast<size_t>(s)] * k);
        so.backward_scale.push_back(bc.back() / so.t_backward);
      }
      so.stage_scale = fc;
      std::vector<std::vector<PipeOp>> ops;
      if (head_rows > 0) {
        so.head_scale = est.head * per[0] / rank[0];
        ops = pipeline_schedule_head_split(p, micro, virt, fc, so.head_scale, bc);
      } else {
        for (int q = 0; q < p; ++q) ops.push_back(pipeline_schedule(p, q, micro, virt));
      }
      staged = simulate_pipeline(ops, micro, virt, so).bubble_fraction;
    }
    std::string stages;
    for (float c : per) stages += (stages.empty() ? "" : ", ") + std::to_string(c).substr(0, 6);
    if (ctx.topology().world_rank() == 0)
      std::printf(
          "{\"engine\": \"oslo\", \"pp\": %d, \"virtual\": %d, \"micro_batches\": %d, "
          "\"layers\": \"%s\", "
          "\"threads\": %d, \"seq\": %lld, \"batch\": %lld, \"step_s\": %.3f, "
          "\"tokens_per_s\": %.1f, \"bubble\": %.4f, \"bubble_theory\": %.4f, "
          "\"bubble_these_stages\": %.4f, \"stage_compute_s\": [%s], \"loss\": %.4f, "
          "\"head_rows\": %lld}\n",
          p, virt, micro, layers_text.c_str(), threads, static_cast<long long>(seq),
          static_cast<long long>(batch), best, static_cast<double>(n) / best, bubble, theory,
          staged, stages.c_str(), loss, static_cast<long long>(head_rows));
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_pp: %s\n", e.what());
    return 1;
  }
  return 0;
}
