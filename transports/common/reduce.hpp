// The reduction kernel every host transport uses (shm and gloo), so that
// results are the same bits whichever transport a group runs on.
#pragma once

#include <cstddef>

#include "oslo.h"

namespace oslo {
namespace transport {

// dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[nsrc-1][i], combined strictly
// in that order (so every rank that calls it with the same inputs gets the same
// bits), then divided by avg_div for OSLO_REDUCE_AVG. f16 and bf16 are combined in f32
// and rounded once. Integer SUM wraps around; integer AVG is the exact sum
// divided by avg_div, truncated toward zero. dst may be the same pointer as any
// source (in-place) but must not overlap one partially. nsrc >= 1.
void reduce(void* dst, const void* const* srcs, int nsrc, size_t count, oslo_dtype dt,
            oslo_reduce_op op, int avg_div);

}  // namespace transport
}  // namespace oslo
