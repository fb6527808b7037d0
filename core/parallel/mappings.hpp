// The communication ops layers are built from (Megatron's mappings). Layers
// never call a collective directly; each op returns early for a group of one,
// so a single rank runs exactly the reference computation.
//
// All buffers are f32 device memory of `rows` x `cols` row-major matrices.
#pragma once

#include <cstdint>

#include "core/context/context.hpp"

namespace oslo {

// In-place sum over the group (forward of a row-parallel layer, backward of
// a column-parallel one).
void reduce_sum(Context& ctx, oslo_group g, float* x, int64_t n);

// out [rows, cols * size] = concatenation along the last dimension of every
// rank's local [rows, cols].
void gather_last_dim(Context& ctx, oslo_group g, const float* local, float* out, int64_t rows,
                     int64_t cols);

// local [rows, cols / size] = this rank's slice of full [rows, cols] along the
// last dimension (no communication).
void split_last_dim(Context& ctx, oslo_group g, const float* full, float* local, int64_t rows,
                    int64_t cols);

}  // namespace oslo
