// Training of the causal families: the causal-LM loss of a batch and its
// backward through every block, composed from the backend seam's ops
// (docs/MODELS.md, "Backward"). The forward here keeps what the backward
// needs (each block's input, norm outputs, q/k/v after RoPE, attention
// output, MLP pre-activations) instead of a KV cache; attention
// probabilities are recomputed in the backward from q and k.
//
// Mixed precision (bf16 or f16 weights): the activations and every gradient
// are f32; a product with a weight rounds its other operand to the weight's
// dtype (linear() in the forward, linear_bw in the backward, for dW and dx
// alike) and accumulates in f32, so the arithmetic is torch.autocast's with
// f32 results instead of rounded ones.
//
// Tensor parallelism follows Megatron: a column-parallel product's input
// gradient is a partial sum (all-reduced over the tensor group), a
// row-parallel product's input gradient is complete (its output was
// all-reduced in the forward); replicated parameters (norms, row-parallel
// biases, position embeddings) get the same gradient on every rank.
#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <exception>
#include <initializer_list>
#include <map>
#include <utility>

#include "core/common/crc32c.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/layers/embedding.hpp"
#include "core/model/model.hpp"
#include "core/model/model_internal.hpp"
#include "core/parallel/mappings.hpp"
#include "core/pipeline/schedule.hpp"
#include "core/tensor/view.hpp"

namespace oslo {

using model_detail::linear;
using model_detail::row_range;
using model_detail::rows_bcast;
using model_detail::strided;

void Model::zero_grad() {
  Backend& be = ctx_.backend();
  if (grads_.empty())
    for (const PlacedTensor& p : params_)
      grads_.push_back(scratch(ctx_.backend_ptr(), OSLO_DTYPE_F32, p.tensor.shape()));
  for (Tensor& g : grads_)
    if (g.defined()) be.fill(view(g), 0.0);
}

void Model::release_grads(const std::vector<size_t>& params) {
  // Before any gradient exists: one slot per parameter, none allocated.
  if (grads_.empty()) grads_.resize(params_.size());
  for (size_t i : params) {
    OSLO_CHECK(i < grads_.size(), OSLO_ERR_INVALID_ARGUMENT, "model: gradient index ", i,
               " is out of range (", grads_.size(), " gradients)");
    grads_[i] = Tensor();
  }
}

std::vector<int> Model::param_units() const {
  const int L = static_cast<int>(layers_.size());
  std::vector<int> unit;
  for (int st : grad_stages()) unit.push_back(st == 0 || st == L + 1 ? 0 : 1 + (L - st));
  return unit;
}

namespace {

// The tensors() entry a compute tensor's memory belongs to (-1: none).
int64_t param_index(const std::map<const Storage*, size_t>& param_of, const Tensor& t) {
  if (!t.defined()) return -1;
  auto it = param_of.find(t.storage().get());
  return it == param_of.end() ? -1 : static_cast<int64_t>(it->second);
}

}  // namespace

int64_t Model::head_param() const {
  return param_index(param_of_, lm_head_);
}

int64_t Model::embed_param() const {
  return param_index(param_of_, wte_);
}

std::vector<int> Model::grad_stages() const {
  const int L = static_cast<int>(layers_.size());
  std::vector<int> stage(params_.size(), 0);
  auto mark = [&](const Tensor& w, int s) {
    if (!w.defined()) return;
    auto it = param_of_.find(w.storage().get());
    if (it != param_of_.end()) stage[it->second] = std::max(stage[it->second], s);
  };
  for (int li = 0; li < L; ++li) {
    const Layer& Ly = *layers_[static_cast<size_t>(li)];
    for (const Tensor* w :
         {&Ly.ln1_w,     &Ly.ln1_b,     &Ly.ln2_w,  &Ly.ln2_b, &Ly.qkv_w,  &Ly.qkv_b,
          &Ly.q_w,       &Ly.q_b,       &Ly.k_w,    &Ly.k_b,   &Ly.v_w,    &Ly.v_b,
          &Ly.o_w,       &Ly.o_b,       &Ly.up_w,   &Ly.up_b,  &Ly.gate_w, &Ly.gate_b,
          &Ly.gate_up_w, &Ly.gate_up_b, &Ly.down_w, &Ly.down_b})
      mark(*w, L - li);
  }
  // The token table (also the head when tied) is final after the
  // embeddings' backward.
  for (const Tensor* w : {&wte_, &wpe_, &type_, &emb_ln_w_, &emb_ln_b_}) mark(*w, L + 1);
  return stage;
}

void Model::parameters_changed() {
  packs_.clear();
  packs_made_ = false;
  if (derived_.empty()) return;
  Backend& be = ctx_.backend();
  Tensor one = scratch(ctx_.backend_ptr(), OSLO_DTYPE_F32, {1});
  be.fill(view(one), 1.0);
  for (auto& d : derived_) {
    const Tensor& src = params_[d.second].tensor;
    View o = make_view(one.data(), OSLO_DTYPE_F32, {src.numel()});
    o.strides[0] = 0;
    be.binary(OSLO_BK_ADD, view(d.first), view(src), o);
  }
}

Tensor& Model::grad_of(const Tensor& w) {
  auto it = param_of_.find(w.storage().get());
  OSLO_CHECK(it != param_of_.end() && it->second < grads_.size(), OSLO_ERR_INTERNAL,
             "model: a compute tensor without a parameter entry");
  Tensor& g = grads_[it->second];
  if (!g.defined()) {  // released (ZeRO-2): made again, zero
    g = scratch(ctx_.backend_ptr(), OSLO_DTYPE_F32, params_[it->second].tensor.shape());
    ctx_.backend().fill(view(g), 0.0);
  }
  return g;
}

namespace {

// What one block's backward needs from its forward.
// Post-norm blocks (BERT) keep the residual sums r1 = x + attention and
// r2 = x_mid + MLP that their norms read; x_mid is then LN1(r1).
struct Saved {
  Tensor x_in, h1, qkv, q, k, v, att, x_mid, h2, gu, up, gate, m, r1, r2;
};

}  // namespace

// One micro-batch's training pass (Model::train_pass): the batch on the
// device, what the backward needs from the forward, and the phases in the
// order they run: embed, forward_blocks, head_forward, head_backward,
// backward_blocks, embed_backward. Each phase is collective over the tensor
// group.
struct Model::Pass {
  Model& m;
  Backend& be;
  const std::shared_ptr<Backend>& bp;
  const BlockTraits& tr;
  const bool post, rms, parallel, labels_in, kv_replicated;
  const int64_t B, S, BS, H, D, qw, kw, g;
  const int nl;  // blocks
  const float eps, scale, emb_scale, grad_scale;
  const oslo_bk_unary act_op;
  const std::vector<float>* grad_hidden;
  Tensor lab_t, ids_t, pos_t, mask_t, types_t, cos_t, sin_t, nsin_t;
  // The ids the token table's gradient is scattered by: ids_t, or a copy
  // with the pad row's id as -1 (no row) where this rank holds that row and
  // the family's embedding has padding_idx (torch's embedding backward
  // skips it; a tied head still adds into the row).
  Tensor grad_ids_t;
  View mv;
  Tensor x;       // the residual stream: the embeddings', then each block's output
  Tensor emb_in;  // the embedding norm's input
  Tensor hf, dlogits, dhf;
  Tensor dx;  // gradient of the residual stream
  std::vector<Saved> saved;
  float loss = 0.f;
  bool defer_loss_check = false;  // the pipeline's: checked after the schedule
  // The pipeline's head split (pipeline_schedule_head_split): the first
  // head_rows0 tokens' head runs on the first stage (head_share), the rest
  // here; head_in is what goes there, head_grad their gradient back.
  int64_t head_rows0 = 0;
  Tensor head_in, head_grad;
  std::vector<int64_t> host_labels;  // shifted (labels_in)
  int64_t kept = 0;                  // labels kept in the whole micro-batch

  // Uploads ids, positions (following the mask, as the inference forward),
  // the shifted labels and the additive key mask; the inputs were checked
  // by train_pass.
  Pass(Model& model, const std::vector<int64_t>& ids, const std::vector<int64_t>* labels,
       const std::vector<int64_t>& mask, const std::vector<int64_t>& types,
       const std::vector<float>* grad_hidden_in, int64_t batch, int64_t seq, float gscale)
      : m(model),
        be(model.ctx_.backend()),
        bp(model.ctx_.backend_ptr()),
        tr(model.cfg_.traits),
        post(tr.post_norm),
        rms(tr.norm == NormKind::RMS_NORM),
        parallel(tr.parallel_residual),
        labels_in(labels != nullptr),
        kv_replicated(model.cfg_.num_kv_heads < model.tp_),
        B(batch),
        S(seq),
        BS(batch * seq),
        H(model.cfg_.hidden_size),
        D(model.cfg_.head_dim),
        qw(model.nhl_ * D),
        kw(model.nkvl_ * D),
        g(model.nhl_ / model.nkvl_),
        nl(static_cast<int>(model.layers_.size())),
        eps(static_cast<float>(model.cfg_.norm_eps)),
        scale(1.0f / std::sqrt(static_cast<float>(D))),
        emb_scale(static_cast<float>(tr.embed_scale)),
        grad_scale(gscale),
        act_op(model_detail::act_op(model.cfg_.act)),
        grad_hidden(grad_hidden_in),
        saved(model.layers_.size()) {
    be.set_num_threads(m.ctx_.num_threads());
    const size_t n = static_cast<size_t>(BS);

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
    const int64_t pad = m.cfg_.embed_pad_row;
    if (pad >= m.vocab_start_ && pad < m.vocab_start_ + m.vocab_valid_ &&
        std::find(ids.begin(), ids.end(), pad) != ids.end()) {
      std::vector<int64_t> kept_ids(ids);
      std::replace(kept_ids.begin(), kept_ids.end(), pad, int64_t{-1});
      grad_ids_t = upload(kept_ids.data(), OSLO_DTYPE_I64, {BS});
    }
    pos_t = upload(pos.data(), OSLO_DTYPE_I64, {BS});
    mask_t = upload(key_mask.data(), OSLO_DTYPE_F32, {B, S});
    if (m.type_.defined()) types_t = upload(types.data(), OSLO_DTYPE_I64, {BS});
    if (tr.rotary) {
      m.rope_tables(pos, &cos_t, &sin_t);
      nsin_t = scratch(bp, OSLO_DTYPE_F32, sin_t.shape());
      be.unary(OSLO_BK_SCALE, view(nsin_t), view(sin_t), -1.f);  // the inverse rotation
    }
    mv = view(mask_t);
  }

  Tensor f32(std::vector<int64_t> shape) { return scratch(bp, OSLO_DTYPE_F32, shape); }
  Tensor upload(const void* src, oslo_dtype dt, std::vector<int64_t> shape) {
    Tensor t = scratch(bp, dt, shape);
    be.copy(t.data(), src, t.nbytes(), CopyKind::HostToDevice);
    return t;
  }
  void rope(const View& t, int64_t heads, const Tensor& sn) {
    be.rope(strided(t.data, t.dtype, {BS, heads, D}, {t.strides[0], D, 1}), view(cos_t), view(sn));
  }
  void norm(const View& out, const View& in, const Tensor& w, const Tensor& b) {
    View wv = view(w), bv;
    if (b.defined()) bv = view(b);
    be.norm(out, in, &wv, rms || !b.defined() ? nullptr : &bv, eps, rms);
  }
  void add_bias(const View& y, const Tensor& b) {
    if (b.defined()) be.binary(OSLO_BK_ADD, y, y, rows_bcast(b, y.shape[0]));
  }
  // [BS, heads * D] columns as [B, heads, S, D].
  View heads4(const View& t, int64_t heads) {
    const int64_t rs = t.strides[0];
    return strided(t.data, t.dtype, {B, heads, S, D}, {S * rs, D, rs, 1});
  }
  // One block's forward from its input, keeping what its backward needs in
  // sv; returns the block's output. Run again in the backward when
  // activations are checkpointed (the same ops on the same input: the same
  // bits).
  Tensor block_forward(size_t l, const Tensor& x, Saved& sv) {
    Layer& L = *m.layers_[l];
    sv.x_in = x;
    // Attention input: the block's input (post-norm) or its norm.
    if (!post) {
      sv.h1 = f32({BS, H});
      norm(view(sv.h1), view(x), L.ln1_w, L.ln1_b);
    }
    const View ain = post ? view(x) : view(sv.h1);
    View q, k, v;
    if (L.qkv_w.defined()) {
      sv.qkv = f32({BS, qw + 2 * kw});
      linear(be, bp, view(sv.qkv), ain, L.qkv_w, &L.qkv_b);
      q = columns(view(sv.qkv), 0, qw);
      k = columns(view(sv.qkv), qw, kw);
      v = columns(view(sv.qkv), qw + kw, kw);
    } else {
      sv.q = f32({BS, qw});
      sv.k = f32({BS, kw});
      sv.v = f32({BS, kw});
      linear(be, bp, view(sv.q), ain, L.q_w, &L.q_b);
      linear(be, bp, view(sv.k), ain, L.k_w, &L.k_b);
      linear(be, bp, view(sv.v), ain, L.v_w, &L.v_b);
      q = view(sv.q);
      k = view(sv.k);
      v = view(sv.v);
    }
    if (tr.rotary) {
      rope(q, m.nhl_, sin_t);
      rope(k, m.nkvl_, sin_t);
    }
    sv.att = f32({BS, qw});
    be.attention(heads4(view(sv.att), m.nhl_), heads4(q, m.nhl_), heads4(k, m.nkvl_),
                 heads4(v, m.nkvl_), &mv, scale, tr.causal, 0);
    Tensor a = f32({BS, H});
    linear(be, bp, view(a), view(sv.att), L.o_w, nullptr);
    // MLP input: the block's input (parallel residual) or x + attention,
    // normed (post-norm: LN1 of it, which is also the MLP's residual).
    if (!parallel) {
      reduce_sum(m.ctx_, OSLO_GROUP_TENSOR, view(a));
      add_bias(view(a), L.o_b);
      sv.x_mid = f32({BS, H});
      if (post) {
        sv.r1 = f32({BS, H});
        be.binary(OSLO_BK_ADD, view(sv.r1), view(x), view(a));
        norm(view(sv.x_mid), view(sv.r1), L.ln1_w, L.ln1_b);
      } else {
        be.binary(OSLO_BK_ADD, view(sv.x_mid), view(x), view(a));
      }
    }
    const Tensor& min = parallel ? x : sv.x_mid;
    if (!post) {
      sv.h2 = f32({BS, H});
      norm(view(sv.h2), view(min), L.ln2_w, L.ln2_b);
    }
    const Tensor& mlp_in = post ? sv.x_mid : sv.h2;
    int64_t il;
    View gv, uv;
    if (L.gate_up_w.defined()) {
      il = L.gate_up_w.dim(0) / 2;
      sv.gu = f32({BS, 2 * il});
      linear(be, bp, view(sv.gu), view(mlp_in), L.gate_up_w, &L.gate_up_b);
      gv = columns(view(sv.gu), 0, il);
      uv = columns(view(sv.gu), il, il);
    } else {
      il = L.up_w.dim(0);
      sv.up = f32({BS, il});
      linear(be, bp, view(sv.up), view(mlp_in), L.up_w, &L.up_b);
      uv = view(sv.up);
      if (tr.gated_mlp) {
        sv.gate = f32({BS, il});
        linear(be, bp, view(sv.gate), view(mlp_in), L.gate_w, &L.gate_b);
        gv = view(sv.gate);
      }
    }
    sv.m = f32({BS, il});
    if (tr.gated_mlp) {
      be.unary(act_op, view(sv.m), gv);
      be.binary(OSLO_BK_MUL, view(sv.m), view(sv.m), uv);
    } else {
      be.unary(act_op, view(sv.m), uv);
    }
    Tensor d = f32({BS, H});
    linear(be, bp, view(d), view(sv.m), L.down_w, nullptr);
    Tensor out = f32({BS, H});
    if (parallel) {
      be.binary(OSLO_BK_ADD, view(d), view(d), view(a));  // one all-reduce for both branches
      reduce_sum(m.ctx_, OSLO_GROUP_TENSOR, view(d));
      add_bias(view(d), L.o_b);
      add_bias(view(d), L.down_b);
      be.binary(OSLO_BK_ADD, view(out), view(x), view(d));
    } else if (post) {
      reduce_sum(m.ctx_, OSLO_GROUP_TENSOR, view(d));
      add_bias(view(d), L.down_b);
      sv.r2 = f32({BS, H});
      be.binary(OSLO_BK_ADD, view(sv.r2), view(sv.x_mid), view(d));
      norm(view(out), view(sv.r2), L.ln2_w, L.ln2_b);
    } else {
      reduce_sum(m.ctx_, OSLO_GROUP_TENSOR, view(d));
      add_bias(view(d), L.down_b);
      be.binary(OSLO_BK_ADD, view(out), view(sv.x_mid), view(d));
    }
    return out;
  }
  static size_t block_bytes(const Saved& sv) {
    size_t b = 0;
    for (const Tensor* t : {&sv.x_in, &sv.h1, &sv.qkv, &sv.q, &sv.k, &sv.v, &sv.att, &sv.x_mid,
                            &sv.h2, &sv.gu, &sv.up, &sv.gate, &sv.m, &sv.r1, &sv.r2})
      if (t->defined()) b += t->nbytes();
    return b;
  }
  // Products with a weight run in the weight's dtype as the forward's
  // linear() does (autocast's rule): the f32 operands are rounded to it,
  // the product accumulates in f32 and lands in f32 (gradients, dx).
  View in_dtype(const View& t, oslo_dtype dt, Tensor* keep) {
    if (t.dtype == dt) return t;
    *keep = scratch(bp, dt, {t.shape[0], t.shape[1]});
    be.convert(view(*keep), t);
    return view(*keep);
  }
  // y = x W^T (+ b): dW += dy^T x, db += column sums of dy, dx (+)= dy W.
  void linear_bw(const View& dy, const View& xin, const Tensor& W, const Tensor* b, const View* dx,
                 bool accumulate) {
    Tensor dy_keep, x_keep;
    const View dyw = in_dtype(dy, W.dtype(), &dy_keep), xw = in_dtype(xin, W.dtype(), &x_keep);
    be.matmul(view(m.grad_of(W)), transposed(dyw), xw, nullptr, 1.f, 1.f);
    if (b && b->defined()) be.sum_rows(view(m.grad_of(*b)), dy, true);
    if (dx) be.matmul(*dx, dyw, view(W), nullptr, 1.f, accumulate ? 1.f : 0.f);
  }
  // With fewer key/value heads than ranks, each head is held by `copies`
  // ranks (sharding.cpp), each of which sees only its own query heads'
  // share of the head's gradient: this call's share is summed over the
  // group (a [nkv, rows, cols] buffer, each rank writing its head's slot)
  // before it is added to the accumulated gradient.

  void sum_over_head_copies(const View& part) {  // [rows, cols]
    const int64_t nkv = m.cfg_.num_kv_heads, head = m.rank_ / (m.tp_ / nkv);
    const int64_t rows = part.shape[0], cols = part.shape[1];
    Tensor buf = f32({nkv, rows, cols});
    be.fill(view(buf), 0.0);
    const View slot = strided(model_detail::at(view(buf), head * rows * cols), OSLO_DTYPE_F32,
                              {rows, cols}, {cols, 1});
    be.convert(slot, part);
    reduce_sum(m.ctx_, OSLO_GROUP_TENSOR, view(buf));
    be.convert(part, slot);
  }
  // linear_bw for a product whose output rows [r0, r0 + n) for each range
  // belong to a replicated key/value head.
  void kv_linear_bw(const View& dy, const View& xin, const Tensor& W, const Tensor* b,
                    const View* dx, bool accumulate,
                    std::initializer_list<std::pair<int64_t, int64_t>> ranges) {
    if (!kv_replicated) return linear_bw(dy, xin, W, b, dx, accumulate);
    const int64_t out = W.dim(0), in = W.dim(1);
    Tensor gw = f32({out, in});
    Tensor dy_keep, x_keep;
    const View dyw = in_dtype(dy, W.dtype(), &dy_keep), xw = in_dtype(xin, W.dtype(), &x_keep);
    be.matmul(view(gw), transposed(dyw), xw);
    for (const auto& r : ranges)
      sum_over_head_copies(strided(model_detail::at(view(gw), r.first * in), OSLO_DTYPE_F32,
                                   {r.second, in}, {in, 1}));
    be.binary(OSLO_BK_ADD, view(m.grad_of(W)), view(m.grad_of(W)), view(gw));
    if (b && b->defined()) {
      Tensor gb = f32({1, out});
      be.fill(view(gb), 0.0);
      be.sum_rows(make_view(gb.data(), OSLO_DTYPE_F32, {out}), dy, true);
      for (const auto& r : ranges)
        sum_over_head_copies(strided(model_detail::at(view(gb), r.first), OSLO_DTYPE_F32,
                                     {1, r.second}, {r.second, 1}));
      be.binary(OSLO_BK_ADD, view(m.grad_of(*b)), view(m.grad_of(*b)),
                make_view(gb.data(), OSLO_DTYPE_F32, {out}));
    }
    if (dx) be.matmul(*dx, dyw, view(W), nullptr, 1.f, accumulate ? 1.f : 0.f);
  }
  // dx (+)= the norm's input gradient; its parameters' gradients accumulated.
  void norm_bw(const View& dx, const View& xin, const Tensor& w, const Tensor& b, const View& dy,
               bool accumulate) {
    View wv = view(w), gw = view(m.grad_of(w)), gb;
    const bool has_b = !rms && b.defined();
    if (has_b) gb = view(m.grad_of(b));
    if (!accumulate) {
      be.norm_backward(dx, &gw, has_b ? &gb : nullptr, xin, &wv, dy, eps, rms);
      return;
    }
    Tensor t = f32({BS, H});
    be.norm_backward(view(t), &gw, has_b ? &gb : nullptr, xin, &wv, dy, eps, rms);
    be.binary(OSLO_BK_ADD, dx, dx, view(t));
  }

  // The embeddings of the ids (and positions, token types) into x.
  void embed() {
    x = f32({BS, H});
    be.gather_rows(view(x), view(m.wte_), view(ids_t), m.vocab_start_, m.cfg_.vocab_size);
    reduce_sum(m.ctx_, OSLO_GROUP_TENSOR, view(x));
    if (tr.embed_scale != 1.0) be.unary(OSLO_BK_SCALE, view(x), view(x), emb_scale);
    if (m.wpe_.defined()) {
      Tensor t = f32({BS, H});
      be.gather_rows(view(t), view(m.wpe_), view(pos_t), 0, m.cfg_.max_positions);
      be.binary(OSLO_BK_ADD, view(x), view(x), view(t));
    }
    if (m.type_.defined()) {
      Tensor t = f32({BS, H});
      be.gather_rows(view(t), view(m.type_), view(types_t), 0, m.cfg_.type_vocab_size);
      be.binary(OSLO_BK_ADD, view(x), view(x), view(t));
    }
    if (m.emb_ln_w_.defined()) {
      emb_in = x;
      x = f32({BS, H});
      norm(view(x), view(emb_in), m.emb_ln_w_, m.emb_ln_b_);
    }
  }

  // Blocks [l0, l1) forward from x, keeping what their backward needs.
  void forward_blocks(size_t l0, size_t l1) {
    size_t kept = 0;
    for (size_t l = l0; l < l1; ++l) {
      const int unit = 1 + static_cast<int>(l);
      if (m.param_hook_) m.param_hook_(unit, true, unit < nl ? unit + 1 : -1);
      Tensor out = block_forward(l, x, saved[l]);
      if (m.param_hook_ && unit < nl) m.param_hook_(unit, false, -1);
      if (m.checkpoint_activations_) {  // only the block's input
        Saved keep;
        keep.x_in = x;
        saved[l] = keep;
      }
      kept += block_bytes(saved[l]);
      x = out;
    }
    m.saved_activation_bytes_ = kept;
  }

  // The final norm, the logits and the loss (its gradient in dlogits), or
  // the caller's gradient of the hidden states (dhf).
  void head_forward() {
    hf = f32({BS, H});
    if (m.norm_w_.defined())
      norm(view(hf), view(x), m.norm_w_, m.norm_b_);
    else
      be.convert(view(hf), view(x));
    if (labels_in && head_rows0 > 0) {
      // The first head_rows0 tokens go to the first stage; the rest here,
      // their loss a share of the micro-batch's mean.
      const int64_t n0 = head_rows0, n1 = BS - n0;
      head_in = f32({n0, H});
      be.convert(view(head_in), row_range(view(hf), 0, n0));
      loss = 0.f;
      if (n1 > 0) dlogits = share_logits(row_range(view(hf), n0, n1), m.lm_head_, n0, &loss);
      if (kept == 0) loss = std::numeric_limits<float>::quiet_NaN();
    } else if (labels_in) {
      Tensor logits = f32({BS, m.vocab_local_});
      if (chunked())
        head_chunks(&logits);
      else
        linear(be, bp, view(logits), view(hf), m.lm_head_, nullptr);
      // The gradient overwrites the logits: no second [tokens, vocab] buffer.
      vocab_parallel_cross_entropy(m.ctx_, logits, lab_t, m.cfg_.vocab_size, -100, nullptr, &loss,
                                   &logits);
      dlogits = logits;
      if (defer_loss_check) {
        // The pipeline checks the mean loss after its schedule, on every
        // stage at once (a stage that stopped here would leave the others
        // waiting for its gradients).
      } else if (m.agree_over_data_ && group_size(m.ctx_, OSLO_GROUP_DATA) > 1) {
        // A non-finite loss on one data rank stops them all before the
        // gradient reduction.
        const int nd = group_size(m.ctx_, OSLO_GROUP_DATA);
        Tensor t = scratch(bp, OSLO_DTYPE_F32, {1}), all = scratch(bp, OSLO_DTYPE_F32, {nd});
        be.copy(t.data(), &loss, sizeof loss, CopyKind::HostToDevice);
        gather_first_dim(m.ctx_, OSLO_GROUP_DATA, view(t), view(all));
        std::vector<float> got(static_cast<size_t>(nd));
        be.copy(got.data(), all.data(), got.size() * sizeof(float), CopyKind::DeviceToHost);
        for (int q = 0; q < nd; ++q)
          OSLO_CHECK(std::isfinite(got[static_cast<size_t>(q)]), OSLO_ERR_INVALID_ARGUMENT,
                     "loss: the loss is ", got[static_cast<size_t>(q)], " on data-parallel rank ",
                     q, " (no label kept, or non-finite logits)");
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
  float head_share(const Tensor& h, Tensor* dh) {
    float part = 0.f;
    const Tensor dy = share_logits(view(h), m.wte_, 0, &part);
    *dh = f32({h.dim(0), H});
    share_products(view(dy), view(h), m.wte_, view(*dh));
    return kept == 0 ? std::numeric_limits<float>::quiet_NaN() : part;
  }

  // The head split's shares, on either stage: the logits of `h` (the final
  // hidden states of tokens [row0, row0 + rows)) through W, turned in place
  // into the gradient of their loss share (*loss: their losses summed over
  // the micro-batch's kept labels, as its mean), times grad_scale.
  Tensor share_logits(const View& h, const Tensor& W, int64_t row0, float* loss_share) {
    const int64_t rows = h.shape[0];
    Tensor logits = f32({rows, m.vocab_local_});
    linear(be, bp, view(logits), h, W, nullptr);
    const Tensor lab = upload(host_labels.data() + row0, OSLO_DTYPE_I64, {rows});
    vocab_parallel_cross_entropy(m.ctx_, logits, lab, m.cfg_.vocab_size, -100, nullptr, loss_share,
                                 &logits, std::max<int64_t>(kept, 1));
    if (grad_scale != 1.f) be.unary(OSLO_BK_SCALE, view(logits), view(logits), grad_scale);
    return logits;
  }
  // Their backward: dh = dy W (summed over the tensor group), W's gradient
  // += dy^T h.
  void share_products(const View& dy, const View& h, const Tensor& W, const View& dh) {
    Tensor dy_keep, x_keep;
    const View dyw = in_dtype(dy, W.dtype(), &dy_keep), xw = in_dtype(h, W.dtype(), &x_keep);
    be.matmul(dh, dyw, view(W));
    be.matmul(view(m.grad_of(W)), transposed(dyw), xw, nullptr, 1.f, 1.f);
    reduce_sum(m.ctx_, OSLO_GROUP_TENSOR, dh);
  }

  // Whether the head's weight comes in row chunks (Model::HeadRows).
  bool chunked() const { return labels_in && m.head_rows_.parts > 0; }

  // The head chunk by chunk (Model::HeadRows): with `logits` its forward
  // (each chunk's blocks of logit columns from hf), else its backward from
  // dlogits: dhf, and each chunk's weight gradient handed to reduce. Only
  // one chunk of W (and of its gradient) exists at a time.
  void head_chunks(Tensor* logits) {
    const Model::HeadRows& hr = m.head_rows_;
    const Tensor& W = m.lm_head_;
    const int64_t V = W.dim(0), c = hr.chunk_rows, n = hr.parts;
    Tensor h_keep, dy_keep;
    const View hw = in_dtype(view(hf), W.dtype(), &h_keep);
    View dyw;
    if (!logits) {
      dyw = in_dtype(view(dlogits), W.dtype(), &dy_keep);
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
          be.matmul(columns(view(*logits), r0, count), hw, transposed(wq));
        } else {
          const View dy = columns(dyw, r0, count);
          be.matmul(view(dhf), dy, wq, nullptr, 1.f, 1.f);                   // dh += dy Wq
          be.matmul(row_range(view(gc), q * c, count), transposed(dy), hw);  // dWq = dy^T h
        }
      }
      if (!logits) hr.reduce(k, view(gc));
    }
    if (!logits) dlogits = Tensor();
  }

  // The head's and the final norm's backward: dx, the gradient of the
  // last block's output.
  void head_backward() {
    // The embedding's backward reads no weight of unit 0 that ZeRO-3
    // partitions (only its 1-D norm): unit 0 goes as soon as the head's
    // input gradient is made, before its weight gradient, so that a whole
    // head and its whole gradient never coexist.
    if (labels_in && chunked()) {
      head_chunks(nullptr);
      reduce_sum(m.ctx_, OSLO_GROUP_TENSOR, view(dhf));
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
        share_products(view(dlogits), row_range(view(hf), n0, n1), m.lm_head_,
                       row_range(view(dhf), n0, n1));
        dlogits = Tensor();
      }
    } else if (labels_in) {
      dhf = f32({BS, H});
      const Tensor& W = m.lm_head_;
      Tensor dy_keep, x_keep;
      const View dyw = in_dtype(view(dlogits), W.dtype(), &dy_keep),
                 xw = in_dtype(view(hf), W.dtype(), &x_keep);
      be.matmul(view(dhf), dyw, view(W));  // dh = dlogits W
      if (m.param_hook_) m.param_hook_(0, false, -1);
      be.matmul(view(m.grad_of(W)), transposed(dyw), xw, nullptr, 1.f, 1.f);  // dW += dy^T h
      dlogits = Tensor();
      reduce_sum(m.ctx_, OSLO_GROUP_TENSOR, view(dhf));
    } else if (m.param_hook_) {
      m.param_hook_(0, false, -1);
    }
    dx = f32({BS, H});
    if (m.norm_w_.defined())
      norm_bw(view(dx), view(x), m.norm_w_, m.norm_b_, view(dhf), false);
    else
      be.convert(view(dx), view(dhf));
    if (m.backward_hook_) m.backward_hook_(0);
  }

  // Blocks [l0, l1) backward, from the last: dx becomes the gradient of
  // block l0's input; each block's activations are freed after it.
  void backward_blocks(size_t l0, size_t l1) {
    for (size_t li = l1; li-- > l0;) {
      Layer& L = *m.layers_[li];
      Saved& sv = saved[li];
      if (m.param_hook_) {  // the last block is still held from its forward
        const int unit = 1 + static_cast<int>(li);
        m.param_hook_(unit, true, unit > 1 ? unit - 1 : -1);
      }
      if (m.checkpoint_activations_) {
        const Tensor x_in = sv.x_in;
        block_forward(li, x_in, sv);  // recompute what the forward dropped
      }
      // Post-norm: out = LN2(r2), r2 = x_mid + down(m) + down_b.
      Tensor dr2;
      if (post) {
        dr2 = f32({BS, H});
        norm_bw(view(dr2), view(sv.r2), L.ln2_w, L.ln2_b, view(dx), false);
      }
      const Tensor& dout = post ? dr2 : dx;
      const Tensor& mlp_in = post ? sv.x_mid : sv.h2;
      // MLP branch: out = min + down(m) + down_b (dd = dout, complete on every rank).
      const int64_t il = sv.m.dim(1);
      if (L.down_b.defined()) be.sum_rows(view(m.grad_of(L.down_b)), view(dout), true);
      Tensor dm = f32({BS, il});
      const View dmv = view(dm);
      linear_bw(view(dout), view(sv.m), L.down_w, nullptr, &dmv, false);
      View gv, uv;
      Tensor dgu, dup, dgate;
      View dgv, duv;
      if (L.gate_up_w.defined()) {
        gv = columns(view(sv.gu), 0, il);
        uv = columns(view(sv.gu), il, il);
        dgu = f32({BS, 2 * il});
        dgv = columns(view(dgu), 0, il);
        duv = columns(view(dgu), il, il);
      } else {
        uv = view(sv.up);
        dup = f32({BS, il});
        duv = view(dup);
        if (tr.gated_mlp) {
          gv = view(sv.gate);
          dgate = f32({BS, il});
          dgv = view(dgate);
        }
      }
      if (tr.gated_mlp) {
        // m = act(g) * u: du = dm * act(g), dg = act'(g) * (dm * u).
        Tensor t = f32({BS, il});
        be.unary(act_op, view(t), gv);
        be.binary(OSLO_BK_MUL, duv, view(dm), view(t));
        be.binary(OSLO_BK_MUL, view(t), view(dm), uv);
        be.unary_backward(act_op, dgv, gv, view(t));
      } else {
        be.unary_backward(act_op, duv, uv, view(dm));
      }
      Tensor dh2 = f32({BS, H});
      if (L.gate_up_w.defined()) {
        const View dh = view(dh2);
        linear_bw(view(dgu), view(mlp_in), L.gate_up_w, &L.gate_up_b, &dh, false);
      } else {
        const View dh = view(dh2);
        linear_bw(duv, view(mlp_in), L.up_w, &L.up_b, &dh, false);
        if (tr.gated_mlp) linear_bw(dgv, view(mlp_in), L.gate_w, &L.gate_b, &dh, true);
      }
      // Attention branch: da = dx (parallel residual) or d(x_mid) (post-norm:
      // d(r1) = LN1's input gradient of d(x_mid)).
      Tensor dmid;
      if (post) {
        reduce_sum(m.ctx_, OSLO_GROUP_TENSOR, view(dh2));
        be.binary(OSLO_BK_ADD, view(dh2), view(dh2), view(dr2));  // d(x_mid)
        dmid = f32({BS, H});
        norm_bw(view(dmid), view(sv.r1), L.ln1_w, L.ln1_b, view(dh2), false);
      } else if (!parallel) {
        reduce_sum(m.ctx_, OSLO_GROUP_TENSOR, view(dh2));
        dmid = f32({BS, H});
        be.convert(view(dmid), view(dx));
        norm_bw(view(dmid), view(sv.x_mid), L.ln2_w, L.ln2_b, view(dh2), true);
      }
      const Tensor& da = parallel ? dx : dmid;
      if (L.o_b.defined()) be.sum_rows(view(m.grad_of(L.o_b)), view(da), true);
      Tensor datt = f32({BS, qw});
      const View dattv = view(datt);
      linear_bw(view(da), view(sv.att), L.o_w, nullptr, &dattv, false);
      // Attention backward, composed: P recomputed from q and k.
      View q, k, v;
      Tensor dqkv, dq, dk, dv;
      View dqv, dkv, dvv;
      if (L.qkv_w.defined()) {
        q = columns(view(sv.qkv), 0, qw);
        k = columns(view(sv.qkv), qw, kw);
        v = columns(view(sv.qkv), qw + kw, kw);
        dqkv = f32({BS, qw + 2 * kw});
        dqv = columns(view(dqkv), 0, qw);
        dkv = columns(view(dqkv), qw, kw);
        dvv = columns(view(dqkv), qw + kw, kw);
      } else {
        q = view(sv.q);
        k = view(sv.k);
        v = view(sv.v);
        dq = f32({BS, qw});
        dk = f32({BS, kw});
        dv = f32({BS, kw});
        dqv = view(dq);
        dkv = view(dk);
        dvv = view(dv);
      }
      {
        const int64_t nkv = m.nkvl_, BH = B * nkv;
        // Queries grouped by key/value head: [B, nkv, g, S, D] <-> [B*nkv, g*S, D].
        auto grouped = [&](const View& t) {
          const int64_t rs = t.strides[0];
          return strided(t.data, t.dtype, {B, nkv, g, S, D}, {S * rs, g * D, D, rs, 1});
        };
        auto packed5 = [&](const Tensor& t) {
          return strided(t.data(), OSLO_DTYPE_F32, {B, nkv, g, S, D},
                         {nkv * g * S * D, g * S * D, S * D, D, 1});
        };
        Tensor qc = f32({BH, g * S, D}), doc = f32({BH, g * S, D});
        Tensor kc = f32({BH, S, D}), vc = f32({BH, S, D});
        be.convert(packed5(qc), grouped(q));
        be.convert(packed5(doc), grouped(view(datt)));
        be.convert(strided(kc.data(), OSLO_DTYPE_F32, {B, nkv, S, D}, {nkv * S * D, S * D, D, 1}),
                   heads4(k, nkv));
        be.convert(strided(vc.data(), OSLO_DTYPE_F32, {B, nkv, S, D}, {nkv * S * D, S * D, D, 1}),
                   heads4(v, nkv));
        auto tr3 = [&](const Tensor& t) { return transposed(view(t)); };
        Tensor P = f32({BH, g * S, S}), dP = f32({BH, g * S, S}), dS = f32({BH, g * S, S});
        be.matmul(view(P), view(qc), tr3(kc));
        const View p5 = strided(P.data(), OSLO_DTYPE_F32, {B, nkv, g, S, S},
                                {nkv * g * S * S, g * S * S, S * S, S, 1});
        const View m5 = strided(mask_t.data(), OSLO_DTYPE_F32, {B, 1, 1, 1, S}, {S, 0, 0, 0, 1});
        be.softmax(p5, p5, &m5, scale, tr.causal, 0);
        Tensor dqc = f32({BH, g * S, D}), dkc = f32({BH, S, D}), dvc = f32({BH, S, D});
        be.matmul(view(dvc), tr3(P), view(doc));  // dV = P^T dO
        be.matmul(view(dP), view(doc), tr3(vc));  // dP = dO V^T
        be.softmax_backward(view(dS), view(P), view(dP), scale);
        be.matmul(view(dqc), view(dS), view(kc));  // dQ = dS K
        be.matmul(view(dkc), tr3(dS), view(qc));   // dK = dS^T Q
        be.convert(grouped(dqv), packed5(dqc));
        be.convert(heads4(dkv, nkv),
                   strided(dkc.data(), OSLO_DTYPE_F32, {B, nkv, S, D}, {nkv * S * D, S * D, D, 1}));
        be.convert(heads4(dvv, nkv),
                   strided(dvc.data(), OSLO_DTYPE_F32, {B, nkv, S, D}, {nkv * S * D, S * D, D, 1}));
      }
      if (tr.rotary) {  // the transpose of a rotation is the rotation back
        rope(dqv, m.nhl_, nsin_t);
        rope(dkv, m.nkvl_, nsin_t);
      }
      Tensor dh1 = f32({BS, H});
      {
        const View dh = view(dh1), ain = post ? view(sv.x_in) : view(sv.h1);
        if (L.qkv_w.defined()) {
          kv_linear_bw(view(dqkv), ain, L.qkv_w, &L.qkv_b, &dh, false, {{qw, kw}, {qw + kw, kw}});
        } else {
          linear_bw(dqv, ain, L.q_w, &L.q_b, &dh, false);
          kv_linear_bw(dkv, ain, L.k_w, &L.k_b, &dh, true, {{0, kw}});
          kv_linear_bw(dvv, ain, L.v_w, &L.v_b, &dh, true, {{0, kw}});
        }
      }
      if (post) {
        // x feeds the attention products and the residual into r1.
        reduce_sum(m.ctx_, OSLO_GROUP_TENSOR, view(dh1));
        be.binary(OSLO_BK_ADD, view(dx), view(dmid), view(dh1));
      } else if (parallel) {
        // Both branches read the block's input: one all-reduce for both.
        Tensor both = f32({2, BS, H});
        be.convert(strided(both.data(), OSLO_DTYPE_F32, {BS, H}, {H, 1}), view(dh1));
        be.convert(strided(model_detail::at(view(both), BS * H), OSLO_DTYPE_F32, {BS, H}, {H, 1}),
                   view(dh2));
        reduce_sum(m.ctx_, OSLO_GROUP_TENSOR, view(both));
        const View d1 = strided(both.data(), OSLO_DTYPE_F32, {BS, H}, {H, 1});
        const View d2 =
            strided(model_detail::at(view(both), BS * H), OSLO_DTYPE_F32, {BS, H}, {H, 1});
        norm_bw(view(dx), view(sv.x_in), L.ln1_w, L.ln1_b, d1, true);
        norm_bw(view(dx), view(sv.x_in), L.ln2_w, L.ln2_b, d2, true);
      } else {
        reduce_sum(m.ctx_, OSLO_GROUP_TENSOR, view(dh1));
        be.convert(view(dx), view(dmid));
        norm_bw(view(dx), view(sv.x_in), L.ln1_w, L.ln1_b, view(dh1), true);
      }
      sv = Saved{};  // this block's activations are no longer needed
      if (m.param_hook_) m.param_hook_(1 + static_cast<int>(li), false, -1);
      if (m.backward_hook_) m.backward_hook_(static_cast<int>(m.layers_.size() - li));
    }
  }

  // The embeddings' backward from dx.
  void embed_backward() {
    // Embeddings: the norm over their sum, the token table's local rows (but
    // the pad row where the family has padding_idx), the position and
    // token-type tables.
    if (m.emb_ln_w_.defined()) {
      Tensor de = f32({BS, H});
      norm_bw(view(de), view(emb_in), m.emb_ln_w_, m.emb_ln_b_, view(dx), false);
      dx = de;
    }
    if (m.type_.defined())
      be.scatter_add_rows(view(m.grad_of(m.type_)), view(types_t), view(dx), 0);
    if (tr.embed_scale != 1.0) {
      Tensor t = f32({BS, H});
      be.unary(OSLO_BK_SCALE, view(t), view(dx), emb_scale);
      be.scatter_add_rows(view(m.grad_of(m.wte_)), view(grad_ids_t), view(t), m.vocab_start_);
    } else {
      be.scatter_add_rows(view(m.grad_of(m.wte_)), view(grad_ids_t), view(dx), m.vocab_start_);
    }
    if (m.wpe_.defined()) be.scatter_add_rows(view(m.grad_of(m.wpe_)), view(pos_t), view(dx), 0);
    if (m.backward_hook_) m.backward_hook_(static_cast<int>(m.layers_.size()) + 1);
  }
};

float Model::loss_backward(const std::vector<int64_t>& ids, const std::vector<int64_t>& labels,
                           const std::vector<int64_t>& mask, int64_t B, int64_t S,
                           float grad_scale) {
  check_single_stage();
  OSLO_CHECK(causal() && lm_head_.defined(), OSLO_ERR_NOT_SUPPORTED, cfg_.model_type,
             ": the causal-LM loss needs a causal language model (an encoder trains from a "
             "gradient of its hidden states: hidden_backward)");
  return train_pass(ids, &labels, mask, {}, nullptr, B, S, grad_scale);
}

void Model::hidden_backward(const std::vector<int64_t>& ids, const std::vector<int64_t>& mask,
                            const std::vector<int64_t>& token_types, int64_t B, int64_t S,
                            const std::vector<float>& grad_hidden, float grad_scale) {
  train_pass(ids, nullptr, mask, token_types, &grad_hidden, B, S, grad_scale);
}

void Model::check_single_stage() const {
  OSLO_CHECK(pp_ == 1, OSLO_ERR_NOT_SUPPORTED, "model: training with pipeline_parallel_size ", pp_,
             " (> 1) is not supported yet: pipeline stages run inference only");
}

float Model::train_pass(const std::vector<int64_t>& ids, const std::vector<int64_t>* labels_in,
                        const std::vector<int64_t>& mask0, const std::vector<int64_t>& types0,
                        const std::vector<float>* grad_hidden, int64_t B, int64_t S,
                        float grad_scale, PipeRun* pipe) {
  if (!pipe) check_single_stage();
  const BlockTraits& tr = cfg_.traits;
  const bool post = tr.post_norm;
  OSLO_CHECK(!post || !tr.parallel_residual, OSLO_ERR_NOT_SUPPORTED, cfg_.model_type,
             ": post-norm blocks with a parallel residual are not supported in training");
  for (const PlacedTensor& p : params_) {
    const oslo_dtype dt = p.tensor.dtype();
    OSLO_CHECK(dt == OSLO_DTYPE_F32 || dt == OSLO_DTYPE_BF16 || dt == OSLO_DTYPE_F16,
               OSLO_ERR_NOT_SUPPORTED, "model: training needs f32, bf16 or f16 weights (",
               p.placement.name, " is ", dtype_name(dt), ")");
  }
  // This rank's checks, then one exchange over the tensor group: every rank
  // learns whether any rank refused its batch and whether all hold the same
  // one, before the first collective of the step (no rank is left waiting).
  std::exception_ptr local_error;
  std::vector<int64_t> mask, types;
  static const std::vector<int64_t> kNone;
  const std::vector<int64_t>& labels = labels_in ? *labels_in : kNone;
  const int64_t H0 = cfg_.hidden_size;
  const size_t n = static_cast<size_t>(std::max<int64_t>(B, 0) * std::max<int64_t>(S, 0));
  try {
    OSLO_CHECK(B > 0 && S > 0, OSLO_ERR_INVALID_ARGUMENT, "loss: batch (", B, ") and sequence (", S,
               ") must be positive");
    if (pipe) {
      OSLO_CHECK(pipe->micro_batches >= 1 && B % pipe->micro_batches == 0,
                 OSLO_ERR_INVALID_ARGUMENT, "pipeline: ", pipe->micro_batches,
                 " micro-batches must be at least 1 and divide the batch of ", B, " rows");
      OSLO_CHECK(!param_hook_, OSLO_ERR_NOT_SUPPORTED,
                 "pipeline: ZeRO-3 with pipeline_parallel_size ", pp_,
                 " (ZeRO 0 or 1 with pipeline parallelism)");
      const double f = pipe->head_split;
      OSLO_CHECK(std::isfinite(f) && f <= 1 && (f >= 0 || f == -1), OSLO_ERR_INVALID_ARGUMENT,
                 "pipeline: pipeline_head_split ", f,
                 " must be 0 (off), a fraction in (0, 1] or -1 (by the stages' costs)");
      if (f != 0) {
        OSLO_CHECK(pp_ > 1, OSLO_ERR_NOT_SUPPORTED, "pipeline: pipeline_head_split ", f,
                   " needs pipeline stages (pipeline_parallel_size is 1)");
        OSLO_CHECK(cfg_.tie_word_embeddings && labels_in, OSLO_ERR_NOT_SUPPORTED,
                   "pipeline: pipeline_head_split needs tied word embeddings (the first stage "
                   "computes its share of the head with its token table); ",
                   cfg_.model_type, " here has an untied head");
      }
    }
    OSLO_CHECK(ids.size() == n && (!labels_in || labels.size() == n), OSLO_ERR_SHAPE,
               "loss: ", ids.size(), " ids and ", labels.size(), " labels for [", B, ", ", S, "]");
    OSLO_CHECK(!grad_hidden || grad_hidden->size() == n * static_cast<size_t>(H0), OSLO_ERR_SHAPE,
               "backward: the hidden states' gradient has ", grad_hidden ? grad_hidden->size() : 0,
               " values for [", B, ", ", S, ", ", H0, "]");
    OSLO_CHECK(type_.defined() || types0.empty(), OSLO_ERR_INVALID_ARGUMENT,
               "backward: ", cfg_.model_type, " has no token types");
    types = types0.empty() ? std::vector<int64_t>(type_.defined() ? n : 0, 0) : types0;
    OSLO_CHECK(types.size() == (type_.defined() ? n : 0), OSLO_ERR_SHAPE,
               "backward: token types have ", types.size(), " entries for [", B, ", ", S, "]");
    for (size_t i = 0; i < types.size(); ++i)
      OSLO_CHECK(types[i] >= 0 && types[i] < cfg_.type_vocab_size, OSLO_ERR_INVALID_ARGUMENT,
                 "backward: token type ", types[i], " at position ", i, " is outside [0, ",
                 cfg_.type_vocab_size, ")");
    if (grad_hidden)
      for (size_t i = 0; i < grad_hidden->size(); ++i)
        OSLO_CHECK(std::isfinite((*grad_hidden)[i]), OSLO_ERR_INVALID_ARGUMENT,
                   "backward: the hidden states' gradient is ", (*grad_hidden)[i], " at ", i);
    mask = mask0.empty() ? std::vector<int64_t>(n, 1) : mask0;
    OSLO_CHECK(mask.size() == n, OSLO_ERR_SHAPE, "loss: attention mask has ", mask.size(),
               " entries for [", B, ", ", S, "]");
    OSLO_CHECK(cfg_.sliding_window == 0 || S <= cfg_.sliding_window, OSLO_ERR_NOT_SUPPORTED,
               cfg_.model_type, ": sequences longer than the sliding window (", cfg_.sliding_window,
               ") are not supported");
    for (size_t i = 0; i < n; ++i)
      OSLO_CHECK(ids[i] >= 0 && ids[i] < cfg_.vocab_size, OSLO_ERR_INVALID_ARGUMENT, "loss: token ",
                 ids[i], " at position ", i, " is outside [0, ", cfg_.vocab_size, ")");
    if (labels_in)
      for (size_t i = 0; i < n; ++i)
        OSLO_CHECK(labels[i] == -100 || (labels[i] >= 0 && labels[i] < cfg_.vocab_size),
                   OSLO_ERR_INVALID_ARGUMENT, "loss: label ", labels[i], " at position ", i,
                   " is outside the vocabulary [0, ", cfg_.vocab_size, ") and not -100 (ignored)");
  } catch (...) {
    local_error = std::current_exception();
  }
  // One exchange per group (the tensor group; the pipeline group when the
  // stages run the batch together; the data group with data parallelism):
  // every rank learns whether any rank refused its batch and whether the
  // ranks that must hold the same batch do. Every rank runs every exchange,
  // refused or not, so that none is left waiting in one.
  uint32_t h = 0;
  if (tp_ > 1 || (pipe && pp_ > 1)) {  // the exchanges that compare batches
    h = crc32c(h, &B, sizeof B);
    h = crc32c(h, &S, sizeof S);
    h = crc32c(h, &grad_scale, sizeof grad_scale);
    const std::vector<int64_t>* parts[] = {&ids, &labels, &mask, &types};
    for (const std::vector<int64_t>* v : parts)
      if (!v->empty()) h = crc32c(h, v->data(), v->size() * sizeof(int64_t));
    if (grad_hidden && !grad_hidden->empty())
      h = crc32c(h, grad_hidden->data(), grad_hidden->size() * sizeof(float));
    if (pipe) {
      h = crc32c(h, &pipe->micro_batches, sizeof pipe->micro_batches);
      h = crc32c(h, &pipe->head_split, sizeof pipe->head_split);
    }
  }
  std::exception_ptr verdict = local_error;
  auto agree = [&](oslo_group grp, const char* who, bool same_batch, const char* what) {
    const int np = group_size(ctx_, grp);
    const int64_t mine[4] = {verdict ? 1 : 0, B, S, static_cast<int64_t>(h)};
    Tensor t = scratch(ctx_.backend_ptr(), OSLO_DTYPE_I64, {4});
    Tensor all = scratch(ctx_.backend_ptr(), OSLO_DTYPE_I64, {np, 4});
    ctx_.backend().copy(t.data(), mine, sizeof mine, CopyKind::HostToDevice);
    gather_first_dim(ctx_, grp, view(t), view(all));
    std::vector<int64_t> got(static_cast<size_t>(4 * np));
    ctx_.backend().copy(got.data(), all.data(), got.size() * sizeof(int64_t),
                        CopyKind::DeviceToHost);
    if (verdict) return;
    try {
      for (int q = 0; q < np; ++q) {
        const int64_t* g = &got[static_cast<size_t>(4 * q)];
        OSLO_CHECK(g[0] == 0, OSLO_ERR_INVALID_ARGUMENT, "loss: ", who, " rank ", q,
                   " refused its batch (its error says why)");
        if (same_batch)
          OSLO_CHECK(g[1] == got[1] && g[2] == got[2] && g[3] == got[3], OSLO_ERR_INVALID_ARGUMENT,
                     "loss: the batch differs between ", who, " ranks: rank ", q, " has [", g[1],
                     ", ", g[2], "], rank 0 [", got[1], ", ", got[2], "] (", what, ")");
      }
    } catch (...) {
      verdict = std::current_exception();
    }
  };
  if (tp_ > 1)
    agree(OSLO_GROUP_TENSOR, "tensor-parallel", true,
          "every rank of a tensor group must pass the same ids, labels, mask, token types, "
          "hidden-state gradient and grad_scale");
  if (pipe && pp_ > 1)
    agree(OSLO_GROUP_PIPELINE, "pipeline", true,
          "every stage of a pipeline must pass the same ids, labels, mask, grad_scale, "
          "number of micro-batches and head split");
  // Data parallelism: the data-parallel ranks hold other batches; they
  // learn whether any of them refused its batch, so that none is left
  // waiting in the gradient reduction.
  if (agree_over_data_ && group_size(ctx_, OSLO_GROUP_DATA) > 1)
    agree(OSLO_GROUP_DATA, "data-parallel", false, "");
  if (verdict) std::rethrow_exception(verdict);
  if (!param_hook_) check_whole("training without its ZeRO-3 optimizer");
  if (grads_.empty()) zero_grad();
  if (pipe) {
    run_pipeline(ids, labels, mask, B, S, grad_scale, *pipe);
    return pipe->stats.loss;
  }
  Pass p(*this, ids, labels_in, mask, types, grad_hidden, B, S, grad_scale);
  // ZeRO-3: the embeddings, final norm and head from the embedding to the
  // head's backward, each block while it runs (the last one from its
  // forward through its backward). Each acquisition names the unit the pass
  // needs next, which the hook may start gathering now.
  const int nl = static_cast<int>(layers_.size());
  if (param_hook_) param_hook_(0, true, nl > 0 ? 1 : -1);
  p.embed();
  // The head needs nothing of unit 0 that is partitioned when its weight
  // comes in row chunks or no loss is computed (only the final norm, kept
  // whole): unit 0 goes now, not after the head.
  if (param_hook_ && (p.chunked() || !labels_in)) param_hook_(0, false, -1);
  p.forward_blocks(0, layers_.size());
  p.head_forward();
  p.head_backward();
  p.backward_blocks(0, layers_.size());
  p.embed_backward();
  return p.loss;
}

Model::PipelineStats Model::pipeline_loss_backward(const std::vector<int64_t>& ids,
                                                   const std::vector<int64_t>& labels,
                                                   const std::vector<int64_t>& mask, int64_t B,
                                                   int64_t S, int micro_batches, float grad_scale,
                                                   double head_split) {
  OSLO_CHECK(causal() && (lm_head_.defined() || !last_stage()), OSLO_ERR_NOT_SUPPORTED,
             cfg_.model_type,
             ": the causal-LM loss needs a causal language model (an encoder trains from a "
             "gradient of its hidden states: hidden_backward)");
  PipeRun run;
  run.micro_batches = micro_batches;
  run.head_split = head_split;
  train_pass(ids, &labels, mask, {}, nullptr, B, S, grad_scale, &run);
  return run.stats;  // the loss may be non-finite (see run_pipeline)
}

Model::PipelineCosts Model::pipeline_costs(double share) const {
  // Each virtual stage's blocks (stage_cost_; their backward twice their
  // forward) and the head's, whose forward also takes the cross-entropy over
  // the vocabulary: about 800 multiply-adds of work per logit (measured on
  // an AVX-512 CPU in f32), so that its backward (two products) costs about
  // what its forward does.
  PipelineCosts c;
  if (stage_cost_.empty()) return c;  // one stage without virtual stages
  const double V = static_cast<double>(cfg_.vocab_size), H = static_cast<double>(cfg_.hidden_size);
  const double head_fwd = (H + 768.0) * V, head_bwd = 2.0 * H * V;
  c.forward = stage_cost_;
  for (double x : stage_cost_) c.backward.push_back(2 * x);
  c.forward.back() += head_fwd * (1 - share);
  c.backward.back() += head_bwd * (1 - share);
  for (double& x : c.forward) x = std::max(x, 1.0);
  for (double& x : c.backward) x = std::max(x, 1.0);
  c.head = (head_fwd + head_bwd) * share / 3;
  return c;
}

void Model::run_pipeline(const std::vector<int64_t>& ids, const std::vector<int64_t>& labels,
                         const std::vector<int64_t>& mask, int64_t B, int64_t S, float grad_scale,
                         PipeRun& pipe) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  const int mb = pipe.micro_batches, v = vstages_;
  const int64_t rows = B / mb, H = cfg_.hidden_size;
  const size_t per = static_cast<size_t>(rows * S);
  auto slice = [per](const std::vector<int64_t>& vec, int i) {
    return std::vector<int64_t>(vec.begin() + static_cast<std::ptrdiff_t>(i * per),
                                vec.begin() + static_cast<std::ptrdiff_t>((i + 1) * per));
  };
  // The head split: the first stage's share of each micro-batch's tokens
  // (pipe.head_split a fraction, or < 0: the share that makes the first and
  // the last rank's work per token equal).
  int64_t n0 = 0;
  if (pipe.head_split != 0) {
    double f = pipe.head_split;
    if (f < 0) {
      const double head = 3 * pipeline_costs(1).head;  // its forward and backward
      double first = 0, last = head;
      for (int c = 0; c < v; ++c) {
        first += 3 * stage_cost_[static_cast<size_t>(c * pp_)];
        last += 3 * stage_cost_[static_cast<size_t>(c * pp_ + pp_ - 1)];
      }
      f = (last - first) / (2 * head);
    }
    n0 = std::clamp<int64_t>(std::llround(std::clamp(f, 0.0, 1.0) * static_cast<double>(per)), 0,
                             static_cast<int64_t>(per));
  }
  pipe.stats.head_rows = n0;
  const PipelineCosts cost = pipeline_costs(static_cast<double>(n0) / static_cast<double>(per));
  // Megatron's order for this rank (or the head split's), with the
  // transfers placed so that blocking sends cannot deadlock (pipeline_plan).
  const std::vector<PipeStep> plan =
      n0 > 0
          ? pipeline_plan_head_split(pp_, pp_rank_, mb, v, cost.forward, cost.head, cost.backward)
          : pipeline_plan(pp_, pp_rank_, mb, v, cost.forward, cost.backward);
  Backend& be = ctx_.backend();
  const int last_vs = pp_ * v - 1;
  // The backward hook (data parallelism) sees only the last micro-batch's
  // backward of each chunk; it is restored whatever happens.
  struct HookGuard {
    std::function<void(int)>& slot;
    std::function<void(int)> saved;
    ~HookGuard() { slot = std::move(saved); }
  } guard{backward_hook_, backward_hook_};
  const float g = grad_scale / static_cast<float>(mb);
  // One pass per micro-batch, alive from its first forward to its last
  // backward; the messages received and the outputs waiting to be sent.
  std::vector<std::unique_ptr<Pass>> live(static_cast<size_t>(mb));
  std::map<PipeMessage, Tensor> inbox, outbox;
  double loss_sum = 0, compute = 0;
  int alive = 0, peak = 0;
  for (const PipeStep& st : plan) {
    if (st.kind == PipeStep::RECV) {
      if (st.peer == pp_rank_) continue;  // handed over in memory by the send
      Tensor t = scratch(ctx_.backend_ptr(), OSLO_DTYPE_F32, {st.message.head ? n0 : rows * S, H});
      recv(ctx_, OSLO_GROUP_PIPELINE, t.data(), t.nbytes(), st.peer);
      inbox[st.message] = t;
      continue;
    }
    if (st.kind == PipeStep::SEND) {
      auto it = outbox.find(st.message);
      OSLO_CHECK(it != outbox.end(), OSLO_ERR_INTERNAL, "pipeline: a send before its output");
      if (st.peer == pp_rank_) {
        inbox[st.message] = it->second;
      } else {
        send(ctx_, OSLO_GROUP_PIPELINE, it->second.data(), it->second.nbytes(), st.peer);
      }
      outbox.erase(it);
      continue;
    }
    const PipeOp& op = st.op;
    const int i = op.microbatch, c = op.chunk, vs = c * pp_ + pp_rank_;
    const size_t l0 = chunks_[static_cast<size_t>(c)].first,
                 l1 = chunks_[static_cast<size_t>(c)].second;
    std::unique_ptr<Pass>& slot = live[static_cast<size_t>(i)];
    auto take = [&](bool gradient, int from, bool head_msg = false) {
      auto it = inbox.find(PipeMessage{gradient, i, from, head_msg});
      OSLO_CHECK(it != inbox.end(), OSLO_ERR_INTERNAL, "pipeline: an op before its input");
      Tensor t = it->second;
      inbox.erase(it);
      return t;
    };
    if (op.kind == PipeOp::HEAD) {  // the first stage's share of the head
      OSLO_CHECK(slot, OSLO_ERR_INTERNAL, "pipeline: head share of micro-batch ", i,
                 " before its forward");
      Pass& p = *slot;
      const Tensor h = take(false, last_vs, true);
      const auto c0 = Clock::now();
      Tensor dh;
      loss_sum += p.head_share(h, &dh);
      compute += seconds(c0, Clock::now());
      outbox[PipeMessage{true, i, 0, true}] = dh;
      continue;
    }
    if (op.kind == PipeOp::FORWARD) {
      if (!slot) {
        const std::vector<int64_t> id = slice(ids, i), lab = slice(labels, i), mk = slice(mask, i);
        slot = std::make_unique<Pass>(*this, id, &lab, mk, std::vector<int64_t>{}, nullptr, rows, S,
                                      g);
        slot->defer_loss_check = true;
        slot->head_rows0 = n0;
        peak = std::max(peak, ++alive);
      }
      Pass& p = *slot;
      if (vs > 0) p.x = take(false, vs - 1);
      const auto c0 = Clock::now();
      if (vs == 0) p.embed();
      p.forward_blocks(l0, l1);
      if (vs == last_vs) {
        p.head_forward();
        loss_sum += p.loss;
      }
      compute += seconds(c0, Clock::now());
      if (vs == last_vs && n0 > 0) {
        outbox[PipeMessage{false, i, last_vs, true}] = p.head_in;
        p.head_in = Tensor();
      }
      if (vs < last_vs) {
        outbox[PipeMessage{false, i, vs}] = p.x;
        p.x = Tensor();  // the blocks kept what their backward needs
      }
    } else {
      OSLO_CHECK(slot, OSLO_ERR_INTERNAL, "pipeline: backward of micro-batch ", i,
                 " before its forward");
      Pass& p = *slot;
      backward_hook_ = i == mb - 1 ? guard.saved : nullptr;
      if (vs < last_vs) p.dx = take(true, vs + 1);
      if (vs == last_vs && n0 > 0) p.head_grad = take(true, 0, true);
      const auto c0 = Clock::now();
      if (vs == last_vs) p.head_backward();
      p.backward_blocks(l0, l1);
      if (vs == 0) p.embed_backward();
      compute += seconds(c0, Clock::now());
      if (vs > 0) {
        outbox[PipeMessage{true, i, vs}] = p.dx;
        p.dx = Tensor();
      }
      if (c == 0) {  // the micro-batch's last op on this rank
        slot.reset();
        --alive;
      }
    }
  }
  // Every stage learns the last stage's mean loss and every stage's times.
  const double wall = seconds(t0, Clock::now());
  const float mine[3] = {static_cast<float>(loss_sum / mb), static_cast<float>(compute),
                         static_cast<float>(wall)};
  Tensor t = scratch(ctx_.backend_ptr(), OSLO_DTYPE_F32, {3});
  Tensor all = scratch(ctx_.backend_ptr(), OSLO_DTYPE_F32, {pp_, 3});
  be.copy(t.data(), mine, sizeof mine, CopyKind::HostToDevice);
  gather_first_dim(ctx_, OSLO_GROUP_PIPELINE, view(t), view(all));
  std::vector<float> got(static_cast<size_t>(3 * pp_));
  be.copy(got.data(), all.data(), got.size() * sizeof(float), CopyKind::DeviceToHost);
  // A non-finite loss is returned, not thrown: with data parallelism the
  // caller first finishes the gradient reduction every data rank takes
  // part in (Trainer::train_step), then fails on every rank.
  // The last stage's loss, plus the first stage's share with the head split
  // (the other stages report 0).
  float loss = 0.f;
  double busy = 0, longest = 0;
  for (int q = 0; q < pp_; ++q) {
    loss += got[static_cast<size_t>(3 * q)];
    busy += got[static_cast<size_t>(3 * q + 1)];
    longest = std::max<double>(longest, got[static_cast<size_t>(3 * q + 2)]);
  }
  pipe.stats.loss = loss;
  pipe.stats.micro_batches = mb;
  pipe.stats.peak_live = peak;
  pipe.stats.compute_s = compute;
  pipe.stats.wall_s = wall;
  pipe.stats.bubble = longest > 0 ? std::max(0.0, 1.0 - busy / (pp_ * longest)) : 0.0;
}

void Model::sync_tied_grads() {
  if (pp_ == 1 || !cfg_.tie_word_embeddings || !causal()) return;
  if (!first_stage() && !last_stage()) return;
  const Tensor& w = first_stage() ? wte_ : lm_head_;
  if (!w.defined()) return;
  if (grads_.empty()) zero_grad();
  Tensor& gr = grad_of(w);
  Backend& be = ctx_.backend();
  Tensor other = scratch(ctx_.backend_ptr(), OSLO_DTYPE_F32, gr.shape());
  // The first stage sends first, the last receives first.
  constexpr oslo_group kPipe = OSLO_GROUP_PIPELINE;
  if (first_stage()) {
    send(ctx_, kPipe, gr.data(), gr.nbytes(), pp_ - 1);
    recv(ctx_, kPipe, other.data(), other.nbytes(), pp_ - 1);
  } else {
    recv(ctx_, kPipe, other.data(), other.nbytes(), 0);
    send(ctx_, kPipe, gr.data(), gr.nbytes(), 0);
  }
  // a + b == b + a in floating point: both stages hold the same bits.
  be.binary(OSLO_BK_ADD, view(gr), view(gr), view(other));
}

}  // namespace oslo
