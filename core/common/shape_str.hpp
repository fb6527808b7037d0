// The one text form of a tensor shape in messages: "[2, 3]" ("[]" for a
// scalar).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace oslo {

// "[d0, d1, ...]". Never throws except std::bad_alloc.
std::string shape_str(const std::vector<int64_t>& shape);
// The same for extents held unsigned (safetensors headers).
std::string shape_str(const std::vector<uint64_t>& shape);

}  // namespace oslo
