// Training oracle of the causal families: the causal-LM loss of one batch
// and the gradient of every parameter, against transformers'
// `loss.backward()` on the same batch (tests/models/make_train_refs.py wrote
// <fixture>/train_ref.safetensors). Each rank compares its own local slice
// of every gradient (cut from the full reference by the tensor's placement),
// so tensor parallelism is checked piece by piece.
//
//   model_train_test FIXTURE_DIR --tp N [--loop adamw|sgd]   ranks as threads
//   oslo-run --nproc-per-node N model_train_test FIXTURE_DIR --procs [--loop ...|--amp ...]
//                                                            ranks as processes
//
// Passes when |loss - ref| <= 1e-5 |ref| and, for every parameter,
// max |grad - ref| <= 1e-4 max |ref| (f32; with --dtype bf16|f16, the model
// in that dtype: 1e-2 and 5e-2), on every rank; then checks that
// a second call accumulates (gradients double) and that bad input fails
// with a named error on every rank.
//
// --loop: 20 optimizer steps (gradient accumulation over 2 micro-batches,
// clip_grad_norm 1.0, AdamW with a cosine schedule or Nesterov SGD with a
// linear one) against a plain PyTorch loop on the same data
// (train_loop_ref.safetensors): every step's loss and gradient norm within
// 1e-4 relative.
//
// --amp bf16|bf16_sgd|f16|f16_overflow: the AdamW loop (cosine schedule with
// warmup; bf16_sgd: Nesterov SGD, linear schedule) through the Trainer
// (accumulation 2, clipping 1.0) on the model loaded in bf16 or f16 with f32
// master weights, against PyTorch's loop under
// torch.autocast (train_amp_ref.safetensors): every step's mean loss within
// 2e-2 relative; f16 runs use loss scaling and must give PyTorch
// GradScaler's scale after every step and skip the same steps. The
// f16_overflow run starts at a scale that overflows (step 0 skipped) and
// has inf written into one gradient on the last tensor-parallel rank only
// (a split tensor at one step, a replicated one at another): every rank
// skips, parameters and masters stay as they were, the scale backs off.
// After every update each bf16/f16 parameter must be its master rounded to
// its dtype. bf16 runs end with an inf gradient on one rank and no loss
// scaling: the Trainer's named error on every rank.
//
// --pad own|p400: the pad row (run_pad): data where the pad id is also a
// real token (train_pad_ref.safetensors; p400: config.json's pad_token_id
// moved to row 400, on the last rank at TP 2 and 4). The families whose
// token table transformers builds with padding_idx = pad_token_id give that
// row no gradient from the lookup (a tied head's still reaches it); GPT-2
// trains it; the gradient rows, norm, 6-step AdamW and SGD curves and the
// pad row after them against torch.
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checkpoint/safetensors.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/context/context.hpp"
#include "core/model/model.hpp"
#include "core/tensor/view.hpp"
#include "core/train/optimizer.hpp"
#include "core/train/trainer.hpp"
#include "tests/common/grad_check.hpp"
#include "tests/common/safetensors_ref.hpp"
#include "tests/common/temp_dir.hpp"

using namespace oslo;

namespace {

using Ref = oslo_test::SafetensorsRef;

std::atomic<int> g_fail{0};

using oslo_test::download;
using oslo_test::local_slice;

// The fixture with f32 weights (training updates f32 parameters).
std::unique_ptr<Model> load_f32(Context& ctx, const std::string& dir) {
  ModelLoadOptions o;
  o.dtype = OSLO_DTYPE_F32;
  return Model::load(ctx, dir, o);
}

// dtype: the model's (f32; bf16 or f16 for mixed precision, compared with
// the f32 reference at looser tolerances: the weights themselves are rounded).
void run_rank(Context& ctx, const std::string& dir, int tp, const Ref& ref, oslo_dtype dtype) {
  const int r = ctx.topology().tp_rank();
  ModelLoadOptions lo;
  lo.dtype = dtype;
  auto m = Model::load(ctx, dir, lo);
  const bool narrow = dtype != OSLO_DTYPE_F32;
  // bf16 products keep 8 significant bits: small gradients (a bias whose
  // terms cancel) move by up to ~20% of their tensor's largest; f16 ones by
  // ~3%. A wrong slice or a missing reduction moves them by ~100%.
  const double loss_tol = narrow ? 1e-2 : 1e-5;
  double grad_tol = 1e-4;
  if (dtype == OSLO_DTYPE_BF16) grad_tol = 0.25;
  if (dtype == OSLO_DTYPE_F16) grad_tol = 5e-2;
  std::vector<int64_t> shape;
  const auto ids = ref.get<int64_t>("input_ids", &shape);
  const auto mask = ref.get<int64_t>("attention_mask");
  const auto labels = ref.get<int64_t>("labels");
  const double want_loss = ref.get<double>("loss")[0];
  const float loss = m->training().loss_backward(ids, labels, mask, shape[0], shape[1]);
  const double lerr = std::fabs(loss - want_loss) / std::fabs(want_loss);
  const bool lok = lerr <= loss_tol;
  if (r == 0 || !lok)
    std::printf("[rank %d tp %d] loss %.7f vs transformers %.7f (rel %.2g) %s\n", r, tp, loss,
                want_loss, lerr, lok ? "ok" : "FAIL");
  if (!lok) ++g_fail;
  const auto& params = m->tensors();
  const auto& grads = m->training().grads();
  double worst = 0;
  std::string worst_name;
  std::vector<std::vector<float>> first(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Placement& p = params[i].placement;
    const std::string key = "grad." + p.name;
    if (!ref.has(key)) {
      std::printf("[rank %d] %s: no reference gradient FAIL\n", r, p.name.c_str());
      ++g_fail;
      continue;
    }
    const std::vector<float> full = ref.get<float>(key);
    int64_t gn = 1;
    for (int64_t d : p.global_shape) gn *= d;
    if (static_cast<int64_t>(full.size()) != gn) {
      std::printf("[rank %d] %s: reference has %zu elements, the placement %lld FAIL\n", r,
                  p.name.c_str(), full.size(), static_cast<long long>(gn));
      ++g_fail;
      continue;
    }
    const std::vector<float> want = local_slice(p, full);
    first[i] = download(ctx, grads[i]);
    const std::vector<float>& got = first[i];
    if (got.size() != want.size()) {
      std::printf("[rank %d] %s: %zu gradient elements, reference slice %zu FAIL\n", r,
                  p.name.c_str(), got.size(), want.size());
      ++g_fail;
      continue;
    }
    double mref = 0, merr = 0;
    for (size_t k = 0; k < want.size(); ++k) {
      mref = std::max(mref, static_cast<double>(std::fabs(want[k])));
      const double e = std::fabs(static_cast<double>(got[k]) - want[k]);
      if (!(e <= merr)) merr = e;
    }
    const double rel = merr / std::max(mref, 1e-12);
    if (!(rel <= grad_tol)) {
      std::printf("[rank %d tp %d] %s: max |grad - ref| %.3g of max |ref| %.3g (rel %.3g) FAIL\n",
                  r, tp, p.name.c_str(), merr, mref, rel);
      ++g_fail;
    }
    if (!(rel <= worst)) {
      worst = rel;
      worst_name = p.name;
    }
  }
  if (r == 0)
    std::printf("[rank %d tp %d] %zu gradients, worst relative error %.3g (%s)\n", r, tp,
                params.size(), worst, worst_name.c_str());
  // A second call adds the same gradients again (accumulation).
  m->training().loss_backward(ids, labels, mask, shape[0], shape[1], 0.5f);
  // (f16 without loss scaling: the loss gradient's small entries are f16
  // subnormals, which do not scale exactly: 1% of the tensor's largest.)
  bool acc = true;
  for (size_t i = 0; i < params.size() && acc; ++i) {
    if (first[i].empty()) continue;  // reported above
    const auto twice = download(ctx, grads[i]);
    float big = 0.f;
    for (float v : first[i]) big = std::max(big, std::fabs(v));
    const float slack = dtype == OSLO_DTYPE_F16 ? 1e-2f * big : 0.f;
    for (size_t k = 0; k < twice.size() && acc; ++k)
      acc = std::fabs(twice[k] - 1.5f * first[i][k]) <=
            1e-5f * (1 + std::fabs(first[i][k]) * 10) + slack;
  }
  if (r == 0 || !acc)
    std::printf("[rank %d tp %d] a second call with grad_scale 0.5 accumulates: %s\n", r, tp,
                acc ? "ok" : "FAIL");
  if (!acc) ++g_fail;
  // Activation checkpointing: the same loss and gradients, bit for bit,
  // with at most a third of the activations kept.
  {
    m->training().zero_grad();
    const size_t full_bytes = m->training().saved_activation_bytes();
    m->training().set_activation_checkpointing(true);
    const float loss2 = m->training().loss_backward(ids, labels, mask, shape[0], shape[1]);
    const size_t ckpt_bytes = m->training().saved_activation_bytes();
    m->training().set_activation_checkpointing(false);
    bool same = loss2 == loss;
    for (size_t i = 0; i < params.size() && same; ++i)
      if (!first[i].empty()) same = download(ctx, grads[i]) == first[i];
    const bool smaller = ckpt_bytes * 3 <= full_bytes;
    if (r == 0 || !same || !smaller)
      std::printf(
          "[rank %d tp %d] activation checkpointing: loss and gradients %s, activations "
          "kept %zu of %zu bytes %s\n",
          r, tp, same ? "bitwise equal" : "DIFFER", ckpt_bytes, full_bytes,
          same && smaller ? "ok" : "FAIL");
    if (!same || !smaller) ++g_fail;
  }
  m->training().zero_grad();
  bool zero = true;
  for (const Tensor& g : grads)
    for (float v : download(ctx, g)) zero = zero && v == 0.f;
  if (!zero) {
    std::printf("[rank %d] zero_grad left a nonzero gradient FAIL\n", r);
    ++g_fail;
  }
  // Bad input: a label outside the vocabulary, a token outside it, shapes
  // that disagree: each a named error, on every rank.
  auto refused = [&](const char* what, oslo_status want, const char* needle, auto fn) {
    try {
      fn();
      std::printf("[rank %d] %s: accepted FAIL\n", r, what);
      ++g_fail;
    } catch (const Error& e) {
      const bool ok = e.status() == want && std::strstr(e.what(), needle);
      if (r == 0 || !ok)
        std::printf("[rank %d] %s: %s (%s)\n", r, what, ok ? "refused ok" : "FAIL", e.what());
      if (!ok) ++g_fail;
    }
  };
  std::vector<int64_t> bad = labels;
  bad[3] = m->config().vocab_size + 7;
  refused("a label outside the vocabulary", OSLO_ERR_INVALID_ARGUMENT, "label",
          [&] { m->training().loss_backward(ids, bad, mask, shape[0], shape[1]); });
  std::vector<int64_t> bad_ids = ids;
  bad_ids[2] = -1;
  refused("a token outside the vocabulary", OSLO_ERR_INVALID_ARGUMENT, "token",
          [&] { m->training().loss_backward(bad_ids, labels, mask, shape[0], shape[1]); });
  if (tp > 1) {
    // Ranks that disagree: another label on the last rank, then a bad token
    // on the last rank only. Every rank fails, none waits.
    std::vector<int64_t> other = labels;
    if (r == tp - 1) other[5] = (other[5] + 1) % m->config().vocab_size;
    refused("a batch that differs between ranks", OSLO_ERR_INVALID_ARGUMENT, "differs between",
            [&] { m->training().loss_backward(ids, other, mask, shape[0], shape[1]); });
    std::vector<int64_t> one_bad = ids;
    if (r == tp - 1) one_bad[1] = m->config().vocab_size;
    refused("a bad token on one rank", OSLO_ERR_INVALID_ARGUMENT,
            r == tp - 1 ? "outside" : "refused its batch",
            [&] { m->training().loss_backward(one_bad, labels, mask, shape[0], shape[1]); });
  }
  refused("labels of another shape", OSLO_ERR_SHAPE, "labels", [&] {
    m->training().loss_backward(ids, std::vector<int64_t>(labels.begin() + 1, labels.end()), mask,
                                shape[0], shape[1]);
  });
  // A non-finite loss (NaN written into every parameter): refused on every
  // rank, as the loss is the same on all of them.
  for (const auto& p : params) {
    const float nan = std::nanf("");
    ctx.backend().copy(p.tensor.data(), &nan, sizeof nan, CopyKind::HostToDevice);
  }
  m->parameters_changed();
  refused("NaN parameters", OSLO_ERR_INVALID_ARGUMENT, "the loss is",
          [&] { m->training().loss_backward(ids, labels, mask, shape[0], shape[1]); });
}

// make_train_refs.py's run_loop, step by step, on micro-batches of [B, S]
// (ids, labels and mask hold 2 * steps of them), against its per-step losses
// and gradient norms (within 1e-4 relative). `tag` names the run in output.
void train_steps(Context& ctx, Model& m, const std::string& opt_name,
                 const std::vector<int64_t>& ids, const std::vector<int64_t>& mask,
                 const std::vector<int64_t>& labels, int64_t B, int64_t S,
                 const std::vector<double>& want_loss, const std::vector<double>& want_norm,
                 const std::string& tag) {
  const int r = ctx.topology().tp_rank(), tp = ctx.topology().tp_size();
  const int64_t per = B * S, accum = 2;
  const int64_t steps = static_cast<int64_t>(want_loss.size());
  OptimizerOptions o;
  o.weight_decay = 0.01;
  ScheduleKind sched;
  int64_t warmup;
  if (opt_name == "adamw") {
    o.kind = OptimizerKind::ADAMW;
    o.lr = 2e-3;
    sched = ScheduleKind::COSINE;
    warmup = 3;
  } else {
    o.kind = OptimizerKind::SGD;
    o.lr = 0.05;
    o.momentum = 0.9;
    o.nesterov = true;
    sched = ScheduleKind::LINEAR;
    warmup = 2;
  }
  Optimizer opt(m, o);
  double worst_loss = 0, worst_norm = 0;
  for (int64_t step = 0; step < steps; ++step) {
    m.training().zero_grad();
    double total = 0;
    for (int64_t k = 0; k < accum; ++k) {
      const int64_t i = step * accum + k;
      auto part = [&](const std::vector<int64_t>& v) {
        return std::vector<int64_t>(v.begin() + i * per, v.begin() + (i + 1) * per);
      };
      total += m.training().loss_backward(part(ids), part(labels), part(mask), B, S, 1.f / accum) /
               static_cast<double>(accum);
    }
    const double norm = clip_grad_norm(m, 1.0);
    opt.step(o.lr * schedule_factor(sched, step, warmup, steps));
    const double el = std::fabs(total - want_loss[step]) / std::fabs(want_loss[step]);
    const double en = std::fabs(norm - want_norm[step]) / std::fabs(want_norm[step]);
    worst_loss = std::max(worst_loss, el);
    worst_norm = std::max(worst_norm, en);
    const bool ok = el <= 1e-4 && en <= 1e-4;
    if (!ok || (r == 0 && (step == 0 || step + 1 == steps)))
      std::printf("[rank %d tp %d %s] step %lld: loss %.6f vs %.6f, grad norm %.5f vs %.5f %s\n", r,
                  tp, tag.c_str(), static_cast<long long>(step), total, want_loss[step], norm,
                  want_norm[step], ok ? "ok" : "FAIL");
    if (!ok) ++g_fail;
  }
  if (r == 0)
    std::printf("[rank %d tp %d %s] %lld steps: worst relative error loss %.3g, grad norm %.3g\n",
                r, tp, tag.c_str(), static_cast<long long>(steps), worst_loss, worst_norm);
}

// The training loop of make_train_refs.py's run_loop, step by step.
void run_loop(Context& ctx, const std::string& dir, const std::string& opt_name) {
  Ref ref(dir + "/train_loop_ref.safetensors");
  auto m = load_f32(ctx, dir);
  std::vector<int64_t> shape;
  const auto ids = ref.get<int64_t>("input_ids", &shape);
  train_steps(ctx, *m, opt_name, ids, ref.get<int64_t>("attention_mask"),
              ref.get<int64_t>("labels"), shape[1], shape[2], ref.get<double>("losses_" + opt_name),
              ref.get<double>("grad_norms_" + opt_name), opt_name);
}

// The local row of global row `row` of a vocabulary-split table on this
// rank, -1 if another rank holds it.
int64_t local_row(const Placement& p, int64_t row) {
  for (const Segment& s : p.segments)
    if (row >= s.global_start && row < s.global_start + s.length)
      return s.local_start + row - s.global_start;
  return -1;
}

// A copy of the fixture folder with config.json's pad_token_id set to pad.
std::string fixture_with_pad(const std::string& dir, int64_t pad) {
  namespace fs = std::filesystem;
  const std::string out = oslo_test::temp_dir("oslo-pad");
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) fs::copy_file(e.path(), fs::path(out) / e.path().filename());
  nlohmann::json j;
  {
    std::ifstream f(out + "/config.json");
    j = nlohmann::json::parse(f);
  }
  j["pad_token_id"] = pad;
  std::ofstream(out + "/config.json") << j.dump(2);
  return out;
}

// The pad row (train_pad_ref.safetensors, run `run`: make_train_refs.py
// --pad): data where the pad id is also a real token. The family's rule is
// transformers' (padding_idx = pad_token_id or none); the token table's
// gradient rows of every id of micro-batch 0 within 1e-4 (relative to their
// largest) of torch's, the pad row's among them (with padding_idx only a
// tied head's share reaches it, without it the lookup's too: the data must
// tell the two apart by 100x the tolerance); the gradient norm over every
// parameter within 1e-5; then 6 steps of AdamW and of Nesterov SGD (weight
// decay 0.01, which moves the pad row either way) with every step's loss and
// gradient norm within 1e-4 and the pad row after them within 1e-3 of its
// movement (plus 1e-7) of torch's.
void run_pad(Context& ctx, const std::string& fixture, const std::string& run) {
  const int r = ctx.topology().tp_rank(), tp = ctx.topology().tp_size();
  Ref ref(fixture + "/train_pad_ref.safetensors");
  const std::string k = run + ".";
  const int64_t pad = ref.get<int64_t>(k + "pad_token_id")[0];
  const bool masks = ref.get<int64_t>(k + "masks")[0] != 0;
  const std::string dir =
      ref.get<int64_t>(k + "override")[0] ? fixture_with_pad(fixture, pad) : fixture;
  std::vector<int64_t> shape;
  const auto ids = ref.get<int64_t>(k + "input_ids", &shape);
  const auto mask = ref.get<int64_t>(k + "attention_mask");
  const auto labels = ref.get<int64_t>(k + "labels");
  const int64_t B = shape[1], S = shape[2], per = B * S;
  const std::string tag = run + " pad " + std::to_string(pad);
  auto fail = [&](bool ok) {
    if (!ok) ++g_fail;
    return ok ? "ok" : "FAIL";
  };

  auto m = load_f32(ctx, dir);
  // The rule: the row transformers' nn.Embedding(padding_idx=) names.
  const bool rule_ok = m->config().embed_pad_row == (masks ? pad : -1);
  if (r == 0 || !rule_ok)
    std::printf("[rank %d tp %d %s] %s: the token table's pad row %s (transformers: %s) %s\n", r,
                tp, tag.c_str(), m->config().model_type.c_str(),
                m->config().embed_pad_row >= 0 ? "gets no gradient from the lookup" : "trains",
                masks ? "padding_idx" : "no padding_idx", fail(rule_ok));

  // Micro-batch 0's gradient.
  auto first = [&](const std::vector<int64_t>& v) {
    return std::vector<int64_t>(v.begin(), v.begin() + per);
  };
  m->training().loss_backward(first(ids), first(labels), first(mask), B, S);
  const size_t e = static_cast<size_t>(m->training().embed_param());
  const Placement& pl = m->tensors()[e].placement;
  const int64_t H = pl.global_shape[1];
  const std::vector<float> got = download(ctx, m->training().grads()[e]);
  const auto row_ids = ref.get<int64_t>(k + "grad_rows_ids");
  const auto rows = ref.get<float>(k + "grad_rows");
  double big = 0;
  for (float v : rows) big = std::max(big, static_cast<double>(std::fabs(v)));
  double worst = 0;
  int held = 0;
  for (size_t i = 0; i < row_ids.size(); ++i) {
    const int64_t lr = local_row(pl, row_ids[i]);
    if (lr < 0) continue;
    ++held;
    for (int64_t c = 0; c < H; ++c)
      worst = std::max(worst, std::fabs(static_cast<double>(got[static_cast<size_t>(lr * H + c)]) -
                                        rows[i * static_cast<size_t>(H) + static_cast<size_t>(c)]));
  }
  std::printf(
      "[rank %d tp %d %s] token table gradient, %d rows of micro-batch 0's ids held: max "
      "|diff| %.3g of max %.3g %s\n",
      r, tp, tag.c_str(), held, worst, big, fail(worst <= 1e-4 * big));
  const int64_t pr = local_row(pl, pad);
  if (pr >= 0) {
    const auto with = ref.get<float>(k + "grad_pad_with");
    const auto without = ref.get<float>(k + "grad_pad_without");
    double dw = 0, dwo = 0, lookup = 0;
    for (int64_t c = 0; c < H; ++c) {
      const double g = got[static_cast<size_t>(pr * H + c)];
      dw = std::max(dw, std::fabs(g - with[static_cast<size_t>(c)]));
      dwo = std::max(dwo, std::fabs(g - without[static_cast<size_t>(c)]));
      lookup = std::max(lookup, static_cast<double>(std::fabs(with[static_cast<size_t>(c)] -
                                                              without[static_cast<size_t>(c)])));
    }
    const double tol = 1e-4 * big;
    const bool ok = lookup > 100 * tol && (masks ? dw : dwo) <= tol;
    std::printf(
        "[rank %d tp %d %s] pad row %lld (local %lld) gradient: |diff| %.3g from torch "
        "with padding_idx, %.3g without (the lookup's share %.3g); %s %s\n",
        r, tp, tag.c_str(), static_cast<long long>(pad), static_cast<long long>(pr), dw, dwo,
        lookup,
        masks ? "no gradient from the lookup, as transformers" : "the row trains, as transformers",
        fail(ok));
  }
  const double norm = clip_grad_norm(*m, 1e30);
  const double want_norm = ref.get<double>(k + "grad_norm")[0];
  const double en = std::fabs(norm - want_norm) / want_norm;
  if (r == 0 || en > 1e-5)
    std::printf("[rank %d tp %d %s] gradient norm %.7f vs %.7f (rel %.2g) %s\n", r, tp, tag.c_str(),
                norm, want_norm, en, fail(en <= 1e-5));

  // Training: the curves, then the pad row.
  const auto before = ref.get<float>(k + "pad_row_before");
  for (const char* o : {"adamw", "sgd"}) {
    const std::string opt = o;
    auto mo = load_f32(ctx, dir);
    train_steps(ctx, *mo, opt, ids, mask, labels, B, S, ref.get<double>(k + "losses_" + opt),
                ref.get<double>(k + "grad_norms_" + opt), tag + " " + opt);
    const size_t pe = static_cast<size_t>(mo->training().embed_param());
    if (pr < 0) continue;
    const std::vector<float> w = download(ctx, mo->tensors()[pe].tensor);
    const auto after = ref.get<float>(k + "pad_row_" + opt);
    double moved = 0, got_moved = 0, err = 0;
    for (int64_t c = 0; c < H; ++c) {
      const size_t ci = static_cast<size_t>(c);
      const double v = w[static_cast<size_t>(pr * H + c)];
      moved = std::max(moved, std::fabs(static_cast<double>(after[ci]) - before[ci]));
      got_moved = std::max(got_moved, std::fabs(v - before[ci]));
      err = std::max(err, std::fabs(v - after[ci]));
    }
    std::printf(
        "[rank %d tp %d %s %s] pad row after %zu steps: moved %.3g (torch %.3g), |diff| "
        "%.3g %s\n",
        r, tp, tag.c_str(), opt.c_str(), ref.get<double>(k + "losses_" + opt).size(), got_moved,
        moved, err, fail(err <= 1e-3 * moved + 1e-7));
  }
  if (dir != fixture) oslo_test::remove_tree(dir);  // this rank's copy
}

// A bf16/f16/f32 tensor's values widened to f32 on the host.
std::vector<float> download_any(Context& ctx, const Tensor& t) {
  if (t.dtype() == OSLO_DTYPE_F32) return download(ctx, t);
  std::vector<uint16_t> raw(static_cast<size_t>(t.numel()));
  ctx.backend().copy(raw.data(), t.data(), t.nbytes(), CopyKind::DeviceToHost);
  std::vector<float> v(raw.size());
  for (size_t k = 0; k < raw.size(); ++k)
    v[k] = t.dtype() == OSLO_DTYPE_BF16 ? bf16_to_f32(raw[k]) : f16_to_f32(raw[k]);
  return v;
}

// Whether every non-f32 parameter holds exactly its master rounded to its
// dtype (f32 parameters must be their own master).
bool params_are_rounded_masters(Context& ctx, const Optimizer& opt, std::string* bad) {
  const auto& params = opt.model().tensors();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i].tensor;
    if (p.dtype() == OSLO_DTYPE_F32) {
      if (opt.master(i).data() != p.data()) {
        *bad = params[i].placement.name + " (f32, yet its master is another tensor)";
        return false;
      }
      continue;
    }
    const std::vector<float> m = download(ctx, opt.master(i)), got = download_any(ctx, p);
    for (size_t k = 0; k < m.size(); ++k) {
      const float want = p.dtype() == OSLO_DTYPE_BF16 ? bf16_to_f32(f32_to_bf16(m[k]))
                                                      : f16_to_f32(f32_to_f16(m[k]));
      if (!(got[k] == want)) {
        *bad = params[i].placement.name + " element " + std::to_string(k) + ": " +
               std::to_string(got[k]) + ", its master rounds to " + std::to_string(want);
        return false;
      }
    }
  }
  return true;
}

// Writes inf into element 0 of gradient i (f32) on this rank.
void poison_grad(Context& ctx, const Model& m, size_t i) {
  const float inf = INFINITY;
  ctx.backend().copy(m.training().grads()[i].data(), &inf, sizeof inf, CopyKind::HostToDevice);
}

// The first parameter split over the ranks (every segment its own) and the
// first replicated one.
size_t first_split(const Model& m) {
  const auto& ps = m.tensors();
  for (size_t i = 0; i < ps.size(); ++i) {
    bool owned = true;
    for (const Segment& s : ps[i].placement.segments) owned = owned && s.owner;
    if (ps[i].placement.split_dim >= 0 && owned) return i;
  }
  return 0;
}
size_t first_replicated(const Model& m) {
  const auto& ps = m.tensors();
  for (size_t i = 0; i < ps.size(); ++i)
    if (ps[i].placement.split_dim < 0) return i;
  return 0;
}

// make_train_refs.py's run_amp_loop, through the Trainer.
void run_amp(Context& ctx, const std::string& dir, int tp, const std::string& run) {
  const int r = ctx.topology().tp_rank();
  Ref data(dir + "/train_loop_ref.safetensors");
  Ref ref(dir + "/train_amp_ref.safetensors");
  const bool sgd = run == "bf16_sgd", bf16 = run == "bf16" || sgd, overflow = run == "f16_overflow";
  ModelLoadOptions lo;
  lo.dtype = bf16 ? OSLO_DTYPE_BF16 : OSLO_DTYPE_F16;
  auto m = Model::load(ctx, dir, lo);
  std::vector<int64_t> shape;
  const auto ids = data.get<int64_t>("input_ids", &shape);
  const auto mask = data.get<int64_t>("attention_mask");
  const auto labels = data.get<int64_t>("labels");
  const auto want_loss = ref.get<double>("losses_" + run);
  const auto want_norm = ref.get<double>("grad_norms_" + run);
  const auto want_scale = ref.get<double>("scales_" + run);
  const auto want_skip = ref.get<int64_t>("skipped_" + run);
  const auto inject = ref.get<int64_t>("inject_" + run);
  const int64_t B = shape[1], S = shape[2], per = B * S, accum = 2;
  const int64_t steps = static_cast<int64_t>(want_loss.size());
  TrainerOptions o;
  o.optimizer.weight_decay = 0.01;
  if (sgd) {  // run_loop's Nesterov SGD with a linear schedule
    o.optimizer.kind = OptimizerKind::SGD;
    o.optimizer.lr = 0.05;
    o.optimizer.momentum = 0.9;
    o.optimizer.nesterov = true;
    o.schedule = ScheduleKind::LINEAR;
    o.warmup_steps = 2;
  } else {
    o.optimizer.kind = OptimizerKind::ADAMW;
    o.optimizer.lr = 2e-3;
    o.schedule = ScheduleKind::COSINE;
    o.warmup_steps = 3;
  }
  o.total_steps = steps;
  o.max_grad_norm = 1.0;
  o.grad_accum_steps = accum;
  if (!bf16) {
    o.scaler.enabled = true;  // torch.amp.GradScaler's defaults
    if (overflow) {
      o.scaler.init_scale = std::ldexp(1.0, 24);
      o.scaler.backoff_factor = std::ldexp(1.0, -8);
      o.scaler.growth_interval = 5;
    }
  }
  Trainer t(*m, o);
  const Optimizer& opt = t.optimizer();
  const auto& params = m->tensors();
  // Memory: 4 bytes of master per element of every bf16/f16 parameter.
  size_t narrow = 0;
  for (const auto& p : params)
    if (p.tensor.dtype() != OSLO_DTYPE_F32) narrow += static_cast<size_t>(p.tensor.numel());
  if (opt.master_bytes() != 4 * narrow || narrow == 0) {
    std::printf("[rank %d] master bytes %zu for %zu narrow parameter elements FAIL\n", r,
                opt.master_bytes(), narrow);
    ++g_fail;
  }
  std::string bad;
  if (!params_are_rounded_masters(ctx, opt, &bad)) {
    std::printf("[rank %d] before training: %s FAIL\n", r, bad.c_str());
    ++g_fail;
  }
  const size_t split = first_split(*m), repl = first_replicated(*m);
  int injected = 0;
  double worst_loss = 0, worst_norm = 0;
  std::string scales;
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<std::vector<float>> before;
    TrainStepResult res;
    for (int64_t k = 0; k < accum; ++k) {
      const int64_t i = step * accum + k;
      auto part = [&](const std::vector<int64_t>& v) {
        return std::vector<int64_t>(v.begin() + i * per, v.begin() + (i + 1) * per);
      };
      if (k + 1 == accum) {
        if (want_skip[step])
          for (size_t j = 0; j < params.size(); ++j) {
            before.push_back(download(ctx, opt.master(j)));
            before.push_back(download_any(ctx, params[j].tensor));
          }
        if (inject[step] && r == tp - 1)  // one rank only: the others' gradients are finite
          poison_grad(ctx, *m, injected % 2 == 0 ? split : repl);
        if (inject[step]) ++injected;
      }
      res = t.train_step(part(ids), part(labels), part(mask), B, S);
    }
    scales += (step ? " " : "") + std::to_string(static_cast<long long>(res.loss_scale));
    const double el = std::fabs(res.mean_loss - want_loss[step]) / std::fabs(want_loss[step]);
    worst_loss = std::max(worst_loss, el);
    if (!want_skip[step]) {
      const double en = std::fabs(res.grad_norm - want_norm[step]) / std::fabs(want_norm[step]);
      worst_norm = std::max(worst_norm, en);
    }
    bool ok = res.stepped && el <= 2e-2 && res.skipped == (want_skip[step] != 0) &&
              res.loss_scale == want_scale[step];
    if (res.skipped) {
      // Nothing moved: masters and parameters as before the step.
      size_t j = 0;
      bool same = !before.empty();
      for (size_t p = 0; p < params.size() && same; ++p) {
        same = download(ctx, opt.master(p)) == before[j++];
        same = same && download_any(ctx, params[p].tensor) == before[j++];
      }
      if (!same) {
        std::printf("[rank %d tp %d %s] step %lld skipped, yet a parameter changed FAIL\n", r, tp,
                    run.c_str(), static_cast<long long>(step));
        ok = false;
      }
    } else if (!params_are_rounded_masters(ctx, opt, &bad)) {
      std::printf("[rank %d tp %d %s] step %lld: %s FAIL\n", r, tp, run.c_str(),
                  static_cast<long long>(step), bad.c_str());
      ok = false;
    }
    if (!ok || (r == 0 && (step == 0 || step + 1 == steps || res.skipped)))
      std::printf(
          "[rank %d tp %d %s] step %lld: loss %.6f vs %.6f (rel %.2g), grad norm %.5f vs %.5f, "
          "scale %g vs %g, %s vs %s %s\n",
          r, tp, run.c_str(), static_cast<long long>(step), res.mean_loss, want_loss[step], el,
          res.grad_norm, want_norm[step], res.loss_scale, want_scale[step],
          res.skipped ? "skipped" : "stepped", want_skip[step] ? "skipped" : "stepped",
          ok ? "ok" : "FAIL");
    if (!ok) ++g_fail;
  }
  if (r == 0)
    std::printf(
        "[rank %d tp %d %s] %lld steps: worst relative error loss %.3g, grad norm %.3g; "
        "scales %s\n",
        r, tp, run.c_str(), static_cast<long long>(steps), worst_loss, worst_norm, scales.c_str());
  // masters_loaded(): compute tensors re-derived from the masters.
  for (const auto& p : params)
    if (p.tensor.dtype() != OSLO_DTYPE_F32) ctx.backend().fill(view(p.tensor), 0.0);
  t.optimizer().masters_loaded();
  if (!params_are_rounded_masters(ctx, opt, &bad)) {
    std::printf("[rank %d] after masters_loaded: %s FAIL\n", r, bad.c_str());
    ++g_fail;
  }
  if (bf16) {
    // No loss scaling: a non-finite gradient on one rank is the Trainer's
    // named error on every rank.
    t.zero_grad();
    m->training().loss_backward(std::vector<int64_t>(ids.begin(), ids.begin() + per),
                                std::vector<int64_t>(labels.begin(), labels.begin() + per),
                                std::vector<int64_t>(mask.begin(), mask.begin() + per), B, S);
    if (r == tp - 1) poison_grad(ctx, *m, repl);
    try {
      t.step();
      std::printf("[rank %d] inf gradient without loss scaling: accepted FAIL\n", r);
      ++g_fail;
    } catch (const Error& e) {
      const bool ok =
          e.status() == OSLO_ERR_INVALID_ARGUMENT && std::strstr(e.what(), "non-finite gradients");
      if (r == 0 || !ok)
        std::printf("[rank %d] inf gradient on rank %d without loss scaling: %s (%s)\n", r, tp - 1,
                    ok ? "refused ok" : "FAIL", e.what());
      if (!ok) ++g_fail;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s FIXTURE_DIR --tp N | --procs [--dtype f32|bf16|f16] "
                 "[--loop adamw|sgd] [--amp bf16|bf16_sgd|f16|f16_overflow] [--pad own|p400]\n",
                 argv[0]);
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string dir = argv[1];
  const bool procs = !std::strcmp(argv[2], "--procs");
  const int tp = procs ? (std::getenv("WORLD_SIZE") ? std::atoi(std::getenv("WORLD_SIZE")) : 1)
                       : (argc > 3 ? std::atoi(argv[3]) : 1);
  std::string loop, amp, pad;
  oslo_dtype dtype = OSLO_DTYPE_F32;
  for (int i = 2; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--loop")) loop = argv[i + 1];
    if (!std::strcmp(argv[i], "--amp")) amp = argv[i + 1];
    if (!std::strcmp(argv[i], "--pad")) pad = argv[i + 1];
    if (!std::strcmp(argv[i], "--dtype"))
      dtype = !std::strcmp(argv[i + 1], "bf16")  ? OSLO_DTYPE_BF16
              : !std::strcmp(argv[i + 1], "f16") ? OSLO_DTYPE_F16
                                                 : OSLO_DTYPE_F32;
  }
  Ref ref(dir + "/train_ref.safetensors");
  auto body = [&](Context& ctx) {
    if (!pad.empty())
      run_pad(ctx, dir, pad);
    else if (!amp.empty())
      run_amp(ctx, dir, tp, amp);
    else if (loop.empty())
      run_rank(ctx, dir, tp, ref, dtype);
    else
      run_loop(ctx, dir, loop);
  };
  g_fail += oslo_test::run_tp(procs, tp, body);
  return g_fail ? 1 : 0;
}
