// C shims: training (optimizer handle, train step, activation checkpointing).
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/capi/handles.hpp"
#include "core/capi/options.hpp"
#include "core/train/train_checkpoint.hpp"

using oslo::capi::check_batch;
using oslo::capi::guard;
using oslo::capi::need;

namespace {

OSLO_OPTIONS(
    kOptimizerOptions, oslo_optimizer_options, OSLO_OPTIMIZER_OPTIONS_VERSION,
    [](oslo_optimizer_options& o) {
      o.kind = OSLO_OPTIMIZER_ADAMW;
      o.lr = 1e-3;
      o.beta1 = 0.9;
      o.beta2 = 0.999;
      o.eps = 1e-8;
      o.schedule = OSLO_LR_CONSTANT;
      o.loss_scaling = -1;
      o.init_scale = 65536.0;
      o.growth_factor = 2.0;
      o.backoff_factor = 0.5;
      o.growth_interval = 2000;
    },
    OSLO_OPTIONS_END(oslo_optimizer_options, growth_interval));

OSLO_OPTIONS(
    kTrainOptions, oslo_train_options, OSLO_TRAIN_OPTIONS_VERSION,
    [](oslo_train_options& o) {
      o.grad_accum_steps = 1;
      o.bucket_bytes = 25 << 20;
      o.micro_batches = 1;
    },
    OSLO_OPTIONS_END(oslo_train_options, pipeline_head_split));

// oslo 0.2's oslo_optimizer_options were versions 1 to 4 with the training
// settings in them; 0.3 restarted at 1. A 0.2 program that names a version
// by number (not OSLO_OPTIMIZER_OPTIONS_VERSION) gets told why.
void refuse_02_version(unsigned version, const char* fn, const char* arg) {
  if (version >= 2 && version <= 4)
    oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": ", arg, " version ", version,
               " is oslo 0.2's oslo_optimizer_options layout (with the training settings); 0.3 "
               "knows version 1 (OSLO_OPTIMIZER_OPTIONS_VERSION), with grad_accum_steps, "
               "zero_stage, bucket_bytes, micro_batches and pipeline_head_split in "
               "oslo_train_options: python3 tools/migrate-0.3.py rewrites a 0.2 program");
}

oslo::TrainerOptions trainer_options(const oslo_optimizer_options& o,
                                     const oslo_train_options& train, const oslo::Model& model,
                                     const char* fn) {
  oslo::TrainerOptions t;
  oslo::OptimizerOptions& p = t.optimizer;
  switch (o.kind) {
    case OSLO_OPTIMIZER_ADAMW: p.kind = oslo::OptimizerKind::ADAMW; break;
    case OSLO_OPTIMIZER_SGD: p.kind = oslo::OptimizerKind::SGD; break;
    default:
      oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": options.kind ", static_cast<int>(o.kind),
                 " is not OSLO_OPTIMIZER_ADAMW (0) or OSLO_OPTIMIZER_SGD (1)");
  }
  p.lr = o.lr;
  p.weight_decay = o.weight_decay;
  p.beta1 = o.beta1;
  p.beta2 = o.beta2;
  p.eps = o.eps;
  p.momentum = o.momentum;
  p.dampening = o.dampening;
  p.nesterov = o.nesterov != 0;
  p.decay_1d = o.decay_1d != 0;
  switch (o.schedule) {
    case OSLO_LR_CONSTANT: t.schedule = oslo::ScheduleKind::CONSTANT; break;
    case OSLO_LR_CONSTANT_WITH_WARMUP: t.schedule = oslo::ScheduleKind::CONSTANT_WITH_WARMUP; break;
    case OSLO_LR_LINEAR: t.schedule = oslo::ScheduleKind::LINEAR; break;
    case OSLO_LR_COSINE: t.schedule = oslo::ScheduleKind::COSINE; break;
    default:
      oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": options.schedule ", static_cast<int>(o.schedule),
                 " is not an oslo_lr_schedule (0 to 3)");
  }
  t.warmup_steps = o.warmup_steps;
  t.total_steps = o.total_steps;
  t.max_grad_norm = o.max_grad_norm;
  if (o.loss_scaling < -1 || o.loss_scaling > 1)
    oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": options.loss_scaling ", o.loss_scaling,
               " is not -1 (on for f16 models), 0 or 1");
  t.scaler.enabled =
      o.loss_scaling == 1 || (o.loss_scaling == -1 && model.dtype() == OSLO_DTYPE_F16);
  t.scaler.init_scale = o.init_scale;
  t.scaler.growth_factor = o.growth_factor;
  t.scaler.backoff_factor = o.backoff_factor;
  t.scaler.growth_interval = o.growth_interval;
  t.grad_accum_steps = train.grad_accum_steps;
  t.data_parallel.zero_stage = train.zero_stage;
  t.data_parallel.bucket_bytes = train.bucket_bytes;
  t.micro_batches = train.micro_batches;
  t.pipeline_head_split = train.pipeline_head_split;
  return t;
}

void fill(oslo_train_step_result* out, const oslo::TrainStepResult& r) {
  if (!out) return;
  out->loss = r.loss;
  out->stepped = r.stepped ? 1 : 0;
  out->skipped = r.skipped ? 1 : 0;
  out->mean_loss = r.mean_loss;
  out->grad_norm = r.grad_norm;
  out->lr = r.lr;
  out->loss_scale = r.loss_scale;
  out->step = r.step;
}

oslo::Trainer& trainer_of(oslo_optimizer* o, const char* fn) {
  need(o, fn, "optimizer");
  return *o->impl;
}

}  // namespace

extern "C" {

oslo_status oslo_optimizer_options_init(oslo_optimizer_options* options, unsigned int version) {
  const oslo_status st =
      guard([&] { refuse_02_version(version, "oslo_optimizer_options_init", "options"); });
  return st != OSLO_OK ? st : kOptimizerOptions.init(options, version);
}

oslo_status oslo_train_options_init(oslo_train_options* options, unsigned int version) {
  return kTrainOptions.init(options, version);
}

oslo_status oslo_optimizer_create(oslo_model* model, const oslo_optimizer_options* options,
                                  const oslo_train_options* train, oslo_optimizer** out) {
  if (out) *out = nullptr;
  return guard([&] {
    const char* fn = "oslo_optimizer_create";
    need(out, fn, "out");
    need(model, fn, "model");
    if (options) refuse_02_version(options->version, fn, "options");
    const oslo_optimizer_options o = kOptimizerOptions.read_or_defaults(options, fn, "options");
    const oslo_train_options t = kTrainOptions.read_or_defaults(train, fn, "train");
    oslo::Model& m = *model->impl;
    auto h = std::make_unique<oslo_optimizer>();
    h->model = model->impl;
    h->impl = std::make_unique<oslo::Trainer>(m, trainer_options(o, t, m, fn));
    *out = h.release();
  });
}

void oslo_optimizer_destroy(oslo_optimizer* optimizer) {
  // The trainer first (it unhooks itself from the model), then the model
  // when this optimizer held it last (oslo_model_destroy ran before).
  delete optimizer;
}

oslo_status oslo_model_train_step(oslo_model* model, oslo_optimizer* optimizer, const int64_t* ids,
                                  const int64_t* labels, const int64_t* mask, int64_t batch,
                                  int64_t seq, oslo_train_step_result* result) {
  return guard([&] {
    const char* fn = "oslo_model_train_step";
    need(model, fn, "model");
    check_batch(fn, ids, batch, seq);
    if (optimizer && optimizer->model != model->impl)
      oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn,
                 ": the optimizer was created over another model (oslo_optimizer_create)");
    const size_t n = static_cast<size_t>(batch * seq);
    std::vector<int64_t> id(ids, ids + n), m, lab;
    if (mask) m.assign(mask, mask + n);
    if (labels) {
      lab.assign(labels, labels + n);
    } else {
      lab = id;
      if (mask)
        for (size_t i = 0; i < n; ++i)
          if (mask[i] == 0) lab[i] = -100;
    }
    oslo::TrainStepResult r;
    model->last_pipeline = oslo::PipelineStats{};  // zeros unless this step runs a schedule
    if (optimizer) {
      oslo::Trainer& t = *optimizer->impl;
      r = t.train_step(id, lab, m, batch, seq);
      if (model->impl->pipeline_size() > 1 || t.options().micro_batches > 1)
        model->last_pipeline = t.pipeline_stats();
    } else if (model->impl->pipeline_size() > 1) {
      const oslo::PipelineStats st =
          model->impl->training().pipeline_loss_backward(id, lab, m, batch, seq, 1, 1.f);
      r.loss = st.loss;
      if (!std::isfinite(r.loss))
        oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": the loss is ", r.loss,
                   " (no label kept, or non-finite logits)");
      model->last_pipeline = st;
      r.grad_norm = std::numeric_limits<double>::quiet_NaN();
    } else {
      r.loss = model->impl->training().loss_backward(id, lab, m, batch, seq, 1.f);
      r.grad_norm = std::numeric_limits<double>::quiet_NaN();
    }
    fill(result, r);
  });
}

oslo_status oslo_model_pipeline_stats(const oslo_model* model, double* compute_s, double* wall_s,
                                      double* bubble) {
  return guard([&] {
    need(model, "oslo_model_pipeline_stats", "model");
    const oslo::PipelineStats& st = model->last_pipeline;
    if (compute_s) *compute_s = st.compute_s;
    if (wall_s) *wall_s = st.wall_s;
    if (bubble) *bubble = st.bubble;
  });
}

oslo_status oslo_model_backward(oslo_model* model, oslo_optimizer* optimizer, const int64_t* ids,
                                const int64_t* mask, const int64_t* token_type_ids, int64_t batch,
                                int64_t seq, const float* grad_hidden, size_t count,
                                oslo_train_step_result* result) {
  return guard([&] {
    const char* fn = "oslo_model_backward";
    need(model, fn, "model");
    check_batch(fn, ids, batch, seq);
    need(grad_hidden, fn, "grad_hidden");
    if (optimizer && optimizer->model != model->impl)
      oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn,
                 ": the optimizer was created over another model (oslo_optimizer_create)");
    oslo::Model& m = *model->impl;
    const size_t n = static_cast<size_t>(batch * seq);
    const size_t want = n * static_cast<size_t>(m.config().hidden_size);
    if (count != want)
      oslo::fail(OSLO_ERR_SHAPE, fn, ": grad_hidden holds ", count, " floats; [", batch, ", ", seq,
                 ", ", m.config().hidden_size, "] needs ", want);
    std::vector<int64_t> id(ids, ids + n), mk, tt;
    if (mask) mk.assign(mask, mask + n);
    if (token_type_ids) tt.assign(token_type_ids, token_type_ids + n);
    const std::vector<float> g(grad_hidden, grad_hidden + count);
    oslo::TrainStepResult r;
    if (optimizer) {
      r = optimizer->impl->backward_step(id, mk, tt, batch, seq, g);
    } else {
      m.training().hidden_backward(id, mk, tt, batch, seq, g, 1.f);
      r.grad_norm = std::numeric_limits<double>::quiet_NaN();
    }
    fill(result, r);
  });
}

oslo_status oslo_optimizer_step(oslo_optimizer* optimizer, oslo_train_step_result* result) {
  return guard([&] { fill(result, trainer_of(optimizer, "oslo_optimizer_step").step()); });
}

oslo_status oslo_optimizer_zero_grad(oslo_optimizer* optimizer) {
  return guard([&] { trainer_of(optimizer, "oslo_optimizer_zero_grad").zero_grad(); });
}

oslo_status oslo_model_set_activation_checkpointing(oslo_model* model, int enabled) {
  return guard([&] {
    need(model, "oslo_model_set_activation_checkpointing", "model");
    model->impl->training().set_activation_checkpointing(enabled != 0);
  });
}

oslo_status oslo_checkpoint_save(oslo_optimizer* optimizer, const char* dir,
                                 const oslo_train_state* state) {
  return guard([&] {
    const char* fn = "oslo_checkpoint_save";
    oslo::Trainer& t = trainer_of(optimizer, fn);
    need(dir, fn, "dir");
    const oslo_train_state s = state ? *state : oslo_train_state{0, 0, 0};
    nlohmann::json u;
    u["seed"] = s.seed;
    u["epoch"] = s.epoch;
    u["data_position"] = s.data_position;
    oslo::save_training_checkpoint(dir, t, u);
  });
}

oslo_status oslo_checkpoint_load(oslo_optimizer* optimizer, const char* dir,
                                 oslo_train_state* state) {
  return guard([&] {
    const char* fn = "oslo_checkpoint_load";
    oslo::Trainer& t = trainer_of(optimizer, fn);
    need(dir, fn, "dir");
    const nlohmann::json u = oslo::load_training_checkpoint(dir, t);
    // The train state as oslo_checkpoint_save wrote it (keys missing from a
    // checkpoint saved through the C++ core read as 0).
    oslo_train_state s{0, 0, 0};
    auto field = [&](const char* key, auto* out) {
      if (!u.is_object() || !u.contains(key)) return;
      const nlohmann::json& v = u.at(key);
      if (!v.is_number_integer())
        oslo::fail(OSLO_ERR_FORMAT, fn, ": the checkpoint's train state \"", key,
                   "\" is not an integer");
      *out = v.get<std::remove_pointer_t<decltype(out)>>();
    };
    field("seed", &s.seed);
    field("epoch", &s.epoch);
    field("data_position", &s.data_position);
    if (state) *state = s;
  });
}

}  // extern "C"
