// The fused attention backward of the backend seam (oslo_backend.h's
// attention_backward): the backend's own entry when it offers one for the
// dtype, else the composition below from the required entries (products,
// the softmax and its backward), the reference the conformance suite checks
// every backend's entry against.
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

void Backend::attention_backward(const View& dq, const View& dk, const View& dv, const View& q,
                                 const View& k, const View& v, const View& dout, const View* mask,
                                 float scale, bool causal, int64_t causal_offset) {
  for (const View* t : {&dq, &dk, &dv, &q, &k, &v, &dout})
    OSLO_CHECK(t->ndim == 4 && is_float(t->dtype), OSLO_ERR_SHAPE,
               "attention_backward operands must be 4-D float views ([batch, heads, seq, "
               "head_dim]), got ",
               dims(*t), " ", dtype_name(t->dtype));
  OSLO_CHECK(q.dtype == k.dtype && q.dtype == v.dtype && q.dtype == dout.dtype, OSLO_ERR_DTYPE,
             "attention_backward q, k, v and dout must share a dtype (", dtype_name(q.dtype), ", ",
             dtype_name(k.dtype), ", ", dtype_name(v.dtype), ", ", dtype_name(dout.dtype), ")");
  OSLO_CHECK(k.shape[0] == q.shape[0] && k.shape[3] == q.shape[3] && k.shape[1] > 0 &&
                 q.shape[1] % k.shape[1] == 0,
             OSLO_ERR_SHAPE, "attention_backward keys ", dims(k), " do not fit queries ", dims(q),
             " (batch and head_dim equal, query heads a multiple of key heads)");
  for (int i = 0; i < 4; ++i) {
    OSLO_CHECK(v.shape[i] == k.shape[i] && dk.shape[i] == k.shape[i] && dv.shape[i] == k.shape[i],
               OSLO_ERR_SHAPE, "attention_backward values ", dims(v), ", dk ", dims(dk), " and dv ",
               dims(dv), " must have the keys' shape ", dims(k));
    OSLO_CHECK(dout.shape[i] == q.shape[i] && dq.shape[i] == q.shape[i], OSLO_ERR_SHAPE,
               "attention_backward dout ", dims(dout), " and dq ", dims(dq),
               " must have the queries' shape ", dims(q));
  }
  if (mask)
    OSLO_CHECK(is_float(mask->dtype) && mask->ndim == 2 && mask->shape[0] == q.shape[0] &&
                   mask->shape[1] == k.shape[2],
               OSLO_ERR_SHAPE, "attention_backward mask ", dims(*mask), " must be float [",
               q.shape[0], ", ", k.shape[2], "]");
  if (uses_fused(OSLO_BK_OP_ATTENTION_BACKWARD, q.dtype))
    return check(t_.attention_backward(self_, &dq, &dk, &dv, &q, &k, &v, &dout, mask, scale,
                                       causal ? 1 : 0, causal_offset),
                 "attention_backward");
  compose_attention_backward(dq, dk, dv, q, k, v, dout, mask, scale, causal, causal_offset);
}

// The probabilities recomputed as attention's composition computes them
// (scores [B * Hkv, g * S, T], the softmax with mask and causal limit), then
// dV = P^T dO, dP = dO V^T, dS = softmax_backward, dQ = dS K, dK = dS^T Q.
void Backend::compose_attention_backward(const View& dq, const View& dk, const View& dv,
                                         const View& q, const View& k, const View& v,
                                         const View& dout, const View* mask, float scale,
                                         bool causal, int64_t offset) {
  const int64_t B = q.shape[0], Hq = q.shape[1], S = q.shape[2], D = q.shape[3];
  const int64_t Hkv = k.shape[1], T = k.shape[2], g = Hq / Hkv, BH = B * Hkv;
  if (B * Hkv * D == 0) return;
  if (S == 0 || T == 0) {  // no query or no key: every gradient is 0
    if (S > 0) fill(dq, 0.0);
    if (T > 0) {
      fill(dk, 0.0);
      fill(dv, 0.0);
    }
    return;
  }
  // Queries (and their gradients) grouped by key/value head: [B, Hkv, g, S, D].
  auto grouped = [&](const View& t) {
    return strided(t.data, t.dtype, {B, Hkv, g, S, D},
                   {t.strides[0], g * t.strides[1], t.strides[1], t.strides[2], t.strides[3]});
  };
  auto packed5 = [&](const Scratch& t) {
    return strided(t.data(), OSLO_DTYPE_F32, {B, Hkv, g, S, D},
                   {Hkv * g * S * D, g * S * D, S * D, D, 1});
  };
  auto packed4 = [&](const Scratch& t) {
    return strided(t.data(), OSLO_DTYPE_F32, {B, Hkv, T, D}, {Hkv * T * D, T * D, D, 1});
  };
  auto tr3 = [&](const Scratch& t) { return compose::swap_last(t.view()); };
  Scratch qc(*this, {BH, g * S, D}), doc(*this, {BH, g * S, D});
  Scratch kc(*this, {BH, T, D}), vc(*this, {BH, T, D});
  convert(packed5(qc), grouped(q));
  convert(packed5(doc), grouped(dout));
  convert(packed4(kc), k);
  convert(packed4(vc), v);
  Scratch P(*this, {BH, g * S, T}), dP(*this, {BH, g * S, T}), dS(*this, {BH, g * S, T});
  matmul(P.view(), qc.view(), tr3(kc));
  const View p5 = strided(P.data(), OSLO_DTYPE_F32, {B, Hkv, g, S, T},
                          {Hkv * g * S * T, g * S * T, S * T, T, 1});
  View m5;
  if (mask)
    m5 = strided(mask->data, mask->dtype, {B, 1, 1, 1, T},
                 {mask->strides[0], 0, 0, 0, mask->strides[1]});
  softmax(p5, p5, mask ? &m5 : nullptr, scale, causal, offset);
  Scratch dqc(*this, {BH, g * S, D}), dkc(*this, {BH, T, D}), dvc(*this, {BH, T, D});
  matmul(dvc.view(), compose::swap_last(P.view()), doc.view());  // dV = P^T dO
  matmul(dP.view(), doc.view(), tr3(vc));                        // dP = dO V^T
  softmax_backward(dS.view(), P.view(), dP.view(), scale);
  matmul(dqc.view(), dS.view(), kc.view());                      // dQ = dS K
  matmul(dkc.view(), compose::swap_last(dS.view()), qc.view());  // dK = dS^T Q
  convert(grouped(dq), packed5(dqc));
  convert(dk, packed4(dkc));
  convert(dv, packed4(dvc));
}

}  // namespace oslo
