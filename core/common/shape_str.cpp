#include "core/common/shape_str.hpp"

namespace oslo {
namespace {

template <typename T>
std::string join_extents(const std::vector<T>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace

std::string shape_str(const std::vector<int64_t>& shape) {
  return join_extents(shape);
}

std::string shape_str(const std::vector<uint64_t>& shape) {
  return join_extents(shape);
}

}  // namespace oslo
