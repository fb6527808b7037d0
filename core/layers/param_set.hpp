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
