#include "core/tensor/dlpack.hpp"

#include <dlpack/dlpack.h>

#include "core/common/error.hpp"

namespace oslo {
namespace {

static_assert(DLPACK_MAJOR_VERSION == 1, "oslo reads and writes DLPack 1.x");

// One allocation per export: the share of the storage, the shape and
// strides arrays the DLTensor points to, and the managed struct handed out.
template <typename Managed>
struct ExportCtx {
  std::shared_ptr<Storage> storage;
  int64_t shape[OSLO_MAX_DIMS];
  int64_t strides[OSLO_MAX_DIMS];
  Managed managed;
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

template <typename Managed>
void delete_export(Managed* m) {
  delete static_cast<ExportCtx<Managed>*>(m->manager_ctx);
}

template <typename Managed>
ExportCtx<Managed>* make_export(const Tensor& t) {
  OSLO_CHECK(t.defined(), OSLO_ERR_INVALID_ARGUMENT, "dlpack: tensor is empty");
  auto* c = new (std::nothrow) ExportCtx<Managed>();
  OSLO_CHECK(c, OSLO_ERR_OUT_OF_MEMORY, "dlpack: out of memory");
  c->storage = t.storage();
  // Compact row-major strides, in elements; an extent of 0 counts as 1 (as
  // torch does), so every stride is positive.
  int64_t stride = 1;
  for (int i = t.ndim() - 1; i >= 0; --i) {
    c->shape[i] = t.shape()[i];
    c->strides[i] = stride;
    stride *= t.shape()[i] > 0 ? t.shape()[i] : 1;
  }
  DLTensor& d = c->managed.dl_tensor;
  d.data = t.data();
  d.device = {static_cast<DLDeviceType>(t.backend().dlpack_device_type()), t.backend().device_id()};
  d.ndim = t.ndim();
  d.dtype = to_dl(t.dtype());
  d.shape = c->shape;
  // Always set, also for ndim 0 (a pointer to no entries): DLPack 1.x allows
  // NULL for compact tensors, but not every consumer handles NULL.
  d.strides = c->strides;
  d.byte_offset = 0;
  c->managed.manager_ctx = c;
  c->managed.deleter = delete_export<Managed>;
  return c;
}

template <typename Managed>
void release_import(void* m) {
  auto* managed = static_cast<Managed*>(m);
  if (managed->deleter) managed->deleter(managed);
}

// The layout, device and type checks shared by both imports; nothing is
// taken over here.
Tensor wrap_dl(const std::shared_ptr<Backend>& backend, const DLTensor& d) {
  OSLO_CHECK(d.ndim >= 0 && d.ndim <= OSLO_MAX_DIMS, OSLO_ERR_INVALID_ARGUMENT, "dlpack: ndim ",
             d.ndim, " is outside [0, ", OSLO_MAX_DIMS, "]");
  OSLO_CHECK(d.ndim == 0 || d.shape, OSLO_ERR_INVALID_ARGUMENT, "dlpack: shape is NULL");
  bool host_ok = d.device.device_type == kDLCPU || d.device.device_type == kDLCUDAHost;
  OSLO_CHECK(static_cast<int>(d.device.device_type) == backend->dlpack_device_type() ||
                 (backend->dlpack_device_type() == kDLCPU && host_ok),
             OSLO_ERR_NOT_SUPPORTED, "dlpack: tensor is on device type ",
             static_cast<int>(d.device.device_type), " but the context's backend '",
             backend->name(), "' uses device type ", backend->dlpack_device_type());
  // A device tensor must be on the context's device, not only of its type.
  OSLO_CHECK(backend->dlpack_device_type() == kDLCPU || d.device.device_id == backend->device_id(),
             OSLO_ERR_NOT_SUPPORTED, "dlpack: tensor is on device ",
             static_cast<int>(d.device.device_type), ":", d.device.device_id,
             " but the context's backend '", backend->name(), "' uses device ",
             backend->dlpack_device_type(), ":", backend->device_id(),
             " (copy it to that device first, or create the context on device ", d.device.device_id,
             ")");
  oslo_dtype dt = from_dl(d.dtype);
  std::vector<int64_t> shape(d.shape, d.shape + d.ndim);
  Tensor::check_shape(shape);
  // Strides must describe the compact row-major layout; an extent of 1 may
  // have any stride, and a tensor without elements any strides at all.
  if (d.strides && Tensor::numel_of(shape) > 0) {
    int64_t expect = 1;
    for (int i = d.ndim - 1; i >= 0; --i) {
      OSLO_CHECK(shape[i] == 1 || d.strides[i] == expect, OSLO_ERR_NOT_SUPPORTED,
                 "dlpack: tensor is not contiguous row-major (stride ", d.strides[i],
                 " of dimension ", i, ", expected ", expect, "); make it contiguous first");
      expect *= shape[i];
    }
  }
  void* data = static_cast<char*>(d.data) + d.byte_offset;
  return Tensor::wrap(backend, data, dt, shape);
}

}  // namespace

DLManagedTensor* to_dlpack(const Tensor& t) {
  return &make_export<DLManagedTensor>(t)->managed;
}

DLManagedTensorVersioned* to_dlpack_versioned(const Tensor& t) {
  auto* c = make_export<DLManagedTensorVersioned>(t);
  c->managed.version.major = DLPACK_MAJOR_VERSION;
  c->managed.version.minor = DLPACK_MINOR_VERSION;
  c->managed.flags = 0;  // writable, shared (not a copy)
  return &c->managed;
}

Tensor from_dlpack(std::shared_ptr<Backend> backend, DLManagedTensor* m) {
  OSLO_CHECK(m, OSLO_ERR_INVALID_ARGUMENT, "dlpack: managed tensor is NULL");
  Tensor t = wrap_dl(backend, m->dl_tensor);
  t.storage()->release = release_import<DLManagedTensor>;
  t.storage()->release_ctx = m;
  return t;
}

Tensor from_dlpack_versioned(std::shared_ptr<Backend> backend, DLManagedTensorVersioned* m) {
  OSLO_CHECK(m, OSLO_ERR_INVALID_ARGUMENT, "dlpack: managed tensor is NULL");
  // Only version, manager_ctx and deleter are readable across major versions.
  OSLO_CHECK(m->version.major == DLPACK_MAJOR_VERSION, OSLO_ERR_NOT_SUPPORTED,
             "dlpack: tensor has DLPack version ", m->version.major, ".", m->version.minor,
             " but oslo reads major version ", DLPACK_MAJOR_VERSION,
             " (the caller keeps the tensor and must call its deleter)");
  OSLO_CHECK(!(m->flags & DLPACK_FLAG_BITMASK_READ_ONLY), OSLO_ERR_NOT_SUPPORTED,
             "dlpack: tensor is read-only (DLPACK_FLAG_BITMASK_READ_ONLY) but oslo tensors are "
             "writable and any call may write them; import a writable copy");
  Tensor t = wrap_dl(backend, m->dl_tensor);
  t.storage()->release = release_import<DLManagedTensorVersioned>;
  t.storage()->release_ctx = m;
  return t;
}

}  // namespace oslo
