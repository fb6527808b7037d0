// C shims: tensors and DLPack.
#include <cstring>

#include "core/capi/handles.hpp"
#include "core/common/dtype.hpp"
#include "core/tensor/dlpack.hpp"

using oslo::capi::guard;
using oslo::capi::need;
using oslo::capi::tensor_of;

namespace {

std::vector<int64_t> shape_arg(int ndim, const int64_t* shape, const char* fn) {
  if (ndim < 0 || ndim > OSLO_MAX_DIMS)
    oslo::fail(OSLO_ERR_INVALID_ARGUMENT, fn, ": ndim ", ndim, " is outside [0, ", OSLO_MAX_DIMS,
               "]");
  if (ndim > 0) need(shape, fn, "shape");
  return std::vector<int64_t>(shape, shape + ndim);
}

void check_dtype(oslo_dtype dt, const char* fn) {
  if (!oslo::dtype_valid(dt))
    oslo::fail(OSLO_ERR_DTYPE, fn, ": unknown dtype ", static_cast<int>(dt));
}

}  // namespace

extern "C" {

oslo_status oslo_tensor_create(oslo_context* ctx, oslo_dtype dtype, int ndim, const int64_t* shape,
                               oslo_tensor** out) {
  if (out) *out = nullptr;
  return guard([&] {
    need(out, "oslo_tensor_create", "out");
    need(ctx, "oslo_tensor_create", "ctx");
    check_dtype(dtype, "oslo_tensor_create");
    auto s = shape_arg(ndim, shape, "oslo_tensor_create");
    auto h = std::make_unique<oslo_tensor>();
    h->t = oslo::Tensor::zeros(ctx->impl->backend_ptr(), dtype, s);
    h->ctx = ctx;
    *out = h.release();
  });
}

oslo_status oslo_tensor_wrap(oslo_context* ctx, void* data, oslo_dtype dtype, int ndim,
                             const int64_t* shape, oslo_tensor** out) {
  if (out) *out = nullptr;
  return guard([&] {
    need(out, "oslo_tensor_wrap", "out");
    need(ctx, "oslo_tensor_wrap", "ctx");
    check_dtype(dtype, "oslo_tensor_wrap");
    auto s = shape_arg(ndim, shape, "oslo_tensor_wrap");
    auto h = std::make_unique<oslo_tensor>();
    h->t = oslo::Tensor::wrap(ctx->impl->backend_ptr(), data, dtype, s);
    h->ctx = ctx;
    *out = h.release();
  });
}

void oslo_tensor_destroy(oslo_tensor* tensor) {
  delete tensor;
}

oslo_status oslo_tensor_copy_from_host(oslo_tensor* tensor, const void* src, size_t bytes) {
  return guard([&] {
    const auto& t = tensor_of(tensor, "oslo_tensor_copy_from_host", "tensor");
    if (bytes != t.nbytes())
      oslo::fail(OSLO_ERR_SHAPE, "oslo_tensor_copy_from_host: ", bytes,
                 " bytes given but the tensor ", t.describe(), " holds ", t.nbytes());
    if (bytes) need(src, "oslo_tensor_copy_from_host", "src");
    t.backend().copy(t.data(), src, bytes, oslo::CopyKind::HostToDevice);
  });
}

oslo_status oslo_tensor_copy_to_host(const oslo_tensor* tensor, void* dst, size_t bytes) {
  return guard([&] {
    const auto& t = tensor_of(tensor, "oslo_tensor_copy_to_host", "tensor");
    if (bytes != t.nbytes())
      oslo::fail(OSLO_ERR_SHAPE, "oslo_tensor_copy_to_host: ", bytes,
                 " bytes given but the tensor ", t.describe(), " holds ", t.nbytes());
    if (bytes) need(dst, "oslo_tensor_copy_to_host", "dst");
    t.backend().copy(dst, t.data(), bytes, oslo::CopyKind::DeviceToHost);
  });
}

oslo_status oslo_tensor_ndim(const oslo_tensor* tensor, int* ndim) {
  return guard([&] {
    const auto& t = tensor_of(tensor, "oslo_tensor_ndim", "tensor");
    need(ndim, "oslo_tensor_ndim", "ndim");
    *ndim = t.ndim();
  });
}

oslo_status oslo_tensor_shape(const oslo_tensor* tensor, int64_t* shape) {
  return guard([&] {
    const auto& t = tensor_of(tensor, "oslo_tensor_shape", "tensor");
    need(shape, "oslo_tensor_shape", "shape");
    for (int i = 0; i < t.ndim(); ++i) shape[i] = t.shape()[i];
  });
}

oslo_status oslo_tensor_dtype(const oslo_tensor* tensor, oslo_dtype* dtype) {
  return guard([&] {
    const auto& t = tensor_of(tensor, "oslo_tensor_dtype", "tensor");
    need(dtype, "oslo_tensor_dtype", "dtype");
    *dtype = t.dtype();
  });
}

oslo_status oslo_tensor_numel(const oslo_tensor* tensor, int64_t* numel) {
  return guard([&] {
    const auto& t = tensor_of(tensor, "oslo_tensor_numel", "tensor");
    need(numel, "oslo_tensor_numel", "numel");
    *numel = t.numel();
  });
}

oslo_status oslo_tensor_data(const oslo_tensor* tensor, void** data) {
  return guard([&] {
    const auto& t = tensor_of(tensor, "oslo_tensor_data", "tensor");
    need(data, "oslo_tensor_data", "data");
    *data = t.data();
  });
}

oslo_status oslo_tensor_to_dlpack(oslo_tensor* tensor, struct DLManagedTensor** out) {
  if (out) *out = nullptr;
  return guard([&] {
    need(out, "oslo_tensor_to_dlpack", "out");
    *out = oslo::to_dlpack(tensor_of(tensor, "oslo_tensor_to_dlpack", "tensor"));
  });
}

oslo_status oslo_tensor_to_dlpack_versioned(oslo_tensor* tensor,
                                            struct DLManagedTensorVersioned** out) {
  if (out) *out = nullptr;
  return guard([&] {
    need(out, "oslo_tensor_to_dlpack_versioned", "out");
    *out =
        oslo::to_dlpack_versioned(tensor_of(tensor, "oslo_tensor_to_dlpack_versioned", "tensor"));
  });
}

oslo_status oslo_tensor_from_dlpack(oslo_context* ctx, struct DLManagedTensor* managed,
                                    oslo_tensor** out) {
  if (out) *out = nullptr;
  return guard([&] {
    need(out, "oslo_tensor_from_dlpack", "out");
    need(ctx, "oslo_tensor_from_dlpack", "ctx");
    need(managed, "oslo_tensor_from_dlpack", "managed");
    auto h = std::make_unique<oslo_tensor>();
    h->ctx = ctx;
    // Ownership of `managed` moves only once nothing below can fail.
    h->t = oslo::from_dlpack(ctx->impl->backend_ptr(), managed);
    *out = h.release();
  });
}

oslo_status oslo_tensor_from_dlpack_versioned(oslo_context* ctx,
                                              struct DLManagedTensorVersioned* managed,
                                              oslo_tensor** out) {
  if (out) *out = nullptr;
  return guard([&] {
    need(out, "oslo_tensor_from_dlpack_versioned", "out");
    need(ctx, "oslo_tensor_from_dlpack_versioned", "ctx");
    need(managed, "oslo_tensor_from_dlpack_versioned", "managed");
    auto h = std::make_unique<oslo_tensor>();
    h->ctx = ctx;
    // Ownership of `managed` moves only once nothing below can fail.
    h->t = oslo::from_dlpack_versioned(ctx->impl->backend_ptr(), managed);
    *out = h.release();
  });
}

}  // extern "C"
