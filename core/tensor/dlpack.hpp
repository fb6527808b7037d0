// DLPack exchange: zero-copy export and import of tensors (dlpack.h v0.6,
// the DLManagedTensor ABI that numpy, PyTorch and others speak).
#pragma once

#include "core/tensor/tensor.hpp"

struct DLManagedTensor;

namespace oslo {

// The returned tensor shares t's storage; its deleter releases the share.
DLManagedTensor* to_dlpack(const Tensor& t);
// Takes ownership of `m` on success only. Requires a compact row-major
// layout, byte_offset handled, the backend's device and a supported type.
Tensor from_dlpack(std::shared_ptr<Backend> backend, DLManagedTensor* m);

}  // namespace oslo
