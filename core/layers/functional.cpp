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

void attention_backward(Backend& be, const std::shared_ptr<Backend>& bp, const AttentionShape& a,
                        const View& q, const View& k, const View& v, const View& dout,
                        const View& mask, const View& dq, const View& dk, const View& dv) {
  const int64_t B = a.B, S = a.S, D = a.head_dim, nkv = a.kv_heads, g = a.heads / a.kv_heads;
  const int64_t BH = B * nkv;
  auto f32 = [&](std::vector<int64_t> shape) { return scratch(bp, OSLO_DTYPE_F32, shape); };
  // [B * S, heads * D] columns as [B, heads, S, D].
  auto heads4 = [&](const View& t, int64_t heads) {
    const int64_t rs = t.strides[0];
    return strided(t.data, t.dtype, {B, heads, S, D}, {S * rs, D, rs, 1});
  };
  // Queries grouped by key/value head: [B, nkv, g, S, D] <-> [B*nkv, g*S, D].
  auto grouped = [&](const View& t) {
    const int64_t rs = t.strides[0];
    return strided(t.data, t.dtype, {B, nkv, g, S, D}, {S * rs, g * D, D, rs, 1});
  };
  auto packed5 = [&](const Tensor& t) {
    return strided(t.data(), OSLO_DTYPE_F32, {B, nkv, g, S, D},
                   {nkv * g * S * D, g * S * D, S * D, D, 1});
  };
  auto packed4 = [&](const Tensor& t) {
    return strided(t.data(), OSLO_DTYPE_F32, {B, nkv, S, D}, {nkv * S * D, S * D, D, 1});
  };
  Tensor qc = f32({BH, g * S, D}), doc = f32({BH, g * S, D});
  Tensor kc = f32({BH, S, D}), vc = f32({BH, S, D});
  be.convert(packed5(qc), grouped(q));
  be.convert(packed5(doc), grouped(dout));
  be.convert(packed4(kc), heads4(k, nkv));
  be.convert(packed4(vc), heads4(v, nkv));
  auto tr3 = [&](const Tensor& t) { return transposed(view(t)); };
  Tensor P = f32({BH, g * S, S}), dP = f32({BH, g * S, S}), dS = f32({BH, g * S, S});
  be.matmul(view(P), view(qc), tr3(kc));
  const View p5 = strided(P.data(), OSLO_DTYPE_F32, {B, nkv, g, S, S},
                          {nkv * g * S * S, g * S * S, S * S, S, 1});
  const View m5 = strided(mask.data, OSLO_DTYPE_F32, {B, 1, 1, 1, S}, {S, 0, 0, 0, 1});
  be.softmax(p5, p5, &m5, a.scale, a.causal, 0);
  Tensor dqc = f32({BH, g * S, D}), dkc = f32({BH, S, D}), dvc = f32({BH, S, D});
  be.matmul(view(dvc), tr3(P), view(doc));  // dV = P^T dO
  be.matmul(view(dP), view(doc), tr3(vc));  // dP = dO V^T
  be.softmax_backward(view(dS), view(P), view(dP), a.scale);
  be.matmul(view(dqc), view(dS), view(kc));  // dQ = dS K
  be.matmul(view(dkc), tr3(dS), view(qc));   // dK = dS^T Q
  be.convert(grouped(dq), packed5(dqc));
  be.convert(heads4(dk, nkv), packed4(dkc));
  be.convert(heads4(dv, nkv), packed4(dvc));
}

}  // namespace oslo
