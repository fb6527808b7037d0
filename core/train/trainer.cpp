#include "core/train/trainer.hpp"

#include <cmath>
#include <limits>

#include "core/common/error.hpp"
#include "core/parallel/mappings.hpp"
#include "core/tensor/view.hpp"

namespace oslo {

namespace {

const char* kind_name(OptimizerKind k) {
  return k == OptimizerKind::ADAMW ? "adamw" : "sgd";
}

}  // namespace

Trainer::Trainer(Model& model, const TrainerOptions& o) : model_(model), o_(o) {
  OSLO_CHECK(o.grad_accum_steps >= 1, OSLO_ERR_INVALID_ARGUMENT, "trainer: grad_accum_steps ",
             o.grad_accum_steps, " must be >= 1");
  OSLO_CHECK(o.warmup_steps >= 0 && o.total_steps >= 0, OSLO_ERR_INVALID_ARGUMENT,
             "trainer: warmup_steps (", o.warmup_steps, ") and total_steps (", o.total_steps,
             ") must be >= 0");
  OSLO_CHECK((o.schedule != ScheduleKind::LINEAR && o.schedule != ScheduleKind::COSINE) ||
                 o.total_steps > 0,
             OSLO_ERR_INVALID_ARGUMENT,
             "trainer: a linear or cosine schedule needs total_steps > 0");
  OSLO_CHECK(std::isfinite(o.max_grad_norm) && o.max_grad_norm >= 0, OSLO_ERR_INVALID_ARGUMENT,
             "trainer: max_grad_norm ", o.max_grad_norm,
             " must be finite and >= 0 (0: no clipping)");
  OSLO_CHECK(o.micro_batches >= 1 && o.micro_batches <= (1 << 20), OSLO_ERR_INVALID_ARGUMENT,
             "trainer: micro_batches ", o.micro_batches, " must lie in [1, 2^20]");
  OSLO_CHECK(
      (model.pipeline_size() == 1 && o.micro_batches == 1) || o.data_parallel.zero_stage <= 1,
      OSLO_ERR_NOT_SUPPORTED, "trainer: ZeRO stage ", o.data_parallel.zero_stage,
      " with pipeline_parallel_size ", model.pipeline_size(), " and ", o.micro_batches,
      " micro-batches (ZeRO 0 or 1 with pipeline parallelism or micro-batches, as "
      "Colossal-AI)");
  const double hs = o.pipeline_head_split;
  OSLO_CHECK(std::isfinite(hs) && hs <= 1 && (hs >= 0 || hs == -1), OSLO_ERR_INVALID_ARGUMENT,
             "trainer: pipeline_head_split ", hs,
             " must be 0 (off), a fraction in (0, 1] or -1 (by the stages' costs)");
  OSLO_CHECK(hs == 0 || model.pipeline_size() > 1, OSLO_ERR_NOT_SUPPORTED,
             "trainer: pipeline_head_split ", hs,
             " needs pipeline stages (pipeline_parallel_size is 1)");
  const LossScalerOptions& s = o.scaler;
  if (s.enabled) {
    OSLO_CHECK(std::isfinite(s.init_scale) && s.init_scale > 0, OSLO_ERR_INVALID_ARGUMENT,
               "trainer: init_scale ", s.init_scale, " must be finite and > 0");
    OSLO_CHECK(std::isfinite(s.growth_factor) && s.growth_factor > 1, OSLO_ERR_INVALID_ARGUMENT,
               "trainer: growth_factor ", s.growth_factor, " must be > 1");
    OSLO_CHECK(s.backoff_factor > 0 && s.backoff_factor < 1, OSLO_ERR_INVALID_ARGUMENT,
               "trainer: backoff_factor ", s.backoff_factor, " must lie in (0, 1)");
    OSLO_CHECK(s.growth_interval >= 1, OSLO_ERR_INVALID_ARGUMENT, "trainer: growth_interval ",
               s.growth_interval, " must be >= 1");
    scale_ = s.init_scale;
  }
  dp_ = std::make_unique<DataParallel>(model, o.data_parallel);
  if (dp_->zero_stage() >= 1) {
    std::vector<std::pair<int64_t, int64_t>> owned;
    for (const OwnedRange& w : dp_->owned()) owned.emplace_back(w.lo, w.hi);
    opt_ = std::make_unique<Optimizer>(model, o.optimizer, owned, dp_->zero_stage() == 3);
  } else {
    opt_ = std::make_unique<Optimizer>(model, o.optimizer);
  }
  // ZeRO-2 keeps no full gradient between backwards: each is made when the
  // backward first writes it and freed once its bucket is reduced.
  if (dp_->zero_stage() >= 2) {
    std::vector<size_t> all(model.tensors().size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    model.training().release_grads(all);
  }
  model.training().set_backward_hook([d = dp_.get()](int stage) { d->on_stage(stage); }, this);
  if (dp_->zero_stage() == 3) {
    // The parameters now live in the optimizer's masters.
    std::vector<View> sources;
    for (size_t i = 0; i < model.tensors().size(); ++i) sources.push_back(opt_->master_view(i));
    dp_->set_sources(sources);
    dp_->discard_partitioned();
    model.training().set_param_hook(
        [d = dp_.get()](int unit, bool on, int next) { d->acquire(unit, on, next); }, true);
    model.training().set_head_rows(dp_->head_rows());
  }
  model.training().set_agree_over_data(dp_->size() > 1);
}

Trainer::~Trainer() {
  model_.training().clear_backward_hook(this);
  // A ZeRO-3 model keeps no whole parameters: it refuses to run without
  // its optimizer (a training checkpoint carries it on).
  if (dp_ && dp_->zero_stage() == 3) {
    model_.training().set_param_hook(nullptr, true);
    model_.training().set_head_rows(TrainingPass::HeadRows{});
  }
  model_.training().set_agree_over_data(false);
}

double Trainer::grad_multiplier() const {
  return scale_ / (static_cast<double>(o_.grad_accum_steps) * dp_->size());
}

void Trainer::reduced_backward(const std::function<void()>& fn) {
  dp_->begin_backward(micro_ == 0, micro_ + 1 >= o_.grad_accum_steps);
  try {
    fn();
  } catch (...) {
    dp_->abandon();
    throw;
  }
  dp_->end_backward();
}

double Trainer::next_lr() const {
  return o_.optimizer.lr *
         schedule_factor(o_.schedule, opt_->steps(), o_.warmup_steps, o_.total_steps);
}

void Trainer::zero_grad() {
  model_.training().zero_grad();
  dp_->reset();
  micro_ = 0;
  loss_sum_ = 0.0;
}

TrainStepResult Trainer::train_step(const std::vector<int64_t>& ids,
                                    const std::vector<int64_t>& labels,
                                    const std::vector<int64_t>& mask, int64_t batch, int64_t seq) {
  const float g = static_cast<float>(grad_multiplier());
  float loss = 0.f;
  if (model_.pipeline_size() > 1 || o_.micro_batches > 1) {
    try {
      reduced_backward([&] {
        pipe_ = model_.training().pipeline_loss_backward(ids, labels, mask, batch, seq,
                                                         static_cast<int>(o_.micro_batches), g,
                                                         o_.pipeline_head_split);
      });
    } catch (...) {
      // A schedule that failed part-way has added some micro-batches'
      // gradients: the window is dropped.
      zero_grad();
      throw;
    }
    loss = pipe_.loss;  // checked below, after the data ranks' mean
  } else {
    reduced_backward(
        [&] { loss = model_.training().loss_backward(ids, labels, mask, batch, seq, g); });
  }
  if (dp_->size() > 1) {
    // The mean of the data-parallel ranks' losses (DDP averages their
    // gradients the same way), the same on every rank.
    Context& ctx = model_.context();
    Backend& be = ctx.backend();
    Tensor t = scratch(ctx.backend_ptr(), OSLO_DTYPE_F32, {1});
    be.copy(t.data(), &loss, sizeof loss, CopyKind::HostToDevice);
    reduce_sum(ctx, OSLO_GROUP_DATA, view(t));
    be.copy(&loss, t.data(), sizeof loss, CopyKind::DeviceToHost);
    loss /= static_cast<float>(dp_->size());
  }
  if (!std::isfinite(loss) && (model_.pipeline_size() > 1 || o_.micro_batches > 1)) {
    // The pipeline reports a non-finite loss after its schedule (the mean
    // over the data ranks carries it to all of them): the window's
    // gradients are spoiled.
    zero_grad();
    fail(OSLO_ERR_INVALID_ARGUMENT, "loss: the loss is ", loss,
         " (no label kept in a micro-batch, or non-finite logits, on some data-parallel rank)");
  }
  return after_micro_batch(loss);
}

TrainStepResult Trainer::backward_step(const std::vector<int64_t>& ids,
                                       const std::vector<int64_t>& mask,
                                       const std::vector<int64_t>& token_types, int64_t batch,
                                       int64_t seq, const std::vector<float>& grad_hidden) {
  const float g = static_cast<float>(grad_multiplier());
  reduced_backward([&] {
    model_.training().hidden_backward(ids, mask, token_types, batch, seq, grad_hidden, g);
  });
  return after_micro_batch(0.f);
}

TrainStepResult Trainer::after_micro_batch(float loss) {
  ++micro_;
  loss_sum_ += loss;
  TrainStepResult r;
  if (micro_ >= o_.grad_accum_steps) r = step();
  r.loss = loss;
  r.loss_scale = scale_;
  r.step = opt_->steps();
  return r;
}

TrainStepResult Trainer::step() {
  TrainStepResult r;
  r.stepped = true;
  r.mean_loss = micro_ > 0 ? loss_sum_ / static_cast<double>(micro_) : 0.0;
  if (model_.training().grads().empty()) model_.training().zero_grad();
  // A window that did not end with a reducing backward (a step after fewer
  // micro-batches than grad_accum_steps) is reduced here.
  dp_->reduce_now();
  // Tied embeddings split between the first and the last stage: one sum.
  model_.training().sync_tied_grads();
  Context& ctx = model_.context();
  Backend& be = ctx.backend();
  be.set_num_threads(ctx.num_threads());
  if (o_.scaler.enabled) {
    // GradScaler.unscale_: gradients times the f32 reciprocal of the scale.
    const float inv = static_cast<float>(1.0 / scale_);
    for (const Tensor& gr : dp_->grad_tensors())
      if (gr.defined() && gr.numel() > 0) be.unary(OSLO_BK_SCALE, view(gr), view(gr), inv);
  }
  const bool need_norm = o_.scaler.enabled || o_.max_grad_norm > 0;
  r.grad_norm = std::numeric_limits<double>::quiet_NaN();
  bool finite = true;
  if (need_norm) {
    // The norm comes from one exchange over the group, so every rank sees
    // the same value and takes the same decision.
    r.grad_norm = dp_->clip_grad_norm(
        o_.max_grad_norm > 0 ? o_.max_grad_norm : std::numeric_limits<double>::infinity());
    finite = std::isfinite(r.grad_norm);
  }
  if (o_.scaler.enabled) {
    // GradScaler.update.
    if (!finite) {
      scale_ *= o_.scaler.backoff_factor;
      growth_tracker_ = 0;
    } else if (++growth_tracker_ == o_.scaler.growth_interval) {
      scale_ *= o_.scaler.growth_factor;
      growth_tracker_ = 0;
    }
  } else {
    OSLO_CHECK(finite, OSLO_ERR_INVALID_ARGUMENT, "trainer: the gradient norm is ", r.grad_norm,
               " at update ", opt_->steps() + 1,
               " (non-finite gradients; loss scaling is off, so nothing can skip the step)");
  }
  if (finite) {
    r.lr = next_lr();
    if (dp_->zero_stage() == 0) {
      opt_->step(r.lr);
    } else {
      // ZeRO: each rank updates what it owns, then the parameters are
      // gathered.
      std::vector<View> grads, values;
      for (size_t i = 0; i < model_.tensors().size(); ++i) grads.push_back(dp_->grad_view(i));
      opt_->step(r.lr, grads);
      for (size_t i = 0; i < model_.tensors().size(); ++i) values.push_back(opt_->master_view(i));
      dp_->gather_parameters(values);
      model_.parameters_changed();
    }
  } else {
    r.skipped = true;
  }
  zero_grad();
  r.loss_scale = scale_;
  r.step = opt_->steps();
  return r;
}

nlohmann::json Trainer::state() const {
  OSLO_CHECK(micro_ == 0, OSLO_ERR_INVALID_ARGUMENT, "trainer: ", micro_,
             " micro-batch(es) accumulated since the last update; save a training checkpoint "
             "after an optimizer step");
  nlohmann::json j;
  j["optimizer"] = kind_name(o_.optimizer.kind);
  j["updates"] = opt_->steps();
  j["loss_scaling"] = o_.scaler.enabled;
  j["loss_scale"] = scale_;
  j["growth_tracker"] = growth_tracker_;
  j["grad_accum_steps"] = o_.grad_accum_steps;
  return j;
}

void Trainer::set_state(const nlohmann::json& j) {
  auto get = [&](const char* key) -> const nlohmann::json& {
    OSLO_CHECK(j.is_object() && j.contains(key), OSLO_ERR_FORMAT, "training state: the key \"", key,
               "\" is missing");
    return j.at(key);
  };
  const nlohmann::json& kind = get("optimizer");
  OSLO_CHECK(kind.is_string(), OSLO_ERR_FORMAT, "training state: \"optimizer\" is not a string");
  OSLO_CHECK(kind.get<std::string>() == kind_name(o_.optimizer.kind), OSLO_ERR_INVALID_ARGUMENT,
             "training checkpoint: saved with optimizer ", kind.get<std::string>(),
             ", resumed with ", kind_name(o_.optimizer.kind));
  const nlohmann::json &updates = get("updates"), &scale = get("loss_scale"),
                       &tracker = get("growth_tracker");
  OSLO_CHECK(updates.is_number_integer() && updates.get<int64_t>() >= 0, OSLO_ERR_FORMAT,
             "training state: \"updates\" is not a non-negative integer");
  OSLO_CHECK(scale.is_number() && std::isfinite(scale.get<double>()) && scale.get<double>() > 0,
             OSLO_ERR_FORMAT, "training state: \"loss_scale\" is not a positive number");
  OSLO_CHECK(tracker.is_number_integer() && tracker.get<int64_t>() >= 0, OSLO_ERR_FORMAT,
             "training state: \"growth_tracker\" is not a non-negative integer");
  opt_->set_steps(updates.get<int64_t>());
  // A run resumed with loss scaling turned on or off starts the scaler anew.
  const nlohmann::json& was = get("loss_scaling");
  if (o_.scaler.enabled && was.is_boolean() && was.get<bool>()) {
    scale_ = scale.get<double>();
    growth_tracker_ = tracker.get<int64_t>();
  }
  zero_grad();
}

}  // namespace oslo
