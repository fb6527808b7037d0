#include "core/checkpoint/placement.hpp"

#include <utility>

namespace oslo {

std::vector<int64_t> Placement::local_shape() const {
  std::vector<int64_t> s = global_shape;
  if (split_dim >= 0 && split_dim < static_cast<int>(s.size())) s[split_dim] = local_extent;
  if (transpose && s.size() == 2) std::swap(s[0], s[1]);
  return s;
}

}  // namespace oslo
