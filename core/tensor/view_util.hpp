// Small view helpers for code that lays tensors out by hand (the layers'
// functions, the model's block): explicit strides, element offsets, row
// ranges and a 1-D tensor broadcast over rows. A view borrows memory.
#pragma once

#include <initializer_list>

#include "core/tensor/view.hpp"

namespace oslo {
namespace views {

// A view with explicit shape and strides (elements) at data.
inline View strided(void* data, oslo_dtype dt, std::initializer_list<int64_t> shape,
                    std::initializer_list<int64_t> strides) {
  View v;
  v.data = data;
  v.dtype = dt;
  v.ndim = static_cast<int32_t>(shape.size());
  int i = 0;
  for (int64_t s : shape) v.shape[i++] = s;
  i = 0;
  for (int64_t s : strides) v.strides[i++] = s;
  return v;
}

// The address `elements` elements past v's start (for a block-quantized
// dtype, whole blocks: a multiple of the block size, else OSLO_ERR_SHAPE).
inline char* at(const View& v, int64_t elements) {
  return static_cast<char*>(v.data) + dtype_bytes(v.dtype, elements);
}

// Rows [r0, r0 + count) of a view (any dtype: a block-quantized row stride
// is whole blocks).
inline View row_range(View v, int64_t r0, int64_t count) {
  v.data = static_cast<char*>(v.data) + dtype_bytes(v.dtype, r0 * v.strides[0]);
  v.shape[0] = count;
  return v;
}

// A 1-D tensor broadcast over `rows` rows.
inline View rows_bcast(const Tensor& t, int64_t rows) {
  return strided(t.data(), t.dtype(), {rows, t.numel()}, {0, 1});
}

}  // namespace views
}  // namespace oslo
