// The layers' math on views, written once: the products of a linear layer
// with their one rule for 16-bit weights, norms and attention, forward and
// backward. ParallelLinear (linear.cpp) and the model's block
// (core/model/block.cpp) are built from these. Nothing here communicates:
// callers add the tensor group's reductions around the products, as
// Megatron-LM's layers do.
//
// The rule for 16-bit weights (torch.autocast's): every product with a
// weight, forward and backward, rounds its other operand to the weight's
// dtype, accumulates in f32 and lands in f32 (activations, dx, dW, db).
//
// All functions: views borrow memory that must outlive the ops queued on
// the backend; errors are the backend's (OSLO_ERR_SHAPE, OSLO_ERR_DTYPE...).
// Not thread-safe for one backend (one thread at a time issues its ops).
#pragma once

#include <memory>

#include "core/backend/backend.hpp"
#include "core/tensor/tensor.hpp"

namespace oslo {

// `t` in dtype dt: t itself when it has it, else a converted copy held in
// *keep (a 2-D [rows, cols] view).
View in_dtype(Backend& be, const std::shared_ptr<Backend>& bp, const View& t, oslo_dtype dt,
              Tensor* keep);

// y = x w^T + b, w [out, in] as stored; with act, y = act(that) (* gate):
// the backend's matmul_act epilogue. With `packed` (the backend's packed
// copy of w^T) the product may read it. f32 activations go to a 16-bit
// product as they are when the backend converts them itself
// (OSLO_BK_OP_MATMUL_MIXED), else converted here. b may be nullptr.
void linear_forward(Backend& be, const std::shared_ptr<Backend>& bp, const View& y, const View& x,
                    const View& w, const View* b, const oslo_bk_unary* act = nullptr,
                    const View* gate = nullptr, const PackedWeight* packed = nullptr);

// The backward of y = x w^T + b under the rule above: dw += dy^T x and
// db += dy's column sums (f32, accumulated; either may be nullptr), and
// dx = dy w (dx_accumulate: dx += dy w; nullptr: none).
void linear_backward(Backend& be, const std::shared_ptr<Backend>& bp, const View& dy, const View& x,
                     const View& w, const View* dw, const View* db, const View* dx,
                     bool dx_accumulate);

// out = norm(in) * w (+ b): LayerNorm, or RMSNorm when rms (b ignored).
// b may be nullptr (a LayerNorm without bias).
void norm_forward(Backend& be, const View& out, const View& in, const View& w, const View* b,
                  float eps, bool rms);

// The backward of norm_forward at input x: dx = (accumulate: +=) the input
// gradient of dy; dw and db (nullptr: none; ignored when rms) accumulated.
void norm_backward(Backend& be, const std::shared_ptr<Backend>& bp, const View& dx, const View& x,
                   const View& w, const View& dw, const View* db, const View& dy, float eps,
                   bool rms, bool accumulate);

// Scaled dot-product attention's backward: the backend's attention_backward
// (its fused entry, or the composition from products and the softmax's
// backward in core/backend/fused_attention.cpp; the probabilities recomputed
// from q and k). q and dout are [B * S, nh * D] column views (any row
// stride), k and v [B * S, nkv * D], nh a multiple of nkv (grouped queries);
// mask is the additive key mask [B, S] f32. Writes dq, dk, dv in their
// forward's layouts (overwritten).
struct AttentionShape {
  int64_t B = 0, S = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 1.f;
  bool causal = true;
};
void attention_backward(Backend& be, const AttentionShape& a, const View& q, const View& k,
                        const View& v, const View& dout, const View& mask, const View& dq,
                        const View& dk, const View& dv);

}  // namespace oslo
