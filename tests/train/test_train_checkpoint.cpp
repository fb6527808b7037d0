// Training checkpoints (core/train/train_checkpoint.hpp): a run interrupted,
// saved and resumed equals the uninterrupted run.
//
//   train_checkpoint_test resume FIXTURE WORK --tp N [--opt adamw|sgd]
//   oslo-run --nproc-per-node N train_checkpoint_test resume FIXTURE WORK --procs [--opt ...]
//       20 optimizer steps uninterrupted; then 10 steps, save, a fresh model
//       loaded from the training checkpoint folder (a plain Model::load) and
//       a fresh trainer restored by load_training_checkpoint, 10 more steps:
//       every loss, gradient norm and learning rate and the final weights and
//       optimizer state bitwise equal to the uninterrupted run's; user_state
//       comes back as saved.
//   train_checkpoint_test reslice FIXTURE WORK [--opt ...]
//       saved at TP 2 (threads), resumed at TP 1 and TP 4: the loss curve
//       within 1e-5 relative of the uninterrupted TP 2 run; `reshard` of the
//       training checkpoint to TP 4 resumes bitwise like the original loaded
//       at TP 4 (the optimizer state is re-sliced with the weights).
//   train_checkpoint_test merge FIXTURE WORK
//       20 steps at TP 2, then: WORK/ckpt (training checkpoint), WORK/plain
//       (Model::save of the trained model), WORK/merged (merge of WORK/ckpt:
//       no optimizer tensor) and WORK/plain_merged (merge of WORK/plain);
//       check_merged_train.py then loads WORK/merged in transformers.
//       Also checks what inspect shows of a training checkpoint.
//   train_checkpoint_test errors FIXTURE OTHER_FIXTURE WORK
//       bad input at TP 2 (threads): a named error on every rank, nothing
//       written half-way, the previous checkpoint still loadable.
//
// The data and hyper-parameters are those of make_train_refs.py's loop
// (train_loop_ref.safetensors): AdamW (lr 2e-3, weight decay 0.01, cosine,
// warmup 3) or SGD (lr 0.05, Nesterov momentum 0.9, linear, warmup 2), 20
// optimizer steps of 2 accumulated micro-batches, clipping at 1.0.
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/checkpoint/fs_util.hpp"
#include "core/checkpoint/model_checkpoint.hpp"
#include "core/common/error.hpp"
#include "core/context/context.hpp"
#include "core/model/model.hpp"
#include "core/model/sharding.hpp"
#include "core/train/train_checkpoint.hpp"
#include "core/train/trainer.hpp"
#include "tests/common/expect.hpp"
#include "tests/common/grad_check.hpp"
#include "tests/common/safetensors_ref.hpp"
#include "tests/common/temp_dir.hpp"
#include "tests/common/train_loop.hpp"

using namespace oslo;
using json = nlohmann::json;

namespace {

using oslo_test::g_fail;

constexpr int64_t kSteps = 20, kAccum = 2;

using Data = oslo_test::LoopData;

// The dtype the fixtures load in (--dtype; bf16/f16: f32 masters in the
// optimizer, f16 with loss scaling).
oslo_dtype g_dtype = OSLO_DTYPE_F32;

TrainerOptions trainer_options(const std::string& opt) {
  return oslo_test::loop_trainer_options(opt, g_dtype, kAccum, kSteps);
}

std::unique_ptr<Model> load_model(Context& ctx, const std::string& dir) {
  ModelLoadOptions o;
  o.dtype = g_dtype;
  return Model::load(ctx, dir, o);
}

// What one optimizer step reported.
struct StepLog {
  double loss = 0, norm = 0, lr = 0;
};

// Optimizer steps [from, to) of the loop (micro-batches 2 from .. 2 to - 1).
std::vector<StepLog> train(Trainer& tr, const Data& d, int64_t from, int64_t to) {
  std::vector<StepLog> out;
  for (int64_t i = from * kAccum; i < to * kAccum; ++i) {
    TrainStepResult r =
        tr.train_step(d.part(d.ids, i), d.part(d.labels, i), d.part(d.mask, i), d.B, d.S);
    if (r.stepped) out.push_back({r.mean_loss, r.grad_norm, r.lr});
  }
  return out;
}

using oslo_test::download;

// Every master and state tensor of this rank, on the host.
std::vector<std::vector<float>> snapshot(Context& ctx, Trainer& tr) {
  std::vector<std::vector<float>> out;
  Optimizer& opt = tr.optimizer();
  for (size_t i = 0; i < tr.model().tensors().size(); ++i) {
    out.push_back(download(ctx, opt.master(i)));
    for (const Tensor& s : opt.state(i)) out.push_back(download(ctx, s));
  }
  return out;
}

bool bitwise_equal(const std::vector<std::vector<float>>& a,
                   const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// Runs body(ctx) on `tp` ranks as threads (one world, tensor-parallel).
void run_threads(int tp, const std::function<void(Context&)>& body) {
  g_fail += oslo_test::run_tp(false, tp, body);
}

// Ranks as processes under oslo-run (WORLD_SIZE ranks, all tensor-parallel).
void run_procs(const std::function<void(Context&)>& body) {
  const char* ws = std::getenv("WORLD_SIZE");
  g_fail += oslo_test::run_tp(true, ws ? std::atoi(ws) : 1, body);
}

json user_state_at(int64_t step) {
  // What a caller keeps: seed, epoch, data position, its own RNG state.
  return json{{"seed", 1234},
              {"epoch", 0},
              {"data_position", step * kAccum},
              {"rng", {"mt19937", 5489, 18446744073709551615ull}},
              {"note", "r\xc3\xa9sum\xc3\xa9"}};
}

// ---- resume ----------------------------------------------------------------

void resume(Context& ctx, const std::string& fixture, const std::string& work,
            const std::string& opt) {
  const int r = ctx.topology().tp_rank(), tp = ctx.topology().tp_size();
  const Data d(fixture);
  const std::string ckpt = work + "/ckpt";
  // The uninterrupted run.
  std::vector<StepLog> ref;
  std::vector<std::vector<float>> ref_end;
  {
    auto m = load_model(ctx, fixture);
    Trainer tr(*m, trainer_options(opt));
    ref = train(tr, d, 0, kSteps);
    ref_end = snapshot(ctx, tr);
  }
  // Interrupted after step 10.
  std::vector<StepLog> first;
  {
    auto m = load_model(ctx, fixture);
    Trainer tr(*m, trainer_options(opt));
    first = train(tr, d, 0, kSteps / 2);
    save_training_checkpoint(ckpt, tr, user_state_at(kSteps / 2));
  }
  // Resumed: the model from the training checkpoint folder, as a plain checkpoint.
  auto m = load_model(ctx, ckpt);
  Trainer tr(*m, trainer_options(opt));
  const json user = load_training_checkpoint(ckpt, tr);
  EXPECT(user == user_state_at(kSteps / 2), "[rank %d] user_state came back as %s", r,
         user.dump().c_str());
  EXPECT(tr.optimizer().steps() == kSteps / 2, "[rank %d] resumed at update %lld", r,
         static_cast<long long>(tr.optimizer().steps()));
  const int64_t start = user.at("data_position").get<int64_t>() / kAccum;
  std::vector<StepLog> second = train(tr, d, start, kSteps);
  std::vector<StepLog> all = first;
  all.insert(all.end(), second.begin(), second.end());
  EXPECT(all.size() == ref.size(), "[rank %d] %zu steps, want %zu", r, all.size(), ref.size());
  int differ = 0;
  for (size_t s = 0; s < std::min(all.size(), ref.size()); ++s) {
    const bool eq = same_bits(all[s].loss, ref[s].loss) && same_bits(all[s].norm, ref[s].norm) &&
                    same_bits(all[s].lr, ref[s].lr);
    if (!eq || (r == 0 && (s + 1 == kSteps / 2 || s == kSteps / 2 || s + 1 == all.size())))
      std::printf(
          "[rank %d tp %d %s] step %zu: loss %.9g vs %.9g, norm %.9g vs %.9g, lr %.9g vs "
          "%.9g %s\n",
          r, tp, opt.c_str(), s + 1, all[s].loss, ref[s].loss, all[s].norm, ref[s].norm, all[s].lr,
          ref[s].lr, eq ? "bitwise equal" : "FAIL");
    if (!eq) ++differ;
  }
  EXPECT(differ == 0, "[rank %d] %d steps differ from the uninterrupted run", r, differ);
  EXPECT(bitwise_equal(snapshot(ctx, tr), ref_end),
         "[rank %d] final weights or optimizer state differ from the uninterrupted run", r);
  if (r == 0 && !differ)
    std::printf("[tp %d %s] resumed at step %lld: %lld losses bitwise equal\n", tp, opt.c_str(),
                static_cast<long long>(start), static_cast<long long>(kSteps));
  // The usual loop saves into the folder it resumed from: the new save
  // replaces the old (its shards removed) and loads back as it was saved.
  const std::vector<std::string> old_files = fsutil::list_dir(ckpt);
  save_training_checkpoint(ckpt, tr, user_state_at(kSteps));
  auto m2 = load_model(ctx, ckpt);
  Trainer t2(*m2, trainer_options(opt));
  EXPECT(load_training_checkpoint(ckpt, t2) == user_state_at(kSteps) &&
             t2.optimizer().steps() == kSteps && bitwise_equal(snapshot(ctx, t2), ref_end),
         "[rank %d] a second save into the folder resumed from does not load back as saved", r);
  size_t shards = 0;
  for (const std::string& f : fsutil::list_dir(ckpt))
    if (f.rfind("shard-", 0) == 0) ++shards;
  EXPECT(shards == static_cast<size_t>(tp), "[rank %d] %zu shard files after the second save", r,
         shards);
  EXPECT(fsutil::list_dir(ckpt).size() == old_files.size(),
         "[rank %d] the second save left %zu files, the first %zu", r,
         fsutil::list_dir(ckpt).size(), old_files.size());
  // Under oslo-run, rank 0 removes the work folder when it returns.
  ctx.control(OSLO_GROUP_WORLD).barrier();
}

// ---- reslice ---------------------------------------------------------------

struct Curve {
  std::vector<StepLog> steps;
  std::vector<std::vector<float>> end;  // rank 0's final tensors
};

void reslice(const std::string& fixture, const std::string& work, const std::string& opt) {
  const Data d(fixture);
  const std::string ckpt = work + "/ckpt", resharded = work + "/resharded_tp4";
  std::vector<StepLog> ref;
  run_threads(2, [&](Context& ctx) {
    std::vector<StepLog> full;
    {
      auto m = load_model(ctx, fixture);
      Trainer tr(*m, trainer_options(opt));
      full = train(tr, d, 0, kSteps);
    }
    auto m = load_model(ctx, fixture);
    Trainer tr(*m, trainer_options(opt));
    train(tr, d, 0, kSteps / 2);
    save_training_checkpoint(ckpt, tr, user_state_at(kSteps / 2));
    if (ctx.topology().tp_rank() == 0) ref = full;
  });
  if (ref.size() != static_cast<size_t>(kSteps)) {
    ++g_fail;
    return;
  }
  // Offline: the training checkpoint resharded to TP 4 (optimizer state
  // placed like its parameters).
  try {
    reshard(ckpt, resharded, 4, model_planner(ckpt));
  } catch (const Error& e) {
    EXPECT(false, "reshard of a training checkpoint: %s", e.what());
    return;
  }
  auto resume_at = [&](int tp, const std::string& from) {
    Curve c;
    run_threads(tp, [&](Context& ctx) {
      auto m = load_model(ctx, from);
      Trainer tr(*m, trainer_options(opt));
      const json user = load_training_checkpoint(from, tr);
      EXPECT(user == user_state_at(kSteps / 2), "user_state came back as %s", user.dump().c_str());
      std::vector<StepLog> s = train(tr, d, kSteps / 2, kSteps);
      auto end = snapshot(ctx, tr);
      if (ctx.topology().tp_rank() == 0) {
        c.steps = s;
        c.end = end;
      }
    });
    return c;
  };
  for (int tp : {1, 4}) {
    const Curve c = resume_at(tp, ckpt);
    double worst = 0;
    for (size_t s = 0; s < c.steps.size(); ++s) {
      const StepLog& w = ref[kSteps / 2 + s];
      worst = std::max(worst, std::fabs(c.steps[s].loss - w.loss) / std::fabs(w.loss));
    }
    EXPECT(c.steps.size() == static_cast<size_t>(kSteps / 2) && worst <= 1e-5,
           "saved at TP 2, resumed at TP %d: worst relative loss error %.3g", tp, worst);
    std::printf(
        "[%s] saved at TP 2, resumed at TP %d: steps 11-20 within %.3g relative of the "
        "uninterrupted TP 2 run (last loss %.9g vs %.9g)\n",
        opt.c_str(), tp, worst, c.steps.empty() ? 0.0 : c.steps.back().loss, ref.back().loss);
    if (tp == 4) {
      const Curve rc = resume_at(4, resharded);
      bool eq = rc.steps.size() == c.steps.size() && bitwise_equal(rc.end, c.end);
      for (size_t s = 0; eq && s < c.steps.size(); ++s)
        eq = same_bits(rc.steps[s].loss, c.steps[s].loss);
      EXPECT(eq, "resumed from the TP 4 reshard: not bitwise the TP 2 checkpoint loaded at TP 4");
      if (eq)
        std::printf(
            "[%s] reshard to TP 4 then resume: bitwise equal to loading the TP 2 "
            "checkpoint at TP 4\n",
            opt.c_str());
    }
  }
}

// ---- merge -----------------------------------------------------------------

void merge_mode(const std::string& fixture, const std::string& work) {
  const Data d(fixture);
  run_threads(2, [&](Context& ctx) {
    auto m = load_model(ctx, fixture);
    Trainer tr(*m, trainer_options("adamw"));
    train(tr, d, 0, kSteps);
    save_training_checkpoint(work + "/ckpt", tr, user_state_at(kSteps));
    m->save(work + "/plain");
  });
  merge(work + "/ckpt", work + "/merged");
  merge(work + "/plain", work + "/plain_merged");
  WeightSource merged(work + "/merged");
  WeightSource plain(work + "/plain_merged");
  int optimizer_tensors = 0;
  for (const SourceTensor& t : merged.tensors())
    if (t.name.rfind("optimizer/", 0) == 0) ++optimizer_tensors;
  EXPECT(optimizer_tensors == 0, "merge wrote %d optimizer tensors", optimizer_tensors);
  EXPECT(merged.tensors().size() == plain.tensors().size(),
         "merge of the training checkpoint has %zu tensors, of the model save %zu",
         merged.tensors().size(), plain.tensors().size());
  EXPECT(merged.sections().empty(), "a merged folder has manifest sections");
  // inspect shows the training section.
  const Inspection in = inspect(work + "/ckpt");
  const std::string text = render_text(in), js = render_json(in);
  EXPECT(in.has_training && text.find("training: section version 1") != std::string::npos &&
             text.find("exp_avg, exp_avg_sq") != std::string::npos &&
             text.find("\"data_position\":40") != std::string::npos,
         "inspect text lacks the training section:\n%s", text.c_str());
  const json j = json::parse(js);
  EXPECT(j.contains("training") && j["training"]["trainer"]["updates"] == kSteps &&
             j["training"]["user_state"] == user_state_at(kSteps),
         "inspect --json lacks the training section");
  std::printf("merge: %zu tensors, no optimizer tensor; inspect:\n", merged.tensors().size());
  std::printf("%s", text.substr(0, text.find("\n\n") + 1).c_str());
}

// ---- errors ----------------------------------------------------------------

std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> v = fsutil::list_dir(dir);
  std::sort(v.begin(), v.end());
  return v;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void copy_dir(const std::string& from, const std::string& to) {
  fsutil::make_dirs(to);
  for (const std::string& n : fsutil::list_dir(from)) {
    std::ofstream o(fsutil::join(to, n), std::ios::binary);
    o << read_file(fsutil::join(from, n));
  }
}

// Fails the save of rank 1's shard, after it is written.
void fail_rank1_shard(const char* point, const std::string& path) {
  if (!std::strcmp(point, "save.after_shard_write") && path.find("-tp01-") != std::string::npos)
    fail(OSLO_ERR_IO, "injected failure writing ", path);
}

void errors(const std::string& fixture, const std::string& other, const std::string& work) {
  const Data d(fixture);
  const std::string good = work + "/good", plain = work + "/plain", corrupt = work + "/corrupt";
  run_threads(2, [&](Context& ctx) {
    const int r = ctx.topology().tp_rank();
    auto refused = [&](const char* what, oslo_status want, std::vector<const char*> needles,
                       const std::function<void()>& fn) {
      try {
        fn();
        EXPECT(false, "[rank %d] %s: accepted", r, what);
      } catch (const Error& e) {
        bool ok = e.status() == want;
        for (const char* n : needles) ok = ok && std::strstr(e.what(), n);
        EXPECT(ok, "[rank %d] %s: status %d, want %d: %s", r, what, e.status(), want, e.what());
        if (ok && r == 0) std::printf("%s: refused on every rank (%s)\n", what, e.what());
      }
    };
    auto m = load_model(ctx, fixture);
    Trainer tr(*m, trainer_options("adamw"));
    train(tr, d, 0, 2);
    save_training_checkpoint(good, tr, user_state_at(2));
    m->save(plain);
    if (r == 0) copy_dir(good, corrupt);
    const std::vector<std::string> before = listing(good);
    const std::string manifest_before = read_file(good + "/oslo_checkpoint.json");
    auto unchanged = [&](const char* after) {
      EXPECT(
          listing(good) == before && read_file(good + "/oslo_checkpoint.json") == manifest_before,
          "[rank %d] %s: the checkpoint folder changed", r, after);
    };

    // Offline: reshard to another dtype would round the masters.
    if (r == 0) {
      ReshardOptions ro;
      ro.convert = true;
      ro.dtype = OSLO_DTYPE_BF16;
      refused("reshard of a training checkpoint to bf16", OSLO_ERR_INVALID_ARGUMENT,
              {"training checkpoint", "master weights"},
              [&] { reshard(good, work + "/bf16", 2, model_planner(good), ro); });
      EXPECT(!fsutil::exists(work + "/bf16"), "the refused reshard made its destination");
    }
    // Not training checkpoints.
    {
      auto m2 = load_model(ctx, fixture);
      Trainer t2(*m2, trainer_options("adamw"));
      refused("a model checkpoint", OSLO_ERR_FORMAT, {"not a training checkpoint"},
              [&] { load_training_checkpoint(plain, t2); });
      refused("a Hugging Face folder", OSLO_ERR_FORMAT, {"not a training checkpoint"},
              [&] { load_training_checkpoint(fixture, t2); });
      refused("a missing folder", OSLO_ERR_IO, {"does not exist"},
              [&] { load_training_checkpoint(work + "/nothing", t2); });
      EXPECT(t2.optimizer().steps() == 0, "[rank %d] a refused load changed the trainer", r);
    }
    // Another model with the same tensor names (other key/value heads).
    {
      auto m2 = load_model(ctx, other);
      Trainer t2(*m2, trainer_options("adamw"));
      const auto before_w = snapshot(ctx, t2);
      refused("a checkpoint of another model", OSLO_ERR_SHAPE, {"k_proj"},
              [&] { load_training_checkpoint(good, t2); });
      EXPECT(bitwise_equal(snapshot(ctx, t2), before_w),
             "[rank %d] a refused load wrote into the model", r);
    }
    // Another optimizer.
    {
      auto m2 = load_model(ctx, fixture);
      Trainer t2(*m2, trainer_options("sgd"));
      refused("another optimizer kind", OSLO_ERR_INVALID_ARGUMENT, {"adamw", "momentum_buffer"},
              [&] { load_training_checkpoint(good, t2); });
    }
    // Micro-batches pending: nothing is written.
    {
      const int64_t i = 2 * kAccum;
      tr.train_step(d.part(d.ids, i), d.part(d.labels, i), d.part(d.mask, i), d.B, d.S);
      refused("a save with a micro-batch pending", OSLO_ERR_INVALID_ARGUMENT, {"micro-batch"},
              [&] { save_training_checkpoint(good, tr, user_state_at(2)); });
      unchanged("the refused save");
      tr.train_step(d.part(d.ids, i + 1), d.part(d.labels, i + 1), d.part(d.mask, i + 1), d.B, d.S);
    }
    // A user_state one rank cannot write (invalid UTF-8 on rank 1).
    {
      json bad = user_state_at(3);
      if (r == 1) bad["note"] = std::string("\xff\xfe");
      refused("a user_state that does not serialise on one rank", OSLO_ERR_INVALID_ARGUMENT,
              {"world rank 1", "user_state"}, [&] { save_training_checkpoint(good, tr, bad); });
      unchanged("the refused user_state");
    }
    // A save that fails on rank 1 after its shard is written.
    {
      if (r == 0) fsutil::set_fault_hook(&fail_rank1_shard);
      ctx.control(OSLO_GROUP_WORLD).barrier();
      refused("a save failing on rank 1", OSLO_ERR_IO, {"world rank 1", "injected"},
              [&] { save_training_checkpoint(good, tr, user_state_at(3)); });
      ctx.control(OSLO_GROUP_WORLD).barrier();
      if (r == 0) fsutil::set_fault_hook(nullptr);
      unchanged("the failed save");
      // The previous checkpoint still loads, at update 2.
      auto m2 = load_model(ctx, good);
      Trainer t2(*m2, trainer_options("adamw"));
      const json user = load_training_checkpoint(good, t2);
      EXPECT(user == user_state_at(2) && t2.optimizer().steps() == 2,
             "[rank %d] after a failed save the previous checkpoint loads as %s at update %lld", r,
             user.dump().c_str(), static_cast<long long>(t2.optimizer().steps()));
    }
    // A corrupted shard: one flipped byte at the end of rank 1's file.
    {
      ctx.control(OSLO_GROUP_WORLD).barrier();
      std::string shard;
      for (const std::string& n : listing(corrupt))
        if (n.find("-tp01-") != std::string::npos) shard = n;
      if (r == 0) {
        std::string bytes = read_file(fsutil::join(corrupt, shard));
        bytes.back() ^= 0x10;
        std::ofstream(fsutil::join(corrupt, shard), std::ios::binary) << bytes;
      }
      ctx.control(OSLO_GROUP_WORLD).barrier();
      auto m2 = load_model(ctx, fixture);
      Trainer t2(*m2, trainer_options("adamw"));
      refused("a corrupted shard", OSLO_ERR_FORMAT, {"checksum mismatch", shard.c_str()},
              [&] { load_training_checkpoint(corrupt, t2); });
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  auto usage = [&] {
    std::fprintf(
        stderr,
        "usage: %s resume FIXTURE WORK (--tp N | --procs) [--opt adamw|sgd] [--dtype bf16|f16]\n"
        "       %s reslice FIXTURE WORK [--opt adamw|sgd]\n"
        "       %s merge FIXTURE WORK\n"
        "       %s errors FIXTURE OTHER_FIXTURE WORK\n",
        argv[0], argv[0], argv[0], argv[0]);
    return 2;
  };
  if (argc < 4) return usage();
  const std::string mode = argv[1], fixture = argv[2];
  std::string opt = "adamw";
  int tp = 1;
  bool procs = false;
  for (int i = 3; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--opt") && i + 1 < argc) opt = argv[++i];
    if (!std::strcmp(argv[i], "--tp") && i + 1 < argc) tp = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--procs")) procs = true;
    if (!std::strcmp(argv[i], "--dtype") && i + 1 < argc) {
      ++i;
      g_dtype = !std::strcmp(argv[i], "bf16")  ? OSLO_DTYPE_BF16
                : !std::strcmp(argv[i], "f16") ? OSLO_DTYPE_F16
                                               : OSLO_DTYPE_F32;
    }
  }
  const std::string work = mode == "errors" ? (argc > 4 ? argv[4] : "") : argv[3];
  if (work.empty() || work[0] == '-') return usage();
  // A fresh work folder (under oslo-run: rank 0 clears it before its first
  // collective, which no other rank passes before it).
  const char* rank_env = std::getenv("RANK");
  if (!procs || !rank_env || std::atoi(rank_env) == 0) {
    oslo_test::remove_tree(work);
    fsutil::make_dirs(work);
  }
  if (mode == "resume") {
    auto body = [&](Context& ctx) { resume(ctx, fixture, work, opt); };
    if (procs)
      run_procs(body);
    else
      run_threads(tp, body);
  } else if (mode == "reslice") {
    reslice(fixture, work, opt);
  } else if (mode == "merge") {
    try {
      merge_mode(fixture, work);
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      ++g_fail;
    }
  } else if (mode == "errors") {
    errors(fixture, argv[3], work);
  } else {
    return usage();
  }
  if (!g_fail && mode != "merge" && (!procs || !rank_env || std::atoi(rank_env) == 0))
    oslo_test::remove_tree(work);
  std::printf("%s\n", g_fail ? "FAILED" : "PASSED");
  return g_fail ? 1 : 0;
}
