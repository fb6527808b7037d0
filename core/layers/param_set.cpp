#include "core/layers/param_set.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/checkpoint/checkpoint.hpp"
#include "core/common/error.hpp"
#include "core/layers/embedding.hpp"
#include "core/layers/linear.hpp"
#include "core/parallel/mappings.hpp"
#include "core/tensor/view.hpp"

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
  std::vector<GradSlice> grads;
  for (const auto& e : entries_)
    if (e.grad.defined()) grads.push_back(GradSlice{e.name, e.grad, e.split_dim < 0});
  return oslo::clip_grad_norm(ctx_, grads, max_norm, norm_type);
}

double clip_grad_norm(Context& ctx, const std::vector<GradSlice>& grads, double max_norm,
                      double norm_type, bool over_data) {
  OSLO_CHECK(std::isinf(norm_type) ? norm_type > 0 : norm_type >= 1.0, OSLO_ERR_INVALID_ARGUMENT,
             "clip_grad_norm: norm_type must be >= 1 or INFINITY, got ", norm_type);
  OSLO_CHECK(!std::isnan(max_norm), OSLO_ERR_INVALID_ARGUMENT, "clip_grad_norm: max_norm is NaN");
  const bool inf = std::isinf(norm_type);
  const bool tp_first = ctx.topology().tp_rank() == 0;
  Backend& be = ctx.backend();
  auto bk = ctx.backend_ptr();
  be.set_num_threads(ctx.num_threads());
  // One slot per piece of a gradient: sum |g|^p (or max |g|) accumulated in
  // f64 by the backend and rounded once to f32; the slots are then added on
  // the host in f64 after one copy (a wait point).
  std::vector<const GradSlice*> counted;
  size_t n_counted = 0;
  for (const auto& e : grads) {
    OSLO_CHECK(e.grad.dtype() == OSLO_DTYPE_F32, OSLO_ERR_DTYPE, "clip_grad_norm: gradient of '",
               e.name, "' must be f32");
    // Replicated gradients are the same on every tensor rank: count them once.
    if ((e.replicated && !tp_first && !inf) || e.count == 0) continue;
    counted.push_back(&e);
  }
  n_counted = counted.size();
  // What this rank does not count is still searched for non-finite values
  // (its slot joins the sum only when it is inf or NaN), so a gradient gone
  // bad on one rank only makes the norm non-finite on all of them.
  for (const auto& e : grads)
    if (((e.replicated && !tp_first && !inf) || e.count == 0) && e.grad.numel() > 0)
      counted.push_back(&e);
  double local = 0;
  if (!counted.empty()) {
    // Pieces of at most kPiece elements (4 MiB: cache-sized, yet few enough
    // that the backend's per-call costs stay small), each piece's |g|^p
    // written into one reused scratch buffer and summed from there: no copy
    // of a whole gradient (a fresh 150 MB buffer costs a page fault per 4 KB
    // on every call).
    constexpr int64_t kPiece = int64_t(1) << 20;
    struct Piece {
      size_t entry;  // index into counted
      int64_t offset, n;
    };
    std::vector<Piece> pieces;
    int64_t widest = 0;
    for (size_t i = 0; i < counted.size(); ++i) {
      const Tensor& g = counted[i]->grad;
      const bool whole = i >= n_counted;
      const int64_t n = whole || counted[i]->count < 0 ? g.numel() : counted[i]->count;
      const int64_t offset = whole ? 0 : counted[i]->offset;
      OSLO_CHECK(offset >= 0 && offset + n <= g.numel(), OSLO_ERR_INTERNAL,
                 "clip_grad_norm: a part of '", counted[i]->name, "' outside the tensor");
      if (inf) {  // no copy needed: one piece per gradient
        pieces.push_back(Piece{i, offset, n});
        continue;
      }
      for (int64_t o = 0; o < n || (n == 0 && o == 0); o += kPiece) {
        const int64_t m = std::min(kPiece, n - o);
        pieces.push_back(Piece{i, offset + o, m});
        widest = std::max(widest, m);
      }
    }
    Tensor slots = scratch(bk, OSLO_DTYPE_F32, {static_cast<int64_t>(pieces.size())});
    Tensor pw;
    if (!inf) pw = scratch(bk, OSLO_DTYPE_F32, {std::max<int64_t>(widest, 1)});
    for (size_t k = 0; k < pieces.size(); ++k) {
      const Piece& pc = pieces[k];
      const Tensor& g = counted[pc.entry]->grad;
      View flat = make_view(static_cast<float*>(g.data()) + pc.offset, OSLO_DTYPE_F32, {1, pc.n});
      View slot = make_view(static_cast<float*>(slots.data()) + k, OSLO_DTYPE_F32, {1});
      if (inf) {
        be.reduce(OSLO_BK_REDUCE_MAX_ABS, slot, flat);
      } else {
        View pv = make_view(pw.data(), OSLO_DTYPE_F32, {1, pc.n});
        be.unary(OSLO_BK_ABS_POW, pv, flat, static_cast<float>(norm_type));
        be.reduce(OSLO_BK_REDUCE_SUM, slot, pv);
      }
    }
    std::vector<float> host(pieces.size());
    be.copy(host.data(), slots.data(), host.size() * 4, CopyKind::DeviceToHost);
    for (size_t k = 0; k < host.size(); ++k) {
      const double v = host[k];
      // searched, not counted: nothing bad
      if (pieces[k].entry >= n_counted && std::isfinite(v)) continue;
      local = inf ? (std::isnan(v) ? v : std::max(local, v)) : local + v;
    }
  }
  // Sum (or max) over the tensor group, then over pipeline stages, which hold
  // different parameters. Data-parallel replicas hold the same gradients. The
  // f64 partial travels as two f32 (high and low part) in device memory and
  // is combined in rank order: identical on every rank.
  double total = local;
  for (oslo_group g : {OSLO_GROUP_TENSOR, OSLO_GROUP_PIPELINE, OSLO_GROUP_DATA}) {
    const int n = group_size(ctx, g);
    if (n == 1 || (g == OSLO_GROUP_DATA && !over_data)) continue;
    float pair[2];
    pair[0] = static_cast<float>(total);
    pair[1] = static_cast<float>(total - static_cast<double>(pair[0]));
    Tensor mine = scratch(bk, OSLO_DTYPE_F32, {2});
    Tensor all = scratch(bk, OSLO_DTYPE_F32, {n, 2});
    be.copy(mine.data(), pair, sizeof pair, CopyKind::HostToDevice);
    gather_first_dim(ctx, g, view(mine), view(all));
    std::vector<float> host(static_cast<size_t>(2 * n));
    be.copy(host.data(), all.data(), host.size() * 4, CopyKind::DeviceToHost);
    total = 0.0;
    for (int r = 0; r < n; ++r) {
      double v = static_cast<double>(host[2 * r]) + static_cast<double>(host[2 * r + 1]);
      total = inf ? std::max(total, v) : total + v;
    }
  }
  double norm = inf ? total : std::pow(total, 1.0 / norm_type);
  if (max_norm > 0 && norm > max_norm) {
    float coef = static_cast<float>(max_norm / (norm + 1e-6));
    for (const auto& e : grads)
      if (e.scale) be.unary(OSLO_BK_SCALE, view(e.grad), view(e.grad), coef);
  }
  return norm;
}

namespace {

// The set's tensors as host buffers for the checkpoint code. Memory the host
// may address (cpu; torch on CPU) is used in place once the backend's queue
// has drained; device memory is staged through host copies (the backend's
// copy operations), so the core never dereferences device memory.
class HostShards {
 public:
  HostShards(Context& ctx, const std::vector<ParamEntry>& entries, bool for_save)
      : ctx_(ctx), entries_(entries) {
    Backend& be = ctx.backend();
    be.synchronize();
    direct_ = be.host_accessible();
    if (!direct_) staging_.resize(entries.size());
    for (size_t i = 0; i < entries.size(); ++i) {
      const ParamEntry& e = entries[i];
      ParamShard s;
      s.name = e.name;
      s.dtype = e.tensor.dtype();
      s.global_shape = e.global_shape;
      s.split_dim = e.split_dim;
      s.offset = e.offset;
      s.local_shape = e.tensor.shape();
      if (direct_) {
        s.data = e.tensor.data();
      } else {
        staging_[i].resize(e.tensor.nbytes());
        s.data = staging_[i].data();
        if (for_save) be.copy(s.data, e.tensor.data(), e.tensor.nbytes(), CopyKind::DeviceToHost);
      }
      shards_.push_back(std::move(s));
    }
  }
  const std::vector<ParamShard>& shards() const { return shards_; }
  // After a load: moves staged bytes to the device.
  void upload() {
    if (direct_) return;
    for (size_t i = 0; i < entries_.size(); ++i)
      ctx_.backend().copy(entries_[i].tensor.data(), staging_[i].data(), staging_[i].size(),
                          CopyKind::HostToDevice);
  }

 private:
  Context& ctx_;
  const std::vector<ParamEntry>& entries_;
  bool direct_ = true;
  std::vector<std::vector<char>> staging_;
  std::vector<ParamShard> shards_;
};

}  // namespace

void ParamSet::save(const std::string& dir) {
  const Topology& t = ctx_.topology();
  CheckpointLayout layout{t.tp_rank(), t.tp_size(), t.pp_rank(),    t.pp_size(),
                          t.dp_rank(), t.dp_size(), t.world_rank(), t.world_size()};
  HostShards hs(ctx_, entries_, true);
  save_checkpoint(dir, hs.shards(), layout, ctx_.control(OSLO_GROUP_WORLD));
}

void ParamSet::load(const std::string& dir) {
  HostShards hs(ctx_, entries_, false);
  // Collective: every rank loads, then all agree on the outcome.
  load_checkpoint_collective(dir, hs.shards(), ctx_.control(OSLO_GROUP_WORLD));
  hs.upload();
}

}  // namespace oslo
