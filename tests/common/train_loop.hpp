// The hyper-parameters of make_train_refs.py's training loop
// (tests/models/make_train_refs.py, make_optimizer): AdamW (lr 2e-3, weight
// decay 0.01 except 1-D parameters, cosine, 3 warmup steps) or Nesterov SGD
// (lr 0.05, momentum 0.9, linear, 2 warmup steps), clipping at 1.0, 20
// optimizer steps; f16 with loss scaling. Shared by the tests that train on
// its data (train_loop_ref.safetensors), with the data itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/train/trainer.hpp"
#include "tests/common/safetensors_ref.hpp"

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
  std::vector<int64_t> part(const std::vector<int64_t>& v, int64_t i) const {
    const int64_t per = B * S;
    i %= count;
    return std::vector<int64_t>(v.begin() + i * per, v.begin() + (i + 1) * per);
  }
};

}  // namespace oslo_test
