#include "core/layers/functional.hpp"

#include "core/tensor/view.hpp"
#include "core/tensor/view_util.hpp"

namespace oslo {

using views::strided;

View in_dtype(Backend& be, const std::shared_ptr<Backend>& bp, const View& t, oslo_dtype dt,
              Tensor* keep) {
  if (t.dtype == dt) return t;
  *keep = scratch(bp, dt, {t.shape[0], t.shape[1]});
  be.convert(view(*keep), t);
  return view(*keep);
}

void linear_forward(Backend& be, const std::shared_ptr<Backend>& bp, const View& y, const View& x,
                    const View& w, const View* b, const oslo_bk_unary* act, const View* gate,
                    const PackedWeight* packed) {
  if (dtype_is_block(w.dtype)) {  // weight-only quantized: f32 activations
    Tensor conv;
    const View xf = in_dtype(be, bp, x, OSLO_DTYPE_F32, &conv);
    if (packed)
      be.matmul_packed(y, xf, w, *packed, b, act, gate);
    else
      be.matmul_quant(y, xf, w, b, act, gate);
    return;
  }
  View xv = x;
  Tensor conv;
  const bool mixed = x.dtype == OSLO_DTYPE_F32 && be.uses_fused(OSLO_BK_OP_MATMUL_MIXED, w.dtype);
  if (x.dtype != w.dtype && !mixed) xv = in_dtype(be, bp, x, w.dtype, &conv);
  if (packed)
    be.matmul_packed(y, xv, transposed(w), *packed, b, act, gate);
  else if (act)
    be.matmul_act(y, xv, transposed(w), b, *act, gate);
  else
    be.matmul(y, xv, transposed(w), b);
}

void linear_backward(Backend& be, const std::shared_ptr<Backend>& bp, const View& dy, const View& x,
                     const View& w, const View* dw, const View* db, const View* dx,
                     bool dx_accumulate) {
  OSLO_CHECK(!dtype_is_block(w.dtype), OSLO_ERR_NOT_SUPPORTED,
             "training: the backward of a linear with ", dtype_name(w.dtype),
             " (block-quantized) weights is not supported; load the model in f32, f16 or bf16 "
             "to train it");
  Tensor dy_keep, x_keep;
  const View dyw = in_dtype(be, bp, dy, w.dtype, &dy_keep);
  if (dw) {
    const View xw = in_dtype(be, bp, x, w.dtype, &x_keep);
    be.matmul(*dw, transposed(dyw), xw, nullptr, 1.f, 1.f);
  }
  if (db) be.sum_rows(*db, dy, true);
  if (dx) be.matmul(*dx, dyw, w, nullptr, 1.f, dx_accumulate ? 1.f : 0.f);
}

void norm_forward(Backend& be, const View& out, const View& in, const View& w, const View* b,
                  float eps, bool rms) {
  be.norm(out, in, &w, rms ? nullptr : b, eps, rms);
}

void norm_backward(Backend& be, const std::shared_ptr<Backend>& bp, const View& dx, const View& x,
                   const View& w, const View& dw, const View* db, const View& dy, float eps,
                   bool rms, bool accumulate) {
  const View* gb = rms ? nullptr : db;
  if (!accumulate) {
    be.norm_backward(dx, &dw, gb, x, &w, dy, eps, rms);
    return;
  }
  Tensor t = scratch(bp, OSLO_DTYPE_F32, {dx.shape[0], dx.shape[1]});
  be.norm_backward(view(t), &dw, gb, x, &w, dy, eps, rms);
  be.binary(OSLO_BK_ADD, dx, dx, view(t));
}

void attention_backward(Backend& be, const AttentionShape& a, const View& q, const View& k,
                        const View& v, const View& dout, const View& mask, const View& dq,
                        const View& dk, const View& dv) {
  const int64_t B = a.B, S = a.S, D = a.head_dim;
  // [B * S, heads * D] columns as [B, heads, S, D].
  auto heads4 = [&](const View& t, int64_t heads) {
    const int64_t rs = t.strides[0];
    return strided(t.data, t.dtype, {B, heads, S, D}, {S * rs, D, rs, 1});
  };
  const View m = strided(mask.data, mask.dtype, {B, S}, {mask.strides[0], mask.strides[1]});
  be.attention_backward(heads4(dq, a.heads), heads4(dk, a.kv_heads), heads4(dv, a.kv_heads),
                        heads4(q, a.heads), heads4(k, a.kv_heads), heads4(v, a.kv_heads),
                        heads4(dout, a.heads), &m, a.scale, a.causal, 0);
}

}  // namespace oslo
