// All rank arithmetic of a job in one place (as TensorRT-LLM's WorldConfig).
// Rank order is Megatron's: tensor parallel fastest, then data, then pipeline:
//   global = pp_rank * (dp * tp) + dp_rank * tp + tp_rank
// Example, world 8 = tp 2 x dp 2 x pp 2:
//   tensor groups   {0,1} {2,3} {4,5} {6,7}
//   data groups     {0,2} {1,3} {4,6} {5,7}
//   pipeline groups {0,4} {1,5} {2,6} {3,7}
#pragma once

#include <string>
#include <vector>

#include "oslo.h"

namespace oslo {

class Topology {
 public:
  // Validates: sizes positive, tp * pp * dp == world, 0 <= rank < world.
  Topology(int rank, int world, int tp, int pp, int dp);

  int world_rank() const { return rank_; }
  int world_size() const { return world_; }
  int rank(oslo_group g) const;
  int size(oslo_group g) const;
  // Global ranks of the members of this rank's group g, in group-rank order.
  std::vector<int> members(oslo_group g) const;
  // Index of this rank's group among the groups of kind g (for naming).
  int group_index(oslo_group g) const;
  // A name unique within the job, e.g. "tensor.3".
  std::string group_name(oslo_group g) const;

  int tp_rank() const { return rank_ % tp_; }
  int dp_rank() const { return (rank_ / tp_) % dp_; }
  int pp_rank() const { return rank_ / (tp_ * dp_); }
  int tp_size() const { return tp_; }
  int dp_size() const { return dp_; }
  int pp_size() const { return pp_; }

  static const char* group_kind_name(oslo_group g);

 private:
  int rank_, world_, tp_, pp_, dp_;
};

}  // namespace oslo
