#include "core/tensor/dlpack.hpp"

#include <dlpack/dlpack.h>

#include "core/common/error.hpp"

namespace oslo {
namespace {

struct ExportCtx {
  std::shared_ptr<Storage> storage;
  int64_t shape[OSLO_MAX_DIMS];
  DLManagedTensor managed;
};

DLDataType to_dl(oslo_dtype dt) {
  switch (dt) {
    case OSLO_DTYPE_F32: return {kDLFloat, 32, 1};
    case OSLO_DTYPE_F16: return {kDLFloat, 16, 1};
    case OSLO_DTYPE_BF16: return {kDLBfloat, 16, 1};
    case OSLO_DTYPE_I32: return {kDLInt, 32, 1};
    case OSLO_DTYPE_I64: return {kDLInt, 64, 1};
    default: break;
  }
  fail(OSLO_ERR_DTYPE, "dlpack: unknown dtype");
}

oslo_dtype from_dl(DLDataType t) {
  OSLO_CHECK(t.lanes == 1, OSLO_ERR_DTYPE, "dlpack: vector types (lanes=", int(t.lanes),
             ") are not supported");
  if (t.code == kDLFloat && t.bits == 32) return OSLO_DTYPE_F32;
  if (t.code == kDLFloat && t.bits == 16) return OSLO_DTYPE_F16;
  if (t.code == kDLBfloat && t.bits == 16) return OSLO_DTYPE_BF16;
  if (t.code == kDLInt && t.bits == 32) return OSLO_DTYPE_I32;
  if (t.code == kDLInt && t.bits == 64) return OSLO_DTYPE_I64;
  fail(OSLO_ERR_DTYPE, "dlpack: type code ", int(t.code), " with ", int(t.bits),
       " bits is not supported (float32, float16, bfloat16, int32, int64 are)");
}

void delete_export(DLManagedTensor* m) {
  delete static_cast<ExportCtx*>(m->manager_ctx);
}

}  // namespace

DLManagedTensor* to_dlpack(const Tensor& t) {
  OSLO_CHECK(t.defined(), OSLO_ERR_INVALID_ARGUMENT, "dlpack: tensor is empty");
  auto* c = new (std::nothrow) ExportCtx();
  OSLO_CHECK(c, OSLO_ERR_OUT_OF_MEMORY, "dlpack: out of memory");
  c->storage = t.storage();
  for (int i = 0; i < t.ndim(); ++i) c->shape[i] = t.shape()[i];
  DLTensor& d = c->managed.dl_tensor;
  d.data = t.data();
  d.device = {static_cast<DLDeviceType>(t.backend().dlpack_device_type()), t.backend().device_id()};
  d.ndim = t.ndim();
  d.dtype = to_dl(t.dtype());
  d.shape = c->shape;
  d.strides = nullptr;  // compact row-major
  d.byte_offset = 0;
  c->managed.manager_ctx = c;
  c->managed.deleter = delete_export;
  return &c->managed;
}

Tensor from_dlpack(std::shared_ptr<Backend> backend, DLManagedTensor* m) {
  OSLO_CHECK(m, OSLO_ERR_INVALID_ARGUMENT, "dlpack: managed tensor is NULL");
  const DLTensor& d = m->dl_tensor;
  OSLO_CHECK(d.ndim >= 0 && d.ndim <= OSLO_MAX_DIMS, OSLO_ERR_INVALID_ARGUMENT, "dlpack: ndim ",
             d.ndim, " is outside [0, ", OSLO_MAX_DIMS, "]");
  OSLO_CHECK(d.ndim == 0 || d.shape, OSLO_ERR_INVALID_ARGUMENT, "dlpack: shape is NULL");
  bool host_ok = d.device.device_type == kDLCPU || d.device.device_type == kDLCUDAHost;
  OSLO_CHECK(static_cast<int>(d.device.device_type) == backend->dlpack_device_type() ||
                 (backend->dlpack_device_type() == kDLCPU && host_ok),
             OSLO_ERR_NOT_SUPPORTED, "dlpack: tensor is on device type ",
             static_cast<int>(d.device.device_type), " but the context's backend '",
             backend->name(), "' uses device type ", backend->dlpack_device_type());
  oslo_dtype dt = from_dl(d.dtype);
  std::vector<int64_t> shape(d.shape, d.shape + d.ndim);
  Tensor::check_shape(shape);
  if (d.strides) {  // accept strides only if they describe the compact layout
    int64_t expect = 1;
    for (int i = d.ndim - 1; i >= 0; --i) {
      OSLO_CHECK(shape[i] == 1 || d.strides[i] == expect, OSLO_ERR_NOT_SUPPORTED,
                 "dlpack: tensor is not contiguous row-major (stride ", d.strides[i],
                 " of dimension ", i, ", expected ", expect, "); make it contiguous first");
      expect *= shape[i];
    }
  }
  void* data = static_cast<char*>(d.data) + d.byte_offset;
  Tensor t = Tensor::wrap(std::move(backend), data, dt, shape);
  t.storage()->imported = m;
  return t;
}

}  // namespace oslo
