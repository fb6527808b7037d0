// The hyper-parameters of make_train_refs.py's training loop
// (tests/models/make_train_refs.py, make_optimizer): AdamW (lr 2e-3, weight
// decay 0.01 except 1-D parameters, cosine, 3 warmup steps) or Nesterov SGD
// (lr 0.05, momentum 0.9, linear, 2 warmup steps), clipping at 1.0, 20
// optimizer steps; f16 with loss scaling. Shared by the tests that train on
// its data (train_loop_ref.safetensors), with the data itself.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/common/error.hpp"
#include "core/context/context.hpp"
#include "core/model/model.hpp"
#include "core/tensor/view.hpp"
#include "core/train/trainer.hpp"
#include "tests/common/expect.hpp"
#include "tests/common/grad_check.hpp"
#include "tests/common/safetensors_ref.hpp"
#include "tests/common/temp_dir.hpp"
#include "tests/common/test_backend.hpp"

namespace oslo_test {

inline oslo::TrainerOptions loop_trainer_options(const std::string& opt, oslo_dtype dtype,
                                                 int64_t accum, int64_t steps = 20) {
  oslo::TrainerOptions t;
  t.scaler.enabled = dtype == OSLO_DTYPE_F16;
  t.optimizer.weight_decay = 0.01;
  t.total_steps = steps;
  t.grad_accum_steps = accum;
  t.max_grad_norm = 1.0;
  if (opt == "adamw") {
    t.optimizer.kind = oslo::OptimizerKind::ADAMW;
    t.optimizer.lr = 2e-3;
    t.schedule = oslo::ScheduleKind::COSINE;
    t.warmup_steps = 3;
  } else {
    t.optimizer.kind = oslo::OptimizerKind::SGD;
    t.optimizer.lr = 0.05;
    t.optimizer.momentum = 0.9;
    t.optimizer.nesterov = true;
    t.schedule = oslo::ScheduleKind::LINEAR;
    t.warmup_steps = 2;
  }
  return t;
}

// The loop's data: `count` micro-batches of [B, S]; micro-batch i is rows
// [i*B, (i+1)*B) of the reference (i taken modulo count).
struct LoopData {
  std::vector<int64_t> ids, mask, labels;
  int64_t B = 0, S = 0, count = 0;
  explicit LoopData(const std::string& fixture) {
    SafetensorsRef ref(fixture + "/train_loop_ref.safetensors");
    std::vector<int64_t> shape;
    ids = ref.get<int64_t>("input_ids", &shape);
    mask = ref.get<int64_t>("attention_mask");
    labels = ref.get<int64_t>("labels");
    count = shape[0];
    B = shape[1];
    S = shape[2];
  }
  // make_train_refs.py's loop_data shape (40 micro-batches of [2, 9], row 1
  // right-padded after 6 tokens) with ids from a fixed generator in
  // [0, vocab): for fixtures without train_loop_ref.safetensors.
  LoopData(int64_t vocab, int64_t pad_id) : B(2), S(9), count(40) {
    uint64_t x = 4321;
    for (int64_t i = 0; i < count; ++i)
      for (int64_t r = 0; r < B; ++r)
        for (int64_t s = 0; s < S; ++s) {
          x = x * 6364136223846793005ull + 1442695040888963407ull;
          const bool pad = r == 1 && s >= 6;
          const int64_t id = pad ? pad_id : static_cast<int64_t>((x >> 33) % vocab);
          ids.push_back(id);
          mask.push_back(pad ? 0 : 1);
          labels.push_back(pad ? -100 : id);
        }
  }
  std::vector<int64_t> part(const std::vector<int64_t>& v, int64_t i) const {
    const int64_t per = B * S;
    i %= count;
    return std::vector<int64_t>(v.begin() + i * per, v.begin() + (i + 1) * per);
  }
};

// Runs body on `world` ranks as threads (a file:// rendezvous), or once as
// this process's rank under oslo-run (procs). `layout` is the rest of the
// context's JSON: "\"tensor_parallel_size\": 2, ..." (timeout 60 s and one
// thread per rank are added). An oslo::Error escaping body fails the test.
// `backend` (JSON members like test_backend_members()'s) replaces the
// environment's backend and communicator when given.
inline void run_ranks(bool procs, int world, const std::string& layout,
                      const std::function<void(oslo::Context&)>& body,
                      const std::string* backend = nullptr) {
  const std::string common = layout + ", \"timeout_seconds\": 60, \"num_threads\": 1" +
                             (backend ? *backend : test_backend_members());
  if (procs) {
    try {
      oslo::Context ctx(oslo::Config::parse(("{" + common + "}").c_str()));
      body(ctx);
    } catch (const oslo::Error& e) {
      std::printf("FAIL error: %s\n", e.what());
      ++g_fail;
    }
    return;
  }
  const std::string store = temp_dir("oslo-ranks");
  std::vector<std::thread> th;
  for (int r = 0; r < world; ++r)
    th.emplace_back([&, r] {
      try {
        const std::string cfg = "{\"rank\": " + std::to_string(r) +
                                ", \"world_size\": " + std::to_string(world) +
                                ", \"init_method\": \"file://" + store + "/rdv\", " + common + "}";
        oslo::Context ctx(oslo::Config::parse(cfg.c_str()));
        body(ctx);
      } catch (const oslo::Error& e) {
        std::printf("FAIL [rank %d] error: %s\n", r, e.what());
        ++g_fail;
      }
    });
  for (auto& t : th) t.join();
  remove_tree(store);
}

// Every parameter of this rank, widened to f32 on the host.
inline std::vector<std::vector<float>> params_of(oslo::Context& ctx, const oslo::Model& m) {
  std::vector<std::vector<float>> out;
  oslo::Backend& be = ctx.backend();
  for (const oslo::PlacedTensor& p : m.tensors()) {
    oslo::Tensor f = oslo::scratch(ctx.backend_ptr(), OSLO_DTYPE_F32, p.tensor.shape());
    be.convert(oslo::view(f), oslo::view(p.tensor));
    out.push_back(download(ctx, f));
  }
  return out;
}

// The largest parameter difference relative to the largest parameter, and
// the fraction of elements that differ by more than `tol` of it.
inline double compare_params(const std::vector<std::vector<float>>& got,
                             const std::vector<std::vector<float>>& want, double tol,
                             double* outside = nullptr) {
  double big = 0, err = 0;
  if (got.size() != want.size()) return INFINITY;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i].size() != want[i].size()) return INFINITY;
    for (size_t k = 0; k < want[i].size(); ++k) {
      big = std::max(big, static_cast<double>(std::fabs(want[i][k])));
      const double e = std::fabs(static_cast<double>(got[i][k]) - want[i][k]);
      if (!(e <= err)) err = e;
    }
  }
  big = std::max(big, 1e-30);
  size_t n = 0, over = 0;
  for (size_t i = 0; i < want.size(); ++i)
    for (size_t k = 0; k < want[i].size(); ++k) {
      ++n;
      over += !(std::fabs(static_cast<double>(got[i][k]) - want[i][k]) <= tol * big);
    }
  if (outside) *outside = n ? static_cast<double>(over) / static_cast<double>(n) : 0.0;
  return err / big;
}

// The largest relative difference between two loss curves (INFINITY when
// their lengths differ).
inline double worst_rel(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return INFINITY;
  double w = 0;
  for (size_t s = 0; s < got.size(); ++s) {
    const double e = std::fabs(got[s] - want[s]) / std::max(std::fabs(want[s]), 1e-30);
    if (!(e <= w)) w = e;
  }
  return w;
}

}  // namespace oslo_test
