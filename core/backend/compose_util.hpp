// What the backend's compositions (core/backend/fused.cpp,
// fused_attention.cpp) share: stream-ordered scratch, strided views,
// shapes in messages. Internal to core/backend; core/tensor/view.hpp has
// the tensor-side helpers (this tier cannot include it).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/backend/backend.hpp"
#include "core/common/dtype.hpp"
#include "core/common/shape_str.hpp"

namespace oslo {
namespace compose {

// Stream-ordered scratch memory of one composition (f32 unless told).
class Scratch {
 public:
  Scratch(Backend& be, oslo_dtype dt, const std::vector<int64_t>& shape) : be_(be) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    bytes_ = static_cast<size_t>(n) * dtype_size(dt);
    p_ = be_.allocate_async(bytes_);
    v_ = make_view(p_, dt, shape);
  }
  Scratch(Backend& be, const std::vector<int64_t>& shape) : Scratch(be, OSLO_DTYPE_F32, shape) {}
  ~Scratch() { be_.deallocate_async(p_, bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  const View& view() const { return v_; }
  void* data() const { return p_; }

 private:
  Backend& be_;
  void* p_ = nullptr;
  size_t bytes_ = 0;
  View v_;
};

inline View strided(void* data, oslo_dtype dt, const std::vector<int64_t>& shape,
                    const std::vector<int64_t>& strides) {
  View v = make_view(data, dt, shape);
  for (size_t i = 0; i < strides.size(); ++i) v.strides[i] = strides[i];
  return v;
}

// The same elements with the last two dimensions swapped.
inline View swap_last(View v) {
  const int a = v.ndim - 2, b = v.ndim - 1;
  std::swap(v.shape[a], v.shape[b]);
  std::swap(v.strides[a], v.strides[b]);
  return v;
}

inline std::string dims(const View& v) {
  return shape_str(std::vector<int64_t>(v.shape, v.shape + v.ndim));
}

inline bool is_float(oslo_dtype dt) {
  return dt == OSLO_DTYPE_F32 || dt == OSLO_DTYPE_F16 || dt == OSLO_DTYPE_BF16;
}

// The shape and dtype checks of attention() (fused.cpp), shared by its fused
// and composed paths and by attention_kv8's, so all refuse the same input
// with the same message. Throws OSLO_ERR_SHAPE or OSLO_ERR_DTYPE.
void check_attention(const View& out, const View& q, const View& k, const View& v,
                     const View* mask);

}  // namespace compose
}  // namespace oslo
