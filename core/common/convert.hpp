// The one host dtype converter of oslo (checkpoint loads, weight sources,
// merge, reshard).
#pragma once

#include <cstddef>
#include <string>

#include "oslo.h"

namespace oslo {

// Whether convert_host converts between a and b: the same dtype, two
// floating-point dtypes, or two integer dtypes.
bool dtypes_convertible(oslo_dtype a, oslo_dtype b);

// The one host dtype converter (checkpoint loads, weight sources, merge,
// reshard): n elements of `from` at src into `to` at dst (float <-> float
// with round-to-nearest-even, i32 <-> i64; the same dtype is a memcpy).
// OSLO_ERR_DTYPE naming `tensor` for a float <-> int pair or an i64 value
// out of i32 range (dst may then be partly written).
void convert_host(oslo_dtype from, const void* src, oslo_dtype to, void* dst, size_t n,
                  const std::string& tensor);

}  // namespace oslo
