#include "core/model/block.hpp"

#include <cmath>

#include "core/common/error.hpp"
#include "core/layers/functional.hpp"
#include "core/parallel/mappings.hpp"
#include "core/tensor/view.hpp"
#include "core/tensor/view_util.hpp"

namespace oslo {

using views::at;
using views::rows_bcast;
using views::strided;

oslo_bk_unary act_op(Activation a) {
  switch (a) {
    case Activation::GELU: return OSLO_BK_GELU;
    case Activation::GELU_TANH: return OSLO_BK_GELU_TANH;
    case Activation::SILU: return OSLO_BK_SILU;
    case Activation::RELU: return OSLO_BK_RELU;
  }
  return OSLO_BK_GELU;
}

std::vector<const Tensor*> BlockWeights::all() const {
  return {&ln1_w,  &ln1_b,  &ln2_w,     &ln2_b,     &qkv_w,  &qkv_b, &q_w,  &q_b,
          &k_w,    &k_b,    &v_w,       &v_b,       &o_w,    &o_b,   &up_w, &up_b,
          &gate_w, &gate_b, &gate_up_w, &gate_up_b, &down_w, &down_b};
}

size_t BlockActs::bytes() const {
  size_t b = 0;
  for (const Tensor* t :
       {&x_in, &h1, &qkv, &q, &k, &v, &att, &x_mid, &h2, &gu, &up, &gate, &m, &r1, &r2})
    if (t->defined()) b += t->nbytes();
  return b;
}

namespace {

void add_bias(Backend& be, const View& y, const Tensor& b) {
  if (b.defined()) be.binary(OSLO_BK_ADD, y, y, rows_bcast(b, y.shape[0]));
}

}  // namespace

void Residual::flush(Backend& be) {
  if (!pending_) return;
  add_bias(be, pend_yv_, pend_b_);
  be.binary(OSLO_BK_ADD, view(x), view(x), pend_yv_);
  pending_ = false;
  pend_y_ = Tensor();
  pend_b_ = Tensor();
}

Block::Block(const BlockEnv& env)
    : e_(env),
      be_(env.ctx->backend()),
      bp_(env.ctx->backend_ptr()),
      tr_(env.cfg->traits),
      post_(tr_.post_norm),
      rms_(tr_.norm == NormKind::RMS_NORM),
      parallel_(tr_.parallel_residual),
      BS_(env.B * env.S),
      H_(env.cfg->hidden_size),
      D_(env.cfg->head_dim),
      qw_(env.nhl * env.cfg->head_dim),
      kw_(env.nkvl * env.cfg->head_dim),
      eps_(static_cast<float>(env.cfg->norm_eps)),
      act_(act_op(env.cfg->act)) {}

Tensor Block::f32(std::vector<int64_t> shape) const {
  return scratch(bp_, OSLO_DTYPE_F32, shape);
}

void Block::norm(const View& out, const View& in, const Tensor& w, const Tensor& b) const {
  View bv;
  if (b.defined()) bv = view(b);
  norm_forward(be_, out, in, view(w), b.defined() ? &bv : nullptr, eps_, rms_);
}

void Block::norm_x(Residual& r, const View& out, const Tensor& w, const Tensor& b) const {
  if (!r.pending_) return norm(out, view(r.x), w, b);
  View wv = view(w), bv, biasv;
  if (b.defined()) bv = view(b);
  if (r.pend_b_.defined()) biasv = view(r.pend_b_);
  be_.residual_norm(out, view(r.x), &r.pend_yv_, r.pend_b_.defined() ? &biasv : nullptr, &wv,
                    rms_ || !b.defined() ? nullptr : &bv, eps_, rms_);
  r.pending_ = false;
  r.pend_y_ = Tensor();
  r.pend_b_ = Tensor();
}

void Block::add(Residual& r, const Tensor& y, const Tensor& b) const {
  r.flush(be_);
  if (r.fuse) {
    r.pend_y_ = y;
    r.pend_yv_ = view(y);
    r.pend_b_ = b;
    r.pending_ = true;
    return;
  }
  add_bias(be_, view(y), b);
  Tensor out = f32({BS_, H_});
  be_.binary(OSLO_BK_ADD, view(out), view(r.x), view(y));
  r.x = out;
}

void Block::renorm(Residual& r, const Tensor& w, const Tensor& b, Tensor* sum) const {
  r.flush(be_);
  if (!sum) return norm(view(r.x), view(r.x), w, b);
  *sum = r.x;
  Tensor out = f32({BS_, H_});
  norm(view(out), view(r.x), w, b);
  r.x = out;
}

void Block::linear(const View& y, const View& x, const Tensor& w, const Tensor* b, bool packed,
                   const oslo_bk_unary* act, const View* gate) const {
  View bv;
  if (b && b->defined()) bv = view(*b);
  linear_forward(be_, bp_, y, x, view(w), (b && b->defined()) ? &bv : nullptr, act, gate,
                 packed && e_.pack ? e_.pack(w) : nullptr);
}

void Block::rope(const View& t, int64_t heads, const View& sn) const {
  be_.rope(strided(t.data, t.dtype, {BS_, heads, D_}, {t.strides[0], D_, 1}), e_.cos, sn);
}

void Block::forward(const BlockWeights& L, Residual& r, BlockBuffers* buf, BlockActs* keep) const {
  const bool pk = !keep;  // packed weight copies: inference only
  // Inference reuses the run's buffers; training keeps fresh ones.
  auto buffer = [&](Tensor BlockBuffers::*slot, std::vector<int64_t> shape) {
    if (keep || !buf) return f32(shape);
    Tensor& t = buf->*slot;
    if (!t.defined()) t = f32(shape);
    return t;
  };
  if (keep) {
    *keep = BlockActs{};
    keep->x_in = r.x;
  }
  // Attention input: the block's input (post-norm) or its norm.
  if (post_) r.flush(be_);
  Tensor h1;
  View ain = view(r.x);
  if (!post_) {
    h1 = buffer(&BlockBuffers::h, {BS_, H_});
    norm_x(r, view(h1), L.ln1_w, L.ln1_b);
    ain = view(h1);
  }
  Tensor qkv, qt, kt, vt;
  View q, k, v;
  if (L.qkv_w.defined()) {
    qkv = f32({BS_, qw_ + 2 * kw_});
    linear(view(qkv), ain, L.qkv_w, &L.qkv_b, pk);
    q = columns(view(qkv), 0, qw_);
    k = columns(view(qkv), qw_, kw_);
    v = columns(view(qkv), qw_ + kw_, kw_);
  } else {
    qt = f32({BS_, qw_});
    kt = f32({BS_, kw_});
    vt = f32({BS_, kw_});
    linear(view(qt), ain, L.q_w, &L.q_b, pk);
    linear(view(kt), ain, L.k_w, &L.k_b, pk);
    linear(view(vt), ain, L.v_w, &L.v_b, pk);
    q = view(qt);
    k = view(kt);
    v = view(vt);
  }
  if (tr_.rotary) {
    rope(q, e_.nhl, e_.sin);
    rope(k, e_.nkvl, e_.sin);
  }
  Tensor att = buffer(&BlockBuffers::att, {BS_, qw_});
  e_.attend(q, k, v, view(att));
  Tensor a = buffer(&BlockBuffers::tmp, {BS_, H_});
  linear(view(a), view(att), L.o_w, nullptr, pk);
  if (keep) {
    keep->h1 = h1;
    keep->qkv = qkv;
    keep->q = qt;
    keep->k = kt;
    keep->v = vt;
    keep->att = att;
  }
  // x + attention (the MLP's input with a sequential residual; post-norm:
  // LN1 of it, which is also the MLP's residual).
  if (!parallel_) {
    reduce_sum(*e_.ctx, OSLO_GROUP_TENSOR, view(a));
    add(r, a, L.o_b);
    if (post_) renorm(r, L.ln1_w, L.ln1_b, keep ? &keep->r1 : nullptr);
    if (keep) keep->x_mid = r.x;
  }
  // MLP (with a parallel residual, on the block's input).
  Tensor h2;
  View min = view(r.x);
  if (!post_) {
    h2 = keep ? f32({BS_, H_}) : buffer(&BlockBuffers::h, {BS_, H_});
    norm_x(r, view(h2), L.ln2_w, L.ln2_b);
    min = view(h2);
  }
  if (keep) keep->h2 = h2;
  Tensor d = buffer(&BlockBuffers::mlp_out, {BS_, H_});
  if (keep) {
    // The pre-activations stay for the backward: m = act(gate) * up, or
    // act(up).
    View gv, uv;
    int64_t il;
    if (L.gate_up_w.defined()) {  // fused [gate | up], local [gate_r | up_r]
      il = L.gate_up_w.dim(0) / 2;
      keep->gu = f32({BS_, 2 * il});
      linear(view(keep->gu), min, L.gate_up_w, &L.gate_up_b, false);
      gv = columns(view(keep->gu), 0, il);
      uv = columns(view(keep->gu), il, il);
    } else {
      il = L.up_w.dim(0);
      keep->up = f32({BS_, il});
      linear(view(keep->up), min, L.up_w, &L.up_b, false);
      uv = view(keep->up);
      if (tr_.gated_mlp) {
        keep->gate = f32({BS_, il});
        linear(view(keep->gate), min, L.gate_w, &L.gate_b, false);
        gv = view(keep->gate);
      }
    }
    keep->m = f32({BS_, il});
    if (tr_.gated_mlp) {
      be_.unary(act_, view(keep->m), gv);
      be_.binary(OSLO_BK_MUL, view(keep->m), view(keep->m), uv);
    } else {
      be_.unary(act_, view(keep->m), uv);
    }
    linear(view(d), view(keep->m), L.down_w, nullptr, false);
  } else {
    // The activation in the products' epilogues where the backend has them.
    Tensor up;
    View act_out;
    if (L.gate_up_w.defined()) {
      const int64_t il = L.gate_up_w.dim(0) / 2;
      up = f32({BS_, 2 * il});
      linear(view(up), min, L.gate_up_w, &L.gate_up_b, pk);
      const View g = columns(view(up), 0, il), u = columns(view(up), il, il);
      be_.unary(act_, g, g);
      be_.binary(OSLO_BK_MUL, u, u, g);
      act_out = u;
    } else {
      const int64_t il = L.up_w.dim(0);
      up = f32({BS_, il});
      if (tr_.gated_mlp) {
        // up = x W_up^T, then up = act(x W_gate^T) * up in the gate
        // product's epilogue.
        linear(view(up), min, L.up_w, &L.up_b, pk);
        const View uv = view(up);
        linear(uv, min, L.gate_w, &L.gate_b, pk, &act_, &uv);
      } else {
        linear(view(up), min, L.up_w, &L.up_b, pk, &act_);
      }
      act_out = view(up);
    }
    linear(view(d), act_out, L.down_w, nullptr, pk);
  }
  if (parallel_) {
    // x + attention + MLP: the two row-parallel partial sums share one
    // all-reduce.
    be_.binary(OSLO_BK_ADD, view(a), view(a), view(d));
    reduce_sum(*e_.ctx, OSLO_GROUP_TENSOR, view(a));
    add_bias(be_, view(a), L.o_b);
    add(r, a, L.down_b);
  } else {
    reduce_sum(*e_.ctx, OSLO_GROUP_TENSOR, view(d));
    add(r, d, L.down_b);
    if (post_) renorm(r, L.ln2_w, L.ln2_b, keep ? &keep->r2 : nullptr);
  }
}

// --- backward ---------------------------------------------------------------

void Block::linear_bw(const View& dy, const View& xin, const Tensor& w, const Tensor* b,
                      const View* dx, bool accumulate) const {
  const View dw = view(e_.grad(w));
  View db;
  if (b && b->defined()) db = view(e_.grad(*b));
  linear_backward(be_, bp_, dy, xin, view(w), &dw, (b && b->defined()) ? &db : nullptr, dx,
                  accumulate);
}

// With fewer key/value heads than ranks, each head is held by `copies`
// ranks (sharding.cpp), each of which sees only its own query heads' share
// of the head's gradient: this call's share is summed over the group (a
// [nkv, rows, cols] buffer, each rank writing its head's slot) before it is
// added to the accumulated gradient.
void Block::sum_over_head_copies(const View& part) const {  // [rows, cols]
  const int64_t nkv = e_.cfg->num_kv_heads, head = e_.rank / (e_.tp / nkv);
  const int64_t rows = part.shape[0], cols = part.shape[1];
  Tensor buf = f32({nkv, rows, cols});
  be_.fill(view(buf), 0.0);
  const View slot =
      strided(at(view(buf), head * rows * cols), OSLO_DTYPE_F32, {rows, cols}, {cols, 1});
  be_.convert(slot, part);
  reduce_sum(*e_.ctx, OSLO_GROUP_TENSOR, view(buf));
  be_.convert(part, slot);
}

// linear_bw for a product whose output rows [r0, r0 + n) for each range
// belong to a replicated key/value head.
void Block::kv_linear_bw(const View& dy, const View& xin, const Tensor& w, const Tensor* b,
                         const View* dx, bool accumulate,
                         std::initializer_list<std::pair<int64_t, int64_t>> ranges) const {
  if (e_.cfg->num_kv_heads >= e_.tp) return linear_bw(dy, xin, w, b, dx, accumulate);
  const int64_t out = w.dim(0), in = w.dim(1);
  Tensor gw = f32({out, in});
  be_.fill(view(gw), 0.0);
  const View gwv = view(gw);
  Tensor gb;
  View gbv;
  if (b && b->defined()) {
    gb = f32({out});
    be_.fill(view(gb), 0.0);
    gbv = view(gb);
  }
  linear_backward(be_, bp_, dy, xin, view(w), &gwv, gb.defined() ? &gbv : nullptr, dx, accumulate);
  for (const auto& r : ranges)
    sum_over_head_copies(
        strided(at(view(gw), r.first * in), OSLO_DTYPE_F32, {r.second, in}, {in, 1}));
  be_.binary(OSLO_BK_ADD, view(e_.grad(w)), view(e_.grad(w)), view(gw));
  if (gb.defined()) {
    for (const auto& r : ranges)
      sum_over_head_copies(
          strided(at(view(gb), r.first), OSLO_DTYPE_F32, {1, r.second}, {r.second, 1}));
    be_.binary(OSLO_BK_ADD, view(e_.grad(*b)), view(e_.grad(*b)), view(gb));
  }
}

void Block::norm_bw(const View& dx, const View& xin, const Tensor& w, const Tensor& b,
                    const View& dy, bool accumulate) const {
  const bool has_b = !rms_ && b.defined();
  View gb;
  if (has_b) gb = view(e_.grad(b));
  norm_backward(be_, bp_, dx, xin, view(w), view(e_.grad(w)), has_b ? &gb : nullptr, dy, eps_, rms_,
                accumulate);
}

void Block::backward(const BlockWeights& L, const BlockActs& sv, Tensor& dx) const {
  const int64_t BS = BS_, H = H_, qw = qw_, kw = kw_;
  // Post-norm: out = LN2(r2), r2 = x_mid + down(m) + down_b.
  Tensor dr2;
  if (post_) {
    dr2 = f32({BS, H});
    norm_bw(view(dr2), view(sv.r2), L.ln2_w, L.ln2_b, view(dx), false);
  }
  const Tensor& dout = post_ ? dr2 : dx;
  const Tensor& mlp_in = post_ ? sv.x_mid : sv.h2;
  // MLP branch: out = min + down(m) + down_b (dd = dout, complete on every
  // rank).
  const int64_t il = sv.m.dim(1);
  if (L.down_b.defined()) be_.sum_rows(view(e_.grad(L.down_b)), view(dout), true);
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
    if (tr_.gated_mlp) {
      gv = view(sv.gate);
      dgate = f32({BS, il});
      dgv = view(dgate);
    }
  }
  if (tr_.gated_mlp) {
    // m = act(g) * u: du = dm * act(g), dg = act'(g) * (dm * u).
    Tensor t = f32({BS, il});
    be_.unary(act_, view(t), gv);
    be_.binary(OSLO_BK_MUL, duv, view(dm), view(t));
    be_.binary(OSLO_BK_MUL, view(t), view(dm), uv);
    be_.unary_backward(act_, dgv, gv, view(t));
  } else {
    be_.unary_backward(act_, duv, uv, view(dm));
  }
  Tensor dh2 = f32({BS, H});
  {
    const View dh = view(dh2);
    if (L.gate_up_w.defined()) {
      linear_bw(view(dgu), view(mlp_in), L.gate_up_w, &L.gate_up_b, &dh, false);
    } else {
      linear_bw(duv, view(mlp_in), L.up_w, &L.up_b, &dh, false);
      if (tr_.gated_mlp) linear_bw(dgv, view(mlp_in), L.gate_w, &L.gate_b, &dh, true);
    }
  }
  // Attention branch: da = dx (parallel residual) or d(x_mid) (post-norm:
  // d(r1) = LN1's input gradient of d(x_mid)).
  Tensor dmid;
  if (post_) {
    reduce_sum(*e_.ctx, OSLO_GROUP_TENSOR, view(dh2));
    be_.binary(OSLO_BK_ADD, view(dh2), view(dh2), view(dr2));  // d(x_mid)
    dmid = f32({BS, H});
    norm_bw(view(dmid), view(sv.r1), L.ln1_w, L.ln1_b, view(dh2), false);
  } else if (!parallel_) {
    reduce_sum(*e_.ctx, OSLO_GROUP_TENSOR, view(dh2));
    dmid = f32({BS, H});
    be_.convert(view(dmid), view(dx));
    norm_bw(view(dmid), view(sv.x_mid), L.ln2_w, L.ln2_b, view(dh2), true);
  }
  const Tensor& da = parallel_ ? dx : dmid;
  if (L.o_b.defined()) be_.sum_rows(view(e_.grad(L.o_b)), view(da), true);
  Tensor datt = f32({BS, qw});
  const View dattv = view(datt);
  linear_bw(view(da), view(sv.att), L.o_w, nullptr, &dattv, false);
  // Attention's backward (layers tier): P recomputed from q and k.
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
  AttentionShape as;
  as.B = e_.B;
  as.S = e_.S;
  as.heads = e_.nhl;
  as.kv_heads = e_.nkvl;
  as.head_dim = D_;
  as.scale = 1.0f / std::sqrt(static_cast<float>(D_));
  as.causal = tr_.causal;
  attention_backward(be_, as, q, k, v, view(datt), e_.key_mask, dqv, dkv, dvv);
  if (tr_.rotary) {  // the transpose of a rotation is the rotation back
    rope(dqv, e_.nhl, e_.nsin);
    rope(dkv, e_.nkvl, e_.nsin);
  }
  Tensor dh1 = f32({BS, H});
  {
    const View dh = view(dh1), ain = post_ ? view(sv.x_in) : view(sv.h1);
    if (L.qkv_w.defined()) {
      kv_linear_bw(view(dqkv), ain, L.qkv_w, &L.qkv_b, &dh, false, {{qw, kw}, {qw + kw, kw}});
    } else {
      linear_bw(dqv, ain, L.q_w, &L.q_b, &dh, false);
      kv_linear_bw(dkv, ain, L.k_w, &L.k_b, &dh, true, {{0, kw}});
      kv_linear_bw(dvv, ain, L.v_w, &L.v_b, &dh, true, {{0, kw}});
    }
  }
  if (post_) {
    // x feeds the attention products and the residual into r1.
    reduce_sum(*e_.ctx, OSLO_GROUP_TENSOR, view(dh1));
    be_.binary(OSLO_BK_ADD, view(dx), view(dmid), view(dh1));
  } else if (parallel_) {
    // Both branches read the block's input: one all-reduce for both.
    Tensor both = f32({2, BS, H});
    const View d1 = strided(both.data(), OSLO_DTYPE_F32, {BS, H}, {H, 1});
    const View d2 = strided(at(view(both), BS * H), OSLO_DTYPE_F32, {BS, H}, {H, 1});
    be_.convert(d1, view(dh1));
    be_.convert(d2, view(dh2));
    reduce_sum(*e_.ctx, OSLO_GROUP_TENSOR, view(both));
    norm_bw(view(dx), view(sv.x_in), L.ln1_w, L.ln1_b, d1, true);
    norm_bw(view(dx), view(sv.x_in), L.ln2_w, L.ln2_b, d2, true);
  } else {
    reduce_sum(*e_.ctx, OSLO_GROUP_TENSOR, view(dh1));
    be_.convert(view(dx), view(dmid));
    norm_bw(view(dx), view(sv.x_in), L.ln1_w, L.ln1_b, view(dh1), true);
  }
}

}  // namespace oslo
