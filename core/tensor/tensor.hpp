// A dense, contiguous, row-major tensor in a backend's memory. Storage is
// shared (reference counted) so a DLPack export can outlive the tensor and
// the context; it also keeps the backend alive for the deallocation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/backend/backend.hpp"
#include "oslo.h"

namespace oslo {

struct Storage {
  std::shared_ptr<Backend> backend;
  void* data = nullptr;
  size_t bytes = 0;
  bool owned = false;  // allocated by the backend
  // Memory lent by someone else (a DLPack import): release(release_ctx) is
  // called once, when the storage dies.
  void (*release)(void*) = nullptr;
  void* release_ctx = nullptr;
  ~Storage();
};

class Tensor {
 public:
  Tensor() = default;
  // Allocates a zero-filled tensor (any dtype_known dtype; wrap takes the
  // element dtypes only).
  static Tensor empty_like_shape(std::shared_ptr<Backend> backend, oslo_dtype dtype,
                                 const std::vector<int64_t>& shape);
  static Tensor zeros(std::shared_ptr<Backend> backend, oslo_dtype dtype,
                      const std::vector<int64_t>& shape);
  // Wraps memory the caller owns.
  static Tensor wrap(std::shared_ptr<Backend> backend, void* data, oslo_dtype dtype,
                     const std::vector<int64_t>& shape);

  bool defined() const { return storage_ != nullptr; }
  oslo_dtype dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(i < 0 ? i + ndim() : i); }
  int64_t numel() const;
  size_t nbytes() const;
  void* data() const { return storage_ ? storage_->data : nullptr; }
  float* f32() const;  // throws OSLO_ERR_DTYPE unless f32
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  Backend& backend() const { return *storage_->backend; }
  void zero();
  // "[2, 3] f32"
  std::string describe() const;

  // Validates a shape: 0 <= ndim <= OSLO_MAX_DIMS, extents >= 0, no overflow.
  static void check_shape(const std::vector<int64_t>& shape);
  static int64_t numel_of(const std::vector<int64_t>& shape);
  // Bytes of a tensor of this dtype and shape; for a block-quantized dtype
  // its rows of whole blocks (OSLO_ERR_SHAPE when the last dimension is not
  // whole blocks).
  static size_t bytes_of(oslo_dtype dtype, const std::vector<int64_t>& shape);
  static std::string shape_str(const std::vector<int64_t>& shape);

 private:
  std::shared_ptr<Storage> storage_;
  oslo_dtype dtype_ = OSLO_DTYPE_F32;
  std::vector<int64_t> shape_;
  friend Tensor tensor_from_storage(std::shared_ptr<Storage>, oslo_dtype, std::vector<int64_t>);
};

Tensor tensor_from_storage(std::shared_ptr<Storage> s, oslo_dtype dtype,
                           std::vector<int64_t> shape);

// ZeRO-3: frees a storage's memory now (every tensor sharing the storage
// then has no data), and gives it new, uninitialised memory of the same
// size from its backend. Not thread-safe with users of the storage.
void storage_discard(Storage& s) noexcept;
void storage_reallocate(Storage& s);

}  // namespace oslo
