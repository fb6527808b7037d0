#include "core/model/micro_pass.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

#include "core/common/error.hpp"
#include "core/layers/embedding.hpp"
#include "core/layers/functional.hpp"
#include "core/parallel/mappings.hpp"
#include "core/tensor/view.hpp"
#include "core/tensor/view_util.hpp"

namespace oslo {

using views::row_range;
using views::strided;

MicroPass::MicroPass(TrainingPass& o, const std::vector<int64_t>& ids,
                     const std::vector<int64_t>* labels, const std::vector<int64_t>& mask,
                     const std::vector<int64_t>& types, const std::vector<float>* grad_hidden_in,
                     int64_t batch, int64_t seq, float gscale)
    : owner(o),
      s(o.s_),
      be(o.s_.ctx.backend()),
      bp(o.s_.ctx.backend_ptr()),
      labels_in(labels != nullptr),
      B(batch),
      S(seq),
      BS(batch * seq),
      H(o.s_.cfg.hidden_size),
      nl(static_cast<int>(o.s_.layers.size())),
      grad_scale(gscale),
      grad_hidden(grad_hidden_in),
      env(o.s_.env(batch, seq)),
      saved(o.s_.layers.size()) {
  be.set_num_threads(s.ctx.num_threads());
  const size_t n = static_cast<size_t>(BS);
  const BlockTraits& tr = s.cfg.traits;

  // Positions follow the mask (as the inference forward); additive key mask.
  std::vector<int64_t> pos(n);
  std::vector<float> key_mask(n);
  for (int64_t b = 0; b < B; ++b) {
    int64_t count = 0;
    for (int64_t t = 0; t < S; ++t) {
      const size_t i = static_cast<size_t>(b * S + t);
      count += mask[i] != 0;
      pos[i] = std::max<int64_t>(0, count - 1);
      key_mask[i] = mask[i] ? 0.f : -FLT_MAX;
    }
  }
  // Labels shifted inside: position t predicts labels[t + 1].
  if (labels_in) {
    std::vector<int64_t> shifted(n, -100);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t + 1 < S; ++t)
        shifted[static_cast<size_t>(b * S + t)] = (*labels)[static_cast<size_t>(b * S + t + 1)];
    lab_t = upload(shifted.data(), OSLO_DTYPE_I64, {BS});
    for (int64_t y : shifted) kept += y != -100;
    host_labels = std::move(shifted);
  }
  ids_t = upload(ids.data(), OSLO_DTYPE_I64, {BS});
  grad_ids_t = ids_t;
  const int64_t pad = s.cfg.embed_pad_row;
  if (pad >= s.vocab_start && pad < s.vocab_start + s.vocab_valid &&
      std::find(ids.begin(), ids.end(), pad) != ids.end()) {
    std::vector<int64_t> kept_ids(ids);
    std::replace(kept_ids.begin(), kept_ids.end(), pad, int64_t{-1});
    grad_ids_t = upload(kept_ids.data(), OSLO_DTYPE_I64, {BS});
  }
  pos_t = upload(pos.data(), OSLO_DTYPE_I64, {BS});
  mask_t = upload(key_mask.data(), OSLO_DTYPE_F32, {B, S});
  if (s.type.defined()) types_t = upload(types.data(), OSLO_DTYPE_I64, {BS});
  if (tr.rotary) {
    s.rope_tables(pos, &cos_t, &sin_t);
    nsin_t = scratch(bp, OSLO_DTYPE_F32, sin_t.shape());
    be.unary(OSLO_BK_SCALE, view(nsin_t), view(sin_t), -1.f);  // the inverse rotation
    env.cos = view(cos_t);
    env.sin = view(sin_t);
    env.nsin = view(nsin_t);
  }
  // The block: attention over this call's keys and values, plain weights,
  // gradients into the owner's.
  env.key_mask = view(mask_t);
  const int64_t D = s.cfg.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  env.attend = [this, D, scale](const View& q, const View& k, const View& v, const View& out) {
    auto heads4 = [&](const View& t, int64_t heads) {
      const int64_t rs = t.strides[0];
      return strided(t.data, t.dtype, {B, heads, S, D}, {S * rs, D, rs, 1});
    };
    const View mv = view(mask_t);
    be.attention(heads4(out, s.nhl), heads4(q, s.nhl), heads4(k, s.nkvl), heads4(v, s.nkvl), &mv,
                 scale, s.cfg.traits.causal, 0);
  };
  env.grad = [this](const Tensor& w) -> Tensor& { return owner.grad_of(w); };
  block = std::make_unique<Block>(env);
}

Tensor MicroPass::f32(std::vector<int64_t> shape) const {
  return scratch(bp, OSLO_DTYPE_F32, shape);
}

Tensor MicroPass::upload(const void* src, oslo_dtype dt, std::vector<int64_t> shape) const {
  Tensor t = scratch(bp, dt, shape);
  be.copy(t.data(), src, t.nbytes(), CopyKind::HostToDevice);
  return t;
}

void MicroPass::embed() {
  x = f32({BS, H});
  s.embed(ids_t, pos_t, s.type.defined() ? &types_t : nullptr, x,
          s.emb_ln_w.defined() ? &emb_in : nullptr);
}

void MicroPass::forward_blocks(size_t l0, size_t l1) {
  size_t bytes = 0;
  for (size_t l = l0; l < l1; ++l) {
    const int unit = 1 + static_cast<int>(l);
    if (owner.param_hook_) owner.param_hook_(unit, true, unit < nl ? unit + 1 : -1);
    Residual r;
    r.fuse = false;
    r.x = x;
    block->forward(*s.layers[l], r, nullptr, &saved[l]);
    if (owner.param_hook_ && unit < nl) owner.param_hook_(unit, false, -1);
    if (owner.checkpoint_activations_) {  // only the block's input
      BlockActs keep;
      keep.x_in = x;
      saved[l] = keep;
    }
    bytes += saved[l].bytes();
    x = r.x;
  }
  owner.saved_activation_bytes_ = bytes;
}

void MicroPass::backward_blocks(size_t l0, size_t l1) {
  for (size_t li = l1; li-- > l0;) {
    BlockActs& sv = saved[li];
    if (owner.param_hook_) {  // the last block is still held from its forward
      const int unit = 1 + static_cast<int>(li);
      owner.param_hook_(unit, true, unit > 1 ? unit - 1 : -1);
    }
    if (owner.checkpoint_activations_) {
      // Recompute what the forward dropped: the same ops on the same input,
      // the same bits.
      Residual r;
      r.fuse = false;
      r.x = sv.x_in;
      block->forward(*s.layers[li], r, nullptr, &sv);
    }
    block->backward(*s.layers[li], sv, dx);
    sv = BlockActs{};  // this block's activations are no longer needed
    if (owner.param_hook_) owner.param_hook_(1 + static_cast<int>(li), false, -1);
    if (owner.backward_hook_) owner.backward_hook_(static_cast<int>(s.layers.size() - li));
  }
}

// The final norm, the logits and the loss (its gradient in dlogits), or
// the caller's gradient of the hidden states (dhf).
void MicroPass::head_forward() {
  hf = f32({BS, H});
  if (s.norm_w.defined())
    block->norm(view(hf), view(x), s.norm_w, s.norm_b);
  else
    be.convert(view(hf), view(x));
  if (labels_in && head_rows0 > 0) {
    // The first head_rows0 tokens go to the first stage; the rest here,
    // their loss a share of the micro-batch's mean.
    const int64_t n0 = head_rows0, n1 = BS - n0;
    head_in = f32({n0, H});
    be.convert(view(head_in), row_range(view(hf), 0, n0));
    loss = 0.f;
    if (n1 > 0) dlogits = share_logits(row_range(view(hf), n0, n1), s.lm_head, n0, &loss);
    if (kept == 0) loss = std::numeric_limits<float>::quiet_NaN();
  } else if (labels_in) {
    Tensor logits = f32({BS, s.vocab_local});
    if (chunked())
      head_chunks(&logits);
    else
      linear_forward(be, bp, view(logits), view(hf), view(s.lm_head), nullptr);
    // The gradient overwrites the logits: no second [tokens, vocab] buffer.
    vocab_parallel_cross_entropy(s.ctx, logits, lab_t, s.cfg.vocab_size, -100, nullptr, &loss,
                                 &logits);
    dlogits = logits;
    if (defer_loss_check) {
      // The pipeline checks the mean loss after its schedule, on every
      // stage at once (a stage that stopped here would leave the others
      // waiting for its gradients).
    } else if (owner.agree_over_data_ && group_size(s.ctx, OSLO_GROUP_DATA) > 1) {
      // A non-finite loss on one data rank stops them all before the
      // gradient reduction.
      const int nd = group_size(s.ctx, OSLO_GROUP_DATA);
      Tensor t = scratch(bp, OSLO_DTYPE_F32, {1}), all = scratch(bp, OSLO_DTYPE_F32, {nd});
      be.copy(t.data(), &loss, sizeof loss, CopyKind::HostToDevice);
      gather_first_dim(s.ctx, OSLO_GROUP_DATA, view(t), view(all));
      std::vector<float> got(static_cast<size_t>(nd));
      be.copy(got.data(), all.data(), got.size() * sizeof(float), CopyKind::DeviceToHost);
      for (int q = 0; q < nd; ++q)
        OSLO_CHECK(std::isfinite(got[static_cast<size_t>(q)]), OSLO_ERR_INVALID_ARGUMENT,
                   "loss: the loss is ", got[static_cast<size_t>(q)], " on data-parallel rank ", q,
                   " (no label kept, or non-finite logits)");
    }
    OSLO_CHECK(defer_loss_check || std::isfinite(loss), OSLO_ERR_INVALID_ARGUMENT,
               "loss: the loss is ", loss, " (no label kept, or non-finite logits)");
    if (grad_scale != 1.f) be.unary(OSLO_BK_SCALE, view(dlogits), view(dlogits), grad_scale);
  } else {
    dhf = upload(grad_hidden->data(), OSLO_DTYPE_F32, {BS, H});
    if (grad_scale != 1.f) be.unary(OSLO_BK_SCALE, view(dhf), view(dhf), grad_scale);
  }
}

// The first stage's share of the head split: the final hidden states
// `h` of the first head_rows0 tokens through the tied token table (this
// stage's wte_, the head's rows on this tensor rank): their loss (a share
// of the micro-batch's mean, returned), the table's gradient added to
// its embedding gradient, and the states' gradient (summed over the
// tensor group) returned in *dh.
float MicroPass::head_share(const Tensor& h, Tensor* dh) {
  float part = 0.f;
  const Tensor dy = share_logits(view(h), s.wte, 0, &part);
  *dh = f32({h.dim(0), H});
  share_products(view(dy), view(h), s.wte, view(*dh));
  return kept == 0 ? std::numeric_limits<float>::quiet_NaN() : part;
}

// The head split's shares, on either stage: the logits of `h` (the final
// hidden states of tokens [row0, row0 + rows)) through W, turned in place
// into the gradient of their loss share (*loss: their losses summed over
// the micro-batch's kept labels, as its mean), times grad_scale.
Tensor MicroPass::share_logits(const View& h, const Tensor& W, int64_t row0, float* loss_share) {
  const int64_t rows = h.shape[0];
  Tensor logits = f32({rows, s.vocab_local});
  linear_forward(be, bp, view(logits), h, view(W), nullptr);
  const Tensor lab = upload(host_labels.data() + row0, OSLO_DTYPE_I64, {rows});
  vocab_parallel_cross_entropy(s.ctx, logits, lab, s.cfg.vocab_size, -100, nullptr, loss_share,
                               &logits, std::max<int64_t>(kept, 1));
  if (grad_scale != 1.f) be.unary(OSLO_BK_SCALE, view(logits), view(logits), grad_scale);
  return logits;
}
// Their backward: dh = dy W (summed over the tensor group), W's gradient
// += dy^T h.
void MicroPass::share_products(const View& dy, const View& h, const Tensor& W, const View& dh) {
  const View gw = view(owner.grad_of(W));
  linear_backward(be, bp, dy, h, view(W), &gw, nullptr, &dh, false);
  reduce_sum(s.ctx, OSLO_GROUP_TENSOR, dh);
}

// Whether the head's weight comes in row chunks (TrainingPass::HeadRows).
bool MicroPass::chunked() const {
  return labels_in && owner.head_rows_.parts > 0;
}

// The head chunk by chunk (TrainingPass::HeadRows): with `logits` its forward
// (each chunk's blocks of logit columns from hf), else its backward from
// dlogits: dhf, and each chunk's weight gradient handed to reduce. Only
// one chunk of W (and of its gradient) exists at a time.
void MicroPass::head_chunks(Tensor* logits) {
  const TrainingPass::HeadRows& hr = owner.head_rows_;
  const Tensor& W = s.lm_head;
  const int64_t V = W.dim(0), c = hr.chunk_rows, n = hr.parts;
  Tensor h_keep, dy_keep;
  const View hw = in_dtype(be, bp, view(hf), W.dtype(), &h_keep);
  View dyw;
  if (!logits) {
    dyw = in_dtype(be, bp, view(dlogits), W.dtype(), &dy_keep);
    dhf = f32({BS, H});
    be.fill(view(dhf), 0.0);
  }
  Tensor wc = scratch(bp, W.dtype(), {n * c, H});
  Tensor gc;
  if (!logits) gc = f32({n * c, H});
  for (int64_t k = 0; k < hr.chunks; ++k) {
    hr.gather(k, view(wc));
    if (!logits) be.fill(view(gc), 0.0);
    for (int64_t q = 0; q < n; ++q) {
      const int64_t r0 = q * hr.part_rows + k * c;
      const int64_t count = std::min({c, hr.part_rows - k * c, std::max<int64_t>(0, V - r0)});
      if (count <= 0) continue;
      const View wq = row_range(view(wc), q * c, count);
      if (logits) {  // logits[:, r0 : r0 + count] = h Wq^T
        linear_forward(be, bp, columns(view(*logits), r0, count), hw, wq, nullptr);
      } else {
        // dh += dy Wq, dWq = dy^T h (gc zeroed above).
        const View dy = columns(dyw, r0, count), dh = view(dhf),
                   gq = row_range(view(gc), q * c, count);
        linear_backward(be, bp, dy, hw, wq, &gq, nullptr, &dh, true);
      }
    }
    if (!logits) hr.reduce(k, view(gc));
  }
  if (!logits) dlogits = Tensor();
}

// The head's and the final norm's backward: dx, the gradient of the
// last block's output.
void MicroPass::head_backward() {
  // The embedding's backward reads no weight of unit 0 that ZeRO-3
  // partitions (only its 1-D norm): unit 0 goes as soon as the head's
  // input gradient is made, before its weight gradient, so that a whole
  // head and its whole gradient never coexist.
  if (labels_in && chunked()) {
    head_chunks(nullptr);
    reduce_sum(s.ctx, OSLO_GROUP_TENSOR, view(dhf));
  } else if (labels_in && head_rows0 > 0) {
    // The first stage's tokens' gradient came back summed; this stage's
    // own rows as below.
    const int64_t n0 = head_rows0, n1 = BS - n0;
    dhf = f32({BS, H});
    OSLO_CHECK(head_grad.defined() && head_grad.dim(0) == n0, OSLO_ERR_INTERNAL,
               "pipeline: the head share's gradient is missing");
    be.convert(row_range(view(dhf), 0, n0), view(head_grad));
    head_grad = Tensor();
    if (n1 > 0) {
      share_products(view(dlogits), row_range(view(hf), n0, n1), s.lm_head,
                     row_range(view(dhf), n0, n1));
      dlogits = Tensor();
    }
  } else if (labels_in) {
    dhf = f32({BS, H});
    const View w = view(s.lm_head), dh = view(dhf);
    if (!owner.param_hook_) {
      const View gw = view(owner.grad_of(s.lm_head));
      linear_backward(be, bp, view(dlogits), view(hf), w, &gw, nullptr, &dh, false);
    } else {
      // dh = dlogits W first; then W (gathered whole) goes before its
      // gradient is made.
      linear_backward(be, bp, view(dlogits), view(hf), w, nullptr, nullptr, &dh, false);
      owner.param_hook_(0, false, -1);
      const View gw = view(owner.grad_of(s.lm_head));
      linear_backward(be, bp, view(dlogits), view(hf), w, &gw, nullptr, nullptr, false);
    }
    dlogits = Tensor();
    reduce_sum(s.ctx, OSLO_GROUP_TENSOR, view(dhf));
  } else if (owner.param_hook_) {
    owner.param_hook_(0, false, -1);
  }
  dx = f32({BS, H});
  if (s.norm_w.defined())
    block->norm_bw(view(dx), view(x), s.norm_w, s.norm_b, view(dhf), false);
  else
    be.convert(view(dx), view(dhf));
  if (owner.backward_hook_) owner.backward_hook_(0);
}

// Blocks [l0, l1) backward, from the last: dx becomes the gradient of
// block l0's input; each block's activations are freed after it.
void MicroPass::embed_backward() {
  // Embeddings: the norm over their sum, the token table's local rows (but
  // the pad row where the family has padding_idx), the position and
  // token-type tables.
  if (s.emb_ln_w.defined()) {
    Tensor de = f32({BS, H});
    block->norm_bw(view(de), view(emb_in), s.emb_ln_w, s.emb_ln_b, view(dx), false);
    dx = de;
  }
  if (s.type.defined())
    be.scatter_add_rows(view(owner.grad_of(s.type)), view(types_t), view(dx), 0);
  if (s.cfg.traits.embed_scale != 1.0) {
    Tensor t = f32({BS, H});
    be.unary(OSLO_BK_SCALE, view(t), view(dx), s.embed_scale());
    be.scatter_add_rows(view(owner.grad_of(s.wte)), view(grad_ids_t), view(t), s.vocab_start);
  } else {
    be.scatter_add_rows(view(owner.grad_of(s.wte)), view(grad_ids_t), view(dx), s.vocab_start);
  }
  if (s.wpe.defined()) be.scatter_add_rows(view(owner.grad_of(s.wpe)), view(pos_t), view(dx), 0);
  if (owner.backward_hook_) owner.backward_hook_(static_cast<int>(s.layers.size()) + 1);
}

}  // namespace oslo
