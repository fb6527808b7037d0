// The CUDA plugin's int8 KV cache entries (oslo_backend.h's quantize_rows
// and dequantize_rows): rows [..., D] of 2-4 dimensions, unit last stride,
// one f32 scale per row.
//
//   - quantize_rows: one warp per row; its lanes find the largest |x| (a NaN
//     wins, as in the core's reference), then d = a / 127 and id = 1 / d with
//     IEEE division (__fdiv_rn) and each q = round-half-away(x * id)
//     (__fmul_rn, roundf) clamped to [-127, 127], 0 for NaN: the bytes of
//     core/backend/fused_kv8.cpp's reference, which the conformance suite
//     compares byte for byte.
//   - dequantize_rows: one thread per element, q * scale (__fmul_rn)
//     rounded once to out's dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "cuda_backend.hpp"
#include "cuda_kernels.cuh"

namespace oslo_cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

// Host-side checks: the float rows, the int8 rows (same shape) and the scales
// (the rows' leading dimensions), as oslo_backend.h states them.
void check_kv8(const oslo_bk_view* fl, const oslo_bk_view* q, const oslo_bk_view* scale,
               const char* op, bool float_out) {
  if (fl == nullptr || q == nullptr || scale == nullptr)
    fail(OSLO_ERR_INVALID_ARGUMENT, std::string(op) + ": NULL view");
  check_float(fl, (std::string(op) + " float rows").c_str(), float_out);
  if (q->dtype != OSLO_DTYPE_I8)
    fail(OSLO_ERR_DTYPE, std::string(op) + ": the int8 rows must be i8");
  if (scale->dtype != OSLO_DTYPE_F32)
    fail(OSLO_ERR_DTYPE, std::string(op) + ": the scales must be f32");
  if (fl->ndim < 2 || fl->ndim > 4 || q->ndim != fl->ndim || scale->ndim != fl->ndim - 1)
    fail(OSLO_ERR_SHAPE, std::string(op) + ": rows " + shape_string(*fl) + ", int8 rows " +
                             shape_string(*q) + ", scales " + shape_string(*scale) +
                             " (rows of 2-4 dimensions, the scales one fewer)");
  for (int d = 0; d < fl->ndim; ++d)
    if (q->shape[d] != fl->shape[d] || (d + 1 < fl->ndim && scale->shape[d] != fl->shape[d]))
      fail(OSLO_ERR_SHAPE, std::string(op) + ": rows " + shape_string(*fl) + ", int8 rows " +
                               shape_string(*q) + ", scales " + shape_string(*scale) + " differ");
  const int last = fl->ndim - 1;
  if (fl->shape[last] > 1 && (fl->strides[last] != 1 || q->strides[last] != 1))
    fail(OSLO_ERR_SHAPE, std::string(op) + ": rows need a unit last stride");
  for (const oslo_bk_view* v : {fl, q, scale}) {
    for (int d = 0; d < v->ndim; ++d)
      if (v->strides[d] < 0) fail(OSLO_ERR_SHAPE, std::string(op) + ": negative stride");
    if (v->data == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, std::string(op) + ": no data");
  }
}

// Row r's element offsets (the leading dimensions of up to 3).
struct Rows {
  int nd;
  int64_t sh[3], fs[3], qs[3], ss[3];
};

__device__ __forceinline__ void row_offsets(const Rows& R, int64_t r, int64_t* fo, int64_t* qo,
                                            int64_t* so) {
  int64_t f = 0, q = 0, s = 0;
  for (int i = R.nd - 1; i >= 0; --i) {
    const int64_t idx = r % R.sh[i];
    r /= R.sh[i];
    f += idx * R.fs[i];
    q += idx * R.qs[i];
    s += idx * R.ss[i];
  }
  *fo = f;
  *qo = q;
  *so = s;
}

Rows rows_of(const oslo_bk_view& fl, const oslo_bk_view& q, const oslo_bk_view& scale,
             int64_t* count) {
  Rows R{};
  R.nd = fl.ndim - 1;
  *count = 1;
  for (int i = 0; i < R.nd; ++i) {
    R.sh[i] = fl.shape[i];
    R.fs[i] = fl.strides[i];
    R.qs[i] = q.strides[i];
    R.ss[i] = scale.strides[i];
    *count *= fl.shape[i];
  }
  return R;
}

__global__ void quantize_rows_kernel(Rows R, int64_t nrows, int64_t D, const char* x, int xdt,
                                     int8_t* q, float* scale) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= nrows) return;
  int64_t fo, qo, so;
  row_offsets(R, r, &fo, &qo, &so);
  float amax = 0.0f;
  for (int64_t i = lane; i < D; i += 32) {
    const float a = fabsf(ld(x, xdt, fo + i));
    if (isnan(a) || a > amax) amax = a;  // a NaN stays
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float b = __shfl_xor_sync(0xffffffffu, amax, o);
    if (isnan(b) || b > amax) amax = b;
  }
  const float d = __fdiv_rn(amax, 127.0f);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  for (int64_t i = lane; i < D; i += 32) {
    float v = roundf(__fmul_rn(ld(x, xdt, fo + i), id));
    if (isnan(v)) v = 0.0f;
    v = fminf(fmaxf(v, -127.0f), 127.0f);
    q[qo + i] = static_cast<int8_t>(v);
  }
  if (lane == 0) scale[so] = d;
}

__global__ void dequantize_rows_kernel(Rows R, int64_t nrows, int64_t D, char* out, int odt,
                                       const int8_t* q, const float* scale) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= nrows * D) return;
  const int64_t r = e / D, i = e % D;
  int64_t fo, qo, so;
  row_offsets(R, r, &fo, &qo, &so);
  st(out, odt, fo + i, __fmul_rn(static_cast<float>(q[qo + i]), scale[so]));
}

}  // namespace

oslo_status fused_quantize_rows(void* self, const oslo_bk_view* q, const oslo_bk_view* scale,
                                const oslo_bk_view* x) {
  return guard(self, "quantize_rows", [&](Instance& in) {
    check_kv8(x, q, scale, "quantize_rows", false);
    int64_t nrows = 0;
    const Rows R = rows_of(*x, *q, *scale, &nrows);
    const int64_t D = x->shape[x->ndim - 1];
    if (nrows == 0 || D == 0) return;
    const int64_t blocks = (nrows + kWarpsPerBlock - 1) / kWarpsPerBlock;
    quantize_rows_kernel<<<static_cast<unsigned>(blocks), 32 * kWarpsPerBlock, 0, in.stream>>>(
        R, nrows, D, static_cast<const char*>(x->data), x->dtype, static_cast<int8_t*>(q->data),
        static_cast<float*>(scale->data));
    launched("quantize_rows kernel");
  });
}

oslo_status fused_dequantize_rows(void* self, const oslo_bk_view* out, const oslo_bk_view* q,
                                  const oslo_bk_view* scale) {
  return guard(self, "dequantize_rows", [&](Instance& in) {
    check_kv8(out, q, scale, "dequantize_rows", true);
    int64_t nrows = 0;
    const Rows R = rows_of(*out, *q, *scale, &nrows);
    const int64_t D = out->shape[out->ndim - 1];
    if (nrows == 0 || D == 0) return;
    dequantize_rows_kernel<<<blocks_for(nrows * D, 256), 256, 0, in.stream>>>(
        R, nrows, D, static_cast<char*>(out->data), out->dtype,
        static_cast<const int8_t*>(q->data), static_cast<const float*>(scale->data));
    launched("dequantize_rows kernel");
  });
}

}  // namespace oslo_cuda
