#include "core/train/optimizer.hpp"

#include <cmath>

#include "core/common/error.hpp"
#include "core/layers/param_set.hpp"
#include "core/tensor/view.hpp"

namespace oslo {

double schedule_factor(ScheduleKind kind, int64_t step, int64_t warmup, int64_t total) {
  OSLO_CHECK(step >= 0 && warmup >= 0 && total >= 0, OSLO_ERR_INVALID_ARGUMENT, "schedule: step (",
             step, "), warmup (", warmup, ") and total (", total, ") must be non-negative");
  const double s = static_cast<double>(step), w = static_cast<double>(warmup);
  if (kind != ScheduleKind::CONSTANT && step < warmup) return s / std::max(1.0, w);
  switch (kind) {
    case ScheduleKind::CONSTANT:
    case ScheduleKind::CONSTANT_WITH_WARMUP: return 1.0;
    case ScheduleKind::LINEAR:
      return std::max(0.0, static_cast<double>(total - step) /
                               std::max(1.0, static_cast<double>(total - warmup)));
    case ScheduleKind::COSINE: {
      // transformers' num_cycles = 0.5: half a cosine from 1 to 0.
      const double progress =
          static_cast<double>(step - warmup) / std::max(1.0, static_cast<double>(total - warmup));
      return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * 0.5 * 2.0 * progress)));
    }
  }
  return 1.0;
}

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "constant") return ScheduleKind::CONSTANT;
  if (name == "constant_with_warmup") return ScheduleKind::CONSTANT_WITH_WARMUP;
  if (name == "linear") return ScheduleKind::LINEAR;
  if (name == "cosine") return ScheduleKind::COSINE;
  fail(OSLO_ERR_INVALID_ARGUMENT, "schedule \"", name,
       "\" is not one of constant, constant_with_warmup, linear, cosine");
}

Optimizer::Optimizer(Model& model, const OptimizerOptions& o)
    : Optimizer(model, o, std::vector<std::pair<int64_t, int64_t>>{}) {}

Optimizer::Optimizer(Model& model, const OptimizerOptions& o,
                     const std::vector<std::pair<int64_t, int64_t>>& owned, bool own_masters)
    : model_(model), o_(o), owned_(owned), own_masters_(own_masters) {
  auto finite_nonneg = [](double v) { return std::isfinite(v) && v >= 0; };
  OSLO_CHECK(finite_nonneg(o.lr), OSLO_ERR_INVALID_ARGUMENT, "optimizer: lr ", o.lr,
             " must be finite and >= 0");
  OSLO_CHECK(finite_nonneg(o.weight_decay), OSLO_ERR_INVALID_ARGUMENT, "optimizer: weight_decay ",
             o.weight_decay, " must be finite and >= 0");
  if (o.kind == OptimizerKind::ADAMW) {
    OSLO_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1,
               OSLO_ERR_INVALID_ARGUMENT, "optimizer: betas (", o.beta1, ", ", o.beta2,
               ") must lie in [0, 1)");
    OSLO_CHECK(std::isfinite(o.eps) && o.eps >= 0, OSLO_ERR_INVALID_ARGUMENT, "optimizer: eps ",
               o.eps, " must be finite and >= 0");
  } else {
    OSLO_CHECK(finite_nonneg(o.momentum) && finite_nonneg(o.dampening), OSLO_ERR_INVALID_ARGUMENT,
               "optimizer: momentum (", o.momentum, ") and dampening (", o.dampening,
               ") must be finite and >= 0");
    OSLO_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), OSLO_ERR_INVALID_ARGUMENT,
               "optimizer: Nesterov momentum requires a momentum and zero dampening");
  }
  for (const PlacedTensor& p : model.tensors()) {
    const oslo_dtype dt = p.tensor.dtype();
    OSLO_CHECK(dt == OSLO_DTYPE_F32 || dt == OSLO_DTYPE_BF16 || dt == OSLO_DTYPE_F16,
               OSLO_ERR_NOT_SUPPORTED, "optimizer: ", p.placement.name, " is ", dtype_name(dt),
               "; the optimizer updates f32, bf16 or f16 parameters");
  }
  OSLO_CHECK(owned.empty() || owned.size() == model.tensors().size(), OSLO_ERR_INTERNAL,
             "optimizer: ", owned.size(), " owned ranges for ", model.tensors().size(),
             " parameters");
  for (size_t i = 0; i < owned.size(); ++i)
    OSLO_CHECK(owned[i].first >= 0 && owned[i].first <= owned[i].second &&
                   owned[i].second <= model.tensors()[i].tensor.numel(),
               OSLO_ERR_INTERNAL, "optimizer: owned range of ", model.tensors()[i].placement.name,
               " outside the tensor");
  // Partitioned (ZeRO), the optimizer reads the gradients it is handed; the
  // full ones are made by the backward when needed (ZeRO-2 never holds all).
  if (model.training().grads().empty() && !partitioned()) model.training().zero_grad();
  const auto& bp = model.context().backend_ptr();
  Backend& be = model.context().backend();
  // f32 masters of the parameters held in a narrower dtype (the widening is
  // exact).
  masters_.resize(model.tensors().size());
  for (size_t i = 0; i < masters_.size(); ++i) {
    const Tensor& p = model.tensors()[i].tensor;
    if (p.dtype() == OSLO_DTYPE_F32 && !own_masters_) continue;
    if (partitioned()) {
      const int64_t n = owned_[i].second - owned_[i].first;
      masters_[i] = scratch(bp, OSLO_DTYPE_F32, {n});
      if (n > 0) be.convert(view(masters_[i]), param_range(i));
      continue;
    }
    masters_[i] = scratch(bp, OSLO_DTYPE_F32, p.shape());
    if (p.numel() > 0) be.convert(view(masters_[i]), view(p));
  }
  if (o.kind == OptimizerKind::ADAMW)
    state_names_ = {"exp_avg", "exp_avg_sq"};
  else if (o.momentum > 0)
    state_names_ = {"momentum_buffer"};
  state_.resize(model.tensors().size());
  for (size_t i = 0; i < state_.size(); ++i) {
    const std::vector<int64_t> shape =
        partitioned() ? std::vector<int64_t>{owned_[i].second - owned_[i].first}
                      : model.tensors()[i].tensor.shape();
    for (size_t k = 0; k < state_names_.size(); ++k) {
      state_[i].push_back(scratch(bp, OSLO_DTYPE_F32, shape));
      be.fill(view(state_[i].back()), 0.0);
    }
  }
}

View Optimizer::param_range(size_t i) const {
  const Tensor& p = model_.tensors()[i].tensor;
  const auto r = owned(i);
  return make_view(
      static_cast<char*>(p.data()) + r.first * static_cast<int64_t>(dtype_size(p.dtype())),
      p.dtype(), {r.second - r.first});
}

std::pair<int64_t, int64_t> Optimizer::owned(size_t i) const {
  OSLO_CHECK(i < masters_.size(), OSLO_ERR_INVALID_ARGUMENT, "optimizer: parameter index ", i,
             " is out of range (", masters_.size(), " parameters)");
  if (owned_.empty()) return {0, model_.tensors()[i].tensor.numel()};
  return owned_[i];
}

View Optimizer::master_view(size_t i) const {
  (void)owned(i);  // the index check
  if (masters_[i].defined())
    return make_view(masters_[i].data(), OSLO_DTYPE_F32, {masters_[i].numel()});
  return param_range(i);
}

const Tensor& Optimizer::master(size_t i) const {
  OSLO_CHECK(i < masters_.size(), OSLO_ERR_INVALID_ARGUMENT, "optimizer: parameter index ", i,
             " is out of range (", masters_.size(), " parameters)");
  return masters_[i].defined() ? masters_[i] : model_.tensors()[i].tensor;
}

size_t Optimizer::master_bytes() const {
  size_t b = 0;
  for (const Tensor& m : masters_)
    if (m.defined()) b += m.nbytes();
  return b;
}

void Optimizer::round_to_parameters() {
  if (own_masters_) return;  // ZeRO-3: the reducer writes the parameters
  Backend& be = model_.context().backend();
  const auto& params = model_.tensors();
  for (size_t i = 0; i < masters_.size(); ++i) {
    if (!masters_[i].defined() || masters_[i].numel() == 0) continue;
    if (partitioned())
      be.convert(param_range(i), view(masters_[i]));
    else
      be.convert(view(params[i].tensor), view(masters_[i]));
  }
}

void Optimizer::masters_loaded() {
  Context& ctx = model_.context();
  ctx.backend().set_num_threads(ctx.num_threads());
  round_to_parameters();
  model_.parameters_changed();
}

void Optimizer::set_steps(int64_t steps) {
  OSLO_CHECK(steps >= 0, OSLO_ERR_INVALID_ARGUMENT, "optimizer: step count ", steps,
             " must be >= 0");
  steps_ = steps;
}

void Optimizer::step(double lr) {
  OSLO_CHECK(!partitioned(), OSLO_ERR_INTERNAL,
             "optimizer: a partitioned (ZeRO) optimizer steps from its owned gradients");
  std::vector<View> grads;
  for (const Tensor& g : model_.training().grads())
    grads.push_back(make_view(g.data(), OSLO_DTYPE_F32, {g.numel()}));
  step(lr, grads);
}

void Optimizer::step(double lr, const std::vector<View>& grads) {
  OSLO_CHECK(std::isfinite(lr) && lr >= 0, OSLO_ERR_INVALID_ARGUMENT, "optimizer: lr ", lr,
             " must be finite and >= 0");
  Context& ctx = model_.context();
  Backend& be = ctx.backend();
  const auto& bp = ctx.backend_ptr();
  be.set_num_threads(ctx.num_threads());
  const auto& params = model_.tensors();
  OSLO_CHECK(grads.size() == params.size(), OSLO_ERR_INTERNAL, "optimizer: ", grads.size(),
             " gradients for ", params.size(), " parameters");
  ++steps_;
  const double t = static_cast<double>(steps_);
  for (size_t i = 0; i < params.size(); ++i) {
    const View p = master_view(i);  // f32: the parameter itself or its master
    const int64_t n = p.numel();
    if (n == 0) continue;
    OSLO_CHECK(grads[i].numel() == n && grads[i].dtype == OSLO_DTYPE_F32, OSLO_ERR_INTERNAL,
               "optimizer: the gradient of ", params[i].placement.name, " has ", grads[i].numel(),
               " elements for ", n);
    auto flat = [&](const Tensor& x) { return make_view(x.data(), OSLO_DTYPE_F32, {n}); };
    const View g = grads[i];
    const bool decay = o_.weight_decay > 0 && (o_.decay_1d || params[i].tensor.ndim() >= 2);
    if (o_.kind == OptimizerKind::ADAMW) {
      const double bc1 = 1.0 - std::pow(o_.beta1, t), bc2 = 1.0 - std::pow(o_.beta2, t);
      be.adamw(p, g, flat(state_[i][0]), flat(state_[i][1]),
               decay ? static_cast<float>(lr * o_.weight_decay) : 0.f, static_cast<float>(o_.beta1),
               static_cast<float>(o_.beta2), static_cast<float>(lr / bc1),
               static_cast<float>(std::sqrt(bc2)), static_cast<float>(o_.eps));
    } else {
      Tensor tmp = scratch(bp, OSLO_DTYPE_F32, {n});
      const View tv = flat(tmp);
      // d = g (+ wd p); buf = momentum buf + (1 - dampening) d (the first
      // step: buf = d); d = d + momentum buf (Nesterov) or buf; p -= lr d.
      View d = g;
      if (decay) {
        be.unary(OSLO_BK_SCALE, tv, p, static_cast<float>(o_.weight_decay));
        be.binary(OSLO_BK_ADD, tv, tv, g);
        d = tv;
      }
      if (o_.momentum > 0) {
        if (steps_ == 1) {  // PyTorch: the first step's buffer is the update
          be.convert(flat(state_[i][0]), d);
        } else {
          const View b = flat(state_[i][0]);
          Tensor t2 = scratch(bp, OSLO_DTYPE_F32, {n});
          be.unary(OSLO_BK_SCALE, b, b, static_cast<float>(o_.momentum));
          be.unary(OSLO_BK_SCALE, flat(t2), d, static_cast<float>(1.0 - o_.dampening));
          be.binary(OSLO_BK_ADD, b, b, flat(t2));
        }
        const View b = flat(state_[i][0]);
        if (o_.nesterov) {
          Tensor t2 = scratch(bp, OSLO_DTYPE_F32, {n});
          be.unary(OSLO_BK_SCALE, flat(t2), b, static_cast<float>(o_.momentum));
          be.binary(OSLO_BK_ADD, tv, d, flat(t2));
          d = tv;
        } else {
          d = b;
        }
      }
      Tensor t3 = scratch(bp, OSLO_DTYPE_F32, {n});
      be.unary(OSLO_BK_SCALE, flat(t3), d, static_cast<float>(-lr));
      be.binary(OSLO_BK_ADD, p, p, flat(t3));
    }
  }
  round_to_parameters();
  model_.parameters_changed();
}

double clip_grad_norm(Model& model, double max_norm, double norm_type) {
  if (model.training().grads().empty()) model.training().zero_grad();
  std::vector<GradSlice> grads;
  const auto& params = model.tensors();
  for (size_t i = 0; i < params.size(); ++i) {
    const Placement& p = params[i].placement;
    const Tensor& g = model.training().grads()[i];
    bool all_owned = true;
    for (const Segment& s : p.segments) all_owned = all_owned && s.owner;
    if (p.split_dim < 0 && !p.replica_owner) {
      // Another rank's to count (a tied head's copy of the first stage's
      // table; a replicated tensor on tensor ranks above 0).
      grads.push_back(GradSlice{p.name, g, true, 0, 0});
      continue;
    }
    if (p.split_dim < 0 || all_owned) {
      grads.push_back(GradSlice{p.name, g, p.split_dim < 0});
      continue;
    }
    // Key/value heads replicated over ranks: each head's rows counted by its
    // owner only.
    OSLO_CHECK(p.split_dim == 0 && !p.transpose && p.local_extent > 0, OSLO_ERR_INTERNAL,
               "clip_grad_norm: ", p.name, " shares segments along a dimension other than 0");
    const int64_t inner = g.numel() / p.local_extent;
    bool scale = true;
    for (const Segment& s : p.segments)
      if (s.owner) {
        grads.push_back(
            GradSlice{p.name, g, false, s.local_start * inner, s.length * inner, scale});
        scale = false;
      }
    // Rows of heads other ranks own: scaled (when no row is this rank's),
    // not counted, still searched for non-finite values (count 0).
    grads.push_back(GradSlice{p.name, g, false, 0, 0, scale});
  }
  return clip_grad_norm(model.context(), grads, max_norm, norm_type);
}

}  // namespace oslo
