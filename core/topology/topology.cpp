#include "core/topology/topology.hpp"

#include "core/common/error.hpp"

namespace oslo {

Topology::Topology(int rank, int world, int tp, int pp, int dp)
    : rank_(rank), world_(world), tp_(tp), pp_(pp), dp_(dp) {
  OSLO_CHECK(world > 0, OSLO_ERR_CONFIG, "world_size must be positive, got ", world);
  OSLO_CHECK(tp > 0 && pp > 0 && dp > 0, OSLO_ERR_CONFIG, "parallel sizes must be positive");
  OSLO_CHECK(static_cast<long long>(tp) * pp * dp == world, OSLO_ERR_CONFIG,
             "tensor_parallel_size (", tp, ") x pipeline_parallel_size (", pp,
             ") x data_parallel_size (", dp, ") must equal the world size (", world, ")");
  OSLO_CHECK(rank >= 0 && rank < world, OSLO_ERR_CONFIG, "rank ", rank,
             " is outside [0, world_size=", world, ")");
}

int Topology::rank(oslo_group g) const {
  switch (g) {
    case OSLO_GROUP_WORLD: return rank_;
    case OSLO_GROUP_TENSOR: return tp_rank();
    case OSLO_GROUP_DATA: return dp_rank();
    case OSLO_GROUP_PIPELINE: return pp_rank();
    default: break;
  }
  fail(OSLO_ERR_INVALID_ARGUMENT, "unknown group ", static_cast<int>(g));
}

int Topology::size(oslo_group g) const {
  switch (g) {
    case OSLO_GROUP_WORLD: return world_;
    case OSLO_GROUP_TENSOR: return tp_;
    case OSLO_GROUP_DATA: return dp_;
    case OSLO_GROUP_PIPELINE: return pp_;
    default: break;
  }
  fail(OSLO_ERR_INVALID_ARGUMENT, "unknown group ", static_cast<int>(g));
}

std::vector<int> Topology::members(oslo_group g) const {
  std::vector<int> m;
  int n = size(g);
  m.reserve(n);
  for (int i = 0; i < n; ++i) {
    switch (g) {
      case OSLO_GROUP_WORLD: m.push_back(i); break;
      case OSLO_GROUP_TENSOR: m.push_back(rank_ - tp_rank() + i); break;
      case OSLO_GROUP_DATA: m.push_back(pp_rank() * dp_ * tp_ + i * tp_ + tp_rank()); break;
      case OSLO_GROUP_PIPELINE: m.push_back(i * dp_ * tp_ + dp_rank() * tp_ + tp_rank()); break;
      default: break;
    }
  }
  return m;
}

int Topology::group_index(oslo_group g) const {
  switch (g) {
    case OSLO_GROUP_WORLD: return 0;
    case OSLO_GROUP_TENSOR: return rank_ / tp_;
    case OSLO_GROUP_DATA: return pp_rank() * tp_ + tp_rank();
    case OSLO_GROUP_PIPELINE: return dp_rank() * tp_ + tp_rank();
    default: break;
  }
  fail(OSLO_ERR_INVALID_ARGUMENT, "unknown group ", static_cast<int>(g));
}

const char* Topology::group_kind_name(oslo_group g) {
  switch (g) {
    case OSLO_GROUP_WORLD: return "world";
    case OSLO_GROUP_TENSOR: return "tensor";
    case OSLO_GROUP_DATA: return "data";
    case OSLO_GROUP_PIPELINE: return "pipeline";
    default: break;
  }
  return "unknown";
}

std::string Topology::group_name(oslo_group g) const {
  return str(group_kind_name(g), ".", group_index(g));
}

}  // namespace oslo
