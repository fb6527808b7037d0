// DLPack exchange: zero-copy export and import of tensors, both the
// unversioned DLManagedTensor (DLPack 0.x and 1.x) and DLPack 1.x's
// DLManagedTensorVersioned (third_party/dlpack/dlpack.h, v1.1).
#pragma once

#include "core/tensor/tensor.hpp"

struct DLManagedTensor;
struct DLManagedTensorVersioned;

namespace oslo {

// The returned tensor shares t's storage; its deleter releases the share.
// The work queued on t's backend is ordered before DLPack's default consumer
// stream (dlpack_wait(t, 0)). Strides are always set (compact row-major). The versioned one carries
// version {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION} and flags 0.
DLManagedTensor* to_dlpack(const Tensor& t);
DLManagedTensorVersioned* to_dlpack_versioned(const Tensor& t);

// Take ownership of `m` on success only. Require a compact row-major layout
// (strides NULL or describing it), the backend's device and a supported
// type; byte_offset is honoured. The versioned one also requires major
// version 1 and refuses read-only tensors (oslo's tensors are writable).
Tensor from_dlpack(std::shared_ptr<Backend> backend, DLManagedTensor* m);

// The DLPack consumer on `stream` (-1: none to order; 0: none given, on CUDA
// the legacy default stream 1; else the device type's stream value) waits
// for the work queued on t's backend (Backend::make_stream_wait). Both
// exports call it with 0: the C ABI's exports take no stream, so they order
// DLPack's default consumer stream.
void dlpack_wait(const Tensor& t, int64_t stream);
Tensor from_dlpack_versioned(std::shared_ptr<Backend> backend, DLManagedTensorVersioned* m);

}  // namespace oslo
