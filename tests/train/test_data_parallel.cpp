// Data parallelism and ZeRO (core/train/data_parallel.hpp) against the same
// global batch trained at data-parallel size 1.
//
//   data_parallel_test curve FIXTURE --tp T --dp D --zero Z [--accum A] [--opt adamw|sgd]
//                      [--dtype bf16|f16] [--bucket BYTES]
//   oslo-run --nproc-per-node T*D data_parallel_test curve FIXTURE --procs ...
//       The reference: T threads (DP 1), accumulating G = A x D micro-batches
//       per optimizer step. Then T x D ranks (threads, or the processes of
//       oslo-run), each data rank d taking micro-batch k G + j D + d at
//       micro-step j of step k. 20 steps: every loss within 1e-5 relative
//       of the reference, the parameters at the end within 1e-5 of the
//       largest, the data ranks' parameters bitwise equal after every step,
//       and the optimizer's state per rank the ZeRO share of the full one.
//   data_parallel_test overlap FIXTURE
//       TP 1 x DP 2 threads, small buckets: every bucket but those the
//       embeddings complete is handed to the communication thread before
//       the backward returns, in the same order on both ranks.
//   data_parallel_test resume FIXTURE WORK
//       DP 2 / ZeRO-2 (threads) for 10 steps, saved; resumed at DP 2 /
//       ZeRO-2 (bitwise like the uninterrupted run), at DP 4 / ZeRO-1, at
//       DP 1 / ZeRO-0 and at TP 2 x DP 2 / ZeRO-1: the curve continues within
//       1e-5 relative.
//   data_parallel_test errors FIXTURE
//       DP 2 threads: a batch refused on one data rank fails both with a
//       named error at once, and the next step trains; bad options refused.
//   oslo-run --nproc-per-node 2 data_parallel_test fault FIXTURE WORK
//       DP 2 processes: rank 1 exits in the middle of a backward, after its
//       first bucket was handed over; rank 0 fails with OSLO_ERR_COMM well
//       within the timeout and the checkpoint saved before still loads.
//
// The data are make_train_refs.py's loop (train_loop_ref.safetensors), used
// cyclically; hyper-parameters as tests/train/test_train_checkpoint.cpp.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/common/crc32c.hpp"
#include "core/common/error.hpp"
#include "core/context/context.hpp"
#include "core/model/model.hpp"
#include "core/tensor/view.hpp"
#include "core/train/train_checkpoint.hpp"
#include "core/train/trainer.hpp"
#include "tests/common/expect.hpp"
#include "tests/common/grad_check.hpp"
#include "tests/common/safetensors_ref.hpp"
#include "tests/common/temp_dir.hpp"
#include "tests/common/train_loop.hpp"

using namespace oslo;

namespace {

using oslo_test::g_fail;

constexpr int64_t kSteps = 20;

using Data = oslo_test::LoopData;

struct Args {
  int tp = 1, dp = 2, zero = 0, accum = 1;
  bool procs = false;
  std::string opt = "adamw";
  oslo_dtype dtype = OSLO_DTYPE_F32;
  int64_t bucket = 16 << 10;   // small: a tiny model still has several buckets
  bool checkpointing = false;  // activation checkpointing
};

TrainerOptions options(const Args& a, int accum) {
  TrainerOptions t = oslo_test::loop_trainer_options(a.opt, a.dtype, accum, kSteps);
  t.data_parallel.zero_stage = a.zero;
  t.data_parallel.bucket_bytes = a.bucket;
  return t;
}

std::unique_ptr<Model> load(Context& ctx, const std::string& dir, oslo_dtype dt) {
  ModelLoadOptions o;
  o.dtype = dt;
  return Model::load(ctx, dir, o);
}

using oslo_test::compare_params;
using oslo_test::download;
using oslo_test::params_of;
using oslo_test::worst_rel;

// Runs body on `world` ranks as threads (tensor size tp), or once as this
// process's rank under oslo-run.
void run(bool procs, int world, int tp, const std::function<void(Context&)>& body) {
  oslo_test::run_ranks(procs, world, "\"tensor_parallel_size\": " + std::to_string(tp), body);
}

// The same through a trainer: ZeRO-3 gathers the partitioned parameters
// for the read (collective over the data group) and frees them after.
std::vector<std::vector<float>> params_of(Context& ctx, Trainer& tr) {
  DataParallel* dp = tr.data_parallel();
  const int units = tr.model().training().backward_stages() - 1;  // 0 and one per block
  if (dp->zero_stage() == 3)
    for (int u = 0; u < units; ++u) dp->acquire(u, true);
  std::vector<std::vector<float>> out = params_of(ctx, tr.model());
  if (dp->zero_stage() == 3) dp->release_units();
  return out;
}

// Whether every data rank holds the same bits in every parameter.
bool dp_bitwise_equal(Context& ctx, Trainer& tr) {
  uint32_t h = 0;
  for (const auto& p : params_of(ctx, tr)) h = crc32c(h, p.data(), p.size() * sizeof(float));
  Control& dc = ctx.control(OSLO_GROUP_DATA);
  const int n = dc.size();
  int64_t mine = h;
  std::vector<int64_t> all(static_cast<size_t>(n));
  dc.all_gather(&mine, all.data(), 1);
  for (int64_t v : all)
    if (v != all[0]) return false;
  return true;
}

// Steps [from, to) with `global` micro-batches per step over the data
// ranks: this data rank's micro-batches, accumulating global / dp each.
std::vector<double> train(Context& ctx, Trainer& tr, const Data& d, int global, int64_t from,
                          int64_t to, bool check_dp = false) {
  const int dp = ctx.topology().dp_size(), dr = ctx.topology().dp_rank();
  std::vector<double> losses;
  for (int64_t k = from; k < to; ++k)
    for (int j = 0; j < global / dp; ++j) {
      const int64_t i = k * global + j * dp + dr;
      TrainStepResult r =
          tr.train_step(d.part(d.ids, i), d.part(d.labels, i), d.part(d.mask, i), d.B, d.S);
      if (!r.stepped) continue;
      losses.push_back(r.mean_loss);
      if (check_dp)
        EXPECT(dp_bitwise_equal(ctx, tr), "[rank %d] data ranks' parameters differ after step %lld",
               ctx.topology().world_rank(), static_cast<long long>(k + 1));
    }
  return losses;
}

// The reference: DP 1 at tensor size tp (threads), G micro-batches a step.
struct Reference {
  std::vector<double> losses;
  std::vector<std::vector<std::vector<float>>> params;  // per tensor rank
};

Reference reference(const std::string& fixture, const Args& a, int global) {
  Reference ref;
  ref.params.resize(static_cast<size_t>(a.tp));
  const Data d(fixture);
  std::mutex mu;
  Args one = a;
  one.zero = 0;
  run(false, a.tp, a.tp, [&](Context& ctx) {
    auto m = load(ctx, fixture, a.dtype);
    Trainer tr(*m, options(one, global));
    std::vector<double> l = train(ctx, tr, d, global, 0, kSteps);
    std::lock_guard<std::mutex> lk(mu);
    if (ctx.topology().tp_rank() == 0) ref.losses = l;
    ref.params[static_cast<size_t>(ctx.topology().tp_rank())] = params_of(ctx, *m);
  });
  return ref;
}

// ---- curve -----------------------------------------------------------------

std::string torch_note(double w) {
  if (w < 0) return "";
  char b[64];
  std::snprintf(b, sizeof b, ", PyTorch's loop within %.3g", w);
  return b;
}

void curve(const std::string& fixture, const Args& a) {
  const int global = a.accum * a.dp;
  const Reference ref = reference(fixture, a, global);
  const Data d(fixture);
  const double loss_tol = a.dtype == OSLO_DTYPE_F32 ? 1e-5 : 2e-3;
  const double param_tol = a.dtype == OSLO_DTYPE_F32 ? 1e-5 : 2e-2;
  run(a.procs, a.tp * a.dp, a.tp, [&](Context& ctx) {
    const Topology& t = ctx.topology();
    EXPECT(t.dp_size() == a.dp && t.tp_size() == a.tp, "layout tp %d dp %d, want %d x %d",
           t.tp_size(), t.dp_size(), a.tp, a.dp);
    auto m = load(ctx, fixture, a.dtype);
    m->training().set_activation_checkpointing(a.checkpointing);
    Trainer tr(*m, options(a, a.accum));
    std::vector<double> l = train(ctx, tr, d, global, 0, kSteps, true);
    if (a.zero == 3) {
      // Between steps a rank holds only the 1-D parameters whole; the rest
      // is the optimizer's masters of its parts. Inference and Model::save
      // refuse by name.
      int64_t whole = 0, psi = 0;
      for (const PlacedTensor& p : m->tensors()) {
        psi += p.tensor.numel();
        if (p.tensor.data()) whole += p.tensor.numel();
      }
      EXPECT(static_cast<double>(whole) < 0.05 * static_cast<double>(psi),
             "[rank %d] %lld of %lld parameter elements held whole between steps", t.world_rank(),
             static_cast<long long>(whole), static_cast<long long>(psi));
      for (int k = 0; k < 2; ++k) {
        try {
          if (k == 0) {
            std::vector<float> out;
            m->inference().forward(d.part(d.ids, 0), {}, {}, d.B, d.S, true, &out);
          } else {
            m->save(oslo_test::temp_dir("oslo-z3-save"));
          }
          EXPECT(false, "[rank %d] a ZeRO-3 model ran %s", t.world_rank(),
                 k ? "save" : "inference");
        } catch (const Error& e) {
          EXPECT(e.status() == OSLO_ERR_NOT_SUPPORTED && std::strstr(e.what(), "ZeRO-3"),
                 "[rank %d] %s", t.world_rank(), e.what());
        }
      }
    }
    const double lw = worst_rel(l, ref.losses);
    // Two micro-batches a step (DP 2, or DP 1 accumulating 2) is also
    // make_train_refs.py's PyTorch loop: micro-batch losses / 2, summed
    // gradients, which is what PyTorch's DDP over two ranks computes.
    double torch_w = -1;
    if (global == 2 && a.dtype == OSLO_DTYPE_F32) {
      oslo_test::SafetensorsRef tref(fixture + "/train_loop_ref.safetensors");
      torch_w = worst_rel(l, tref.get<double>("losses_" + a.opt));
      EXPECT(torch_w <= 1e-4, "[rank %d] losses differ from PyTorch's loop by %.3g relative",
             t.world_rank(), torch_w);
    }
    double outside = 0;
    const double pw = compare_params(
        params_of(ctx, tr), ref.params[static_cast<size_t>(t.tp_rank())], param_tol, &outside);
    // What the optimizer holds: the ZeRO share of the state (and of the
    // f32 masters of a narrower model).
    const Optimizer& opt = tr.optimizer();
    int64_t psi = 0, held = 0;
    for (size_t i = 0; i < m->tensors().size(); ++i) {
      psi += m->tensors()[i].tensor.numel();
      for (const Tensor& s : opt.state(i)) held += s.numel();
    }
    const double share = static_cast<double>(held) /
                         (static_cast<double>(psi) * static_cast<double>(opt.state_names().size()));
    const double want_share = a.zero >= 1 ? 1.0 / a.dp : 1.0;
    EXPECT(share <= want_share * 1.15 && share >= want_share * 0.85,
           "[rank %d] optimizer state %.4f of the full state, want %.4f", t.world_rank(), share,
           want_share);
    // ZeRO-3 runs the head's weight in row chunks (never whole): every
    // chunk's gradient was reduced in the last backward.
    if (a.zero == 3) {
      DataParallel& dp = *tr.data_parallel();
      const int64_t chunks = dp.head_rows().chunks;
      EXPECT(chunks > 1 && dp.timing().row_chunks == chunks,
             "[rank %d] the head came in %lld row chunks, %lld reduced in the last backward",
             t.world_rank(), static_cast<long long>(chunks),
             static_cast<long long>(dp.timing().row_chunks));
    }
    EXPECT(lw <= loss_tol, "[rank %d] losses differ from DP 1 by %.3g relative (limit %.0e)",
           t.world_rank(), lw, loss_tol);
    // SGD: every element within param_tol. AdamW divides each gradient by
    // its own running magnitude, so an element whose exact gradient is 0
    // (a key bias: softmax ignores a shift shared by every key) moves by
    // about lr a step in a direction the round-off picks, and the
    // summation order of the data ranks picks another one: those few
    // elements differ by up to 2 lr per step (under 1 % of the largest
    // parameter here); all others (over 99 %) stay within param_tol.
    EXPECT(a.opt == "adamw" ? (outside <= 0.01 && pw <= 1e-2) : pw <= param_tol,
           "[rank %d] parameters differ from DP 1 by %.3g of the largest (%.4f%% of the "
           "elements beyond %.0e)",
           t.world_rank(), pw, 100 * outside, param_tol);
    if (t.world_rank() == 0)
      std::printf(
          "[tp %d x dp %d zero %d %s%s, %zu buckets%s] %zu steps: losses within %.3g of DP 1 "
          "(first %.6f, last %.6f), parameters within %.3g (%.4f%% beyond %.0e), state share "
          "%.4f%s\n",
          a.tp, a.dp, a.zero, a.opt.c_str(), a.dtype == OSLO_DTYPE_F32 ? "" : " mixed",
          tr.data_parallel()->buckets().size(),
          tr.data_parallel()->background() ? ", background" : "", l.size(), lw,
          l.empty() ? 0.0 : l.front(), l.empty() ? 0.0 : l.back(), pw, 100 * outside, param_tol,
          share, torch_note(torch_w).c_str());
  });
}

// ---- overlap ---------------------------------------------------------------

void overlap(const std::string& fixture) {
  const Data d(fixture);
  Args a;
  a.bucket = 8 << 10;
  std::vector<std::vector<size_t>> orders(2);
  run(false, 2, 1, [&](Context& ctx) {
    auto m = load(ctx, fixture, OSLO_DTYPE_F32);
    Trainer tr(*m, options(a, 1));
    const DataParallel& dp = *tr.data_parallel();
    const int r = ctx.topology().world_rank();
    EXPECT(dp.background(), "[rank %d] no communication thread", r);
    EXPECT(dp.buckets().size() >= 3, "[rank %d] %zu buckets", r, dp.buckets().size());
    const int last_stage = m->training().backward_stages() - 1;
    for (int step = 0; step < 3; ++step) {
      const int64_t i = step * 2 + r;
      tr.train_step(d.part(d.ids, i), d.part(d.labels, i), d.part(d.mask, i), d.B, d.S);
      const DataParallel::Timing& tm = dp.timing();
      size_t early = 0, before_end = 0;
      for (size_t b = 0; b < dp.buckets().size(); ++b) {
        const bool embeddings = dp.buckets()[b].ready_stage == last_stage;
        EXPECT(tm.handed[b] > 0 && tm.started[b] >= tm.handed[b] && tm.finished[b] >= tm.started[b],
               "[rank %d] bucket %zu: handed %.6f started %.6f finished %.6f", r, b, tm.handed[b],
               tm.started[b], tm.finished[b]);
        if (!embeddings) {
          ++early;
          EXPECT(tm.handed[b] < tm.backward_end,
                 "[rank %d] step %d: bucket %zu (stage %d) was handed over at %.6f, after the "
                 "backward ended at %.6f",
                 r, step, b, dp.buckets()[b].ready_stage, tm.handed[b], tm.backward_end);
          if (tm.started[b] < tm.backward_end) ++before_end;
        }
        if (b > 0)
          EXPECT(tm.handed[b] >= tm.handed[b - 1], "[rank %d] bucket %zu handed before %zu", r, b,
                 b - 1);
      }
      EXPECT(early >= 2, "[rank %d] only %zu buckets complete before the embeddings", r, early);
      if (r == 0)
        std::printf(
            "[step %d] %zu buckets, %zu handed over during the backward, %zu of them begun "
            "before it returned; backward ended %.3f ms after the first hand-over, reductions "
            "done %.3f ms after it\n",
            step + 1, dp.buckets().size(), early, before_end,
            1e3 * (tm.backward_end - tm.handed[0]), 1e3 * (tm.waited_until - tm.backward_end));
    }
    {
      // no_sync: the first micro-batch of a window of 2 exchanges nothing.
      Trainer acc(*m, options(a, 2));
      const DataParallel& da = *acc.data_parallel();
      TrainStepResult r1 =
          acc.train_step(d.part(d.ids, r), d.part(d.labels, r), d.part(d.mask, r), d.B, d.S);
      size_t handed = 0;
      for (double h : da.timing().handed) handed += h > 0;
      EXPECT(!r1.stepped && handed == 0 && !da.reduced(),
             "[rank %d] the first micro-batch of 2 handed %zu buckets over", r, handed);
      TrainStepResult r2 = acc.train_step(d.part(d.ids, 2 + r), d.part(d.labels, 2 + r),
                                          d.part(d.mask, 2 + r), d.B, d.S);
      handed = 0;
      for (double h : da.timing().handed) handed += h > 0;
      EXPECT(r2.stepped && handed == da.buckets().size(),
             "[rank %d] the last micro-batch of 2 handed %zu of %zu buckets over", r, handed,
             da.buckets().size());
      if (r == 0)
        std::printf("accumulating 2: micro-batch 1 handed 0 buckets over, micro-batch 2 all %zu\n",
                    handed);
    }
    std::vector<size_t> order;
    for (const GradBucket& b : dp.buckets())
      order.insert(order.end(), b.params.begin(), b.params.end());
    orders[static_cast<size_t>(r)] = order;
    {
      // ZeRO-3 prefetch: a pass gathers only its first unit (the
      // embeddings) on the calling thread; each block's gather is handed to
      // the communication thread when the unit before it is acquired, before
      // the model needs the block (the last block is held from its forward
      // through its backward).
      Args z = a;
      z.zero = 3;
      Trainer z3(*m, options(z, 1));
      const DataParallel& dz = *z3.data_parallel();
      const int blocks = m->training().backward_stages() - 2;
      for (int step = 0; step < 3; ++step) {
        const int64_t i = step * 2 + r;
        z3.train_step(d.part(d.ids, i), d.part(d.labels, i), d.part(d.mask, i), d.B, d.S);
        const auto& acq = dz.timing().acquires;
        std::string seq;
        size_t sync = 0;
        double ahead = 0;
        for (const auto& e : acq) {
          seq += " " + std::to_string(e.unit) + (e.handed > 0 ? "p" : "s");
          if (e.handed == 0) {
            ++sync;
            continue;
          }
          EXPECT(e.handed < e.needed && e.finished >= e.handed,
                 "[rank %d] step %d: unit %d handed %.6f needed %.6f finished %.6f", r, step,
                 e.unit, e.handed, e.needed, e.finished);
          ahead += e.needed - e.handed;
        }
        // Forward: 0, 1 .. L; backward: L - 1 .. 1.
        EXPECT(acq.size() == static_cast<size_t>(2 * blocks) && sync == 1 && acq[0].unit == 0 &&
                   acq[0].handed == 0,
               "[rank %d] step %d: acquisitions (p: prefetched, s: on the calling thread):%s; "
               "expected %d, only the first on the calling thread",
               r, step, seq.c_str(), 2 * blocks);
        if (r == 0)
          std::printf(
              "[zero-3 step %d] acquisitions%s; prefetches handed %.3f ms ahead of use "
              "in all\n",
              step + 1, seq.c_str(), 1e3 * ahead);
      }
    }
  });
  EXPECT(orders[0] == orders[1] && !orders[0].empty(), "the ranks' bucket orders differ");
}

// ---- resume ----------------------------------------------------------------

void resume(const std::string& fixture, const std::string& work) {
  const Data d(fixture);
  const int global = 4;
  const std::string ckpt = work + "/ckpt";
  Args a;
  a.dp = 2;
  a.zero = 2;
  std::vector<double> ref, first;
  run(false, 2, 1, [&](Context& ctx) {
    auto m = load(ctx, fixture, OSLO_DTYPE_F32);
    Trainer tr(*m, options(a, global / 2));
    std::vector<double> l = train(ctx, tr, d, global, 0, kSteps);
    if (ctx.topology().world_rank() == 0) ref = l;
  });
  run(false, 2, 1, [&](Context& ctx) {
    auto m = load(ctx, fixture, OSLO_DTYPE_F32);
    Trainer tr(*m, options(a, global / 2));
    std::vector<double> l = train(ctx, tr, d, global, 0, kSteps / 2);
    save_training_checkpoint(ckpt, tr, nlohmann::json{{"data_position", kSteps / 2}});
    if (ctx.topology().world_rank() == 0) first = l;
  });
  struct Layout {
    int tp, dp, zero;
  };
  for (const Layout& L : {Layout{1, 2, 2}, Layout{1, 4, 3}, Layout{1, 4, 1}, Layout{1, 1, 0},
                          Layout{2, 2, 1}, Layout{2, 2, 3}}) {
    Args b;
    b.tp = L.tp;
    b.dp = L.dp;
    b.zero = L.zero;
    std::vector<double> second;
    run(false, L.tp * L.dp, L.tp, [&](Context& ctx) {
      auto m = load(ctx, ckpt, OSLO_DTYPE_F32);
      Trainer tr(*m, options(b, global / L.dp));
      const nlohmann::json user = load_training_checkpoint(ckpt, tr);
      const int64_t from = user.at("data_position").get<int64_t>();
      std::vector<double> l = train(ctx, tr, d, global, from, kSteps, L.dp > 1);
      if (ctx.topology().world_rank() == 0) second = l;
    });
    std::vector<double> all = first;
    all.insert(all.end(), second.begin(), second.end());
    const double w = worst_rel(all, ref);
    const bool same = L.tp == 1 && L.dp == 2 && L.zero == 2;
    EXPECT(same ? w == 0 : w <= 1e-5,
           "resumed at tp %d x dp %d zero %d: the curve differs by %.3g relative%s", L.tp, L.dp,
           L.zero, w, same ? " (want bitwise)" : "");
    std::printf("saved at dp 2 zero 2, resumed at tp %d x dp %d zero %d: %zu steps within %.3g%s\n",
                L.tp, L.dp, L.zero, all.size(), w, same && w == 0 ? " (bitwise)" : "");
  }
}

// ---- errors ----------------------------------------------------------------

void errors(const std::string& fixture) {
  const Data d(fixture);
  Args a;
  run(false, 2, 1, [&](Context& ctx) {
    auto m = load(ctx, fixture, OSLO_DTYPE_F32);
    const int r = ctx.topology().world_rank();
    for (int stage : {7, -1}) {
      Args b = a;
      b.zero = stage;
      try {
        Trainer bad(*m, options(b, 1));
        EXPECT(false, "[rank %d] zero stage %d accepted", r, stage);
      } catch (const Error& e) {
        EXPECT(std::strstr(e.what(), "zero_stage") && e.status() == OSLO_ERR_INVALID_ARGUMENT,
               "[rank %d] zero stage %d: %s", r, stage, e.what());
      }
    }
    for (int zero : {0, 2}) {
      Args b = a;
      b.zero = zero;
      Trainer tr(*m, options(b, 1));
      std::vector<int64_t> labels = d.part(d.labels, r);
      if (r == 1) labels[3] = 1 << 30;  // outside the vocabulary, on data rank 1 only
      const auto t0 = std::chrono::steady_clock::now();
      try {
        tr.train_step(d.part(d.ids, r), labels, d.part(d.mask, r), d.B, d.S);
        EXPECT(false, "[rank %d] zero %d: a refused batch trained", r, zero);
      } catch (const Error& e) {
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const bool named = r == 1 ? std::strstr(e.what(), "outside") != nullptr
                                  : std::strstr(e.what(), "data-parallel rank 1") != nullptr;
        EXPECT(named && e.status() == OSLO_ERR_INVALID_ARGUMENT && s < 10,
               "[rank %d] zero %d: after %.2f s: %s", r, zero, s, e.what());
        if (r == 0) std::printf("zero %d: rank 0 got in %.3f s: %s\n", zero, s, e.what());
      }
      // The next batch trains, and the ranks agree.
      TrainStepResult ok = tr.train_step(d.part(d.ids, 2 + r), d.part(d.labels, 2 + r),
                                         d.part(d.mask, 2 + r), d.B, d.S);
      EXPECT(ok.stepped && std::isfinite(ok.mean_loss) && dp_bitwise_equal(ctx, tr),
             "[rank %d] zero %d: the step after the refused batch did not train alike", r, zero);
    }
  });
}

// ---- fault -----------------------------------------------------------------

void fault(const std::string& fixture, const std::string& work) {
  const Data d(fixture);
  Args a;
  a.zero = 1;
  const std::string ckpt = work + "/ckpt";
  run(true, 2, 1, [&](Context& ctx) {
    const int r = ctx.topology().world_rank();
    auto m = load(ctx, fixture, OSLO_DTYPE_F32);
    Trainer tr(*m, options(a, 1));
    train(ctx, tr, d, 2, 0, 2);
    save_training_checkpoint(ckpt, tr, nlohmann::json{{"data_position", 2}});
    DataParallel* dp = tr.data_parallel();
    m->training().set_backward_hook([dp, r](int stage) {
      dp->on_stage(stage);
      if (r == 1 && stage == 2) {
        std::fflush(stdout);
        _exit(0);  // gone mid-backward, its first buckets handed over
      }
    });
    const auto t0 = std::chrono::steady_clock::now();
    try {
      train(ctx, tr, d, 2, 2, 3);
      EXPECT(false, "[rank %d] a step with a dead peer succeeded", r);
    } catch (const Error& e) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT(e.status() == OSLO_ERR_COMM && s < 20,
             "[rank %d] after %.2f s: status %d: %s (want OSLO_ERR_COMM well within the 60 s "
             "timeout)",
             r, s, static_cast<int>(e.status()), e.what());
      std::printf("rank %d: failed in %.3f s: %s\n", r, s, e.what());
    }
    // The checkpoint saved before still loads (here alone, at DP 1).
    bool loaded = false;
    run(false, 1, 1, [&](Context& solo) {
      auto m1 = load(solo, ckpt, OSLO_DTYPE_F32);
      Trainer t1(*m1, options(Args{1, 1, 0, 1, false, "adamw", OSLO_DTYPE_F32, 16 << 10}, 1));
      loaded = load_training_checkpoint(ckpt, t1).at("data_position") == 2 &&
               t1.optimizer().steps() == 2;
    });
    EXPECT(loaded, "the checkpoint saved before the fault does not load");
    std::fflush(stdout);
    _exit(g_fail ? 1 : 0);  // the context's peer is gone: skip its teardown
  });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: data_parallel_test curve|overlap|resume|errors|fault FIXTURE ...\n");
    return 2;
  }
  const std::string mode = argv[1], fixture = argv[2];
  Args a;
  std::string work;
  for (int i = 3; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (s == "--tp")
      a.tp = std::atoi(next().c_str());
    else if (s == "--dp")
      a.dp = std::atoi(next().c_str());
    else if (s == "--zero")
      a.zero = std::atoi(next().c_str());
    else if (s == "--accum")
      a.accum = std::atoi(next().c_str());
    else if (s == "--opt")
      a.opt = next();
    else if (s == "--bucket")
      a.bucket = std::atoll(next().c_str());
    else if (s == "--procs")
      a.procs = true;
    else if (s == "--dtype") {
      const std::string dt = next();
      a.dtype = dt == "bf16" ? OSLO_DTYPE_BF16 : dt == "f16" ? OSLO_DTYPE_F16 : OSLO_DTYPE_F32;
    } else
      work = s;
  }
  if (a.procs) {
    const char* ws = std::getenv("WORLD_SIZE");
    a.dp = (ws ? std::atoi(ws) : 1) / a.tp;
  }
  if (mode == "curve")
    curve(fixture, a);
  else if (mode == "overlap")
    overlap(fixture);
  else if (mode == "resume")
    resume(fixture, work);
  else if (mode == "errors")
    errors(fixture);
  else if (mode == "fault")
    fault(fixture, work);
  else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  if (g_fail) {
    std::printf("%d failure(s)\n", g_fail.load());
    return 1;
  }
  std::printf("PASS\n");
  return 0;
}
