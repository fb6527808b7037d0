// The int8 KV cache's conversions (oslo_backend.h's quantize_rows and
// dequantize_rows) and its attention (attention_kv8): the backend's own
// entries when it offers them for the float dtype, else the reference
// below, which the conformance suite compares every backend's entries with
// (the conversions byte for byte; attention_kv8 is dequantize_rows then
// attention()). The reference runs
// on the host: directly on the views when the backend's memory is the
// host's (the CPU backend), else on copies of the byte ranges the views
// span, written back whole (the stream is in order, nothing else writes
// those bytes meanwhile).
#include <cmath>
#include <cstring>
#include <vector>

#include "core/backend/backend.hpp"
#include "core/backend/compose_util.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

namespace oslo {
namespace {

using compose::dims;
using compose::is_float;

// Rows of a view [d0, ..., D]: their count and each one's element offset.
std::vector<int64_t> row_offsets(const View& v) {
  std::vector<int64_t> offs = {0};
  for (int d = 0; d + 1 < v.ndim; ++d) {
    std::vector<int64_t> next;
    next.reserve(offs.size() * static_cast<size_t>(v.shape[d]));
    for (int64_t o : offs)
      for (int64_t i = 0; i < v.shape[d]; ++i) next.push_back(o + i * v.strides[d]);
    offs.swap(next);
  }
  return offs;
}

// The same for the scale view [d0, ...] (one entry per row).
std::vector<int64_t> scale_offsets(const View& s) {
  std::vector<int64_t> offs = {0};
  for (int d = 0; d < s.ndim; ++d) {
    std::vector<int64_t> next;
    next.reserve(offs.size() * static_cast<size_t>(s.shape[d]));
    for (int64_t o : offs)
      for (int64_t i = 0; i < s.shape[d]; ++i) next.push_back(o + i * s.strides[d]);
    offs.swap(next);
  }
  return offs;
}

// The checks both paths share: rows [..., D] of 2-4 dimensions, unit last
// stride, non-negative strides; the scale one dimension fewer, f32.
void check_rows(const View& fl, const View& q, const View& scale, const char* op) {
  OSLO_CHECK(is_float(fl.dtype), OSLO_ERR_DTYPE, op,
             ": the float rows must be f32, f16 or bf16, got ", dtype_name(fl.dtype));
  OSLO_CHECK(q.dtype == OSLO_DTYPE_I8, OSLO_ERR_DTYPE, op, ": the int8 rows must be i8, got ",
             dtype_name(q.dtype));
  OSLO_CHECK(scale.dtype == OSLO_DTYPE_F32, OSLO_ERR_DTYPE, op, ": the scales must be f32, got ",
             dtype_name(scale.dtype));
  OSLO_CHECK(fl.ndim >= 2 && fl.ndim <= 4, OSLO_ERR_SHAPE, op,
             ": rows must be a view of 2 to 4 dimensions [..., D], got ", dims(fl));
  OSLO_CHECK(q.ndim == fl.ndim, OSLO_ERR_SHAPE, op, ": int8 rows ", dims(q),
             " differ from the float rows ", dims(fl));
  for (int d = 0; d < fl.ndim; ++d)
    OSLO_CHECK(q.shape[d] == fl.shape[d], OSLO_ERR_SHAPE, op, ": int8 rows ", dims(q),
               " differ from the float rows ", dims(fl));
  OSLO_CHECK(scale.ndim == fl.ndim - 1, OSLO_ERR_SHAPE, op, ": scales ", dims(scale),
             " must have one dimension fewer than the rows ", dims(fl));
  for (int d = 0; d + 1 < fl.ndim; ++d)
    OSLO_CHECK(scale.shape[d] == fl.shape[d], OSLO_ERR_SHAPE, op, ": scales ", dims(scale),
               " do not match the rows ", dims(fl));
  for (const View* v : {&fl, &q})
    OSLO_CHECK(v->shape[v->ndim - 1] <= 1 || v->strides[v->ndim - 1] == 1, OSLO_ERR_SHAPE, op,
               ": rows need a unit last stride, got ", v->strides[v->ndim - 1]);
  for (const View* v : {&fl, &q, &scale})
    for (int d = 0; d < v->ndim; ++d)
      OSLO_CHECK(v->strides[d] >= 0, OSLO_ERR_SHAPE, op, ": negative stride ", v->strides[d]);
}

bool empty(const View& v) {
  for (int d = 0; d < v.ndim; ++d)
    if (v.shape[d] == 0) return true;
  return false;
}

// Bytes from v.data to one past its last element (v not empty).
size_t span_bytes(const View& v) {
  int64_t last = 0;
  for (int d = 0; d < v.ndim; ++d) last += (v.shape[d] - 1) * v.strides[d];
  return static_cast<size_t>(last + 1) * dtype_size(v.dtype);
}

// Host access to a view's bytes: the view itself on a host backend, else a
// copy of its span (written back by put()).
class HostSpan {
 public:
  HostSpan(Backend& be, const View& v, bool read) : be_(be), v_(v) {
    if (be.host_accessible()) {
      p_ = static_cast<char*>(v.data);
      return;
    }
    buf_.resize(span_bytes(v));
    if (read) be.copy(buf_.data(), v.data, buf_.size(), CopyKind::DeviceToHost);
    p_ = buf_.data();
  }
  char* data() const { return p_; }
  void put() {
    if (!buf_.empty()) be_.copy(v_.data, buf_.data(), buf_.size(), CopyKind::HostToDevice);
  }

 private:
  Backend& be_;
  View v_;
  std::vector<char> buf_;
  char* p_ = nullptr;
};

}  // namespace

void Backend::quantize_rows(const View& q, const View& scale, const View& x) {
  check_rows(x, q, scale, "quantize_rows");
  if (empty(x)) return;
  if (uses_fused(OSLO_BK_OP_QUANTIZE_ROWS, x.dtype))
    return check(t_.quantize_rows(self_, &q, &scale, &x), "quantize_rows");
  // Every row first read whole (x may be q's or scale's neighbour, never
  // the same bytes: the views do not overlap).
  HostSpan hx(*this, x, true), hq(*this, q, true), hs(*this, scale, true);
  const int64_t D = x.shape[x.ndim - 1];
  const std::vector<int64_t> xr = row_offsets(x), qr = row_offsets(q), sr = scale_offsets(scale);
  std::vector<float> row(static_cast<size_t>(D));
  for (size_t r = 0; r < xr.size(); ++r) {
    to_f32(x.dtype, hx.data() + xr[r] * static_cast<int64_t>(dtype_size(x.dtype)), row.data(),
           static_cast<size_t>(D));
    float amax = 0.0f;
    for (int64_t i = 0; i < D; ++i) {
      const float a = std::fabs(row[static_cast<size_t>(i)]);
      if (std::isnan(a) || a > amax) amax = a;  // a NaN stays
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    auto* out = reinterpret_cast<int8_t*>(hq.data()) + qr[r];
    for (int64_t i = 0; i < D; ++i) {
      const float v = row[static_cast<size_t>(i)] * id;
      float rv = std::round(v);
      if (std::isnan(rv)) rv = 0.0f;
      rv = rv > 127.0f ? 127.0f : (rv < -127.0f ? -127.0f : rv);
      out[i] = static_cast<int8_t>(rv);
    }
    std::memcpy(hs.data() + sr[r] * 4, &d, 4);
  }
  hq.put();
  hs.put();
}

void Backend::dequantize_rows(const View& out, const View& q, const View& scale) {
  check_rows(out, q, scale, "dequantize_rows");
  if (empty(out)) return;
  if (uses_fused(OSLO_BK_OP_DEQUANTIZE_ROWS, out.dtype))
    return check(t_.dequantize_rows(self_, &out, &q, &scale), "dequantize_rows");
  HostSpan ho(*this, out, true), hq(*this, q, true), hs(*this, scale, true);
  const int64_t D = out.shape[out.ndim - 1];
  const size_t es = dtype_size(out.dtype);
  const std::vector<int64_t> orow = row_offsets(out), qr = row_offsets(q),
                             sr = scale_offsets(scale);
  std::vector<float> row(static_cast<size_t>(D));
  for (size_t r = 0; r < orow.size(); ++r) {
    float d;
    std::memcpy(&d, hs.data() + sr[r] * 4, 4);
    const auto* in = reinterpret_cast<const int8_t*>(hq.data()) + qr[r];
    for (int64_t i = 0; i < D; ++i) row[static_cast<size_t>(i)] = static_cast<float>(in[i]) * d;
    from_f32(out.dtype, row.data(), ho.data() + orow[r] * static_cast<int64_t>(es),
             static_cast<size_t>(D));
  }
  ho.put();
}

void Backend::attention_kv8(const View& out, const View& q, const View& k, const View& k_scale,
                            const View& v, const View& v_scale, const View* mask, float scale,
                            bool causal, int64_t causal_offset) {
  const char* op = "attention_kv8";
  OSLO_CHECK(k.dtype == OSLO_DTYPE_I8 && v.dtype == OSLO_DTYPE_I8, OSLO_ERR_DTYPE, op,
             ": keys and values must be i8, got ", dtype_name(k.dtype), " and ",
             dtype_name(v.dtype));
  OSLO_CHECK(k.ndim == 4 && v.ndim == 4, OSLO_ERR_SHAPE, op,
             ": keys and values must be 4-D [batch, kv heads, seq, head_dim], got ", dims(k),
             " and ", dims(v));
  // The shape rules of attention(), on the rows as q's dtype would hold them.
  View kd = k, vd = v;
  kd.dtype = vd.dtype = q.dtype;
  compose::check_attention(out, q, kd, vd, mask);
  check_rows(kd, k, k_scale, "attention_kv8 keys");
  check_rows(vd, v, v_scale, "attention_kv8 values");
  if (uses_fused(OSLO_BK_OP_ATTENTION_KV8, q.dtype))
    return check(t_.attention_kv8(self_, &out, &q, &k, &k_scale, &v, &v_scale, mask, scale,
                                  causal ? 1 : 0, causal_offset),
                 op);
  // The reference: the rows dequantized to q's dtype, then attention().
  const int64_t B = k.shape[0], H = k.shape[1], T = k.shape[2], D = k.shape[3];
  if (T == 0) return attention(out, q, kd, vd, mask, scale, causal, causal_offset);
  compose::Scratch kf(*this, q.dtype, {B, H, T, D}), vf(*this, q.dtype, {B, H, T, D});
  dequantize_rows(kf.view(), k, k_scale);
  dequantize_rows(vf.view(), v, v_scale);
  attention(out, q, kf.view(), vf.view(), mask, scale, causal, causal_offset);
}

}  // namespace oslo
