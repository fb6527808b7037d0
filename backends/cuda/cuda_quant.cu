// The CUDA plugin's products with block-quantized weights (oslo_backend.h's
// dequantize and matmul_quant; q8_0, q4_0, q4_k, q6_k, byte layouts in
// docs/QUANTIZATION.md).
//
//   - dequantize: one thread per output element, decoding its block's
//     scale(s) and code in llama.cpp's order of operations with explicitly
//     rounded f32 operations (__fmul_rn, __fsub_rn: nvcc would otherwise
//     contract a multiply and a subtract into one rounding), so the values
//     are bit for bit core/quant's reference; rounded once into out's dtype.
//   - matmul_quant with M <= kDecodeRows (decode): one warp per output
//     column n, its lanes taking runs of 32 weight values (a Q8_0/Q4_0
//     block, a K-quant sub-block) in turn, dequantizing them in registers
//     and accumulating all M rows of a in f32 (no activation quantization:
//     the error is f32 rounding only); then one epilogue kernel: + bias,
//     act, * gate.
//   - M > kDecodeRows (prefill): tiles of weight rows dequantized into an
//     f32 scratch and multiplied by the plugin's own matmul / matmul_act
//     (cuBLASLt), which apply bias, act and gate.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "cuda_backend.hpp"
#include "cuda_kernels.cuh"

namespace oslo_cuda {
namespace {

constexpr int kDecodeRows = 8;
constexpr size_t kTileBytes = size_t(128) << 20;  // f32 scratch per prefill tile

// Elements and bytes per block of a block dtype (0 for any other).
void block_of(int dt, int64_t* be, int64_t* bb) {
  switch (dt) {
    case OSLO_DTYPE_Q8_0: *be = 32, *bb = 34; return;
    case OSLO_DTYPE_Q4_0: *be = 32, *bb = 18; return;
    case OSLO_DTYPE_Q4_K: *be = 256, *bb = 144; return;
    case OSLO_DTYPE_Q6_K: *be = 256, *bb = 210; return;
    default: *be = 0, *bb = 0;
  }
}

__device__ __forceinline__ float half_at(const uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(p[0] | (p[1] << 8))));
}

// Element j of the block at b, as llama.cpp's dequantize_row_* computes it.
__device__ __forceinline__ float deq(int dt, const uint8_t* b, int j) {
  switch (dt) {
    case OSLO_DTYPE_Q8_0:
      return __fmul_rn(static_cast<float>(static_cast<int8_t>(b[2 + j])), half_at(b));
    case OSLO_DTYPE_Q4_0: {
      const int q = j < 16 ? (b[2 + j] & 0x0F) : (b[2 + j - 16] >> 4);
      return __fmul_rn(static_cast<float>(q - 8), half_at(b));
    }
    case OSLO_DTYPE_Q4_K: {
      const int s = j / 32, l = j % 32;
      const uint8_t* sc = b + 4;
      const int d6 = s < 4 ? sc[s] & 63 : (sc[s + 4] & 0xF) | ((sc[s - 4] >> 6) << 4);
      const int m6 = s < 4 ? sc[s + 4] & 63 : (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
      const uint8_t qb = b[16 + 32 * (s / 2) + l];
      const int q = s % 2 ? qb >> 4 : qb & 0xF;
      const float d1 = __fmul_rn(half_at(b), static_cast<float>(d6));
      const float m1 = __fmul_rn(half_at(b + 2), static_cast<float>(m6));
      return __fsub_rn(__fmul_rn(d1, static_cast<float>(q)), m1);
    }
    default: {  // Q6_K
      const int h = j / 128, r = j % 128, c = r / 32, l = r % 32;
      const uint8_t* ql = b + 64 * h;
      const uint8_t* qh = b + 128 + 32 * h;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * h;
      const int low = c == 0   ? ql[l] & 0xF
                      : c == 1 ? ql[l + 32] & 0xF
                      : c == 2 ? ql[l] >> 4
                               : ql[l + 32] >> 4;
      const int q = (low | (((qh[l] >> (2 * c)) & 3) << 4)) - 32;
      const float d = half_at(b + 208);
      return __fmul_rn(__fmul_rn(d, static_cast<float>(sc[l / 16 + 2 * c])), static_cast<float>(q));
    }
  }
}

struct QW {
  const uint8_t* p;
  int dt;
  int64_t be, bb, row_bytes;  // row_bytes: the row stride in bytes
};

// out [rows, K] (any float dtype and strides) = w rows [r0, r0 + rows).
__global__ void dequantize_kernel(QW w, int64_t r0, int64_t rows, int64_t K, char* out, int odt,
                                  int64_t s0, int64_t s1) {
  const int64_t n = rows * K;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = t / K, k = t % K;
    const uint8_t* b = w.p + (r0 + r) * w.row_bytes + (k / w.be) * w.bb;
    st(out, odt, r * s0 + k * s1, deq(w.dt, b, static_cast<int>(k % w.be)));
  }
}

// acc [M, N] (f32, contiguous) = a [M, K] @ w^T: block n, one warp.
template <int MR>
__global__ void gemv_kernel(QW w, const float* a, int64_t lda, int64_t M, int64_t K, float* acc,
                            int64_t N) {
  const int64_t n = blockIdx.x;
  const int lane = threadIdx.x;
  const uint8_t* row = w.p + n * w.row_bytes;
  float s[MR];
#pragma unroll
  for (int m = 0; m < MR; ++m) s[m] = 0.f;
  const int64_t runs = K / 32;
  for (int64_t u = lane; u < runs; u += 32) {
    const int64_t k0 = 32 * u;
    const uint8_t* b = row + (k0 / w.be) * w.bb;
    const int j0 = static_cast<int>(k0 % w.be);
    for (int i = 0; i < 32; ++i) {
      const float x = deq(w.dt, b, j0 + i);
#pragma unroll
      for (int m = 0; m < MR; ++m)
        if (m < M) s[m] = fmaf(x, a[m * lda + k0 + i], s[m]);
    }
  }
#pragma unroll
  for (int m = 0; m < MR; ++m) {
    float v = s[m];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0 && m < M) acc[m * N + n] = v;
  }
}

// c = act(acc + bias) * gate (act_on), else acc + bias; gate may be c.
__global__ void epilogue_kernel(float* c, int64_t cs0, const float* acc, int64_t M, int64_t N,
                                const float* bias, int64_t bs, int act_on, int act,
                                const float* gate, int64_t gs0, int64_t gs1) {
  const int64_t n = M * N;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = t / N, col = t % N;
    float v = acc[t];
    if (bias) v += bias[col * bs];
    if (act_on) {
      v = apply_unary(act, v, 0.f);
      if (gate) v *= gate[r * gs0 + col * gs1];
    }
    c[r * cs0 + col] = v;
  }
}

// The weight view's checks (oslo_backend.h): returns its kernel argument.
QW check_weight(const oslo_bk_view* w, const char* op) {
  if (w == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, std::string(op) + ": NULL weight");
  int64_t be, bb;
  block_of(w->dtype, &be, &bb);
  if (be == 0)
    fail(OSLO_ERR_DTYPE, std::string(op) +
                             ": the weight must be block-quantized (q8_0, q4_0, "
                             "q4_k, q6_k), got dtype " +
                             std::to_string(enum_value(w->dtype)));
  if (w->ndim != 2 || w->shape[0] < 0 || w->shape[1] < 0)
    fail(OSLO_ERR_SHAPE,
         std::string(op) + ": the weight must be 2-D [N, K], got " + shape_string(*w));
  if (w->shape[1] % be)
    fail(OSLO_ERR_SHAPE, std::string(op) + ": weight " + shape_string(*w) +
                             ": K = " + std::to_string(w->shape[1]) + " is not whole blocks of " +
                             std::to_string(be));
  if (w->shape[0] > 1 && (w->strides[0] % be || w->strides[0] < w->shape[1]))
    fail(OSLO_ERR_SHAPE, std::string(op) + ": weight " + shape_string(*w) + ": row stride " +
                             std::to_string(w->strides[0]) + " is not whole blocks of " +
                             std::to_string(be) + " covering the row");
  if (w->shape[1] > 1 && w->strides[1] != 1)
    fail(OSLO_ERR_SHAPE, std::string(op) + ": a block-quantized weight's column stride must be 1");
  if (w->data == nullptr && w->shape[0] * w->shape[1] > 0)
    fail(OSLO_ERR_INVALID_ARGUMENT, std::string(op) + ": the weight has no data");
  const int64_t S = w->shape[0] <= 1 ? w->shape[1] : w->strides[0];
  return QW{static_cast<const uint8_t*>(w->data), w->dtype, be, bb, S / be * bb};
}

void check_f32_matrix(const oslo_bk_view* v, int64_t rows, int64_t cols, const char* what) {
  if (v == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, std::string("matmul_quant: NULL ") + what);
  if (v->dtype != OSLO_DTYPE_F32)
    fail(OSLO_ERR_DTYPE, std::string("matmul_quant: ") + what + " must be f32");
  if (v->ndim != 2 || v->shape[0] != rows || v->shape[1] != cols ||
      (cols > 1 && v->strides[1] != 1))
    fail(OSLO_ERR_SHAPE, std::string("matmul_quant: ") + what + " " + shape_string(*v) +
                             " must be [" + std::to_string(rows) + ", " + std::to_string(cols) +
                             "] with unit column stride");
}

oslo_bk_view sub(const oslo_bk_view& v, int64_t col0, int64_t cols, int64_t elem_bytes) {
  oslo_bk_view r = v;
  r.data = static_cast<char*>(v.data) + col0 * v.strides[v.ndim - 1] * elem_bytes;
  r.shape[v.ndim - 1] = cols;
  return r;
}

}  // namespace

bool quant_dtype(oslo_dtype dt) {
  int64_t be, bb;
  block_of(dt, &be, &bb);
  return be != 0;
}

oslo_status fused_dequantize(void* self, const oslo_bk_view* out, const oslo_bk_view* w) {
  return guard(self, "dequantize", [&](Instance& in) {
    const QW q = check_weight(w, "dequantize");
    if (out == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, "dequantize: NULL output");
    if (!is_float(out->dtype))
      fail(OSLO_ERR_DTYPE, "dequantize: the output must be f32, f16 or bf16");
    if (out->ndim != 2 || out->shape[0] != w->shape[0] || out->shape[1] != w->shape[1])
      fail(OSLO_ERR_SHAPE,
           "dequantize: output " + shape_string(*out) + " differs from weight " + shape_string(*w));
    const int64_t N = w->shape[0], K = w->shape[1];
    if (N * K == 0) return;
    check_view(out, "dequantize output", true);
    dequantize_kernel<<<blocks_for(N * K, 256), 256, 0, in.stream>>>(
        q, 0, N, K, static_cast<char*>(out->data), out->dtype, out->strides[0], out->strides[1]);
    launched("dequantize kernel");
  });
}

oslo_status fused_matmul_quant(void* self, const oslo_bk_view* c, const oslo_bk_view* a,
                               const oslo_bk_view* w, const oslo_bk_view* bias, int act_on,
                               oslo_bk_unary act_arg, const oslo_bk_view* gate) {
  const int act = enum_value(act_arg);
  return guard(self, "matmul_quant", [&](Instance& in) {
    const QW q = check_weight(w, "matmul_quant");
    const int64_t N = w->shape[0], K = w->shape[1];
    if (a == nullptr || c == nullptr) fail(OSLO_ERR_INVALID_ARGUMENT, "matmul_quant: NULL a or c");
    const int64_t M = a->shape[0];
    check_f32_matrix(a, M, K, "a");
    check_f32_matrix(c, M, N, "c");
    if (bias && (bias->dtype != OSLO_DTYPE_F32 || bias->ndim != 1 || bias->shape[0] != N))
      fail(OSLO_ERR_SHAPE, "matmul_quant: bias " + shape_string(*bias) + " must be f32 [" +
                               std::to_string(N) + "]");
    if (!act_on && gate)
      fail(OSLO_ERR_INVALID_ARGUMENT, "matmul_quant: a gate needs an activation");
    if (gate) check_f32_matrix(gate, M, N, "gate");
    if (act_on && act != OSLO_BK_GELU && act != OSLO_BK_GELU_TANH && act != OSLO_BK_SILU &&
        act != OSLO_BK_RELU && act != OSLO_BK_TANH)
      fail(OSLO_ERR_INVALID_ARGUMENT, "matmul_quant: " + std::to_string(act) +
                                          " is not an activation (GELU, GELU_TANH, SILU, RELU "
                                          "or TANH)");
    if (M == 0 || N == 0) return;
    if (M > kDecodeRows && K > 0) {
      // Prefill: f32 tiles of w, multiplied by the plugin's matmul(_act).
      const int64_t tile = std::max<int64_t>(1, std::min<int64_t>(N, kTileBytes / (4 * K)));
      Instance::Temp scratch(&in, static_cast<size_t>(tile * K) * sizeof(float));
      for (int64_t n0 = 0; n0 < N; n0 += tile) {
        const int64_t nt = std::min(tile, N - n0);
        dequantize_kernel<<<blocks_for(nt * K, 256), 256, 0, in.stream>>>(
            q, n0, nt, K, static_cast<char*>(scratch.p), OSLO_DTYPE_F32, K, 1);
        launched("dequantize kernel");
        oslo_bk_view bt{};  // w^T [K, nt]
        bt.data = scratch.p;
        bt.dtype = OSLO_DTYPE_F32;
        bt.ndim = 2;
        bt.shape[0] = K;
        bt.shape[1] = nt;
        bt.strides[0] = 1;
        bt.strides[1] = K;
        const oslo_bk_view ct = sub(*c, n0, nt, 4);
        oslo_bk_view bsub{};
        if (bias) bsub = sub(*bias, n0, nt, 4);
        oslo_bk_view gsub{};
        if (gate) gsub = sub(*gate, n0, nt, 4);
        const oslo_status st = act_on
                                   ? fused_matmul_act(self, &ct, a, &bt, bias ? &bsub : nullptr,
                                                      act_arg, gate ? &gsub : nullptr)
                                   : op_matmul(self, &ct, a, &bt, bias ? &bsub : nullptr, 1.f, 0.f);
        if (st != OSLO_OK) fail(st, in.error);
      }
      return;
    }
    Instance::Temp acc(&in, static_cast<size_t>(M * N) * sizeof(float));
    if (K == 0) {
      check_cuda(cudaMemsetAsync(acc.p, 0, static_cast<size_t>(M * N) * sizeof(float), in.stream),
                 "cudaMemsetAsync");
    } else {
      const float* ap = static_cast<const float*>(a->data);
      float* accp = static_cast<float*>(acc.p);
      const int64_t lda = a->strides[0];
      const unsigned grid = static_cast<unsigned>(N);
      if (M <= 1)
        gemv_kernel<1><<<grid, 32, 0, in.stream>>>(q, ap, lda, M, K, accp, N);
      else if (M <= 4)
        gemv_kernel<4><<<grid, 32, 0, in.stream>>>(q, ap, lda, M, K, accp, N);
      else
        gemv_kernel<kDecodeRows><<<grid, 32, 0, in.stream>>>(q, ap, lda, M, K, accp, N);
      launched("matmul_quant kernel");
    }
    epilogue_kernel<<<blocks_for(M * N, 256), 256, 0, in.stream>>>(
        static_cast<float*>(c->data), c->strides[0], static_cast<const float*>(acc.p), M, N,
        bias ? static_cast<const float*>(bias->data) : nullptr, bias ? bias->strides[0] : 0, act_on,
        act, gate ? static_cast<const float*>(gate->data) : nullptr, gate ? gate->strides[0] : 0,
        gate ? gate->strides[1] : 0);
    launched("matmul_quant epilogue kernel");
  });
}

}  // namespace oslo_cuda
