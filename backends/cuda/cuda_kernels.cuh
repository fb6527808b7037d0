// Device helpers shared by the CUDA plugin's kernel files (cuda_ops.cu,
// cuda_fused.cu): loads and stores by dtype, the activations, block-wide
// reductions, row iteration over strided views, and the host-side view
// helpers that set kernels up. Internal to the plugin (hidden visibility).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "cuda_backend.hpp"

namespace oslo_cuda {
namespace {

constexpr int kMaxDims = OSLO_MAX_DIMS;

// -- loads and stores by dtype ----------------------------------------------

__device__ __forceinline__ float ld(const char* p, int dt, int64_t off) {
  switch (dt) {
    case OSLO_DTYPE_F32: return reinterpret_cast<const float*>(p)[off];
    case OSLO_DTYPE_F16: return __half2float(reinterpret_cast<const __half*>(p)[off]);
    case OSLO_DTYPE_BF16: return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(p)[off]);
    case OSLO_DTYPE_I32: return static_cast<float>(reinterpret_cast<const int32_t*>(p)[off]);
    default: return static_cast<float>(reinterpret_cast<const int64_t*>(p)[off]);
  }
}

__device__ __forceinline__ void st(char* p, int dt, int64_t off, float v) {
  switch (dt) {
    case OSLO_DTYPE_F32: reinterpret_cast<float*>(p)[off] = v; break;
    case OSLO_DTYPE_F16: reinterpret_cast<__half*>(p)[off] = __float2half_rn(v); break;
    case OSLO_DTYPE_BF16: reinterpret_cast<__nv_bfloat16*>(p)[off] = __float2bfloat16_rn(v); break;
    case OSLO_DTYPE_I32: reinterpret_cast<int32_t*>(p)[off] = static_cast<int32_t>(v); break;
    default: reinterpret_cast<int64_t*>(p)[off] = static_cast<int64_t>(v); break;
  }
}

__device__ __forceinline__ int64_t ld_id(const char* p, int dt, int64_t off) {
  return dt == OSLO_DTYPE_I32 ? reinterpret_cast<const int32_t*>(p)[off]
                              : reinterpret_cast<const int64_t*>(p)[off];
}

// -- host-side view helpers ---------------------------------------------------

// v right-aligned to n dimensions (leading size-1 dimensions prepended).
inline oslo_bk_view align(const oslo_bk_view& v, int n) {
  oslo_bk_view r = v;
  const int pad = n - v.ndim;
  if (pad < 0)
    fail(OSLO_ERR_SHAPE,
         "view " + shape_string(v) + " has more dimensions than " + std::to_string(n));
  for (int i = n - 1; i >= 0; --i) {
    r.shape[i] = i >= pad ? v.shape[i - pad] : 1;
    r.strides[i] = i >= pad ? v.strides[i - pad] : 0;
  }
  r.ndim = n;
  return r;
}

// x (aligned to out) broadcast to out: each extent equal or 1.
inline oslo_bk_view broadcast_to(const oslo_bk_view& out, const oslo_bk_view& x, const char* what) {
  oslo_bk_view r = align(x, out.ndim);
  for (int i = 0; i < out.ndim; ++i) {
    if (r.shape[i] != out.shape[i] && r.shape[i] != 1)
      fail(OSLO_ERR_SHAPE, std::string(what) + " " + shape_string(x) + " does not broadcast to " +
                               shape_string(out));
    if (r.shape[i] != out.shape[i]) r.strides[i] = 0;
    r.shape[i] = out.shape[i];
  }
  return r;
}

inline int64_t rows_of(const oslo_bk_view& v) {
  int64_t r = 1;
  for (int i = 0; i + 1 < v.ndim; ++i) r *= v.shape[i];
  return r;
}
inline int64_t cols_of(const oslo_bk_view& v) {
  return v.ndim ? v.shape[v.ndim - 1] : 1;
}
inline bool flat(const oslo_bk_view& v) {
  int64_t s = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    if (v.shape[i] != 1 && v.strides[i] != s) return false;
    s *= v.shape[i];
  }
  return true;
}

inline void launched(const char* what) {
  check_cuda(cudaGetLastError(), what);
}

inline unsigned blocks_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(b, 1), 65535 * 8));
}

__device__ __forceinline__ float gelu(float v) {
  return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}
__device__ __forceinline__ float gelu_tanh(float v) {
  const float k = 0.7978845608028654f;
  return 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
}
__device__ __forceinline__ float sigmoid(float v) {
  return 1.0f / (1.0f + expf(-v));
}

__device__ __forceinline__ float apply_unary(int op, float v, float alpha) {
  switch (op) {
    case OSLO_BK_SCALE: return v * alpha;
    case OSLO_BK_EXP: return expf(v);
    case OSLO_BK_GELU: return gelu(v);
    case OSLO_BK_GELU_TANH: return gelu_tanh(v);
    case OSLO_BK_SILU: return v * sigmoid(v);
    case OSLO_BK_RELU: return v > 0 ? v : (v == v ? 0.f : v);
    case OSLO_BK_TANH: return tanhf(v);
    case OSLO_BK_SQUARE: return v * v;
    case OSLO_BK_ABS_POW:
      return alpha == 1.f ? fabsf(v) : alpha == 2.f ? v * v : powf(fabsf(v), alpha);
    case OSLO_BK_ABS: return fabsf(v);
    case OSLO_BK_LOG: return logf(v);
    default: return 1.0f / sqrtf(v);  // RSQRT
  }
}

// -- rows -----------------------------------------------------------------------

// The shape rows are counted over (all dimensions but the last) and, per
// operand aligned to it, the strides.
struct RowShape {
  int nd;  // dimensions before the last
  int64_t sh[kMaxDims];
};
struct RowV {
  const char* p;
  int dt;
  int64_t inner;
  int64_t s[kMaxDims];
};

inline RowShape row_shape(const oslo_bk_view& v) {
  RowShape r{};
  r.nd = v.ndim > 0 ? v.ndim - 1 : 0;
  for (int i = 0; i < r.nd; ++i) r.sh[i] = v.shape[i];
  return r;
}
// v aligned to shape_src's dimensions (broadcast allowed).
inline RowV row_view(const oslo_bk_view& shape_src, const oslo_bk_view& v0, const char* what) {
  const oslo_bk_view v = shape_src.ndim ? broadcast_to(shape_src, v0, what) : v0;
  RowV r{};
  r.p = static_cast<const char*>(v.data);
  r.dt = v.dtype;
  r.inner = v.ndim ? v.strides[v.ndim - 1] : 1;
  for (int i = 0; i + 1 < v.ndim; ++i) r.s[i] = v.strides[i];
  return r;
}
// Same dimensions, no broadcast check (for outputs of the same numel).
inline RowV row_view_same(const oslo_bk_view& v) {
  RowV r{};
  r.p = static_cast<const char*>(v.data);
  r.dt = v.dtype;
  r.inner = v.ndim ? v.strides[v.ndim - 1] : 1;
  for (int i = 0; i + 1 < v.ndim; ++i) r.s[i] = v.strides[i];
  return r;
}

__device__ __forceinline__ int64_t row_off(const RowShape& rs, const RowV& v, int64_t r) {
  int64_t off = 0;
  for (int i = rs.nd - 1; i >= 0; --i) {
    const int64_t e = rs.sh[i];
    const int64_t idx = e ? r % e : 0;
    r = e ? r / e : 0;
    off += idx * v.s[i];
  }
  return off;
}

// Block-wide combine of one double per thread (blockDim.x a multiple of 32,
// at most 1024); every thread gets the result.
template <class Op>
__device__ double block_all(double v, Op op) {
  __shared__ double part[32];
  __shared__ double result;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int nw = blockDim.x >> 5;
    double w = lane < nw ? part[lane] : part[0];
    for (int o = 16; o > 0; o >>= 1) {
      const double other = __shfl_down_sync(0xffffffffu, w, o);
      if (lane + o < nw) w = op(w, other);
    }
    if (lane == 0) result = w;
  }
  __syncthreads();
  return result;
}

struct Add {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct Max {  // NaN wins
  __device__ double operator()(double a, double b) const { return (isnan(b) || b > a) ? b : a; }
};

inline int row_threads(int64_t cols) {
  if (cols >= 4096) return 1024;
  if (cols >= 1024) return 512;
  if (cols >= 256) return 256;
  return 128;
}

}  // namespace
}  // namespace oslo_cuda
