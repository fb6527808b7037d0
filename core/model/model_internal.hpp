// What model.cpp (inference) and model_train.cpp (training) share: a
// block's tensors and the small view helpers. Internal to core/model.
#pragma once

#include <initializer_list>
#include <memory>

#include "core/backend/backend.hpp"
#include "core/model/model.hpp"
#include "core/tensor/view.hpp"

namespace oslo {

struct Model::Layer {
  Tensor ln1_w, ln1_b, ln2_w, ln2_b;
  Tensor qkv_w, qkv_b, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b;
  Tensor up_w, up_b, gate_w, gate_b, gate_up_w, gate_up_b, down_w, down_b;
  Tensor k_cache, v_cache;  // [rows, local kv heads, max_len, head_dim] f32
};

namespace model_detail {

// A view with explicit shape and strides (elements) at data.
inline View strided(void* data, oslo_dtype dt, std::initializer_list<int64_t> shape,
                    std::initializer_list<int64_t> strides) {
  View v;
  v.data = data;
  v.dtype = dt;
  v.ndim = static_cast<int32_t>(shape.size());
  int i = 0;
  for (int64_t s : shape) v.shape[i++] = s;
  i = 0;
  for (int64_t s : strides) v.strides[i++] = s;
  return v;
}

inline char* at(const View& v, int64_t elements) {
  return static_cast<char*>(v.data) + elements * static_cast<int64_t>(dtype_size(v.dtype));
}

// Rows [r0, r0 + count) of a view.
inline View row_range(View v, int64_t r0, int64_t count) {
  v.data =
      static_cast<char*>(v.data) + r0 * v.strides[0] * static_cast<int64_t>(dtype_size(v.dtype));
  v.shape[0] = count;
  return v;
}

// A 1-D tensor broadcast over `rows` rows.
inline View rows_bcast(const Tensor& t, int64_t rows) {
  return strided(t.data(), t.dtype(), {rows, t.numel()}, {0, 1});
}

// y = x @ w^T + b; with act, y = act(that) * gate (matmul_act: the
// activation in the product's epilogue where the backend offers it). With
// `packed` (the backend's packed copy of w^T) the product may read it.
inline void linear(Backend& be, const std::shared_ptr<Backend>& bp, const View& y, const View& x,
                   const Tensor& w, const Tensor* b, const oslo_bk_unary* act = nullptr,
                   const View* gate = nullptr, const PackedWeight* packed = nullptr) {
  View xv = x;
  Tensor conv;
  // f32 activations go to a 16-bit product as they are when the backend
  // converts them itself (OSLO_BK_OP_MATMUL_MIXED), else converted here.
  const bool mixed = x.dtype == OSLO_DTYPE_F32 && be.uses_fused(OSLO_BK_OP_MATMUL_MIXED, w.dtype());
  if (x.dtype != w.dtype() && !mixed) {
    conv = scratch(bp, w.dtype(), {x.shape[0], x.shape[1]});
    be.convert(view(conv), x);
    xv = view(conv);
  }
  View bv;
  if (b && b->defined()) bv = view(*b);
  const View* bias = (b && b->defined()) ? &bv : nullptr;
  if (packed)
    be.matmul_packed(y, xv, transposed(view(w)), *packed, bias, act, gate);
  else if (act)
    be.matmul_act(y, xv, transposed(view(w)), bias, *act, gate);
  else
    be.matmul(y, xv, transposed(view(w)), bias);
}

// The backend's element-wise op for a model's MLP activation.
inline oslo_bk_unary act_op(Activation a) {
  switch (a) {
    case Activation::GELU: return OSLO_BK_GELU;
    case Activation::GELU_TANH: return OSLO_BK_GELU_TANH;
    case Activation::SILU: return OSLO_BK_SILU;
    case Activation::RELU: return OSLO_BK_RELU;
  }
  return OSLO_BK_GELU;
}

}  // namespace model_detail

}  // namespace oslo
