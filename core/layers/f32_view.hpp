// The CPU computes in f32: these helpers give a layer an f32 pointer to a
// tensor of any float dtype, converting through scratch memory only when the
// tensor is not already f32.
#pragma once

#include <memory>

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

// Read-only f32 view of a float tensor.
class F32In {
 public:
  F32In(Context& ctx, const Tensor& t) {
    if (t.dtype() == OSLO_DTYPE_F32) {
      p_ = static_cast<const float*>(t.data());
    } else {
      buf_ = std::make_unique<DeviceBuffer>(ctx.backend(), static_cast<size_t>(t.numel()) * 4);
      ctx.kernels().convert(OSLO_DTYPE_F32, buf_->get(), t.dtype(), t.data(), t.numel());
      p_ = buf_->f32();
    }
  }
  const float* get() const { return p_; }

 private:
  std::unique_ptr<DeviceBuffer> buf_;
  const float* p_ = nullptr;
};

// Write-only f32 view of a float tensor; commit() converts back if needed.
class F32Out {
 public:
  F32Out(Context& ctx, const Tensor& t) : ctx_(ctx), t_(t) {
    if (t.dtype() == OSLO_DTYPE_F32) {
      p_ = static_cast<float*>(t.data());
    } else {
      buf_ = std::make_unique<DeviceBuffer>(ctx.backend(), static_cast<size_t>(t.numel()) * 4);
      p_ = buf_->f32();
    }
  }
  float* get() const { return p_; }
  void commit() {
    if (buf_) ctx_.kernels().convert(t_.dtype(), t_.data(), OSLO_DTYPE_F32, p_, t_.numel());
  }

 private:
  Context& ctx_;
  const Tensor& t_;
  std::unique_ptr<DeviceBuffer> buf_;
  float* p_ = nullptr;
};

// Leading dimensions flattened: [..., last] -> rows.
inline int64_t rows_of(const Tensor& t) {
  int64_t r = 1;
  for (int i = 0; i + 1 < t.ndim(); ++i) r *= t.shape()[i];
  return r;
}

}  // namespace oslo
