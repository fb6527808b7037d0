// oslo train: fine-tune a causal model on text or token ids (train.hpp has
// the data and the bookkeeping).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tools/oslo/train.hpp"

namespace oslo_cli {

namespace {

const char* kTrainHelp =
    "usage: oslo train --model DIR --data FILE.txt|.jsonl|.bin|PREFIX --seq-len N --batch-size B\n"
    "                  --steps S [--lr X] [--schedule constant|constant_with_warmup|linear|\n"
    "                  cosine] [--warmup W] [--optimizer adamw|sgd] [--weight-decay X]\n"
    "                  [--momentum X] [--max-grad-norm X] [--grad-accum K] [--seed N]\n"
    "                  [--dtype f32|bf16|f16] [--activation-checkpointing]\n"
    "                  [--save DIR [--save-every K]] [--resume DIR] [--log FILE]\n"
    "                  [--tokenizer DIR] [--tp N] [--dp N] [--zero 0|1|2|3] [--bucket-mb M]\n"
    "                  [--pp N [--micro-batches M] [--virtual-stages V] [--pp-layers A,B]\n"
    "                  [--pipeline-head-split F|auto]]\n"
    "                  [--threads N] [--device cpu|cuda[:N]] [--backend NAME]\n"
    "                  [--backend-options JSON] [--communicator auto|backend|host]\n"
    "                  [--data-dtype uint16|uint32] [--timeout SECONDS]\n"
    "Fine-tunes a causal language model (causal-LM loss, labels = inputs) as Hugging\n"
    "Face's run_clm.py with Trainer does, split over the ranks of oslo-run:\n"
    "  ranks    --tp N tensor-parallel x --dp N data-parallel ranks = the world size\n"
    "           (without --tp: world / --dp; without --dp: world / --tp; neither:\n"
    "           all ranks tensor-parallel). Each data-parallel rank trains on its own\n"
    "           rows; gradients are averaged over them (PyTorch DDP) in buckets of\n"
    "           --bucket-mb MiB (default 25). --zero 1 partitions the optimizer\n"
    "           state over the data-parallel ranks, --zero 2 the gradients too,\n"
    "           --zero 3 the parameters too (DeepSpeed ZeRO; default 0: none).\n"
    "           --pp N splits the blocks over N pipeline stages (tp x pp x dp = the\n"
    "           world size; the first stage embeds, the last norms and projects):\n"
    "           each --batch-size batch runs as --micro-batches M micro-batches (M\n"
    "           divides --batch-size; default: one row each) through the stages in\n"
    "           1F1B order, and the progress shows the measured bubble (the stages'\n"
    "           idle share of the step; (pp - 1) / (M + pp - 1) in theory).\n"
    "           --virtual-stages V gives each rank V model chunks (Megatron's\n"
    "           interleaved 1F1B: the stream goes round the ranks V times, the\n"
    "           bubble shrinks about V-fold; M must be a multiple of --pp).\n"
    "           --pipeline-head-split F|auto (tied embeddings):\n"
    "           the first stage also runs the head and loss of that share of each\n"
    "           micro-batch's tokens (auto: the share that equalises the first and\n"
    "           last stage's products), so the stages can be equal although the\n"
    "           head is worth several blocks.\n"
    "           --pp-layers A,B,... gives each stage's blocks (default: as even as\n"
    "           possible; the last stage's head costs about vocab / (12 hidden)\n"
    "           blocks, so fewer blocks there balance the stages). --zero 0 or 1\n"
    "           with --pp.\n"
    "  data     .txt: the whole file is one document; .jsonl: one JSON object with a\n"
    "           \"text\" string per line, one document each. Documents are tokenized\n"
    "           with the model folder's tokenizer (or --tokenizer), each followed by\n"
    "           EOS, concatenated and cut into rows of --seq-len tokens (the remainder\n"
    "           is dropped). Every rank reads and tokenizes the file itself.\n"
    "           Token ids, used as they are: .jsonl with an \"input_ids\" array per\n"
    "           line (cut as text); a .bin of flat little-endian ids (nanoGPT;\n"
    "           --data-dtype uint16, the default, or uint32) or a Megatron-LM dataset\n"
    "           (--data PREFIX, PREFIX.bin or PREFIX.idx), both cut into rows of\n"
    "           --seq-len tokens that share a token with the next, as Megatron-LM\n"
    "           and nanoGPT cut samples (docs/CLI.md). Ids outside the model's\n"
    "           vocabulary are errors.\n"
    "  order    each epoch shuffles the rows with a generator seeded by --seed\n"
    "           (default 0) and the epoch: the same order on every rank and run.\n"
    "           --batch-size is per data-parallel rank: a global micro-batch is the\n"
    "           next dp x --batch-size rows of the order, data rank r taking its\n"
    "           positions r, r+dp, r+2dp, ... (PyTorch's DistributedSampler; the\n"
    "           rows left over at the end of an epoch are skipped), so --dp 2\n"
    "           --batch-size 4 trains on the rows of --dp 1 --batch-size 8. An\n"
    "           optimizer step takes --grad-accum K micro-batches (default 1);\n"
    "           epochs wrap until --steps steps are done.\n"
    "  update   AdamW (default) or SGD, --lr (default 5e-5), --weight-decay\n"
    "           (default 0; not on biases and norm weights), --momentum (SGD),\n"
    "           --max-grad-norm (default 1.0; 0 = no clipping), --schedule (default\n"
    "           linear: decay to 0 at --steps) after --warmup W steps of linear warmup\n"
    "           (default 0). f16 weights get dynamic loss scaling.\n"
    "  device   --device cuda trains on the GPU (the losses of --device cpu; see\n"
    "           docs/MODELS.md). --communicator host connects the ranks through\n"
    "           oslo's host transports, staged through host memory, so several\n"
    "           ranks can share one GPU (NCCL, the default for cuda, wants one GPU\n"
    "           a rank); backend: the backend's own, even for one rank.\n"
    "  timeout  --timeout SECONDS (default: $OSLO_TIMEOUT, else 300): how long a\n"
    "           rank waits for its peers (the rendezvous and every collective)\n"
    "           before it fails with OSLO_ERR_TIMEOUT, e.g. when a peer stopped.\n"
    "  output   a progress bar on rank 0 (plain lines when stderr is not a terminal),\n"
    "           a JSON line per step in --log FILE (default DIR/train_log.jsonl with\n"
    "           --save, else none): step, loss, lr, grad_norm, tokens_per_s,\n"
    "           elapsed_s, epoch, tokens, data_hash (losses, tokens and hashes\n"
    "           cover all data-parallel ranks). --save DIR writes a checkpoint\n"
    "           at the end (and every --save-every K steps) that oslo merge turns into\n"
    "           a Hugging Face folder and oslo generate loads.\n"
    "  resume   --resume DIR continues from a checkpoint of --save: the same --data,\n"
    "           --seq-len, --grad-accum and global batch (dp x --batch-size); the\n"
    "           tensor- and data-parallel sizes and --zero may change.\n"
    "Steps count optimizer steps. Errors (a missing or malformed data file, too few\n"
    "tokens for one batch, bad numbers) name their cause and print on every rank.\n"
    "  example: oslo-run --nproc-per-node 2 oslo train --model M --data corpus.txt \\\n"
    "             --seq-len 64 --batch-size 8 --steps 100 --lr 1e-3 --save ckpt\n";

// A run's options, checked on every rank alike before anything is loaded.
struct Plan {
  int64_t S = 0, B = 0, steps = 0, K = 1, save_every = 0, seed_arg = 0;
  int all_ranks = 1;
  int64_t pp = 1, tp = 1, dp = 1, M = 1, zero = 0;
  int64_t G = 0;  // rows per global micro-batch: dp x B
  oslo_optimizer_options oo;
  oslo_train_options to;
  std::string save_dir, log_path;
};

Plan plan_run(const Args& a) {
  Plan p;
  // Numbers: integers in range, finite reals.
  const auto int_in = [&](const char* k, int64_t lo, int64_t hi, int64_t def) {
    if (!a.has(k)) return def;
    const int64_t v = to_int(a.get(k), std::string("--") + k);
    if (v < lo || v > hi)
      die_all(std::string("--") + k + " must be in [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "], got " + a.get(k),
              2);
    return v;
  };
  const auto real_at_least = [&](const char* k, double lo, double def, bool above) {
    if (!a.has(k)) return def;
    const double v = to_num(a.get(k), std::string("--") + k);
    if (above ? !(v > lo) : !(v >= lo))
      die_all(std::string("--") + k + " must be " + (above ? "> " : ">= ") +
                  (lo == 0 ? "0" : std::to_string(lo)) + ", got " + a.get(k),
              2);
    return v;
  };
  const int64_t kMax = int64_t(1) << 40;
  p.S = int_in("seq-len", 2, 1 << 20, 0);
  p.B = int_in("batch-size", 1, 1 << 20, 0);
  p.steps = int_in("steps", 1, kMax, 0);
  p.K = int_in("grad-accum", 1, 1 << 20, 1);
  const int64_t warmup = int_in("warmup", 0, kMax, 0);
  p.save_every = int_in("save-every", 1, kMax, 0);
  p.seed_arg = int_in("seed", 0, INT64_MAX, 0);
  if (a.has("save-every") && !a.has("save")) die_all("--save-every needs --save DIR", 2);
  // The ranks: tensor-parallel x pipeline x data-parallel = the world
  // (checked on every rank before anything is loaded).
  const int all_ranks = p.all_ranks = launcher_world();
  const int64_t pp = p.pp = int_in("pp", 1, 1 << 20, 1);
  if (all_ranks % pp != 0)
    die_all("--pp " + std::to_string(pp) + " does not divide the world size " +
                std::to_string(all_ranks) +
                " (the ranks of oslo-run: --tp x --pp x --dp must equal it)",
            2);
  const int world = static_cast<int>(all_ranks / pp);  // ranks per stage
  int64_t tp = int_in("tp", 1, 1 << 20, 0), dp = int_in("dp", 1, 1 << 20, 0);
  const auto must_divide = [&](const char* k, int64_t v) {
    if (world % v != 0)
      die_all(std::string("--") + k + " " + std::to_string(v) +
                  (pp == 1 ? " does not divide the world size " + std::to_string(world) +
                                 " (the ranks of oslo-run: --tp x --dp must equal it)"
                           : " does not divide the " + std::to_string(world) +
                                 " ranks of a stage (world size " + std::to_string(all_ranks) +
                                 " / --pp " + std::to_string(pp) + ")"),
              2);
    return world / v;
  };
  if (!a.has("tp") && !a.has("dp"))
    tp = world, dp = 1;
  else if (!a.has("dp"))
    dp = must_divide("tp", tp);
  else if (!a.has("tp"))
    tp = must_divide("dp", dp);
  else if (tp * dp != world)
    die_all("--tp " + std::to_string(tp) + (pp > 1 ? " x --pp " + std::to_string(pp) : "") +
                " x --dp " + std::to_string(dp) + " = " + std::to_string(tp * pp * dp) +
                " ranks, but the world size is " + std::to_string(all_ranks) +
                " (run under oslo-run --nproc-per-node " + std::to_string(tp * pp * dp) + ")",
            2);
  const int64_t B = p.B;
  const int64_t M = p.M = int_in("micro-batches", 1, 1 << 20, pp > 1 ? B : 1);
  if (B % M != 0)
    die_all("--micro-batches " + std::to_string(M) + " does not divide --batch-size " +
                std::to_string(B),
            2);

  p.tp = tp;
  p.dp = dp;
  int64_t& zero = p.zero;
  if (a.has("zero")) {
    zero = to_int(a.get("zero"), "--zero");
    if (zero < 0 || zero > 3) die_all("--zero must be 0, 1, 2 or 3, got " + a.get("zero"), 2);
  }
  const double bucket_mb = real_at_least("bucket-mb", 0, 25.0, true);
  if (bucket_mb > 1 << 20)
    die_all("--bucket-mb must be at most 1048576 (1 TiB), got " + a.get("bucket-mb"), 2);
  const int64_t bucket_bytes = std::llround(bucket_mb * (1 << 20));
  if (bucket_bytes < 4) die_all("--bucket-mb " + a.get("bucket-mb") + " is under 4 bytes", 2);
  p.G = dp * B;

  oslo_optimizer_options& oo = p.oo;
  oslo_train_options& to = p.to;
  check(oslo_optimizer_options_init(&oo, OSLO_OPTIMIZER_OPTIONS_VERSION), "options");
  check(oslo_train_options_init(&to, OSLO_TRAIN_OPTIONS_VERSION), "train options");
  const std::string kind = a.get("optimizer", "adamw");
  if (kind == "adamw")
    oo.kind = OSLO_OPTIMIZER_ADAMW;
  else if (kind == "sgd")
    oo.kind = OSLO_OPTIMIZER_SGD;
  else
    die_all("--optimizer must be adamw or sgd, got \"" + kind + "\"", 2);
  if (a.has("momentum") && kind != "sgd") die_all("--momentum is for --optimizer sgd", 2);
  const std::string sched = a.get("schedule", "linear");
  if (sched == "constant")
    oo.schedule = OSLO_LR_CONSTANT;
  else if (sched == "constant_with_warmup")
    oo.schedule = OSLO_LR_CONSTANT_WITH_WARMUP;
  else if (sched == "linear")
    oo.schedule = OSLO_LR_LINEAR;
  else if (sched == "cosine")
    oo.schedule = OSLO_LR_COSINE;
  else
    die_all("--schedule must be constant, constant_with_warmup, linear or cosine, got \"" + sched +
                "\"",
            2);
  oo.lr = real_at_least("lr", 0, 5e-5, true);
  oo.weight_decay = real_at_least("weight-decay", 0, 0.0, false);
  oo.momentum = real_at_least("momentum", 0, 0.0, false);
  oo.max_grad_norm = real_at_least("max-grad-norm", 0, 1.0, false);
  oo.warmup_steps = warmup;
  oo.total_steps = p.steps;
  to.grad_accum_steps = p.K;
  to.zero_stage = static_cast<int>(zero);
  to.bucket_bytes = bucket_bytes;
  to.micro_batches = M;
  if (a.has("pipeline-head-split")) {
    const std::string hs = a.get("pipeline-head-split");
    if (hs == "auto") {
      to.pipeline_head_split = -1;
    } else {
      to.pipeline_head_split = to_num(hs, "--pipeline-head-split");
      if (!(to.pipeline_head_split > 0 && to.pipeline_head_split <= 1))
        die_all("--pipeline-head-split must be auto or a fraction in (0, 1], got " + hs, 2);
    }
    if (pp < 2) die_all("--pipeline-head-split needs --pp 2 or more", 2);
  }
  p.save_dir = a.get("save");
  p.log_path = a.has("log")         ? a.get("log")
               : p.save_dir.empty() ? ""
                                    : p.save_dir + "/train_log.jsonl";
  timeout_seconds(a);  // checked here, used by context()
  return p;
}

// --resume DIR: checks that DIR's run continues on this data and batch
// (oslo_train.json, then the position itself), loads the checkpoint into
// `opt` and *state, and returns the optimizer steps already taken.
int64_t resume(const Args& a, const Plan& p, oslo_optimizer* opt, const DataShape& shape,
               int64_t per_epoch, TrainState* state) {
  const std::string dir = a.get("resume");
  const int64_t G = p.G, K = p.K;
  // The data must continue where it stopped: the same rows, global
  // micro-batch and accumulation (oslo_train.json); the position is then
  // whole global micro-batches into the epoch at any data-parallel size.
  DataShape saved;
  bool stale = false;
  if (read_data_shape(dir, &saved, &stale)) {
    std::string diff;
    const auto cmp = [&](const char* what, int64_t was, int64_t now) {
      if (was != now)
        diff += std::string(diff.empty() ? "" : "; ") + what + " " + std::to_string(was) +
                " then, " + std::to_string(now) + " now";
    };
    cmp("rows (--data, --seq-len)", saved.rows, shape.rows);
    cmp("--seq-len", saved.seq_len, p.S);
    cmp("global batch (dp x --batch-size)", saved.global_batch, G);
    cmp("--grad-accum", saved.grad_accum, K);
    if (!diff.empty())
      die_all("--resume " + dir + ": saved by a run whose data does not continue here: " + diff +
                  ". Resume with the same --data, --seq-len, --grad-accum and global batch (it "
                  "was dp " +
                  std::to_string(saved.dp) + " x --batch-size " + std::to_string(saved.batch_size) +
                  " = " + std::to_string(saved.global_batch) +
                  " rows; any --dp and --batch-size with that product continue it exactly)",
              2);
  } else if (stale && g_rank == 0) {
    std::fprintf(stderr, "oslo: %s/%s belongs to an earlier save: not checked\n", dir.c_str(),
                 kTrainMeta);
  }
  load_checkpoint(opt, dir, state);
  const int64_t mb = state->data_position / G;
  const int64_t done = state->epoch * per_epoch + mb;
  if (state->epoch < 0 || state->data_position < 0 || state->data_position % G != 0 ||
      mb >= per_epoch || done % K != 0)
    die_all("--resume " + dir + ": its data position (epoch " + std::to_string(state->epoch) +
            ", row " + std::to_string(state->data_position) + ") does not fit this data (" +
            std::to_string(per_epoch) + " global micro-batches of " + std::to_string(G) +
            " rows per epoch, --grad-accum " + std::to_string(K) +
            "): resume with the same --data, --seq-len, --grad-accum and global batch (dp x "
            "--batch-size)");
  if (a.has("seed") && state->seed != static_cast<uint64_t>(p.seed_arg) && g_rank == 0)
    std::fprintf(stderr, "oslo: --seed %lld ignored: resuming the data order of seed %llu\n",
                 static_cast<long long>(p.seed_arg), static_cast<unsigned long long>(state->seed));
  return done / K;
}

// Rank 0's summary of the data and the run before the first step.
void banner(const Plan& p, const TrainData& data, int64_t rows, int64_t per_epoch, int64_t start) {
  if (g_rank != 0) return;
  const bool shared = data.stride < p.S;
  std::fprintf(
      stderr,
      "oslo: %lld tokens (%s) in %lld rows of %lld%s; %lld micro-batches "
      "of %lld rows per epoch; %lld steps of %lld tokens on %d rank%s%s%s\n",
      static_cast<long long>(data.tokens.size()), data.what.c_str(), static_cast<long long>(rows),
      static_cast<long long>(p.S), shared ? " sharing a token" : "",
      static_cast<long long>(per_epoch), static_cast<long long>(p.G),
      static_cast<long long>(p.steps), static_cast<long long>(p.G * p.S * p.K), p.all_ranks,
      p.all_ranks > 1 ? "s" : "",
      p.dp > 1 || p.pp > 1
          ? (" (tp " + std::to_string(p.tp) + (p.pp > 1 ? " x pp " + std::to_string(p.pp) : "") +
             " x dp " + std::to_string(p.dp) + ", --batch-size " + std::to_string(p.B) +
             " per data rank" + (p.pp > 1 ? " in " + std::to_string(p.M) + " micro-batches" : "") +
             ", ZeRO " + std::to_string(p.zero) + ")")
                .c_str()
          : "",
      start ? (" (resuming after step " + std::to_string(start) + ")").c_str() : "");
}

// The steps from `start` to --steps: the micro-batches of the epochs'
// orders, the log, the progress and the saves.
void train_steps(const Plan& p, const TrainData& data, int64_t rows, int64_t per_epoch,
                 int64_t start, oslo_context* ctx, oslo_model* m, oslo_optimizer* opt,
                 TrainState state) {
  const int64_t S = p.S, B = p.B, K = p.K, G = p.G, dp = p.dp, steps = p.steps;
  int data_rank = 0;
  check(oslo_context_rank(ctx, OSLO_GROUP_DATA, &data_rank), "rank");
  const DataShape shape{rows, S, G, K, dp, B};
  std::FILE* log = nullptr;
  if (g_rank == 0 && !p.log_path.empty()) {
    const size_t slash = p.log_path.rfind('/');
    if (slash != std::string::npos && slash > 0) make_dirs(p.log_path.substr(0, slash));
    log = std::fopen(p.log_path.c_str(), start > 0 ? "a" : "w");
    if (!log) die("--log " + p.log_path + ": cannot open: " + std::strerror(errno));
  }
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> log_guard(
      log, [](std::FILE* f) { return f ? std::fclose(f) : 0; });
  Progress bar;
  bar.on = g_rank == 0;
  bar.tty = isatty(2) != 0;
  bar.total = steps;

  std::vector<int64_t> batch(static_cast<size_t>(B * S));
  // The global micro-batch in order (rank 0's log hashes it: every data
  // rank holds all the tokens, so the hash is that of --dp 1).
  std::vector<int64_t> global(log ? static_cast<size_t>(G * S) : 0);
  std::vector<int64_t> order;
  int64_t order_epoch = -1;
  double first_loss = NAN, last_loss = NAN;
  int64_t trained_tokens = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  for (int64_t step = start; step < steps; ++step) {
    const auto ts = std::chrono::steady_clock::now();
    uint64_t hash = 0xcbf29ce484222325ull;
    oslo_train_step_result r{};
    int64_t epoch = 0;
    for (int64_t k = 0; k < K; ++k) {
      const int64_t g = step * K + k;  // micro-batches since the start
      epoch = g / per_epoch;
      const int64_t pos = g % per_epoch;
      if (epoch != order_epoch) {
        order = epoch_order(rows, state.seed, epoch);
        order_epoch = epoch;
      }
      // DistributedSampler: data rank r takes positions r, r + dp, ... of
      // the epoch's order; its micro-batch k the k-th B of them, all inside
      // the global micro-batch k (positions k G .. k G + G - 1).
      const auto row_at = [&](int64_t i) { return order[static_cast<size_t>(pos * G + i)]; };
      for (int64_t b = 0; b < B; ++b) data.copy_row(row_at(data_rank + dp * b), S, &batch[b * S]);
      if (log) {
        for (int64_t i = 0; i < G; ++i) data.copy_row(row_at(i), S, &global[i * S]);
        hash = fnv1a(hash, global);
      }
      check(oslo_model_train_step(m, opt, batch.data(), nullptr, nullptr, B, S, &r),
            "train step " + std::to_string(step + 1));
    }
    if (!r.stepped) die("internal: no optimizer step after --grad-accum micro-batches");
    double bubble = 0;
    if (p.pp > 1) check(oslo_model_pipeline_stats(m, nullptr, nullptr, &bubble), "pipeline");
    const double dt = since(ts), elapsed = since(t0);
    trained_tokens += G * S * K;
    if (std::isnan(first_loss)) first_loss = r.mean_loss;
    last_loss = r.mean_loss;
    if (log) {
      nlohmann::json j;
      j["step"] = step + 1;
      j["loss"] = r.mean_loss;
      j["lr"] = r.lr;
      j["grad_norm"] = r.grad_norm;  // NaN (no clipping, no scaling): null
      j["tokens_per_s"] = static_cast<double>(G * S * K) / dt;  // all data ranks
      j["elapsed_s"] = elapsed;
      j["epoch"] = epoch;
      j["tokens"] = (step + 1) * G * S * K;
      j["data_hash"] = [&] {
        char buf[17];
        std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(hash));
        return std::string(buf);
      }();
      if (p.pp > 1) j["bubble"] = bubble;  // the last micro-batch window's
      if (r.skipped) j["skipped"] = true;
      if (r.loss_scale != 1.0) j["loss_scale"] = r.loss_scale;
      std::fprintf(log, "%s\n", j.dump().c_str());
      std::fflush(log);
    }
    bar.step(step + 1, r.mean_loss, static_cast<double>(trained_tokens) / elapsed, elapsed,
             p.pp > 1 ? bubble : -1);
    if (r.skipped) bar.say("step " + std::to_string(step + 1) + ": skipped (non-finite gradients)");
    const bool last = step + 1 == steps;
    if (!p.save_dir.empty() && (last || (p.save_every > 0 && (step + 1) % p.save_every == 0))) {
      const int64_t g = (step + 1) * K;
      state.epoch = g / per_epoch;
      state.data_position = g % per_epoch * G;  // rows of all data ranks
      const auto tsave = std::chrono::steady_clock::now();
      save_checkpoint(m, opt, p.save_dir, state);
      write_data_shape(p.save_dir, shape);
      bar.say("step " + std::to_string(step + 1) + ": saved " + p.save_dir + " (" +
              std::to_string(since(tsave)).substr(0, 4) + " s)");
    }
  }
  bar.end();
  const double total_s = since(t0);
  if (g_rank == 0) {
    if (start >= steps)
      std::fprintf(stderr, "oslo: nothing to do: the checkpoint is at step %lld of --steps %lld\n",
                   static_cast<long long>(start), static_cast<long long>(steps));
    else
      std::fprintf(stderr,
                   "oslo: trained %lld steps in %.2f s (%.0f tokens/s): loss %.4f -> %.4f\n",
                   static_cast<long long>(steps - start), total_s,
                   static_cast<double>(trained_tokens) / total_s, first_loss, last_loss);
  }
}

}  // namespace

int cmd_train(int argc, char** argv) {
  Args a = parse(argc, argv, 2, {"activation-checkpointing", "help"},
                 model_options({"data",
                                "data-dtype",
                                "seq-len",
                                "batch-size",
                                "steps",
                                "lr",
                                "schedule",
                                "warmup",
                                "optimizer",
                                "weight-decay",
                                "momentum",
                                "max-grad-norm",
                                "grad-accum",
                                "seed",
                                "save",
                                "save-every",
                                "resume",
                                "log",
                                "dp",
                                "zero",
                                "bucket-mb",
                                "micro-batches",
                                "pipeline-head-split"}));
  if (a.has("help")) return std::printf("%s", kTrainHelp), 0;
  if (!a.pos.empty()) die_all("unexpected argument \"" + a.pos[0] + "\" (see --help)", 2);
  for (const char* req : {"model", "data", "seq-len", "batch-size", "steps"})
    if (!a.has(req)) die_all(std::string("--") + req + " is required (see --help)", 2);
  const Plan p = plan_run(a);
  const int64_t S = p.S, G = p.G;

  // The data: the same tokens on every rank.
  const TrainData data = read_train_data(a, S);
  const int64_t rows = data.rows(S);
  if (rows < G)
    die_all("--data " + a.get("data") +
            ": too little data for one batch: " + std::to_string(data.tokens.size()) + " tokens (" +
            data.what + ") make " + std::to_string(rows) + " rows of --seq-len " +
            std::to_string(S) + ", and --batch-size " + std::to_string(p.B) +
            (p.dp > 1 ? " on " + std::to_string(p.dp) + " data-parallel ranks" : "") + " needs " +
            std::to_string(G) + " rows (" + std::to_string((G - 1) * data.stride + S) + " tokens)");
  // Global micro-batches per epoch (DistributedSampler with drop_last:
  // rows / dp per rank, then whole micro-batches of B of them).
  const int64_t per_epoch = rows / G;

  // Handles are owned by guards so that an error (a thrown Fail) frees them
  // too, in the reverse order: optimizer, model, context.
  auto own = [](auto* h, auto destroy) {
    return std::unique_ptr<std::remove_pointer_t<decltype(h)>, decltype(destroy)>(h, destroy);
  };
  auto ctx_guard =
      own(context(a, static_cast<int>(p.tp), static_cast<int>(p.dp)), oslo_context_destroy);
  oslo_context* ctx = ctx_guard.get();
  auto m_guard = own(load_model(ctx, a), oslo_model_destroy);
  oslo_model* m = m_guard.get();
  oslo_model_info info;
  check(oslo_model_get_info(m, &info, nullptr), "info");
  if (!info.is_causal) die_all("--model " + a.get("model") + " is not a causal language model", 2);
  if (S > info.max_positions)
    die_all("--seq-len " + std::to_string(S) + " exceeds the model's " +
                std::to_string(info.max_positions) + " positions",
            2);
  check_vocabulary(data, info.vocab_size);
  if (a.has("activation-checkpointing"))
    check(oslo_model_set_activation_checkpointing(m, 1), "activation checkpointing");
  oslo_optimizer* raw_opt = nullptr;
  // Every rank refuses the options alike: each says why (the launcher may
  // stop rank 0 before it prints when another rank exits first).
  if (const oslo_status st = oslo_optimizer_create(m, &p.oo, &p.to, &raw_opt); st != OSLO_OK)
    die_all(std::string("optimizer: ") + oslo_status_string(st) + ": " + oslo_last_error());
  auto opt_guard = own(raw_opt, oslo_optimizer_destroy);
  oslo_optimizer* opt = opt_guard.get();

  TrainState state;
  state.seed = static_cast<uint64_t>(p.seed_arg);
  const DataShape shape{rows, S, G, p.K, p.dp, p.B};
  const int64_t start = a.has("resume") ? resume(a, p, opt, shape, per_epoch, &state) : 0;
  banner(p, data, rows, per_epoch, start);
  train_steps(p, data, rows, per_epoch, start, ctx, m, opt, state);
  return 0;  // the guards destroy optimizer, model and context in that order
}

}  // namespace oslo_cli
