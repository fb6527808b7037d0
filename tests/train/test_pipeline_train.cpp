// Pipeline-parallel training (Model::pipeline_loss_backward through the
// Trainer) against the same global batch trained without stages.
//
//   pipeline_train_test curve FIXTURE --tp T --pp P --dp D [--micro M] [--zero Z]
//                       [--dtype bf16|f16] [--virtual V] [--layers A,B,...]
//                       [--checkpointing] [--head-split F] [--procs]
//       The reference: T threads (tensor size T, no stages, no data
//       parallelism), one micro-batch per train_step, accumulating D x M
//       micro-batches per optimizer step. Then T x P x D ranks (threads, or
//       the processes of oslo-run), data rank d passing at step k the M
//       micro-batches (k D + d) M .. (k D + d) M + M - 1 as one batch that
//       the pipeline cuts into M micro-batches. 20 steps: every loss within
//       1e-5 relative of the reference (2e-3 in bf16/f16), each stage's
//       parameters at the end equal to the reference's of the same names,
//       the tied embedding bitwise equal on the first and last stage and
//       the data ranks' parameters bitwise equal after every step, at most
//       min(P - r, M) micro-batches alive on stage r.
//   pipeline_train_test resume FIXTURE [--work DIR]
//       Trains 10 steps at TP 2 x PP 2 (threads, 2 micro-batches), saves a
//       training checkpoint, loads it at 1 x 4 x 1 and at 4 x 1 x 1 (FIXTURE
//       needs 4 blocks) and trains 10 more: every loss within 1e-5 relative
//       of 20 straight steps at 1 x 1 x 1.
//   pipeline_train_test errors FIXTURE
//       P 2 threads: a micro-batch count that does not divide the batch, a
//       batch that differs between the stages and a token outside the
//       vocabulary fail every stage at once with a named error, and the
//       next step trains; ZeRO-2 with stages and bad options are refused.
//   oslo-run --nproc-per-node 2 pipeline_train_test fault FIXTURE [--head-split F]
//       P 2 processes: the last stage exits in the middle of the schedule;
//       the first fails with OSLO_ERR_COMM or OSLO_ERR_TIMEOUT well within
//       the 60 s timeout instead of hanging in its recv.
//
// The data are make_train_refs.py's loop (train_loop_ref.safetensors), used
// cyclically; hyper-parameters as tests/train/test_data_parallel.cpp.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/common/crc32c.hpp"
#include "core/common/error.hpp"
#include "core/context/context.hpp"
#include "core/model/model.hpp"
#include "core/pipeline/schedule.hpp"
#include "core/train/train_checkpoint.hpp"
#include "core/train/trainer.hpp"
#include "tests/common/expect.hpp"
#include "tests/common/train_loop.hpp"

using namespace oslo;

namespace {

using oslo_test::g_fail;
using Data = oslo_test::LoopData;

constexpr int64_t kSteps = 20;

struct Args {
  int tp = 1, pp = 2, dp = 1, micro = 4, zero = 0;
  int virtual_stages = 1;      // model chunks per rank (interleaved 1F1B)
  bool checkpointing = false;  // activation checkpointing
  std::vector<int> layers;     // explicit blocks per virtual stage (empty: uniform)
  bool procs = false;
  oslo_dtype dtype = OSLO_DTYPE_F32;
  double head_split = 0;  // TrainerOptions::pipeline_head_split
};

std::string layout(const Args& a) {
  return "\"tensor_parallel_size\": " + std::to_string(a.tp) +
         ", \"pipeline_parallel_size\": " + std::to_string(a.pp);
}

std::unique_ptr<Model> load(Context& ctx, const std::string& dir, oslo_dtype dt,
                            const std::vector<int>& layers = {}, int virtual_stages = 1) {
  ModelLoadOptions o;
  o.dtype = dt;
  o.pipeline_layers = layers;
  o.virtual_stages = virtual_stages;
  return Model::load(ctx, dir, o);
}

// The micro-batches whose activations a rank keeps at once: from its first
// forward to its last backward (the chunk-0 one), over its schedule.
int expected_peak(int p, int r, int m, int v) {
  int alive = 0, peak = 0;
  std::vector<bool> started(static_cast<size_t>(m), false);
  for (const PipeOp& op : pipeline_schedule(p, r, m, v)) {
    if (op.kind == PipeOp::FORWARD && !started[static_cast<size_t>(op.microbatch)]) {
      started[static_cast<size_t>(op.microbatch)] = true;
      peak = std::max(peak, ++alive);
    }
    if (op.kind == PipeOp::BACKWARD && op.chunk == 0) --alive;
  }
  return peak;
}

// The batch of M consecutive micro-batches of the loop's data, from `first`.
struct Batch {
  std::vector<int64_t> ids, labels, mask;
  int64_t rows = 0;
};
Batch batch_of(const Data& d, int64_t first, int m) {
  Batch b;
  for (int j = 0; j < m; ++j) {
    for (auto [dst, src] : {std::pair{&b.ids, &d.ids}, std::pair{&b.labels, &d.labels},
                            std::pair{&b.mask, &d.mask}}) {
      const std::vector<int64_t> part = d.part(*src, first + j);
      dst->insert(dst->end(), part.begin(), part.end());
    }
    b.rows += d.B;
  }
  return b;
}

// The reference: tensor size tp, no stages, D x M micro-batches per step.
struct Reference {
  std::vector<double> losses;
  // Per tensor rank: each parameter by name.
  std::vector<std::map<std::string, std::vector<float>>> params;
};

Reference reference(const std::string& fixture, const Args& a) {
  Reference ref;
  ref.params.resize(static_cast<size_t>(a.tp));
  const Data d(fixture);
  const int g = a.dp * a.micro;
  std::mutex mu;
  oslo_test::run_ranks(
      false, a.tp, "\"tensor_parallel_size\": " + std::to_string(a.tp), [&](Context& ctx) {
        auto m = load(ctx, fixture, a.dtype);
        Trainer tr(*m, oslo_test::loop_trainer_options("adamw", a.dtype, g, kSteps));
        std::vector<double> l;
        for (int64_t i = 0; i < kSteps * g; ++i) {
          TrainStepResult r =
              tr.train_step(d.part(d.ids, i), d.part(d.labels, i), d.part(d.mask, i), d.B, d.S);
          if (r.stepped) l.push_back(r.mean_loss);
        }
        const auto p = oslo_test::params_of(ctx, *m);
        std::lock_guard<std::mutex> lk(mu);
        if (ctx.topology().tp_rank() == 0) ref.losses = l;
        auto& mine = ref.params[static_cast<size_t>(ctx.topology().tp_rank())];
        for (size_t i = 0; i < p.size(); ++i) mine[m->tensors()[i].placement.name] = p[i];
      });
  return ref;
}

// One int64 per pipeline rank, gathered over the pipeline group.
std::vector<int64_t> over_stages(Context& ctx, int64_t mine) {
  Control& pc = ctx.control(OSLO_GROUP_PIPELINE);
  std::vector<int64_t> all(static_cast<size_t>(pc.size()));
  pc.all_gather(&mine, all.data(), 1);
  return all;
}

uint32_t crc_of(const std::vector<float>& v) {
  return crc32c(0, v.data(), v.size() * sizeof(float));
}

// The tied embedding: the first stage's table and the last stage's copy
// hold the same bits (checked on every stage; true when not tied).
bool tied_equal(Context& ctx, const Model& m) {
  if (!m.config().tie_word_embeddings || m.pipeline_size() == 1) return true;
  const auto p = oslo_test::params_of(ctx, m);
  const int r = m.pipeline_rank(), n = m.pipeline_size();
  int64_t mine = 0;
  if (r == 0) mine = crc_of(p[static_cast<size_t>(m.training().embed_param())]) + 1;
  if (r == n - 1) mine = crc_of(p[static_cast<size_t>(m.training().head_param())]) + 1;
  const std::vector<int64_t> all = over_stages(ctx, mine);
  return all.front() != 0 && all.front() == all.back();
}

// Whether every data rank holds the same bits in every parameter.
bool dp_equal(Context& ctx, const Model& m) {
  uint32_t h = 0;
  for (const auto& p : oslo_test::params_of(ctx, m)) h = crc32c(h, p.data(), p.size() * 4);
  Control& dc = ctx.control(OSLO_GROUP_DATA);
  int64_t mine = h;
  std::vector<int64_t> all(static_cast<size_t>(dc.size()));
  dc.all_gather(&mine, all.data(), 1);
  return std::all_of(all.begin(), all.end(), [&](int64_t v) { return v == all[0]; });
}

TrainerOptions options(const Args& a) {
  TrainerOptions t = oslo_test::loop_trainer_options("adamw", a.dtype, 1, kSteps);
  t.micro_batches = a.micro;
  t.pipeline_head_split = a.head_split;
  t.data_parallel.zero_stage = a.zero;
  t.data_parallel.bucket_bytes = 16 << 10;
  return t;
}

// ---- curve -----------------------------------------------------------------

void curve(const std::string& fixture, const Args& a) {
  const Reference ref = reference(fixture, a);
  const Data d(fixture);
  const double loss_tol = a.dtype == OSLO_DTYPE_F32 ? 1e-5 : 2e-3;
  const double param_tol = a.dtype == OSLO_DTYPE_F32 ? 1e-5 : 2e-2;
  oslo_test::run_ranks(a.procs, a.tp * a.pp * a.dp, layout(a), [&](Context& ctx) {
    const Topology& t = ctx.topology();
    EXPECT(t.tp_size() == a.tp && t.pp_size() == a.pp && t.dp_size() == a.dp,
           "layout tp %d pp %d dp %d, want %d x %d x %d", t.tp_size(), t.pp_size(), t.dp_size(),
           a.tp, a.pp, a.dp);
    auto m = load(ctx, fixture, a.dtype, a.layers, a.virtual_stages);
    m->training().set_activation_checkpointing(a.checkpointing);
    Trainer tr(*m, options(a));
    const int r = t.world_rank(), stage = t.pp_rank();
    std::vector<double> l;
    int peak = 0;
    int64_t head_rows = -1;
    double bubble = 0;
    bool tied_ok = true, dp_ok = true;
    for (int64_t k = 0; k < kSteps; ++k) {
      const Batch b = batch_of(d, (k * a.dp + t.dp_rank()) * a.micro, a.micro);
      TrainStepResult res = tr.train_step(b.ids, b.labels, b.mask, b.rows, d.S);
      EXPECT(res.stepped, "[rank %d] step %lld did not step", r, static_cast<long long>(k));
      l.push_back(res.mean_loss);
      peak = std::max(peak, tr.pipeline_stats().peak_live);
      head_rows = tr.pipeline_stats().head_rows;
      bubble += tr.pipeline_stats().bubble / kSteps;
      tied_ok = tied_ok && tied_equal(ctx, *m);
      if (a.dp > 1) dp_ok = dp_ok && dp_equal(ctx, *m);
    }
    EXPECT(tied_ok, "[rank %d] the tied embedding differs between the first and last stage", r);
    EXPECT(dp_ok, "[rank %d] data ranks' parameters differ", r);
    // 1F1B keeps min(p - r, m); the interleaved schedule what its order
    // gives; the head split at most min(p - r + 2, m).
    if (a.head_split != 0) {
      const int most = std::min(a.pp - stage + 1 + a.virtual_stages, a.micro);
      EXPECT(peak <= most && head_rows > 0,
             "[rank %d] head split: stage %d kept %d micro-batches alive (at most %d), the first "
             "stage took the head of %lld tokens",
             r, stage, peak, most, static_cast<long long>(head_rows));
    } else {
      const int want_peak = expected_peak(a.pp, stage, a.micro, a.virtual_stages);
      EXPECT(peak == want_peak && (a.virtual_stages > 1 || peak == std::min(a.pp - stage, a.micro)),
             "[rank %d] stage %d kept %d micro-batches alive, the schedule keeps %d", r, stage,
             peak, want_peak);
    }
    const double lw = oslo_test::worst_rel(l, ref.losses);
    EXPECT(lw <= loss_tol,
           "[rank %d] losses differ from the reference by %.3g relative (limit %.0e)", r, lw,
           loss_tol);
    // This stage's parameters against the reference's of the same names.
    const auto got = oslo_test::params_of(ctx, *m);
    std::vector<std::vector<float>> mine, want;
    const auto& names = ref.params[static_cast<size_t>(t.tp_rank())];
    for (size_t i = 0; i < got.size(); ++i) {
      auto it = names.find(m->tensors()[i].placement.name);
      EXPECT(it != names.end(), "[rank %d] %s is not in the reference", r,
             m->tensors()[i].placement.name.c_str());
      if (it == names.end()) continue;
      mine.push_back(got[i]);
      want.push_back(it->second);
    }
    double outside = 0;
    const double pw = oslo_test::compare_params(mine, want, param_tol, &outside);
    // AdamW: an element whose exact gradient is 0 moves by about lr a step
    // in a direction the round-off picks (data_parallel_test explains it).
    EXPECT(outside <= 0.01 && pw <= 1e-2,
           "[rank %d] parameters differ from the reference by %.3g of the largest (%.4f%% of the "
           "elements beyond %.0e)",
           r, pw, 100 * outside, param_tol);
    if (t.tp_rank() == 0 && t.dp_rank() == 0)
      std::printf(
          "[tp %d x pp %d x dp %d, v %d, m %d, zero %d%s, head split %g: %lld tokens] stage %d: "
          "losses within %.3g of the reference "
          "(first %.6f, last %.6f), parameters within %.3g (%.4f%% beyond %.0e), peak live %d, "
          "bubble %.3f\n",
          a.tp, a.pp, a.dp, a.virtual_stages, a.micro, a.zero,
          a.dtype == OSLO_DTYPE_F32 ? "" : " mixed", a.head_split,
          static_cast<long long>(head_rows), stage, lw, l.empty() ? 0.0 : l.front(),
          l.empty() ? 0.0 : l.back(), pw, 100 * outside, param_tol, peak, bubble);
  });
}

// ---- resume ----------------------------------------------------------------

// Steps [from, to) of `a`'s layout on this rank: returns the losses.
std::vector<double> steps(Context& ctx, Trainer& tr, const Data& d, const Args& a, int64_t from,
                          int64_t to) {
  std::vector<double> l;
  for (int64_t k = from; k < to; ++k) {
    const Batch b = batch_of(d, (k * a.dp + ctx.topology().dp_rank()) * a.micro, a.micro);
    l.push_back(tr.train_step(b.ids, b.labels, b.mask, b.rows, d.S).mean_loss);
  }
  return l;
}

// 2 x 2 x 1 for 10 steps, saved; the checkpoint loaded at 1 x 4 x 1 and at
// 4 x 1 x 1 (the blocks re-partitioned between the stages, the tensors
// re-sliced) trains steps 10..19 as the straight run at 1 x 1 x 1 does.
void resume(const std::string& fixture, const std::string& work) {
  const Data d(fixture);
  Args base;
  base.tp = 1;
  base.pp = 1;
  base.micro = 2;
  const Reference ref = reference(fixture, base);
  const std::string ckpt = work + "/ckpt";
  oslo_test::remove_tree(work);
  Args first = base;
  first.tp = 2;
  first.pp = 2;
  std::vector<double> head;
  oslo_test::run_ranks(false, 4, layout(first), [&](Context& ctx) {
    auto m = load(ctx, fixture, OSLO_DTYPE_F32);
    Trainer tr(*m, options(first));
    std::vector<double> l = steps(ctx, tr, d, first, 0, 10);
    save_training_checkpoint(ckpt, tr, nlohmann::json{{"step", 10}});
    if (ctx.topology().world_rank() == 0) head = l;
  });
  const std::vector<double> want_head(ref.losses.begin(), ref.losses.begin() + 10);
  const double hw = oslo_test::worst_rel(head, want_head);
  EXPECT(hw <= 1e-5, "2x2x1 steps 0..9 differ from the reference by %.3g", hw);
  const std::vector<double> want_tail(ref.losses.begin() + 10, ref.losses.end());
  for (auto [tp, pp] : {std::pair{1, 4}, std::pair{4, 1}}) {
    Args next = base;
    next.tp = tp;
    next.pp = pp;
    std::vector<double> tail;
    oslo_test::run_ranks(false, tp * pp, layout(next), [&](Context& ctx) {
      auto m = load(ctx, ckpt, OSLO_DTYPE_F32);
      Trainer tr(*m, options(next));
      const nlohmann::json user = load_training_checkpoint(ckpt, tr);
      EXPECT(user.at("step") == 10 && tr.optimizer().steps() == 10, "resumed at step %s",
             user.dump().c_str());
      std::vector<double> l = steps(ctx, tr, d, next, 10, kSteps);
      EXPECT(tied_equal(ctx, *m), "[rank %d] tied copies differ after resuming",
             ctx.topology().world_rank());
      if (ctx.topology().world_rank() == 0) tail = l;
    });
    const double w = oslo_test::worst_rel(tail, want_tail);
    EXPECT(w <= 1e-5, "resumed at %dx%dx1: steps 10..19 differ from the straight run by %.3g", tp,
           pp, w);
    std::printf(
        "saved at 2x2x1, resumed at %dx%dx1: steps 0..9 within %.3g, 10..19 within %.3g "
        "of the straight run at 1x1x1\n",
        tp, pp, hw, w);
  }
  oslo_test::remove_tree(work);
}

// ---- errors ----------------------------------------------------------------

void errors(const std::string& fixture) {
  const Data d(fixture);
  Args a;
  a.micro = 2;
  oslo_test::run_ranks(false, 2, layout(a), [&](Context& ctx) {
    const int r = ctx.topology().world_rank();
    auto m = load(ctx, fixture, OSLO_DTYPE_F32);
    Trainer tr(*m, options(a));
    const Batch good = batch_of(d, 0, 2);
    auto expect_fail = [&](const Batch& b, int64_t rows, const char* what, const char* needle) {
      try {
        tr.train_step(b.ids, b.labels, b.mask, rows, d.S);
        EXPECT(false, "[rank %d] %s trained", r, what);
      } catch (const Error& e) {
        EXPECT(e.status() == OSLO_ERR_INVALID_ARGUMENT && std::strstr(e.what(), needle),
               "[rank %d] %s: status %d: %s (want INVALID_ARGUMENT naming \"%s\")", r, what,
               static_cast<int>(e.status()), e.what(), needle);
      }
    };
    // Three rows for two micro-batches.
    Batch three = batch_of(d, 0, 2);
    three.rows = 3;
    for (auto* v : {&three.ids, &three.labels, &three.mask}) v->resize(3 * d.S);
    expect_fail(three, 3, "3 rows in 2 micro-batches",
                "micro-batches must be at least 1 and divide");
    // Stage 1 passes other ids.
    Batch other = good;
    if (r == 1) other.ids[0] = (other.ids[0] + 1) % m->config().vocab_size;
    expect_fail(other, good.rows, "a batch that differs between stages",
                "the batch differs between pipeline ranks");
    // A token outside the vocabulary on stage 0 only.
    Batch bad = good;
    if (r == 0) bad.ids[3] = m->config().vocab_size;
    expect_fail(bad, good.rows, "a token outside the vocabulary",
                r == 0 ? "is outside [0, 515)" : "pipeline rank 0 refused its batch");
    // The next step trains.
    TrainStepResult res = tr.train_step(good.ids, good.labels, good.mask, good.rows, d.S);
    EXPECT(res.stepped && std::isfinite(res.mean_loss), "[rank %d] no step after the errors", r);
    // Explicit blocks per stage that do not fit the model: refused on
    // every stage, naming the count.
    try {
      load(ctx, fixture, OSLO_DTYPE_F32, {2, 1});
      EXPECT(false, "[rank %d] layer counts 2 + 1 for 2 blocks accepted", r);
    } catch (const Error& e) {
      EXPECT(e.status() == OSLO_ERR_INVALID_ARGUMENT && std::strstr(e.what(), "sum"),
             "[rank %d] layer counts 2 + 1: %s", r, e.what());
    }
    // ZeRO-2 with stages, and a bad micro-batch count.
    for (int k = 0; k < 2; ++k) {
      TrainerOptions o = options(a);
      if (k == 0)
        o.data_parallel.zero_stage = 2;
      else
        o.micro_batches = 0;
      try {
        Trainer t2(*m, o);
        EXPECT(false, "[rank %d] %s accepted", r, k ? "micro_batches 0" : "ZeRO-2 with stages");
      } catch (const Error& e) {
        EXPECT(e.status() == (k ? OSLO_ERR_INVALID_ARGUMENT : OSLO_ERR_NOT_SUPPORTED) &&
                   std::strstr(e.what(), k ? "micro_batches" : "pipeline_parallel_size"),
               "[rank %d] %s", r, e.what());
      }
    }
    // The head split: values outside 0, (0, 1] and -1 refused when the
    // trainer is made; an untied head (LLaMA) at the step, on every stage,
    // naming why.
    for (double bad : {1.5, -0.5, std::nan("")}) {
      TrainerOptions o = options(a);
      o.pipeline_head_split = bad;
      try {
        Trainer t2(*m, o);
        EXPECT(false, "[rank %d] pipeline_head_split %g accepted", r, bad);
      } catch (const Error& e) {
        EXPECT(
            e.status() == OSLO_ERR_INVALID_ARGUMENT && std::strstr(e.what(), "pipeline_head_split"),
            "[rank %d] pipeline_head_split %g: %s", r, bad, e.what());
      }
    }
    {
      const std::string llama = fixture.substr(0, fixture.rfind('/')) + "/llama-tiny-gqa";
      auto m2 = load(ctx, llama, OSLO_DTYPE_F32);
      TrainerOptions o = options(a);
      o.pipeline_head_split = -1;
      Trainer t2(*m2, o);
      const Data d2(llama);
      const Batch b2 = batch_of(d2, 0, 2);
      try {
        t2.train_step(b2.ids, b2.labels, b2.mask, b2.rows, d2.S);
        EXPECT(false, "[rank %d] head split with an untied head accepted", r);
      } catch (const Error& e) {
        EXPECT(
            e.status() == OSLO_ERR_NOT_SUPPORTED && std::strstr(e.what(), "tied word embeddings"),
            "[rank %d] head split with an untied head: status %d: %s", r,
            static_cast<int>(e.status()), e.what());
      }
    }
    // The first model still trains.
    TrainStepResult again = tr.train_step(good.ids, good.labels, good.mask, good.rows, d.S);
    EXPECT(again.stepped && std::isfinite(again.mean_loss), "[rank %d] no step after the refusals",
           r);
  });
  // One stage: refused when the trainer is made.
  Args one = a;
  one.pp = 1;
  oslo_test::run_ranks(false, 1, layout(one), [&](Context& ctx) {
    auto m = load(ctx, fixture, OSLO_DTYPE_F32);
    TrainerOptions o = options(one);
    o.pipeline_head_split = 0.5;
    try {
      Trainer t2(*m, o);
      EXPECT(false, "pipeline_head_split on one stage accepted");
    } catch (const Error& e) {
      EXPECT(e.status() == OSLO_ERR_NOT_SUPPORTED && std::strstr(e.what(), "pipeline stages"),
             "pipeline_head_split on one stage: %s", e.what());
    }
  });
}

// ---- fault -----------------------------------------------------------------

void fault(const std::string& fixture, double head_split) {
  const Data d(fixture);
  Args a;
  a.micro = 4;
  a.head_split = head_split;
  oslo_test::run_ranks(true, 2, layout(a), [&](Context& ctx) {
    const int r = ctx.topology().world_rank();
    auto m = load(ctx, fixture, OSLO_DTYPE_F32);
    Trainer tr(*m, options(a));
    const Batch b = batch_of(d, 0, a.micro);
    tr.train_step(b.ids, b.labels, b.mask, b.rows, d.S);  // one whole step
    // The last stage dies in the schedule's last backward (the only one
    // that runs the backward hook), after its head: the first stage has
    // sent every activation and waits in a recv for gradients.
    int marker = 0;
    m->training().set_backward_hook(
        [r](int stage) {
          if (r == 1 && stage == 0) {
            std::fflush(stdout);
            _exit(0);
          }
        },
        &marker);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      tr.train_step(b.ids, b.labels, b.mask, b.rows, d.S);
      if (r == 0) EXPECT(false, "[rank %d] a step with a dead stage succeeded", r);
    } catch (const Error& e) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT((e.status() == OSLO_ERR_COMM || e.status() == OSLO_ERR_TIMEOUT) && s < 20,
             "[rank %d] after %.2f s: status %d: %s (want OSLO_ERR_COMM well within the 60 s "
             "timeout)",
             r, s, static_cast<int>(e.status()), e.what());
      std::printf("rank %d: failed in %.3f s: %s\n", r, s, e.what());
    }
    std::fflush(stdout);
    _exit(g_fail ? 1 : 0);  // the context's peer is gone: skip its teardown
  });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: pipeline_train_test curve|resume|errors|fault FIXTURE ...\n");
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
    else if (s == "--pp")
      a.pp = std::atoi(next().c_str());
    else if (s == "--dp")
      a.dp = std::atoi(next().c_str());
    else if (s == "--micro")
      a.micro = std::atoi(next().c_str());
    else if (s == "--zero")
      a.zero = std::atoi(next().c_str());
    else if (s == "--procs")
      a.procs = true;
    else if (s == "--dtype") {
      const std::string dt = next();
      a.dtype = dt == "bf16" ? OSLO_DTYPE_BF16 : dt == "f16" ? OSLO_DTYPE_F16 : OSLO_DTYPE_F32;
    } else if (s == "--checkpointing") {
      a.checkpointing = true;
    } else if (s == "--head-split") {
      a.head_split = std::atof(next().c_str());
    } else if (s == "--virtual") {
      a.virtual_stages = std::atoi(next().c_str());
    } else if (s == "--layers") {
      const std::string list = next();
      for (size_t at = 0; at < list.size();) {
        size_t end = list.find(',', at);
        if (end == std::string::npos) end = list.size();
        a.layers.push_back(std::atoi(list.substr(at, end - at).c_str()));
        at = end + 1;
      }
    } else if (s == "--work") {
      work = next();
    } else {
      std::fprintf(stderr, "unknown argument %s\n", s.c_str());
      return 2;
    }
  }
  if (mode == "curve")
    curve(fixture, a);
  else if (mode == "errors")
    errors(fixture);
  else if (mode == "resume")
    resume(fixture, work.empty() ? oslo_test::temp_dir("oslo-pp-resume") : work);
  else if (mode == "fault")
    fault(fixture, a.head_split);
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
