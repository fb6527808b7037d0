// Products with block-quantized weights (oslo_backend.h's dequantize and
// matmul_quant): the backend's own entries when it offers them for the
// weight's dtype, else the compositions below, the reference the conformance
// suite checks every backend's entries against. The composed dequantize runs
// core/quant's scalar reference on the host (through copy() when the
// backend's memory is not the host's); the composed product dequantizes the
// whole weight into f32 scratch and calls matmul_act or matmul.
#include <cstring>
#include <vector>

#include "core/backend/backend.hpp"
#include "core/backend/compose_util.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/quant/quant.hpp"

namespace oslo {
namespace {

using compose::dims;
using compose::is_float;
using compose::Scratch;
using compose::strided;

quant::Format format_of(oslo_dtype dt) {
  return quant::format_of_dtype(dt);
}

// The checks every path shares: w [N, K] block-quantized with whole-block
// rows and row stride, unit column stride.
void check_weight(const View& w, const char* op) {
  OSLO_CHECK(dtype_is_block(w.dtype), OSLO_ERR_DTYPE, op, ": the weight must be block-quantized ",
             "(q8_0, q4_0, q4_k, q6_k), got ", dtype_name(w.dtype));
  int64_t be, bb;
  dtype_block(w.dtype, &be, &bb);
  OSLO_CHECK(w.ndim == 2, OSLO_ERR_SHAPE, op, ": the weight must be 2-D [N, K], got ", dims(w));
  OSLO_CHECK(w.shape[1] % be == 0, OSLO_ERR_SHAPE, op, ": weight ", dims(w), " ",
             dtype_name(w.dtype), ": K = ", w.shape[1], " is not whole blocks of ", be);
  OSLO_CHECK(w.shape[0] <= 1 || (w.strides[0] % be == 0 && w.strides[0] >= w.shape[1]),
             OSLO_ERR_SHAPE, op, ": weight ", dims(w), " ", dtype_name(w.dtype), ": row stride ",
             w.strides[0], " is not whole blocks of ", be, " covering the row");
  OSLO_CHECK(w.shape[1] <= 1 || w.strides[1] == 1, OSLO_ERR_SHAPE, op,
             ": a block-quantized weight's column stride must be 1, got ", w.strides[1]);
}

size_t row_stride_bytes(const View& w) {
  return w.shape[0] <= 1 ? dtype_bytes(w.dtype, w.shape[1]) : dtype_bytes(w.dtype, w.strides[0]);
}

}  // namespace

void Backend::dequantize(const View& out, const View& w) {
  check_weight(w, "dequantize");
  OSLO_CHECK(is_float(out.dtype), OSLO_ERR_DTYPE,
             "dequantize: the output must be f32, f16 or bf16, got ", dtype_name(out.dtype));
  OSLO_CHECK(out.ndim == 2 && out.shape[0] == w.shape[0] && out.shape[1] == w.shape[1],
             OSLO_ERR_SHAPE, "dequantize: output ", dims(out), " differs from weight ", dims(w));
  const int64_t N = w.shape[0], K = w.shape[1];
  if (N == 0 || K == 0) return;
  if (uses_fused(OSLO_BK_OP_DEQUANTIZE, w.dtype))
    return check(t_.dequantize(self_, &out, &w), "dequantize");
  // The host reference: the weight's bytes (copied when not host memory),
  // each row dequantized into f32, then converted into out.
  const quant::Format f = format_of(w.dtype);
  const size_t rb = dtype_bytes(w.dtype, K), stride = row_stride_bytes(w);
  const bool host = host_accessible();
  std::vector<unsigned char> bytes;
  if (!host) {
    bytes.resize(rb * static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n)
      copy(bytes.data() + rb * n, static_cast<const char*>(w.data) + stride * n, rb,
           CopyKind::DeviceToHost);
  }
  std::vector<float> vals(static_cast<size_t>(N * K));
  for (int64_t n = 0; n < N; ++n) {
    const void* src = host ? static_cast<const void*>(static_cast<const char*>(w.data) + stride * n)
                           : static_cast<const void*>(bytes.data() + rb * n);
    quant::dequantize_row(f, src, vals.data() + n * K, static_cast<uint64_t>(K));
  }
  if (host) {
    convert(out, strided(vals.data(), OSLO_DTYPE_F32, {N, K}, {K, 1}));
    return;
  }
  Scratch tmp(*this, OSLO_DTYPE_F32, {N, K});
  copy(tmp.data(), vals.data(), vals.size() * sizeof(float), CopyKind::HostToDevice);
  convert(out, tmp.view());
}

bool Backend::check_matmul_quant(const View& c, const View& a, const View& w, const View* bias,
                                 const oslo_bk_unary* act, const View* gate) const {
  check_weight(w, "matmul_quant");
  const int64_t N = w.shape[0], K = w.shape[1];
  OSLO_CHECK(a.dtype == OSLO_DTYPE_F32 && c.dtype == OSLO_DTYPE_F32, OSLO_ERR_DTYPE,
             "matmul_quant: a and c must be f32, got ", dtype_name(a.dtype), " and ",
             dtype_name(c.dtype));
  OSLO_CHECK(a.ndim == 2 && a.shape[1] == K && (K <= 1 || a.strides[1] == 1), OSLO_ERR_SHAPE,
             "matmul_quant: a ", dims(a), " must be [M, ", K, "] with unit column stride");
  OSLO_CHECK(
      c.ndim == 2 && c.shape[0] == a.shape[0] && c.shape[1] == N && (N <= 1 || c.strides[1] == 1),
      OSLO_ERR_SHAPE, "matmul_quant: c ", dims(c), " must be [", a.shape[0], ", ", N,
      "] with unit column stride");
  if (bias)
    OSLO_CHECK(bias->dtype == OSLO_DTYPE_F32 && bias->ndim == 1 && bias->shape[0] == N,
               OSLO_ERR_SHAPE, "matmul_quant: bias ", dims(*bias), " ", dtype_name(bias->dtype),
               " must be f32 [", N, "]");
  OSLO_CHECK(act || !gate, OSLO_ERR_INVALID_ARGUMENT, "matmul_quant: a gate needs an activation");
  if (gate)
    OSLO_CHECK(gate->dtype == OSLO_DTYPE_F32 && gate->ndim == 2 && gate->shape[0] == a.shape[0] &&
                   gate->shape[1] == N,
               OSLO_ERR_SHAPE, "matmul_quant: gate ", dims(*gate), " ", dtype_name(gate->dtype),
               " must be f32 [", a.shape[0], ", ", N, "]");
  return a.shape[0] > 0 && N > 0;
}

void Backend::matmul_quant(const View& c, const View& a, const View& w, const View* bias,
                           const oslo_bk_unary* act, const View* gate) {
  if (!check_matmul_quant(c, a, w, bias, act, gate)) return;
  if (uses_fused(OSLO_BK_OP_MATMUL_QUANT, w.dtype))
    return check(
        t_.matmul_quant(self_, &c, &a, &w, bias, act ? 1 : 0, act ? *act : OSLO_BK_SCALE, gate),
        "matmul_quant");
  compose_matmul_quant(c, a, w, bias, act, gate);
}

void Backend::compose_matmul_quant(const View& c, const View& a, const View& w, const View* bias,
                                   const oslo_bk_unary* act, const View* gate) {
  const int64_t N = w.shape[0], K = w.shape[1];
  Scratch wf(*this, OSLO_DTYPE_F32, {N, K});
  dequantize(wf.view(), w);
  const View bt = strided(wf.data(), OSLO_DTYPE_F32, {K, N}, {1, K});  // w^T
  if (act)
    matmul_act(c, a, bt, bias, *act, gate);
  else
    matmul(c, a, bt, bias);
}

}  // namespace oslo
