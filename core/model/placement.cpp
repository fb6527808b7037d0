#include "core/model/placement.hpp"

namespace oslo {

std::vector<int64_t> Placement::local_shape() const {
  std::vector<int64_t> s = global_shape;
  if (split_dim >= 0) s[static_cast<size_t>(split_dim)] = local_extent;
  if (transpose && s.size() == 2) std::swap(s[0], s[1]);
  return s;
}

}  // namespace oslo
