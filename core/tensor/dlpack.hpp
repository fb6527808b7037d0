// DLPack exchange: zero-copy export and import of tensors, both the
// unversioned DLManagedTensor (DLPack 0.x and 1.x) and DLPack 1.x's
// DLManagedTensorVersioned (third_party/dlpack/dlpack.h, v1.1).
#pragma once

#include "core/tensor/tensor.hpp"

struct DLManagedTensor;
struct DLManagedTensorVersioned;

namespace oslo {

// The returned tensor shares t's storage; its deleter releases the share.
// Strides are always set (compact row-major). The versioned one carries
// version {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION} and flags 0.
DLManagedTensor* to_dlpack(const Tensor& t);
DLManagedTensorVersioned* to_dlpack_versioned(const Tensor& t);

// Take ownership of `m` on success only. Require a compact row-major layout
// (strides NULL or describing it), the backend's device and a supported
// type; byte_offset is honoured. The versioned one also requires major
// version 1 and refuses read-only tensors (oslo's tensors are writable).
Tensor from_dlpack(std::shared_ptr<Backend> backend, DLManagedTensor* m);
Tensor from_dlpack_versioned(std::shared_ptr<Backend> backend, DLManagedTensorVersioned* m);

}  // namespace oslo
