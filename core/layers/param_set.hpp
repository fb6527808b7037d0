// Named parameters with their sharding: what gradient clipping and
// checkpoints work on. Tensors are borrowed (owned by layers or the caller).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/context/context.hpp"
#include "core/tensor/tensor.hpp"

namespace oslo {

class ParallelLinear;
class ParallelEmbedding;

struct ParamEntry {
  std::string name;
  Tensor tensor;       // shares storage with the owner's tensor
  Tensor grad;         // may be undefined
  int split_dim = -1;  // -1: replicated over the tensor group
  std::vector<int64_t> global_shape;
  int64_t offset = 0;  // global index along split_dim of local row 0
};

// A gradient for clip_grad_norm: f32, replicated over the tensor group (the
// same on every rank: counted once) or a slice of its own. The norm counts
// `count` elements from element `offset` (count < 0: all of them; a part
// another rank also holds is left to its owner); the clipping scales the
// whole tensor once, for the entry with `scale` set. An entry this rank does
// not count (count 0, or replicated on a rank other than the group's first)
// is still searched whole for non-finite values.
struct GradSlice {
  std::string name;
  Tensor grad;
  bool replicated = false;
  int64_t offset = 0;
  int64_t count = -1;
  bool scale = true;
};

// torch.nn.utils.clip_grad_norm_ over the slices of every rank: the global
// p-norm (or max, norm_type INFINITY) over the tensor and pipeline groups,
// then every gradient scaled by max_norm / (norm + 1e-6) when that is below
// 1 (max_norm <= 0: only the norm). Returns the norm, identical on every
// rank. A non-finite value in any entry of any rank, counted or not, makes
// the norm non-finite on every rank (a gradient that went bad on one rank
// only: loss scaling's skip is decided alike everywhere). Collective over
// the tensor and pipeline groups, and the data-parallel group too when
// over_data (ZeRO-2: each data-parallel rank holds a partition of the
// gradients).
double clip_grad_norm(Context& ctx, const std::vector<GradSlice>& grads, double max_norm,
                      double norm_type, bool over_data = false);

class ParamSet {
 public:
  explicit ParamSet(Context& ctx) : ctx_(ctx) {}

  // Evenly split (or replicated) tensor: global = local * tp along split_dim.
  void add(const std::string& name, const Tensor& tensor, const Tensor* grad, int split_dim);
  void add_linear(const std::string& prefix, const ParallelLinear& layer);
  void add_embedding(const std::string& prefix, const ParallelEmbedding& emb);
  size_t size() const { return entries_.size(); }
  const std::vector<ParamEntry>& entries() const { return entries_; }
  Context& context() const { return ctx_; }

  // See oslo_param_set_clip_grad_norm.
  double clip_grad_norm(double max_norm, double norm_type);
  void save(const std::string& dir);
  void load(const std::string& dir);

 private:
  void add_entry(ParamEntry e);
  Context& ctx_;
  std::vector<ParamEntry> entries_;
  std::map<std::string, size_t> index_;
};

}  // namespace oslo
