// The fused ops of the backend seam (oslo_backend.h: attention,
// residual_norm, rope, matmul_act, argmax, norm_backward, adamw; attention_backward is in
// fused_attention.cpp, paged_attention in fused_paged.cpp): the backend's own entry when it
// offers one for the dtype, else the composition below from the required entries. The compositions
// are the reference: the conformance suite checks every backend's fused entry against them (and
// both against f64).
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/backend/backend.hpp"
#include "core/backend/compose_util.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/common/shape_str.hpp"

namespace oslo {
namespace {

using compose::dims;
using compose::is_float;
using compose::Scratch;
using compose::strided;

}  // namespace

void compose::check_attention(const View& out, const View& q, const View& k, const View& v,
                              const View* mask) {
  for (const View* t : {&out, &q, &k, &v})
    OSLO_CHECK(t->ndim == 4 && is_float(t->dtype), OSLO_ERR_SHAPE,
               "attention operands must be 4-D float views ([batch, heads, seq, head_dim]), got ",
               dims(*t), " ", dtype_name(t->dtype));
  OSLO_CHECK(q.dtype == k.dtype && q.dtype == v.dtype, OSLO_ERR_DTYPE,
             "attention q, k and v must share a dtype (", dtype_name(q.dtype), ", ",
             dtype_name(k.dtype), ", ", dtype_name(v.dtype), ")");
  OSLO_CHECK(k.shape[0] == q.shape[0] && k.shape[3] == q.shape[3] && k.shape[1] > 0 &&
                 q.shape[1] % k.shape[1] == 0,
             OSLO_ERR_SHAPE, "attention keys ", dims(k), " do not fit queries ", dims(q),
             " (batch and head_dim equal, query heads a multiple of key heads)");
  for (int i = 0; i < 4; ++i) {
    OSLO_CHECK(v.shape[i] == k.shape[i], OSLO_ERR_SHAPE, "attention values ", dims(v),
               " differ from keys ", dims(k));
    OSLO_CHECK(out.shape[i] == q.shape[i], OSLO_ERR_SHAPE, "attention output ", dims(out),
               " differs from queries ", dims(q));
  }
  if (mask)
    OSLO_CHECK(is_float(mask->dtype) && mask->ndim == 2 && mask->shape[0] == q.shape[0] &&
                   mask->shape[1] == k.shape[2],
               OSLO_ERR_SHAPE, "attention mask ", dims(*mask), " must be float [", q.shape[0], ", ",
               k.shape[2], "]");
}

bool Backend::uses_fused(oslo_bk_op op, oslo_dtype dtype) const {
  if (!fused_) return false;
  const bool entry =
      (op == OSLO_BK_OP_ATTENTION && t_.attention) ||
      (op == OSLO_BK_OP_RESIDUAL_NORM && t_.residual_norm) || (op == OSLO_BK_OP_ROPE && t_.rope) ||
      (op == OSLO_BK_OP_MATMUL_ACT && t_.matmul_act) || (op == OSLO_BK_OP_ARGMAX && t_.argmax) ||
      (op == OSLO_BK_OP_NORM_BACKWARD && t_.norm_backward) ||
      (op == OSLO_BK_OP_ADAMW && t_.adamw) ||
      (op == OSLO_BK_OP_ATTENTION_BACKWARD && t_.attention_backward) ||
      (op == OSLO_BK_OP_PAGED_ATTENTION && t_.paged_attention) ||
      (op == OSLO_BK_OP_DEQUANTIZE && t_.dequantize) ||
      (op == OSLO_BK_OP_MATMUL_QUANT && t_.matmul_quant) ||
      (op == OSLO_BK_OP_QUANTIZE_ROWS && t_.quantize_rows) ||
      (op == OSLO_BK_OP_DEQUANTIZE_ROWS && t_.dequantize_rows) ||
      (op == OSLO_BK_OP_ATTENTION_KV8 && t_.attention_kv8) ||
      (op == OSLO_BK_OP_PAGED_ATTENTION_KV8 && t_.paged_attention_kv8) ||
      op == OSLO_BK_OP_MATMUL_MIXED;
  return entry && op_supported(op, dtype);
}

void Backend::attention(const View& out, const View& q, const View& k, const View& v,
                        const View* mask, float scale, bool causal, int64_t causal_offset) {
  compose::check_attention(out, q, k, v, mask);
  if (uses_fused(OSLO_BK_OP_ATTENTION, q.dtype))
    return check(t_.attention(self_, &out, &q, &k, &v, mask, scale, causal ? 1 : 0, causal_offset),
                 "attention");
  compose_attention(out, q, k, v, mask, scale, causal, causal_offset);
}

void Backend::compose_attention(const View& out, const View& q, const View& k, const View& v,
                                const View* mask, float scale, bool causal, int64_t P) {
  const int64_t B = q.shape[0], Hq = q.shape[1], S = q.shape[2], D = q.shape[3];
  const int64_t Hkv = k.shape[1], T = k.shape[2], g = Hq / Hkv;
  if (B * Hq * S * D == 0) return;
  const oslo_dtype f32 = OSLO_DTYPE_F32;
  // Queries grouped by their key/value head, contiguous: [B, Hkv, g, S, D].
  Scratch qc(*this, f32, {B, Hkv, g, S, D});
  convert(qc.view(),
          strided(q.data, q.dtype, {B, Hkv, g, S, D},
                  {q.strides[0], g * q.strides[1], q.strides[1], q.strides[2], q.strides[3]}));
  // Keys and values as f32 [B * Hkv, T, D] batches (copied unless they are).
  auto batched = [&](const View& t, std::unique_ptr<Scratch>* copy) {
    if (t.dtype == f32 && t.strides[0] == Hkv * t.strides[1] && t.strides[3] == 1) return t;
    copy->reset(new Scratch(*this, f32, {B, Hkv, T, D}));
    convert((*copy)->view(), t);
    return (*copy)->view();
  };
  if (T == 0) {  // no key: every output is 0
    fill(out, 0.0);
    return;
  }
  std::unique_ptr<Scratch> kcopy, vcopy;
  const View kb = batched(k, &kcopy), vb = batched(v, &vcopy);
  Scratch scores(*this, f32, {B * Hkv, g * S, T});
  matmul(scores.view(), strided(qc.view().data, f32, {B * Hkv, g * S, D}, {g * S * D, D, 1}),
         strided(kb.data, f32, {B * Hkv, D, T}, {kb.strides[1], kb.strides[3], kb.strides[2]}));
  const View s5 = strided(scores.view().data, f32, {B, Hkv, g, S, T},
                          {Hkv * g * S * T, g * S * T, S * T, T, 1});
  View m5;
  if (mask)
    m5 = strided(mask->data, mask->dtype, {B, 1, 1, 1, T},
                 {mask->strides[0], 0, 0, 0, mask->strides[1]});
  softmax(s5, s5, mask ? &m5 : nullptr, scale, causal, P);
  Scratch oc(*this, f32, {B * Hkv, g * S, D});
  matmul(oc.view(), scores.view(),
         strided(vb.data, f32, {B * Hkv, T, D}, {vb.strides[1], vb.strides[2], vb.strides[3]}));
  convert(
      strided(out.data, out.dtype, {B, Hkv, g, S, D},
              {out.strides[0], g * out.strides[1], out.strides[1], out.strides[2], out.strides[3]}),
      strided(oc.view().data, f32, {B, Hkv, g, S, D}, {Hkv * g * S * D, g * S * D, S * D, D, 1}));
}

void Backend::residual_norm(const View& out, const View& x, const View* y, const View* bias,
                            const View* gamma, const View* beta, float eps, bool rms) {
  if (uses_fused(OSLO_BK_OP_RESIDUAL_NORM, x.dtype))
    return check(t_.residual_norm(self_, &out, &x, y, bias, gamma, beta, eps, rms ? 1 : 0),
                 "residual_norm");
  compose_residual_norm(out, x, y, bias, gamma, beta, eps, rms);
}

void Backend::compose_residual_norm(const View& out, const View& x, const View* y, const View* bias,
                                    const View* gamma, const View* beta, float eps, bool rms) {
  const int64_t rows = x.rows(), cols = x.cols();
  auto bcast = [&](const View& b) {  // bias [H] over x's rows
    OSLO_CHECK(b.numel() == cols, OSLO_ERR_SHAPE, "residual_norm bias ", dims(b), " needs ", cols,
               " elements");
    View r = strided(b.data, b.dtype, {rows, cols}, {0, b.ndim ? b.strides[b.ndim - 1] : 1});
    return r;
  };
  const View x2 = strided(x.data, x.dtype, {rows, cols},
                          {x.ndim >= 2 ? x.strides[x.ndim - 2] : cols, x.strides[x.ndim - 1]});
  if (y && bias) {
    OSLO_CHECK(y->numel() == x.numel() && y->cols() == cols, OSLO_ERR_SHAPE, "residual_norm y ",
               dims(*y), " differs from x ", dims(x));
    Scratch t(*this, OSLO_DTYPE_F32, {rows, cols});
    binary(OSLO_BK_ADD, t.view(),
           strided(y->data, y->dtype, {rows, cols},
                   {y->ndim >= 2 ? y->strides[y->ndim - 2] : cols, y->strides[y->ndim - 1]}),
           bcast(*bias));
    binary(OSLO_BK_ADD, x2, x2, t.view());
  } else if (y) {
    binary(OSLO_BK_ADD, x, x, *y);
  } else if (bias) {
    binary(OSLO_BK_ADD, x2, x2, bcast(*bias));
  }
  norm(out, x, gamma, beta, eps, rms);
}

void Backend::rope(const View& x, const View& cos, const View& sin) {
  OSLO_CHECK(x.ndim == 3 && cos.ndim == 2 && sin.ndim == 2 && cos.shape[0] == x.shape[0] &&
                 sin.shape[0] == x.shape[0] && sin.shape[1] == cos.shape[1] &&
                 2 * cos.shape[1] <= x.shape[2],
             OSLO_ERR_SHAPE, "rope: x ", dims(x), " must be [rows, heads, D] and cos/sin ",
             dims(cos), " [rows, R] with 2R <= D");
  OSLO_CHECK(cos.dtype == OSLO_DTYPE_F32 && sin.dtype == OSLO_DTYPE_F32, OSLO_ERR_DTYPE,
             "rope: cos and sin must be f32");
  if (uses_fused(OSLO_BK_OP_ROPE, x.dtype)) return check(t_.rope(self_, &x, &cos, &sin), "rope");
  compose_rope(x, cos, sin);
}

void Backend::compose_rope(const View& x, const View& cos, const View& sin) {
  const int64_t rows = x.shape[0], heads = x.shape[1], h = cos.shape[1];
  if (rows * heads * h == 0) return;
  const int64_t r = x.strides[0], hs = x.strides[1], e = x.strides[2];
  const View x1 = strided(x.data, x.dtype, {rows, heads, h}, {r, hs, e});
  const View x2 =
      strided(static_cast<char*>(x.data) + h * e * static_cast<int64_t>(dtype_size(x.dtype)),
              x.dtype, {rows, heads, h}, {r, hs, e});
  const View c =
      strided(cos.data, OSLO_DTYPE_F32, {rows, heads, h}, {cos.strides[0], 0, cos.strides[1]});
  const View s =
      strided(sin.data, OSLO_DTYPE_F32, {rows, heads, h}, {sin.strides[0], 0, sin.strides[1]});
  Scratch a(*this, OSLO_DTYPE_F32, {rows, heads, h});
  Scratch b(*this, OSLO_DTYPE_F32, {rows, heads, h});
  binary(OSLO_BK_MUL, a.view(), x1, s);
  binary(OSLO_BK_MUL, b.view(), x2, s);
  binary(OSLO_BK_MUL, x1, x1, c);
  binary(OSLO_BK_MUL, x2, x2, c);
  binary(OSLO_BK_SUB, x1, x1, b.view());
  binary(OSLO_BK_ADD, x2, x2, a.view());
}

void Backend::check_matmul_act(const View& c, const View& a, const View& b,
                               const oslo_bk_unary* act, const View* gate) const {
  OSLO_CHECK(c.ndim == 2 && a.ndim == 2 && b.ndim == 2, OSLO_ERR_SHAPE,
             "matmul_act operands must be 2-D: c ", dims(c), ", a ", dims(a), ", b ", dims(b));
  OSLO_CHECK(act || !gate, OSLO_ERR_INVALID_ARGUMENT, "matmul: a gate without an activation");
  if (!act) return;
  const int a_ = static_cast<int>(*act);
  OSLO_CHECK(a_ == OSLO_BK_GELU || a_ == OSLO_BK_GELU_TANH || a_ == OSLO_BK_SILU ||
                 a_ == OSLO_BK_RELU || a_ == OSLO_BK_TANH,
             OSLO_ERR_INVALID_ARGUMENT, "matmul_act: ", a_,
             " is not an activation (GELU, GELU_TANH, SILU, RELU or TANH)");
  if (gate) {
    OSLO_CHECK(gate->ndim == 2 && gate->shape[0] == c.shape[0] && gate->shape[1] == c.shape[1] &&
                   is_float(gate->dtype),
               OSLO_ERR_SHAPE, "matmul_act gate ", dims(*gate),
               " must be a float view of c's shape ", dims(c));
    const bool same = gate->data == c.data && gate->dtype == c.dtype &&
                      gate->strides[0] == c.strides[0] && gate->strides[1] == c.strides[1];
    if (!same) {
      // Byte ranges: the gate may be c itself but may not partly overlap it.
      auto span = [](const View& v) {
        const char* p = static_cast<const char*>(v.data);
        int64_t hi = 0;
        for (int i = 0; i < v.ndim; ++i)
          if (v.shape[i] > 0) hi += (v.shape[i] - 1) * v.strides[i];
        return std::make_pair(p, p + (hi + 1) * static_cast<int64_t>(dtype_size(v.dtype)));
      };
      const auto g = span(*gate), o = span(c);
      OSLO_CHECK(c.numel() == 0 || g.second <= o.first || o.second <= g.first,
                 OSLO_ERR_INVALID_ARGUMENT,
                 "matmul_act: the gate overlaps c without being c itself");
    }
  }
}

void Backend::matmul_act(const View& c, const View& a, const View& b, const View* bias,
                         oslo_bk_unary act, const View* gate) {
  check_matmul_act(c, a, b, &act, gate);
  if (uses_fused(OSLO_BK_OP_MATMUL_ACT, a.dtype))
    return check(t_.matmul_act(self_, &c, &a, &b, bias, act, gate), "matmul_act");
  compose_matmul_act(c, a, b, bias, act, gate);
}

std::unique_ptr<PackedWeight> Backend::pack_weight(const std::shared_ptr<Backend>& self,
                                                   const View& w) {
  Backend& be = *self;
  if (!be.t_.pack_weight || !be.fused_ || !be.prepack_enabled(dtype_is_block(w.dtype)) ||
      w.ndim != 2 || w.numel() == 0 || !be.op_supported(OSLO_BK_OP_PACKED_MATMUL, w.dtype))
    return nullptr;
  void* h = nullptr;
  size_t bytes = 0;
  const oslo_status st = be.t_.pack_weight(be.self_, &w, &h, &bytes);
  if (st == OSLO_ERR_NOT_SUPPORTED) return nullptr;
  be.check(st, "pack_weight");
  OSLO_CHECK(h, OSLO_ERR_INTERNAL, "pack_weight returned OSLO_OK without a handle");
  auto p = std::make_unique<PackedWeight>(self, h, bytes, w);
  p->whole_ = be.t_.unpack_weight && be.t_.unpack_weight(be.self_, h, nullptr) == OSLO_OK;
  return p;
}

void Backend::matmul_packed(const View& c, const View& a, const View& b, const PackedWeight& p,
                            const View* bias, const oslo_bk_unary* act, const View* gate) {
  const bool block = dtype_is_block(b.dtype);
  if (block) {
    if (!check_matmul_quant(c, a, b, bias, act, gate)) return;
  } else {
    check_matmul_act(c, a, b, act, gate);
  }
  OSLO_CHECK(p.be_.get() == this && p.made_from(b), OSLO_ERR_INVALID_ARGUMENT,
             "matmul_packed: the packed copy was made from another weight or backend");
  check(t_.matmul_packed(self_, &c, &a, &b, p.handle_, bias, act ? 1 : 0,
                         act ? *act : OSLO_BK_SCALE, gate),
        "matmul_packed");
}

PackedWeight::~PackedWeight() {
  if (handle_) be_->t_.packed_free(be_->self_, handle_);
}

void PackedWeight::plain_released() {
  OSLO_CHECK(whole_, OSLO_ERR_INTERNAL,
             "packed weight: the plain weight was released, but the copy does not hold it whole");
  w_.data = nullptr;
}

void PackedWeight::restore_plain(void* data) {
  OSLO_CHECK(whole_, OSLO_ERR_INTERNAL, "packed weight: the copy cannot write the weight back");
  View w = w_;
  w.data = data;
  be_->check(be_->t_.unpack_weight(be_->self_, handle_, &w), "unpack_weight");
  w_.data = data;
}

bool PackedWeight::made_from(const View& b) const {
  return b.data == w_.data && b.dtype == w_.dtype && b.ndim == 2 && b.shape[0] == w_.shape[0] &&
         b.shape[1] == w_.shape[1] && b.strides[0] == w_.strides[0] &&
         b.strides[1] == w_.strides[1];
}

void Backend::compose_matmul_act(const View& c, const View& a, const View& b, const View* bias,
                                 oslo_bk_unary act, const View* gate) {
  if (gate && gate->data == c.data) {  // the gate is c: the product goes to a scratch
    Scratch t(*this, c.dtype, {c.shape[0], c.shape[1]});
    matmul(t.view(), a, b, bias);
    unary(act, t.view(), t.view());
    binary(OSLO_BK_MUL, c, t.view(), *gate);
    return;
  }
  matmul(c, a, b, bias);
  unary(act, c, c);
  if (gate) binary(OSLO_BK_MUL, c, c, *gate);
}

void Backend::argmax(const View& index, const View& value, const View& x, int64_t valid) {
  OSLO_CHECK(x.ndim == 2 && is_float(x.dtype), OSLO_ERR_SHAPE, "argmax: x ", dims(x), " ",
             dtype_name(x.dtype), " must be a 2-D float view");
  const int64_t rows = x.shape[0];
  OSLO_CHECK(index.dtype == OSLO_DTYPE_I64 && index.numel() == rows && index.ndim == 1,
             OSLO_ERR_SHAPE, "argmax: index ", dims(index), " ", dtype_name(index.dtype),
             " must be i64 [", rows, "]");
  OSLO_CHECK(value.dtype == OSLO_DTYPE_F32 && value.numel() == rows && value.ndim == 1,
             OSLO_ERR_SHAPE, "argmax: value ", dims(value), " ", dtype_name(value.dtype),
             " must be f32 [", rows, "]");
  OSLO_CHECK(index.contiguous() && value.contiguous(), OSLO_ERR_SHAPE,
             "argmax: index and value must be contiguous");
  OSLO_CHECK(valid <= x.shape[1], OSLO_ERR_INVALID_ARGUMENT, "argmax: ", valid,
             " valid elements in rows of ", x.shape[1]);
  if (uses_fused(OSLO_BK_OP_ARGMAX, x.dtype))
    return check(t_.argmax(self_, &index, &value, &x, valid), "argmax");
  compose_argmax(index, value, x, valid);
}

void Backend::compose_argmax(const View& index, const View& value, const View& x, int64_t valid) {
  // The rows in f32 on the host (the required ops have no index-returning
  // reduction); only the choice goes back to the device.
  const int64_t rows = x.shape[0], n = valid < 0 ? x.shape[1] : valid;
  if (rows == 0) return;
  std::vector<float> host(static_cast<size_t>(rows * std::max<int64_t>(n, 1)));
  if (n > 0) {
    Scratch f(*this, OSLO_DTYPE_F32, {rows, n});
    convert(f.view(), strided(x.data, x.dtype, {rows, n}, {x.strides[0], x.strides[1]}));
    copy(host.data(), f.view().data, host.size() * sizeof(float), CopyKind::DeviceToHost);
  }
  std::vector<int64_t> idx(static_cast<size_t>(rows), -1);
  std::vector<float> val(static_cast<size_t>(rows), -std::numeric_limits<float>::infinity());
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = host.data() + r * n;
    for (int64_t j = 0; j < n; ++j) {
      if (std::isnan(p[j])) {
        idx[r] = j;
        val[r] = p[j];
        break;
      }
      if (idx[r] < 0 || p[j] > val[r]) {
        idx[r] = j;
        val[r] = p[j];
      }
    }
  }
  copy(index.data, idx.data(), idx.size() * sizeof(int64_t), CopyKind::HostToDevice);
  copy(value.data, val.data(), val.size() * sizeof(float), CopyKind::HostToDevice);
}

void Backend::norm_backward(const View& grad_x, const View* grad_gamma, const View* grad_beta,
                            const View& x, const View* gamma, const View& dy, float eps, bool rms) {
  OSLO_CHECK(x.ndim >= 1 && is_float(x.dtype) && is_float(dy.dtype) && is_float(grad_x.dtype),
             OSLO_ERR_DTYPE, "norm_backward: x, dy and grad_x must be float views");
  OSLO_CHECK(x.ndim == 2 && dy.ndim == 2 && grad_x.ndim == 2, OSLO_ERR_SHAPE, "norm_backward: x ",
             dims(x), ", dy ", dims(dy), " and grad_x ", dims(grad_x), " must be 2-D [rows, H]");
  const int64_t rows = x.rows(), H = x.cols();
  OSLO_CHECK(dy.rows() == rows && dy.cols() == H && grad_x.rows() == rows && grad_x.cols() == H,
             OSLO_ERR_SHAPE, "norm_backward: dy ", dims(dy), " and grad_x ", dims(grad_x),
             " must have x's shape ", dims(x));
  for (const View* p : {gamma, grad_gamma, rms ? nullptr : grad_beta})
    OSLO_CHECK(!p || (p->numel() == H && is_float(p->dtype)), OSLO_ERR_SHAPE,
               "norm_backward: gamma and the parameter gradients need ", H, " float elements, got ",
               dims(*p));
  for (const View* p : {grad_gamma, rms ? nullptr : grad_beta})
    OSLO_CHECK(!p || p->dtype == OSLO_DTYPE_F32, OSLO_ERR_DTYPE,
               "norm_backward: parameter gradients must be f32");
  if (uses_fused(OSLO_BK_OP_NORM_BACKWARD, x.dtype))
    return check(t_.norm_backward(self_, &grad_x, grad_gamma, rms ? nullptr : grad_beta, &x, gamma,
                                  &dy, eps, rms ? 1 : 0),
                 "norm_backward");
  compose_norm_backward(grad_x, grad_gamma, rms ? nullptr : grad_beta, x, gamma, dy, eps, rms);
}

void Backend::compose_norm_backward(const View& grad_x, const View* grad_gamma,
                                    const View* grad_beta, const View& x, const View* gamma,
                                    const View& dy, float eps, bool rms) {
  const int64_t R = x.rows(), H = x.cols();
  if (R * H == 0) return;
  const oslo_dtype f32 = OSLO_DTYPE_F32;
  auto two_d = [&](const View& v) {
    return strided(v.data, v.dtype, {R, H},
                   {v.ndim >= 2 ? v.strides[v.ndim - 2] : H, v.strides[v.ndim - 1]});
  };
  auto col = [&](const View& r) { return strided(r.data, f32, {R, H}, {1, 0}); };  // [R] over H
  auto row = [&](const View& p) {                                                  // [H] over R
    return strided(p.data, p.dtype, {R, H}, {0, p.ndim ? p.strides[p.ndim - 1] : 1});
  };
  Scratch xc(*this, f32, {R, H}), g(*this, f32, {R, H}), t(*this, f32, {R, H});
  Scratch stat(*this, f32, {R}), rstd(*this, f32, {R}), eps_s(*this, f32, {1});
  convert(xc.view(), two_d(x));
  if (!rms) {  // centre
    reduce(OSLO_BK_REDUCE_SUM, stat.view(), xc.view());
    unary(OSLO_BK_SCALE, stat.view(), stat.view(), 1.f / static_cast<float>(H));
    binary(OSLO_BK_SUB, xc.view(), xc.view(), col(stat.view()));
  }
  binary(OSLO_BK_MUL, t.view(), xc.view(), xc.view());
  reduce(OSLO_BK_REDUCE_SUM, rstd.view(), t.view());
  unary(OSLO_BK_SCALE, rstd.view(), rstd.view(), 1.f / static_cast<float>(H));
  fill(eps_s.view(), eps);
  binary(OSLO_BK_ADD, rstd.view(), rstd.view(), strided(eps_s.view().data, f32, {R}, {0}));
  unary(OSLO_BK_RSQRT, rstd.view(), rstd.view());
  View xhat = xc.view();  // xc becomes xhat in place
  binary(OSLO_BK_MUL, xhat, xhat, col(rstd.view()));
  const View dy2 = two_d(dy);
  if (grad_gamma) {
    binary(OSLO_BK_MUL, t.view(), dy2, xhat);
    sum_rows(*grad_gamma, t.view(), true);
  }
  if (grad_beta) sum_rows(*grad_beta, dy2, true);
  if (gamma)
    binary(OSLO_BK_MUL, g.view(), dy2, row(*gamma));
  else
    convert(g.view(), dy2);
  // t = g - xhat * mean(g * xhat) (- mean(g)), then grad_x = rstd * t.
  binary(OSLO_BK_MUL, t.view(), g.view(), xhat);
  reduce(OSLO_BK_REDUCE_SUM, stat.view(), t.view());
  unary(OSLO_BK_SCALE, stat.view(), stat.view(), 1.f / static_cast<float>(H));
  binary(OSLO_BK_MUL, t.view(), xhat, col(stat.view()));
  binary(OSLO_BK_SUB, t.view(), g.view(), t.view());
  if (!rms) {
    reduce(OSLO_BK_REDUCE_SUM, stat.view(), g.view());
    unary(OSLO_BK_SCALE, stat.view(), stat.view(), 1.f / static_cast<float>(H));
    binary(OSLO_BK_SUB, t.view(), t.view(), col(stat.view()));
  }
  binary(OSLO_BK_MUL, two_d(grad_x), t.view(), col(rstd.view()));
}

void Backend::adamw(const View& p, const View& g, const View& m, const View& v, float decay,
                    float beta1, float beta2, float step_size, float bc2_sqrt, float eps) {
  for (const View* t : {&p, &g, &m, &v}) {
    OSLO_CHECK(t->dtype == OSLO_DTYPE_F32, OSLO_ERR_DTYPE, "adamw: operands must be f32, not ",
               dtype_name(t->dtype));
    OSLO_CHECK(t->contiguous() && t->numel() == p.numel(), OSLO_ERR_SHAPE, "adamw: operand ",
               dims(*t), " must be contiguous with the parameter's ", p.numel(), " elements");
  }
  if (uses_fused(OSLO_BK_OP_ADAMW, p.dtype))
    return check(t_.adamw(self_, &p, &g, &m, &v, decay, beta1, beta2, step_size, bc2_sqrt, eps),
                 "adamw");
  compose_adamw(p, g, m, v, decay, beta1, beta2, step_size, bc2_sqrt, eps);
}

void Backend::compose_adamw(const View& p0, const View& g0, const View& m0, const View& v0,
                            float decay, float beta1, float beta2, float step_size, float bc2_sqrt,
                            float eps) {
  const int64_t n = p0.numel();
  if (n == 0) return;
  auto flat = [&](const View& t) { return make_view(t.data, OSLO_DTYPE_F32, {n}); };
  const View p = flat(p0), g = flat(g0), m = flat(m0), v = flat(v0);
  Scratch t(*this, OSLO_DTYPE_F32, {n}), e(*this, OSLO_DTYPE_F32, {1});
  const View tv = t.view();
  fill(e.view(), eps);
  if (decay != 0.f) unary(OSLO_BK_SCALE, p, p, 1.f - decay);
  unary(OSLO_BK_SCALE, m, m, beta1);
  unary(OSLO_BK_SCALE, tv, g, 1.f - beta1);
  binary(OSLO_BK_ADD, m, m, tv);
  unary(OSLO_BK_SCALE, v, v, beta2);
  binary(OSLO_BK_MUL, tv, g, g);
  unary(OSLO_BK_SCALE, tv, tv, 1.f - beta2);
  binary(OSLO_BK_ADD, v, v, tv);
  unary(OSLO_BK_ABS_POW, tv, v, 0.5f);
  unary(OSLO_BK_SCALE, tv, tv, 1.f / bc2_sqrt);
  binary(OSLO_BK_ADD, tv, tv, strided(e.view().data, OSLO_DTYPE_F32, {n}, {0}));
  binary(OSLO_BK_DIV, tv, m, tv);
  unary(OSLO_BK_SCALE, tv, tv, -step_size);
  binary(OSLO_BK_ADD, p, p, tv);
}

}  // namespace oslo
