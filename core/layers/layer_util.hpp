// Argument checks shared by the layers.
#pragma once

#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/context/context.hpp"
#include "core/tensor/tensor.hpp"

namespace oslo {

inline void require_float(const Tensor& t, const char* what) {
  OSLO_CHECK(t.defined(), OSLO_ERR_INVALID_ARGUMENT, what, " is NULL");
  OSLO_CHECK(dtype_is_float(t.dtype()), OSLO_ERR_DTYPE, what, " must be f32, f16 or bf16, got ",
             dtype_name(t.dtype()));
}

// Leading dimensions flattened: [..., last] -> rows.
inline int64_t rows_of(const Tensor& t) {
  int64_t r = 1;
  for (int i = 0; i + 1 < t.ndim(); ++i) r *= t.shape()[i];
  return r;
}

}  // namespace oslo
