#include "core/layers/param_set.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/checkpoint/checkpoint.hpp"
#include "core/common/error.hpp"
#include "core/layers/embedding.hpp"
#include "core/layers/linear.hpp"

namespace oslo {

void ParamSet::add_entry(ParamEntry e) {
  OSLO_CHECK(!e.name.empty(), OSLO_ERR_INVALID_ARGUMENT, "param_set: name is empty");
  OSLO_CHECK(!index_.count(e.name), OSLO_ERR_INVALID_ARGUMENT, "param_set: a parameter named '",
             e.name, "' is already in the set");
  OSLO_CHECK(e.tensor.defined(), OSLO_ERR_INVALID_ARGUMENT, "param_set: tensor of '", e.name,
             "' is NULL");
  if (e.grad.defined())
    OSLO_CHECK(e.grad.shape() == e.tensor.shape(), OSLO_ERR_SHAPE, "param_set: gradient of '",
               e.name, "' has shape ", Tensor::shape_str(e.grad.shape()), " but the tensor has ",
               Tensor::shape_str(e.tensor.shape()));
  index_[e.name] = entries_.size();
  entries_.push_back(std::move(e));
}

void ParamSet::add(const std::string& name, const Tensor& tensor, const Tensor* grad,
                   int split_dim) {
  OSLO_CHECK(tensor.defined(), OSLO_ERR_INVALID_ARGUMENT, "param_set: tensor is NULL");
  OSLO_CHECK(split_dim >= -1 && split_dim < tensor.ndim(), OSLO_ERR_INVALID_ARGUMENT,
             "param_set: split_dim ", split_dim, " of '", name, "' is outside [-1, ", tensor.ndim(),
             ")");
  ParamEntry e;
  e.name = name;
  e.tensor = tensor;
  if (grad) e.grad = *grad;
  e.split_dim = split_dim;
  e.global_shape = tensor.shape();
  if (split_dim >= 0) {
    const int tp = ctx_.topology().tp_size();
    e.global_shape[split_dim] *= tp;
    e.offset = tensor.shape()[split_dim] * ctx_.topology().tp_rank();
  }
  add_entry(std::move(e));
}

void ParamSet::add_linear(const std::string& prefix, const ParallelLinear& l) {
  const int r = ctx_.topology().tp_rank();
  ParamEntry w;
  w.name = prefix + ".weight";
  w.tensor = l.weight;
  w.grad = l.grad_weight;
  w.global_shape = {l.options().out_features, l.options().in_features};
  w.split_dim = l.column() ? 0 : 1;
  w.offset = (l.column() ? l.local_out() : l.local_in()) * r;
  add_entry(w);
  if (l.options().bias) {
    ParamEntry b;
    b.name = prefix + ".bias";
    b.tensor = l.bias;
    b.grad = l.grad_bias;
    b.global_shape = {l.options().out_features};
    b.split_dim = l.column() ? 0 : -1;
    b.offset = l.column() ? l.local_out() * r : 0;
    add_entry(b);
  }
}

void ParamSet::add_embedding(const std::string& prefix, const ParallelEmbedding& emb) {
  ParamEntry e;
  e.name = prefix + ".weight";
  e.tensor = emb.weight;
  e.grad = emb.grad_weight;
  e.global_shape = {emb.vocab(), emb.hidden()};
  e.split_dim = 0;
  e.offset = emb.start();
  add_entry(e);
}

double ParamSet::clip_grad_norm(double max_norm, double norm_type) {
  OSLO_CHECK(std::isinf(norm_type) ? norm_type > 0 : norm_type >= 1.0, OSLO_ERR_INVALID_ARGUMENT,
             "clip_grad_norm: norm_type must be >= 1 or INFINITY, got ", norm_type);
  OSLO_CHECK(!std::isnan(max_norm), OSLO_ERR_INVALID_ARGUMENT, "clip_grad_norm: max_norm is NaN");
  const bool inf = std::isinf(norm_type);
  const bool tp_first = ctx_.topology().tp_rank() == 0;
  Kernels& k = ctx_.kernels();
  double local = 0;
  for (const auto& e : entries_) {
    if (!e.grad.defined()) continue;
    OSLO_CHECK(e.grad.dtype() == OSLO_F32, OSLO_ERR_DTYPE, "clip_grad_norm: gradient of '", e.name,
               "' must be f32");
    // Replicated gradients are the same on every tensor rank: count them once.
    if (e.split_dim < 0 && !tp_first && !inf) continue;
    double v = k.norm_accumulate(e.grad.f32(), e.grad.numel(), norm_type);
    local = inf ? std::max(local, v) : local + v;
  }
  // Sum (or max) over the tensor group, then over pipeline stages, which hold
  // different parameters. Data-parallel replicas hold the same gradients.
  double total = local;
  for (oslo_group g : {OSLO_GROUP_TENSOR, OSLO_GROUP_PIPELINE}) {
    Communicator& c = ctx_.comm(g);
    if (c.size() > 1) {
      // Gather every rank's double (as its 8 bytes) and combine in rank order:
      // exact, and identical on every rank.
      std::vector<double> all(c.size());
      c.all_gather(&total, all.data(), 1, OSLO_I64);
      total = 0.0;
      for (double v : all) total = inf ? std::max(total, v) : total + v;
    }
  }
  double norm = inf ? total : std::pow(total, 1.0 / norm_type);
  if (max_norm > 0 && norm > max_norm) {
    float coef = static_cast<float>(max_norm / (norm + 1e-6));
    for (const auto& e : entries_)
      if (e.grad.defined()) k.scale(e.grad.f32(), e.grad.numel(), coef);
  }
  return norm;
}

namespace {

std::vector<ParamShard> shards_of(const std::vector<ParamEntry>& entries) {
  std::vector<ParamShard> out;
  out.reserve(entries.size());
  for (const auto& e : entries) {
    ParamShard s;
    s.name = e.name;
    s.dtype = e.tensor.dtype();
    s.global_shape = e.global_shape;
    s.split_dim = e.split_dim;
    s.offset = e.offset;
    s.local_shape = e.tensor.shape();
    s.data = e.tensor.data();
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

void ParamSet::save(const std::string& dir) {
  const Topology& t = ctx_.topology();
  CheckpointLayout layout{t.tp_rank(), t.tp_size(), t.pp_rank(),    t.pp_size(),
                          t.dp_rank(), t.dp_size(), t.world_rank(), t.world_size()};
  save_checkpoint(dir, shards_of(entries_), layout, ctx_.comm(OSLO_GROUP_WORLD));
}

void ParamSet::load(const std::string& dir) {
  load_checkpoint_collective(dir, shards_of(entries_), ctx_.comm(OSLO_GROUP_WORLD));
}

}  // namespace oslo
