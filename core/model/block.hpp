// One transformer block, written once for inference and training: its
// weights (this rank's shards), its forward and its backward, built from
// the layers tier (core/layers/functional.hpp: the linear's products with
// their one 16-bit rule, norms, attention's backward) and the tensor
// group's reductions (core/parallel/mappings.hpp), as Megatron-LM splits a
// block: attention by heads (key/value heads replicated when there are
// fewer than ranks), the MLP by columns then rows, one all-reduce after
// each row-parallel product (one for both with a parallel residual).
//
// The families differ only in BlockTraits (core/model/config.hpp): pre- or
// post-norm, LayerNorm or RMSNorm, parallel residual, rotary embedding,
// gated MLP, fused or separate projections. What plugs in from outside:
// where attention reads keys and values (the inference runner's KV cache,
// or this call's keys and values in training), the backend's packed weight
// copies and fused residual + norm (inference), the activations kept for
// the backward and their recomputation (activation checkpointing), and
// where gradients accumulate (the training pass).
//
// Collective over the tensor group; one thread at a time per block.
#pragma once

#include <functional>
#include <memory>

#include "core/context/context.hpp"
#include "core/model/config.hpp"
#include "core/tensor/tensor.hpp"

namespace oslo {

// One block's tensors on this rank (undefined where the family has none).
struct BlockWeights {
  Tensor ln1_w, ln1_b, ln2_w, ln2_b;
  Tensor qkv_w, qkv_b, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b;
  Tensor up_w, up_b, gate_w, gate_b, gate_up_w, gate_up_b, down_w, down_b;
  // Every tensor above, in one order (for gradients, packing, checks).
  std::vector<const Tensor*> all() const;
};

// What one block's backward needs from its forward. Post-norm blocks
// (BERT) keep the residual sums r1 = x + attention and r2 = x_mid + MLP
// that their norms read; x_mid is then LN1(r1).
struct BlockActs {
  Tensor x_in, h1, qkv, q, k, v, att, x_mid, h2, gu, up, gate, m, r1, r2;
  size_t bytes() const;  // of the tensors held
};

// The residual stream between blocks: x and, in inference, a branch's
// output y (+ bias b) not yet added: the next norm adds it in the same pass
// (the backend's residual_norm). In training (fuse off) every addition
// makes a new x, since the old one is kept for the backward.
struct Residual {
  Tensor x;
  bool fuse = true;
  // x += the pending branch (no norm follows).
  void flush(Backend& be);
  bool pending() const { return pending_; }

 private:
  friend class Block;
  Tensor pend_y_;
  View pend_yv_;
  Tensor pend_b_;
  bool pending_ = false;
};

// A block's environment: the model's shapes and traits on this rank, the
// backend, and per call the batch's shape, rotary tables and what plugs in.
struct BlockEnv {
  Context* ctx = nullptr;
  const ModelConfig* cfg = nullptr;
  int tp = 1, rank = 0;
  int64_t nhl = 0, nkvl = 0;  // local attention / key-value heads
  // Per call: the batch [B, S] and, with a rotary embedding, cos and sin
  // [B * S, R / 2] (nsin = -sin: the inverse rotation, backward only).
  int64_t B = 0, S = 0;
  View cos, sin, nsin;
  // Attention of q, k, v ([B * S, heads * D] column views, rotated) into
  // out [B * S, nhl * D] f32 (forward).
  std::function<void(const View& q, const View& k, const View& v, const View& out)> attend;
  // The backend's packed copy of a weight, or nullptr (forward; optional).
  std::function<const PackedWeight*(const Tensor& w)> pack;
  // The f32 gradient a parameter's gradient accumulates into (backward).
  std::function<Tensor&(const Tensor& w)> grad;
  // The additive key mask [B, S] f32 (backward's attention).
  View key_mask;
};

// Buffers an inference run reuses from block to block ([B * S, *] f32).
struct BlockBuffers {
  Tensor h, att, tmp, mlp_out;
};

class Block {
 public:
  explicit Block(const BlockEnv& env);

  // The forward of weights L on the residual stream r (r.x [B * S, H] f32).
  // With `keep` (training) the activations the backward needs go there and
  // r.x becomes a new tensor; without, r.x is updated in place and the
  // block's last branch stays pending in r (inference). `buf` (inference)
  // holds reused buffers; nullptr allocates.
  void forward(const BlockWeights& L, Residual& r, BlockBuffers* buf, BlockActs* keep) const;

  // The backward from dx (the gradient of the block's output, [B * S, H]
  // f32): dx becomes the gradient of its input; the weights' gradients
  // accumulate through env.grad. `sv` is what forward(keep) left.
  void backward(const BlockWeights& L, const BlockActs& sv, Tensor& dx) const;

  // out = norm(in) with the model's norm (the final norm, too).
  void norm(const View& out, const View& in, const Tensor& w, const Tensor& b) const;
  // out = norm(r.x) after r's pending branch (fused where pending).
  void norm_x(Residual& r, const View& out, const Tensor& w, const Tensor& b) const;
  // The norm's backward at input x: dx (accumulate: +=) its input gradient
  // of dy; the weights' gradients accumulate through env.grad.
  void norm_bw(const View& dx, const View& x, const Tensor& w, const Tensor& b, const View& dy,
               bool accumulate) const;

 private:
  // r.x += y + b: pending (fuse) or into a new x.
  void add(Residual& r, const Tensor& y, const Tensor& b) const;
  // r.x = norm(r.x) (post-norm): in place, or a new x keeping the sum in *sum.
  void renorm(Residual& r, const Tensor& w, const Tensor& b, Tensor* sum) const;
  void linear(const View& y, const View& x, const Tensor& w, const Tensor* b, bool packed,
              const oslo_bk_unary* act = nullptr, const View* gate = nullptr) const;
  void linear_bw(const View& dy, const View& x, const Tensor& w, const Tensor* b, const View* dx,
                 bool accumulate) const;
  void kv_linear_bw(const View& dy, const View& x, const Tensor& w, const Tensor* b, const View* dx,
                    bool accumulate,
                    std::initializer_list<std::pair<int64_t, int64_t>> ranges) const;
  void sum_over_head_copies(const View& part) const;
  void rope(const View& t, int64_t heads, const View& sn) const;
  Tensor f32(std::vector<int64_t> shape) const;

  const BlockEnv& e_;
  Backend& be_;
  const std::shared_ptr<Backend>& bp_;
  const BlockTraits& tr_;
  const bool post_, rms_, parallel_;
  const int64_t BS_, H_, D_, qw_, kw_;
  const float eps_;
  const oslo_bk_unary act_;
};

// The backend's element-wise op for a model's MLP activation.
oslo_bk_unary act_op(Activation a);

}  // namespace oslo
