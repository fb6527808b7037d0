// Views of tensors for backend ops: the whole tensor, as a matrix, transposed,
// or a slice of columns. A view borrows the tensor's memory; the tensor must
// outlive every op that uses it (ops are ordered on the backend's queue).
#pragma once

#include "core/backend/backend.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/tensor/tensor.hpp"

namespace oslo {

inline View view(const Tensor& t) {
  return make_view(t.data(), t.dtype(), t.shape());
}

// [rows, last] with every leading dimension folded into rows.
inline View matrix(const Tensor& t) {
  int64_t rows = 1;
  for (int i = 0; i + 1 < t.ndim(); ++i) rows *= t.shape()[i];
  return make_view(t.data(), t.dtype(), {rows, t.ndim() ? t.shape().back() : 1});
}

// The same elements with the last two dimensions swapped.
inline View transposed(View v) {
  const int a = v.ndim - 2, b = v.ndim - 1;
  std::swap(v.shape[a], v.shape[b]);
  std::swap(v.strides[a], v.strides[b]);
  return v;
}

// Columns [c0, c0 + n) of the last dimension.
inline View columns(View v, int64_t c0, int64_t n) {
  const int d = v.ndim - 1;
  v.data =
      static_cast<char*>(v.data) + c0 * v.strides[d] * static_cast<int64_t>(dtype_size(v.dtype));
  v.shape[d] = n;
  return v;
}

// A 1-D view as a [n, 1] column (broadcasts along the last dimension).
inline View as_column(View v) {
  View r = v;
  r.ndim = 2;
  r.shape[0] = v.numel();
  r.strides[0] = v.ndim ? v.strides[v.ndim - 1] : 1;
  r.shape[1] = 1;
  r.strides[1] = 0;
  return r;
}

// Scratch tensor on the context's backend (uninitialised).
inline Tensor scratch(const std::shared_ptr<Backend>& b, oslo_dtype dt,
                      const std::vector<int64_t>& shape) {
  return Tensor::empty_like_shape(b, dt, shape);
}

}  // namespace oslo
