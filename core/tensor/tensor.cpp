#include "core/tensor/tensor.hpp"

#include <limits>

#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/common/shape_str.hpp"

namespace oslo {

Storage::~Storage() {
  if (owned && backend && data) backend->deallocate(data, bytes);
  if (release) release(release_ctx);
}

void storage_discard(Storage& s) noexcept {
  if (!s.data) return;
  if (s.owned && s.backend) s.backend->deallocate(s.data, s.bytes);
  if (s.release) s.release(s.release_ctx);
  s.release = nullptr;
  s.release_ctx = nullptr;
  s.data = nullptr;
  s.owned = false;
}

void storage_reallocate(Storage& s) {
  OSLO_CHECK(s.backend, OSLO_ERR_INTERNAL, "storage without a backend");
  storage_discard(s);
  s.data = s.backend->allocate(s.bytes);
  s.owned = true;
}

void Tensor::check_shape(const std::vector<int64_t>& shape) {
  OSLO_CHECK(shape.size() <= OSLO_MAX_DIMS, OSLO_ERR_INVALID_ARGUMENT, "tensor: ", shape.size(),
             " dimensions is more than OSLO_MAX_DIMS (", OSLO_MAX_DIMS, ")");
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    OSLO_CHECK(shape[i] >= 0, OSLO_ERR_INVALID_ARGUMENT, "tensor: extent ", shape[i],
               " of dimension ", i, " is negative");
    if (shape[i] != 0)
      OSLO_CHECK(n <= std::numeric_limits<int64_t>::max() / 8 / shape[i], OSLO_ERR_INVALID_ARGUMENT,
                 "tensor: shape ", shape_str(shape), " is too large");
    n *= shape[i];
  }
}

int64_t Tensor::numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

std::string Tensor::shape_str(const std::vector<int64_t>& shape) {
  return oslo::shape_str(shape);
}

int64_t Tensor::numel() const {
  return numel_of(shape_);
}
size_t Tensor::nbytes() const {
  return bytes_of(dtype_, shape_);
}

size_t Tensor::bytes_of(oslo_dtype dtype, const std::vector<int64_t>& shape) {
  if (!dtype_is_block(dtype)) return static_cast<size_t>(numel_of(shape)) * dtype_size(dtype);
  OSLO_CHECK(!shape.empty(), OSLO_ERR_SHAPE, "tensor: a ", dtype_name(dtype),
             " tensor needs at least one dimension (its rows of blocks)");
  const int64_t k = shape.back();
  return static_cast<size_t>(numel_of(shape) / (k ? k : 1)) * (k ? dtype_bytes(dtype, k) : 0);
}

float* Tensor::f32() const {
  OSLO_CHECK(dtype_ == OSLO_DTYPE_F32, OSLO_ERR_DTYPE, "expected an f32 tensor, got ", describe());
  return static_cast<float*>(data());
}

void Tensor::zero() {
  if (!storage_) return;
  if (dtype_is_block(dtype_)) {  // every block is an even number of bytes
    storage_->backend->fill(make_view(data(), OSLO_DTYPE_F16, {static_cast<int64_t>(nbytes() / 2)}),
                            0.0);
    return;
  }
  storage_->backend->fill(make_view(data(), dtype_, shape_), 0.0);
}

std::string Tensor::describe() const {
  return shape_str(shape_) + " " + dtype_name(dtype_);
}

Tensor tensor_from_storage(std::shared_ptr<Storage> s, oslo_dtype dtype,
                           std::vector<int64_t> shape) {
  Tensor t;
  t.storage_ = std::move(s);
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::empty_like_shape(std::shared_ptr<Backend> backend, oslo_dtype dtype,
                                const std::vector<int64_t>& shape) {
  // I8: the int8 KV cache's storage (internal; the C ABI refuses it).
  OSLO_CHECK(dtype_known(dtype) || dtype == OSLO_DTYPE_I8, OSLO_ERR_DTYPE, "tensor: unknown dtype ",
             static_cast<int>(dtype));
  check_shape(shape);
  auto s = std::make_shared<Storage>();
  s->bytes = bytes_of(dtype, shape);
  s->data = backend->allocate(s->bytes);
  s->owned = true;
  s->backend = std::move(backend);
  return tensor_from_storage(std::move(s), dtype, shape);
}

Tensor Tensor::zeros(std::shared_ptr<Backend> backend, oslo_dtype dtype,
                     const std::vector<int64_t>& shape) {
  Tensor t = empty_like_shape(std::move(backend), dtype, shape);
  t.zero();
  return t;
}

Tensor Tensor::wrap(std::shared_ptr<Backend> backend, void* data, oslo_dtype dtype,
                    const std::vector<int64_t>& shape) {
  OSLO_CHECK(dtype_valid(dtype), OSLO_ERR_DTYPE, "tensor: unknown dtype ", static_cast<int>(dtype));
  check_shape(shape);
  OSLO_CHECK(data || numel_of(shape) == 0, OSLO_ERR_INVALID_ARGUMENT,
             "tensor: data is NULL for a tensor of shape ", shape_str(shape));
  auto s = std::make_shared<Storage>();
  s->backend = std::move(backend);
  s->data = data;
  s->bytes = static_cast<size_t>(numel_of(shape)) * dtype_size(dtype);
  return tensor_from_storage(std::move(s), dtype, shape);
}

}  // namespace oslo
