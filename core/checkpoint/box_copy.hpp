// The one copy loop of the checkpoint readers: a box of global coordinates
// from one stored piece into a destination buffer, as runs contiguous in
// both, with runs adjacent in the piece read by one call. Used by
// parameter-set load (checkpoint.cpp) and WeightSource::read_box
// (weight_source.cpp). Internal to the checkpoint tier.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace oslo {

// Where the bytes of one stored piece come from, and how its elements
// become the destination's.
struct BoxSource {
  // Reads `bytes` bytes at byte `offset` of the piece's data into dst.
  std::function<void(uint64_t offset, uint64_t bytes, void* dst)> read;
  size_t src_size = 1;  // bytes per stored element
  size_t dst_size = 1;  // bytes per destination element
  // Converts n elements from src (stored) to dst; empty: the dtypes are
  // equal (src_size == dst_size) and bytes are copied as they are, large
  // runs read straight into place.
  std::function<void(const void* src, void* dst, size_t n)> convert;
};

// Copies the box [lo, hi) of global coordinates from a stored piece whose
// row-major data starts at global coordinates `sorg` with shape `sshape`
// into the row-major buffer `dst` that starts at `dorg` with shape `dshape`
// (the box must lie inside both; an empty box copies nothing). Runs are the
// innermost dimensions where the box spans both whole; runs adjacent in the
// piece are read together through `bounce` (grown to at most 8 MiB, reused
// across calls), so only the box's bytes are ever read. Errors: what `read`
// or `convert` throw.
void copy_box(const BoxSource& src, const std::vector<int64_t>& lo, const std::vector<int64_t>& hi,
              const std::vector<int64_t>& sorg, const std::vector<int64_t>& sshape,
              const std::vector<int64_t>& dorg, const std::vector<int64_t>& dshape, void* dst,
              std::vector<char>* bounce);

}  // namespace oslo
