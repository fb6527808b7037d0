// oslo's own CUDA kernels for every compute op of the backend table except
// the GEMM (cuda_matmul.cpp): convert, fill, element-wise ops, reductions,
// softmax, norms, gathers and scatters. Every kernel runs on the instance's
// stream; views may be strided and inputs may broadcast (stride 0). Values
// are loaded as f32 and stored rounded to nearest even in the output's
// dtype; reductions accumulate in f64.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "cuda_backend.hpp"
#include "cuda_kernels.cuh"

namespace oslo_cuda {
namespace {

// -- element-wise -------------------------------------------------------------

// Up to three operands over one iteration shape, dimensions merged where
// every operand allows it.
struct Ew {
  int nd;
  int64_t n;
  int64_t sh[kMaxDims];
  int64_t s[3][kMaxDims];
  char* p[3];
  int dt[3];
};

Ew make_ew(const oslo_bk_view& out, const oslo_bk_view* a, const oslo_bk_view* b) {
  Ew e{};
  const oslo_bk_view* v[3] = {&out, a, b};
  int nd = 0;
  for (int i = 0; i < out.ndim; ++i) {
    if (out.shape[i] == 1) continue;
    e.sh[nd] = out.shape[i];
    for (int k = 0; k < 3; ++k) e.s[k][nd] = v[k] ? v[k]->strides[i] : 0;
    ++nd;
  }
  // Merge dimension d into d-1 where contiguous for every operand.
  int m = 0;
  for (int d = 0; d < nd; ++d) {
    if (m > 0) {
      bool ok = true;
      for (int k = 0; k < 3; ++k)
        if (e.s[k][m - 1] != e.s[k][d] * e.sh[d]) ok = false;
      if (ok) {
        e.sh[m - 1] *= e.sh[d];
        for (int k = 0; k < 3; ++k) e.s[k][m - 1] = e.s[k][d];
        continue;
      }
    }
    e.sh[m] = e.sh[d];
    for (int k = 0; k < 3; ++k) e.s[k][m] = e.s[k][d];
    ++m;
  }
  e.nd = m;
  e.n = numel(out);
  for (int k = 0; k < 3; ++k) {
    e.p[k] = v[k] ? static_cast<char*>(v[k]->data) : nullptr;
    e.dt[k] = v[k] ? v[k]->dtype : 0;
  }
  return e;
}

__device__ __forceinline__ void ew_offsets(const Ew& e, int64_t i, int64_t* o) {
  o[0] = o[1] = o[2] = 0;
  if (e.nd == 1) {
    o[0] = i * e.s[0][0];
    o[1] = i * e.s[1][0];
    o[2] = i * e.s[2][0];
    return;
  }
  for (int d = e.nd - 1; d >= 0; --d) {
    const int64_t idx = i % e.sh[d];
    i /= e.sh[d];
    o[0] += idx * e.s[0][d];
    o[1] += idx * e.s[1][d];
    o[2] += idx * e.s[2][d];
  }
}

__device__ __forceinline__ float unary_grad(int op, float v, float alpha) {
  switch (op) {
    case OSLO_BK_SCALE: return alpha;
    case OSLO_BK_GELU:
      return 0.5f * (1.0f + erff(v * 0.70710678118654752f)) +
             v * 0.3989422804014327f * expf(-0.5f * v * v);
    case OSLO_BK_GELU_TANH: {
      const float k = 0.7978845608028654f, c = 0.044715f;
      const float t = tanhf(k * (v + c * v * v * v));
      return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * k * (1.0f + 3.0f * c * v * v);
    }
    case OSLO_BK_SILU: {
      const float s = sigmoid(v);
      return s * (1.0f + v * (1.0f - s));
    }
    case OSLO_BK_RELU: return v > 0 ? 1.f : 0.f;
    default: {  // TANH
      const float t = tanhf(v);
      return 1.0f - t * t;
    }
  }
}

__device__ __forceinline__ float apply_binary(int op, float x, float y) {
  switch (op) {
    case OSLO_BK_ADD: return x + y;
    case OSLO_BK_SUB: return x - y;
    case OSLO_BK_MUL: return x * y;
    case OSLO_BK_DIV: return x / y;
    case OSLO_BK_MAXIMUM: return (isnan(x) || x > y) ? x : y;
    default: return (isnan(x) || x < y) ? x : y;  // MINIMUM
  }
}

// kind: 0 convert (float), 1 binary, 2 unary, 3 unary_backward, 4 fill
__global__ void ew_kernel(Ew e, int kind, int op, float alpha, float value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < e.n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t o[3];
    ew_offsets(e, i, o);
    float r;
    switch (kind) {
      case 0: r = ld(e.p[1], e.dt[1], o[1]); break;
      case 1: r = apply_binary(op, ld(e.p[1], e.dt[1], o[1]), ld(e.p[2], e.dt[2], o[2])); break;
      case 2: r = apply_unary(op, ld(e.p[1], e.dt[1], o[1]), alpha); break;
      case 3:
        r = ld(e.p[2], e.dt[2], o[2]) * unary_grad(op, ld(e.p[1], e.dt[1], o[1]), alpha);
        break;
      default: r = value; break;
    }
    st(e.p[0], e.dt[0], o[0], r);
  }
}

// Integer copies (i32 <-> i64); a value that does not fit i32 sets *flag.
__global__ void int_convert_kernel(Ew e, int* flag) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < e.n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t o[3];
    ew_offsets(e, i, o);
    const int64_t v = ld_id(e.p[1], e.dt[1], o[1]);
    if (e.dt[0] == OSLO_DTYPE_I32) {
      if (v < INT_MIN || v > INT_MAX)
        atomicMin(flag, static_cast<int>(min(i, int64_t(INT_MAX - 1))));
      reinterpret_cast<int32_t*>(e.p[0])[o[0]] = static_cast<int32_t>(v);
    } else {
      reinterpret_cast<int64_t*>(e.p[0])[o[0]] = v;
    }
  }
}

__global__ void int_fill_kernel(Ew e, long long value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < e.n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t o[3];
    ew_offsets(e, i, o);
    if (e.dt[0] == OSLO_DTYPE_I32)
      reinterpret_cast<int32_t*>(e.p[0])[o[0]] = static_cast<int32_t>(value);
    else
      reinterpret_cast<int64_t*>(e.p[0])[o[0]] = static_cast<int64_t>(value);
  }
}

void run_ew(Instance& in, const Ew& e, int kind, int op, float alpha, float value) {
  if (e.n == 0) return;
  const int threads = 256;
  ew_kernel<<<blocks_for(e.n, threads), threads, 0, in.stream>>>(e, kind, op, alpha, value);
  launched("element-wise kernel");
}

}  // namespace

// The flag protocol of the checking kernels (cuda_backend.hpp).
constexpr int kNoFlag = 0x7f7f7f7f;
void flag_reset(Instance& in) {
  check_cuda(cudaMemsetAsync(in.flag, 0x7f, sizeof(int), in.stream), "cudaMemsetAsync");
}
int64_t flag_read(Instance& in) {
  refuse_while_capturing(in, "a check that reads its result back");
  check_cuda(cudaMemcpyAsync(in.host_flag, in.flag, sizeof(int), cudaMemcpyDeviceToHost, in.stream),
             "cudaMemcpyAsync");
  check_cuda(cudaStreamSynchronize(in.stream), "cudaStreamSynchronize");
  return *in.host_flag == kNoFlag ? -1 : *in.host_flag;
}

namespace {

// -- reduce -------------------------------------------------------------------

__global__ void reduce_kernel(RowShape rs, RowV x, int64_t n, int op, const char* shift,
                              int shift_dt, char* out, int out_dt, int accumulate) {
  const int64_t r = blockIdx.x;
  const int64_t base = row_off(rs, x, r);
  const bool is_max = op == OSLO_BK_REDUCE_MAX || op == OSLO_BK_REDUCE_MAX_ABS;
  const double init = op == OSLO_BK_REDUCE_MAX ? -INFINITY : 0.0;
  const double sh = op == OSLO_BK_REDUCE_SUM_EXP ? static_cast<double>(ld(shift, shift_dt, r)) : 0;
  double acc = init;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double v = ld(x.p, x.dt, base + i * x.inner);
    switch (op) {
      case OSLO_BK_REDUCE_SUM: acc += v; break;
      case OSLO_BK_REDUCE_SUM_EXP: acc += exp(v - sh); break;
      case OSLO_BK_REDUCE_MAX: acc = Max()(acc, v); break;
      default: acc = Max()(acc, fabs(v)); break;
    }
  }
  const double total = is_max ? block_all(acc, Max()) : block_all(acc, Add());
  if (threadIdx.x == 0) {
    float v = static_cast<float>(total);
    if (accumulate) {
      const double prev = ld(out, out_dt, r);
      v = static_cast<float>(is_max ? Max()(prev, static_cast<double>(v)) : prev + v);
    }
    st(out, out_dt, r, v);
  }
}

// -- sum_rows -----------------------------------------------------------------

__global__ void sum_rows_kernel(const char* x, int xdt, int64_t rows, int64_t cols, int64_t s0,
                                int64_t s1, char* out, int odt, int accumulate) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= cols) return;
  double acc = 0;
  for (int64_t r = 0; r < rows; ++r) acc += ld(x, xdt, r * s0 + c * s1);
  float v = static_cast<float>(acc);
  if (accumulate) v += ld(out, odt, c);
  st(out, odt, c, v);
}

// -- softmax --------------------------------------------------------------------

__global__ void softmax_kernel(RowShape rs, RowV x, RowShape ros, RowV out, RowV mask, int has_mask,
                               int64_t cols, int64_t qlen, float scale, int causal,
                               int64_t offset) {
  const int64_t r = blockIdx.x;
  const int64_t xb = row_off(rs, x, r), ob = row_off(ros, out, r);
  const int64_t mb = has_mask ? row_off(rs, mask, r) : 0;
  const int64_t q = r % qlen;
  int64_t lim = cols;
  if (causal) lim = min(cols, max(int64_t(0), q + offset + 1));
  auto z = [&](int64_t i) {
    float v = scale * ld(x.p, x.dt, xb + i * x.inner);
    if (has_mask) v += ld(mask.p, mask.dt, mb + i * mask.inner);
    return v;
  };
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < lim; i += blockDim.x) mx = fmaxf(mx, z(i));
  mx = static_cast<float>(block_all(static_cast<double>(mx), Max()));
  double sum = 0;
  if (mx != -INFINITY)
    for (int64_t i = threadIdx.x; i < lim; i += blockDim.x) sum += expf(z(i) - mx);
  sum = block_all(sum, Add());
  const float inv = sum > 0 ? static_cast<float>(1.0 / sum) : 0.f;
  char* o = const_cast<char*>(out.p);
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    float v = 0.f;
    if (i < lim && mx != -INFINITY) v = expf(z(i) - mx) * inv;
    st(o, out.dt, ob + i * out.inner, v);
  }
}

__global__ void softmax_backward_kernel(RowShape rs, RowV y, RowV gy, RowShape rxs, RowV gx,
                                        int64_t cols, float scale) {
  const int64_t r = blockIdx.x;
  const int64_t yb = row_off(rs, y, r), gb = row_off(rs, gy, r), xb = row_off(rxs, gx, r);
  double dot = 0;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
    dot +=
        static_cast<double>(ld(y.p, y.dt, yb + i * y.inner)) * ld(gy.p, gy.dt, gb + i * gy.inner);
  const float d = static_cast<float>(block_all(dot, Add()));
  char* o = const_cast<char*>(gx.p);
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const float yv = ld(y.p, y.dt, yb + i * y.inner);
    st(o, gx.dt, xb + i * gx.inner, scale * yv * (ld(gy.p, gy.dt, gb + i * gy.inner) - d));
  }
}

// -- norms --------------------------------------------------------------------

__global__ void norm_kernel(RowShape rs, RowV x, RowShape ros, RowV out, int64_t cols,
                            const char* g, int gdt, int64_t gs, const char* b, int bdt, int64_t bs,
                            float eps, int rms) {
  const int64_t r = blockIdx.x;
  const int64_t xb = row_off(rs, x, r), ob = row_off(ros, out, r);
  double mean = 0;
  if (!rms) {
    double s = 0;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) s += ld(x.p, x.dt, xb + i * x.inner);
    mean = block_all(s, Add()) / static_cast<double>(max(cols, int64_t(1)));
  }
  double var = 0;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    const double d = ld(x.p, x.dt, xb + i * x.inner) - mean;
    var += d * d;
  }
  var = block_all(var, Add()) / static_cast<double>(max(cols, int64_t(1)));
  const float inv = static_cast<float>(1.0 / sqrt(var + eps));
  const float fm = static_cast<float>(mean);
  char* o = const_cast<char*>(out.p);
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
    float v = (ld(x.p, x.dt, xb + i * x.inner) - fm) * inv;
    if (g) v *= ld(g, gdt, i * gs);
    if (b) v += ld(b, bdt, i * bs);
    st(o, out.dt, ob + i * out.inner, v);
  }
}

// -- gathers and scatters -----------------------------------------------------------

struct Ids {
  const char* p;
  int dt;
  int64_t stride;
  int64_t n;
};

Ids ids_of(const oslo_bk_view* v, const char* what) {
  check_view(v, what, false);
  if (!is_int(v->dtype))
    fail(OSLO_ERR_DTYPE, std::string(what) + " must be i32 or i64, not " + dtype_name(v->dtype));
  if (!(v->ndim <= 1 || rows_of(*v) == 1 || cols_of(*v) == 1 || flat(*v)))
    fail(OSLO_ERR_NOT_SUPPORTED, std::string(what) + " must be contiguous or 1-D");
  Ids r{static_cast<const char*>(v->data), v->dtype, 1, numel(*v)};
  if (v->ndim >= 1 && !flat(*v)) {
    // One non-trivial dimension: its stride.
    for (int i = 0; i < v->ndim; ++i)
      if (v->shape[i] > 1) r.stride = v->strides[i];
  }
  return r;
}

__global__ void check_ids_kernel(Ids ids, int64_t limit, int64_t ignore, int use_ignore,
                                 int* flag) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= ids.n) return;
  const int64_t id = ld_id(ids.p, ids.dt, i * ids.stride);
  if (use_ignore && id == ignore) return;
  if (id < 0 || id >= limit) atomicMin(flag, static_cast<int>(min(i, int64_t(INT_MAX - 1))));
}

// Fails naming the first id outside [0, limit) (a wait point).
void check_ids(Instance& in, const Ids& ids, int64_t limit, int64_t ignore, bool use_ignore,
               const char* noun) {
  // While a step is recorded the check cannot read its result back: the
  // caller checked the ids on the host (Model::append_argmax), and the
  // gather kernels read an out-of-range id as zeros, never out of bounds.
  if (ids.n == 0 || in.capturing) return;
  if (ids.n >= INT_MAX) fail(OSLO_ERR_NOT_SUPPORTED, "more than 2^31 ids");
  flag_reset(in);
  check_ids_kernel<<<blocks_for(ids.n, 256), 256, 0, in.stream>>>(ids, limit, ignore,
                                                                  use_ignore ? 1 : 0, in.flag);
  launched("id check kernel");
  const int64_t pos = flag_read(in);
  if (pos < 0) return;
  int64_t id = 0;
  const size_t es = ids.dt == OSLO_DTYPE_I32 ? 4 : 8;
  char raw[8] = {0};
  check_cuda(cudaMemcpy(raw, ids.p + pos * ids.stride * static_cast<int64_t>(es), es,
                        cudaMemcpyDeviceToHost),
             "cudaMemcpy");
  if (es == 4) {
    int32_t v;
    std::memcpy(&v, raw, 4);
    id = v;
  } else {
    std::memcpy(&id, raw, 8);
  }
  fail(OSLO_ERR_INVALID_ARGUMENT, std::string(noun) + " " + std::to_string(id) + " at position " +
                                      std::to_string(pos) + " is outside [0, " +
                                      std::to_string(limit) + ")");
}

__global__ void gather_rows_kernel(RowShape rs, RowV out, const char* table, int tdt, int64_t ts0,
                                   int64_t ts1, int64_t rows, int64_t h, Ids ids, int64_t offset) {
  const int64_t t = blockIdx.y;
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= h) return;
  const int64_t local = ld_id(ids.p, ids.dt, t * ids.stride) - offset;
  const float v = (local >= 0 && local < rows) ? ld(table, tdt, local * ts0 + c * ts1) : 0.f;
  st(const_cast<char*>(out.p), out.dt, row_off(rs, out, t) + c * out.inner, v);
}

__global__ void scatter_add_rows_kernel(char* table, int tdt, int64_t ts0, int64_t ts1,
                                        int64_t rows, int64_t h, Ids ids, RowShape rs, RowV src,
                                        int64_t offset) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= h) return;
  for (int64_t t = 0; t < ids.n; ++t) {
    const int64_t local = ld_id(ids.p, ids.dt, t * ids.stride) - offset;
    if (local < 0 || local >= rows) continue;
    const int64_t off = local * ts0 + c * ts1;
    st(table, tdt, off,
       ld(table, tdt, off) + ld(src.p, src.dt, row_off(rs, src, t) + c * src.inner));
  }
}

__global__ void gather_cols_kernel(char* out, int odt, int64_t os, const char* x, int xdt,
                                   int64_t s0, int64_t s1, int64_t cols, Ids idx, int64_t offset,
                                   int64_t ignore) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= idx.n) return;
  const int64_t id = ld_id(idx.p, idx.dt, t * idx.stride);
  float v = 0.f;
  const int64_t c = id - offset;
  if (id != ignore && c >= 0 && c < cols) v = ld(x, xdt, t * s0 + c * s1);
  st(out, odt, t * os, v);
}

__global__ void scatter_add_cols_kernel(char* x, int xdt, int64_t s0, int64_t s1, int64_t cols,
                                        Ids idx, int64_t offset, int64_t ignore, float value) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= idx.n) return;
  const int64_t id = ld_id(idx.p, idx.dt, t * idx.stride);
  const int64_t c = id - offset;
  if (id == ignore || c < 0 || c >= cols) return;
  const int64_t off = t * s0 + c * s1;
  st(x, xdt, off, ld(x, xdt, off) + value);
}

// -- GEMM helpers -------------------------------------------------------------------

struct Mat {
  const char* p;
  int dt;
  int64_t sb, s0, s1;  // batch, row, column strides
};

Mat mat_of(const oslo_bk_view& v) {
  Mat m{static_cast<const char*>(v.data), v.dtype, 0, 0, 0};
  if (v.ndim == 3) {
    m.sb = v.shape[0] == 1 ? 0 : v.strides[0];
    m.s0 = v.strides[1];
    m.s1 = v.strides[2];
  } else {
    m.s0 = v.strides[0];
    m.s1 = v.strides[1];
  }
  return m;
}

__global__ void naive_gemm_kernel(Mat c, Mat a, Mat b, const char* bias, int bdt, int64_t bs,
                                  int64_t batch, int64_t M, int64_t N, int64_t K, float alpha,
                                  float beta) {
  const int64_t total = batch * M * N;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i % N, m = (i / N) % M, q = i / (M * N);
    float acc = 0.f;
    for (int64_t k = 0; k < K; ++k)
      acc += ld(a.p, a.dt, q * a.sb + m * a.s0 + k * a.s1) *
             ld(b.p, b.dt, q * b.sb + k * b.s0 + n * b.s1);
    const int64_t co = q * c.sb + m * c.s0 + n * c.s1;
    float v = alpha * acc;
    if (bias) v += ld(bias, bdt, n * bs);
    if (beta != 0.f) v += beta * ld(c.p, c.dt, co);
    st(const_cast<char*>(c.p), c.dt, co, v);
  }
}

__global__ void epilogue_kernel(Mat c, const float* acc, const char* bias, int bdt, int64_t bs,
                                int64_t batch, int64_t M, int64_t N, float beta) {
  const int64_t total = batch * M * N;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i % N, m = (i / N) % M, q = i / (M * N);
    const int64_t co = q * c.sb + m * c.s0 + n * c.s1;
    float v = acc[i];
    if (bias) v += ld(bias, bdt, n * bs);
    if (beta != 0.f) v += beta * ld(c.p, c.dt, co);
    st(const_cast<char*>(c.p), c.dt, co, v);
  }
}

}  // namespace

void epilogue(Instance& in, const oslo_bk_view& c, const float* acc, const oslo_bk_view* bias,
              float beta) {
  const Mat cm = mat_of(c);
  const int64_t batch = c.ndim == 3 ? c.shape[0] : 1;
  const int64_t M = c.shape[c.ndim - 2], N = c.shape[c.ndim - 1];
  const int64_t total = batch * M * N;
  if (total == 0) return;
  const char* bp = bias ? static_cast<const char*>(bias->data) : nullptr;
  const int64_t bs = bias && bias->ndim ? bias->strides[bias->ndim - 1] : 1;
  epilogue_kernel<<<blocks_for(total, 256), 256, 0, in.stream>>>(
      cm, acc, bp, bias ? bias->dtype : 0, bs, batch, M, N, beta);
  launched("matmul epilogue kernel");
}

void naive_gemm(Instance& in, const oslo_bk_view& c, const oslo_bk_view& a, const oslo_bk_view& b,
                const oslo_bk_view* bias, float alpha, float beta) {
  const int64_t batch = c.ndim == 3 ? c.shape[0] : 1;
  const int64_t M = c.shape[c.ndim - 2], N = c.shape[c.ndim - 1], K = a.shape[a.ndim - 1];
  const int64_t total = batch * M * N;
  if (total == 0) return;
  const char* bp = bias ? static_cast<const char*>(bias->data) : nullptr;
  const int64_t bs = bias && bias->ndim ? bias->strides[bias->ndim - 1] : 1;
  naive_gemm_kernel<<<blocks_for(total, 128), 128, 0, in.stream>>>(
      mat_of(c), mat_of(a), mat_of(b), bp, bias ? bias->dtype : 0, bs, batch, M, N, K, alpha, beta);
  launched("GEMM kernel");
}

// -- the table's compute entries ------------------------------------------------------

oslo_status op_convert(void* self, const oslo_bk_view* out, const oslo_bk_view* x0) {
  return guard(self, "convert", [&](Instance& in) {
    check_view(out, "convert output", true);
    check_view(x0, "convert input", false);
    const oslo_bk_view x = broadcast_to(*out, *x0, "convert input");
    if (is_int(out->dtype) || is_int(x.dtype)) {
      if (!(is_int(out->dtype) && is_int(x.dtype)))
        fail(OSLO_ERR_DTYPE, std::string("cannot convert ") + dtype_name(x.dtype) + " to " +
                                 dtype_name(out->dtype));
      const Ew e = make_ew(*out, &x, nullptr);
      if (e.n == 0) return;
      flag_reset(in);
      int_convert_kernel<<<blocks_for(e.n, 256), 256, 0, in.stream>>>(e, in.flag);
      launched("integer convert kernel");
      if (out->dtype == OSLO_DTYPE_I32 && x.dtype == OSLO_DTYPE_I64) {
        const int64_t pos = flag_read(in);
        if (pos >= 0)
          fail(OSLO_ERR_INVALID_ARGUMENT,
               "a value at flat position " + std::to_string(pos) + " does not fit i32");
      }
      return;
    }
    // Same dtype and both contiguous: one device copy.
    if (out->dtype == x.dtype && flat(*out) && flat(*x0) && numel(*x0) == numel(*out)) {
      const size_t bytes = static_cast<size_t>(numel(*out)) * dtype_size(out->dtype);
      if (bytes && out->data != x0->data)
        check_cuda(cudaMemcpyAsync(out->data, x0->data, bytes, cudaMemcpyDeviceToDevice, in.stream),
                   "cudaMemcpyAsync");
      return;
    }
    run_ew(in, make_ew(*out, &x, nullptr), 0, 0, 0.f, 0.f);
  });
}

oslo_status op_fill(void* self, const oslo_bk_view* out, double value) {
  return guard(self, "fill", [&](Instance& in) {
    check_view(out, "fill output", true);
    const Ew e = make_ew(*out, nullptr, nullptr);
    if (e.n == 0) return;
    if (value == 0 && !std::signbit(value) && flat(*out)) {
      check_cuda(cudaMemsetAsync(out->data, 0, static_cast<size_t>(e.n) * dtype_size(out->dtype),
                                 in.stream),
                 "cudaMemsetAsync");
      return;
    }
    if (is_int(out->dtype)) {
      int_fill_kernel<<<blocks_for(e.n, 256), 256, 0, in.stream>>>(e,
                                                                   static_cast<long long>(value));
      launched("fill kernel");
      return;
    }
    run_ew(in, e, 4, 0, 0.f, static_cast<float>(value));
  });
}

oslo_status op_binary(void* self, oslo_bk_binary op_arg, const oslo_bk_view* out,
                      const oslo_bk_view* a, const oslo_bk_view* b) {
  const int op = enum_value(op_arg);
  return guard(self, "binary", [&](Instance& in) {
    check_float(out, "binary output", true);
    check_float(a, "binary input a", false);
    check_float(b, "binary input b", false);
    if (op < OSLO_BK_ADD || op > OSLO_BK_MINIMUM)
      fail(OSLO_ERR_INVALID_ARGUMENT, "unknown binary op " + std::to_string(op));
    const oslo_bk_view av = broadcast_to(*out, *a, "input");
    const oslo_bk_view bv = broadcast_to(*out, *b, "second input");
    run_ew(in, make_ew(*out, &av, &bv), 1, op, 0.f, 0.f);
  });
}

oslo_status op_unary(void* self, oslo_bk_unary op_arg, const oslo_bk_view* out,
                     const oslo_bk_view* x, float alpha) {
  const int op = enum_value(op_arg);
  return guard(self, "unary", [&](Instance& in) {
    check_float(out, "unary output", true);
    check_float(x, "unary input", false);
    if (op < OSLO_BK_SCALE || op > OSLO_BK_RSQRT)
      fail(OSLO_ERR_INVALID_ARGUMENT, "unknown unary op " + std::to_string(op));
    const oslo_bk_view xv = broadcast_to(*out, *x, "input");
    run_ew(in, make_ew(*out, &xv, nullptr), 2, op, alpha, 0.f);
  });
}

oslo_status op_unary_backward(void* self, oslo_bk_unary op_arg, const oslo_bk_view* gx,
                              const oslo_bk_view* x, const oslo_bk_view* gy, float alpha) {
  const int op = enum_value(op_arg);
  return guard(self, "unary_backward", [&](Instance& in) {
    check_float(gx, "unary_backward grad_x", true);
    check_float(x, "unary_backward x", false);
    check_float(gy, "unary_backward grad_out", false);
    if (op != OSLO_BK_SCALE && op != OSLO_BK_GELU && op != OSLO_BK_GELU_TANH &&
        op != OSLO_BK_SILU && op != OSLO_BK_RELU && op != OSLO_BK_TANH)
      fail(OSLO_ERR_NOT_SUPPORTED, "unary_backward of op " + std::to_string(op));
    const oslo_bk_view xv = broadcast_to(*gx, *x, "input");
    const oslo_bk_view gv = broadcast_to(*gx, *gy, "second input");
    run_ew(in, make_ew(*gx, &xv, &gv), 3, op, alpha, 0.f);
  });
}

oslo_status op_reduce(void* self, oslo_bk_reduce op_arg, const oslo_bk_view* out,
                      const oslo_bk_view* x, const oslo_bk_view* shift, int64_t valid,
                      int accumulate) {
  const int op = enum_value(op_arg);
  return guard(self, "reduce", [&](Instance& in) {
    check_float(out, "reduce output", true);
    check_float(x, "reduce input", false);
    if (op < OSLO_BK_REDUCE_SUM || op > OSLO_BK_REDUCE_MAX_ABS)
      fail(OSLO_ERR_INVALID_ARGUMENT, "unknown reduce op " + std::to_string(op));
    const int64_t rows = rows_of(*x), cols = cols_of(*x);
    if (numel(*out) != rows)
      fail(OSLO_ERR_SHAPE, "reduce output " + shape_string(*out) + " needs " +
                               std::to_string(rows) + " elements for input " + shape_string(*x));
    if (!flat(*out)) fail(OSLO_ERR_NOT_SUPPORTED, "reduce output must be contiguous");
    const char* sp = nullptr;
    int sdt = 0;
    if (op == OSLO_BK_REDUCE_SUM_EXP) {
      if (!shift) fail(OSLO_ERR_INVALID_ARGUMENT, "reduce SUM_EXP needs a shift");
      check_float(shift, "reduce shift", false);
      if (numel(*shift) != rows || !flat(*shift))
        fail(OSLO_ERR_SHAPE, "reduce shift " + shape_string(*shift) + " needs " +
                                 std::to_string(rows) + " contiguous elements");
      sp = static_cast<const char*>(shift->data);
      sdt = shift->dtype;
    }
    if (rows == 0) return;
    const int64_t n = valid < 0 ? cols : std::min(valid, cols);
    reduce_kernel<<<static_cast<unsigned>(rows), row_threads(n), 0, in.stream>>>(
        row_shape(*x), row_view_same(*x), n, op, sp, sdt, static_cast<char*>(out->data), out->dtype,
        accumulate ? 1 : 0);
    launched("reduce kernel");
  });
}

oslo_status op_sum_rows(void* self, const oslo_bk_view* out, const oslo_bk_view* x,
                        int accumulate) {
  return guard(self, "sum_rows", [&](Instance& in) {
    check_float(out, "sum_rows output", true);
    check_float(x, "sum_rows input", false);
    if (x->ndim != 2) fail(OSLO_ERR_SHAPE, "sum_rows input must be 2-D, got " + shape_string(*x));
    const int64_t rows = x->shape[0], cols = x->shape[1];
    if (numel(*out) != cols || !flat(*out))
      fail(OSLO_ERR_SHAPE, "sum_rows output " + shape_string(*out) + " needs " +
                               std::to_string(cols) + " contiguous elements");
    if (cols == 0) return;
    sum_rows_kernel<<<blocks_for(cols, 128), 128, 0, in.stream>>>(
        static_cast<const char*>(x->data), x->dtype, rows, cols, x->strides[0], x->strides[1],
        static_cast<char*>(out->data), out->dtype, accumulate ? 1 : 0);
    launched("sum_rows kernel");
  });
}

oslo_status op_softmax(void* self, const oslo_bk_view* out, const oslo_bk_view* x,
                       const oslo_bk_view* mask, float scale, int causal, int64_t causal_offset) {
  return guard(self, "softmax", [&](Instance& in) {
    check_float(out, "softmax output", true);
    check_float(x, "softmax input", false);
    if (numel(*out) != numel(*x) || out->ndim != x->ndim)
      fail(OSLO_ERR_SHAPE,
           "softmax output " + shape_string(*out) + " differs from input " + shape_string(*x));
    RowV mv{};
    if (mask) {
      check_float(mask, "softmax mask", false);
      mv = row_view(*x, *mask, "softmax mask");
    }
    const int64_t rows = rows_of(*x), cols = cols_of(*x);
    const int64_t qlen = x->ndim >= 2 ? x->shape[x->ndim - 2] : 1;
    if (rows == 0 || cols == 0) return;
    softmax_kernel<<<static_cast<unsigned>(rows), row_threads(cols), 0, in.stream>>>(
        row_shape(*x), row_view_same(*x), row_shape(*out), row_view_same(*out), mv, mask ? 1 : 0,
        cols, std::max<int64_t>(qlen, 1), scale, causal ? 1 : 0, causal_offset);
    launched("softmax kernel");
  });
}

oslo_status op_softmax_backward(void* self, const oslo_bk_view* gx, const oslo_bk_view* y,
                                const oslo_bk_view* gy, float scale) {
  return guard(self, "softmax_backward", [&](Instance& in) {
    check_float(gx, "softmax_backward grad_x", true);
    check_float(y, "softmax_backward y", false);
    check_float(gy, "softmax_backward grad_y", false);
    if (numel(*gx) != numel(*y) || numel(*gy) != numel(*y) || gx->ndim != y->ndim ||
        gy->ndim != y->ndim || cols_of(*gx) != cols_of(*y) || cols_of(*gy) != cols_of(*y))
      fail(OSLO_ERR_SHAPE, "softmax_backward shapes differ");
    const int64_t rows = rows_of(*y), cols = cols_of(*y);
    if (rows == 0 || cols == 0) return;
    softmax_backward_kernel<<<static_cast<unsigned>(rows), row_threads(cols), 0, in.stream>>>(
        row_shape(*y), row_view_same(*y), row_view_same(*gy), row_shape(*gx), row_view_same(*gx),
        cols, scale);
    launched("softmax_backward kernel");
  });
}

oslo_status op_norm(void* self, const oslo_bk_view* out, const oslo_bk_view* x,
                    const oslo_bk_view* gamma, const oslo_bk_view* beta, float eps, int rms) {
  return guard(self, "norm", [&](Instance& in) {
    check_float(out, "norm output", true);
    check_float(x, "norm input", false);
    if (numel(*out) != numel(*x) || cols_of(*out) != cols_of(*x))
      fail(OSLO_ERR_SHAPE,
           "norm output " + shape_string(*out) + " differs from input " + shape_string(*x));
    const int64_t rows = rows_of(*x), cols = cols_of(*x);
    auto param = [&](const oslo_bk_view* p, const char* what, const char** ptr, int* dt,
                     int64_t* stride) {
      *ptr = nullptr;
      *dt = 0;
      *stride = 1;
      if (!p) return;
      check_float(p, what, false);
      if (numel(*p) != cols)
        fail(OSLO_ERR_SHAPE, std::string(what) + " " + shape_string(*p) + " needs " +
                                 std::to_string(cols) + " elements");
      const oslo_bk_view a = align(*p, 1 > p->ndim ? 1 : p->ndim);
      *ptr = static_cast<const char*>(p->data);
      *dt = p->dtype;
      // The one dimension with extent > 1 (or the last).
      *stride = a.ndim ? a.strides[a.ndim - 1] : 1;
      for (int i = 0; i < a.ndim; ++i)
        if (a.shape[i] > 1) *stride = a.strides[i];
    };
    const char *gp, *bp;
    int gdt, bdt;
    int64_t gs, bs;
    param(gamma, "norm gamma", &gp, &gdt, &gs);
    param(rms ? nullptr : beta, "norm beta", &bp, &bdt, &bs);
    if (rows == 0) return;
    norm_kernel<<<static_cast<unsigned>(rows), row_threads(cols), 0, in.stream>>>(
        row_shape(*x), row_view_same(*x), row_shape(*out), row_view_same(*out), cols, gp, gdt, gs,
        bp, bdt, bs, eps, rms ? 1 : 0);
    launched("norm kernel");
  });
}

oslo_status op_gather_rows(void* self, const oslo_bk_view* out, const oslo_bk_view* table,
                           const oslo_bk_view* ids, int64_t offset, int64_t limit) {
  return guard(self, "gather_rows", [&](Instance& in) {
    check_float(out, "gather_rows output", true);
    check_float(table, "gather_rows table", false);
    if (table->ndim != 2)
      fail(OSLO_ERR_SHAPE, "gather_rows table must be 2-D, got " + shape_string(*table));
    const Ids id = ids_of(ids, "gather_rows ids");
    const int64_t t = id.n, h = table->shape[1], rows = table->shape[0];
    if (rows_of(*out) != t || cols_of(*out) != h)
      fail(OSLO_ERR_SHAPE, "gather_rows output " + shape_string(*out) + " must be [" +
                               std::to_string(t) + ", " + std::to_string(h) + "]");
    check_ids(in, id, limit, 0, false, "id");
    if (t == 0 || h == 0) return;
    if (t > 65535) {
      // grid.y is limited: gather in pieces of 65535 tokens.
      for (int64_t t0 = 0; t0 < t; t0 += 65535) {
        const int64_t m = std::min<int64_t>(65535, t - t0);
        oslo_bk_view o = *out;
        Ids part = id;
        part.p = id.p + t0 * id.stride * static_cast<int64_t>(dtype_size(ids->dtype));
        part.n = m;
        // out rows t0.. : requires a contiguous row layout.
        if (!flat(*out))
          fail(OSLO_ERR_NOT_SUPPORTED, "gather_rows of > 65535 ids needs a contiguous output");
        o.data =
            static_cast<char*>(out->data) + t0 * h * static_cast<int64_t>(dtype_size(out->dtype));
        o.ndim = 2;
        o.shape[0] = m;
        o.shape[1] = h;
        o.strides[0] = h;
        o.strides[1] = 1;
        dim3 grid(blocks_for(h, 256), static_cast<unsigned>(m));
        gather_rows_kernel<<<grid, 256, 0, in.stream>>>(
            row_shape(o), row_view_same(o), static_cast<const char*>(table->data), table->dtype,
            table->strides[0], table->strides[1], rows, h, part, offset);
        launched("gather_rows kernel");
      }
      return;
    }
    dim3 grid(blocks_for(h, 256), static_cast<unsigned>(t));
    // out viewed as [t, h]: rows over its leading dimensions.
    gather_rows_kernel<<<grid, 256, 0, in.stream>>>(
        row_shape(*out), row_view_same(*out), static_cast<const char*>(table->data), table->dtype,
        table->strides[0], table->strides[1], rows, h, id, offset);
    launched("gather_rows kernel");
  });
}

oslo_status op_scatter_add_rows(void* self, const oslo_bk_view* table, const oslo_bk_view* ids,
                                const oslo_bk_view* src, int64_t offset) {
  return guard(self, "scatter_add_rows", [&](Instance& in) {
    check_float(table, "scatter_add_rows table", true);
    check_float(src, "scatter_add_rows src", false);
    if (table->ndim != 2) fail(OSLO_ERR_SHAPE, "scatter_add_rows table must be 2-D");
    const Ids id = ids_of(ids, "scatter_add_rows ids");
    const int64_t t = id.n, h = table->shape[1], rows = table->shape[0];
    if (rows_of(*src) != t || cols_of(*src) != h)
      fail(OSLO_ERR_SHAPE, "scatter_add_rows src " + shape_string(*src) + " must be [" +
                               std::to_string(t) + ", " + std::to_string(h) + "]");
    if (t == 0 || h == 0) return;
    scatter_add_rows_kernel<<<blocks_for(h, 128), 128, 0, in.stream>>>(
        static_cast<char*>(table->data), table->dtype, table->strides[0], table->strides[1], rows,
        h, id, row_shape(*src), row_view_same(*src), offset);
    launched("scatter_add_rows kernel");
  });
}

oslo_status op_gather_cols(void* self, const oslo_bk_view* out, const oslo_bk_view* x,
                           const oslo_bk_view* idx, int64_t offset, int64_t limit, int64_t ignore) {
  return guard(self, "gather_cols", [&](Instance& in) {
    check_float(out, "gather_cols output", true);
    check_float(x, "gather_cols input", false);
    if (x->ndim != 2)
      fail(OSLO_ERR_SHAPE, "gather_cols input must be 2-D, got " + shape_string(*x));
    const Ids id = ids_of(idx, "gather_cols index");
    const int64_t t = id.n;
    if (x->shape[0] != t || numel(*out) != t || !flat(*out))
      fail(OSLO_ERR_SHAPE, "gather_cols needs " + std::to_string(t) +
                               " rows and a contiguous output of " + std::to_string(t) +
                               " elements");
    check_ids(in, id, limit, ignore, true, "label");
    if (t == 0) return;
    gather_cols_kernel<<<blocks_for(t, 128), 128, 0, in.stream>>>(
        static_cast<char*>(out->data), out->dtype, 1, static_cast<const char*>(x->data), x->dtype,
        x->strides[0], x->strides[1], x->shape[1], id, offset, ignore);
    launched("gather_cols kernel");
  });
}

oslo_status op_scatter_add_cols(void* self, const oslo_bk_view* x, const oslo_bk_view* idx,
                                int64_t offset, int64_t ignore, float value) {
  return guard(self, "scatter_add_cols", [&](Instance& in) {
    check_float(x, "scatter_add_cols target", true);
    if (x->ndim != 2) fail(OSLO_ERR_SHAPE, "scatter_add_cols target must be 2-D");
    const Ids id = ids_of(idx, "scatter_add_cols index");
    const int64_t t = id.n;
    if (x->shape[0] != t)
      fail(OSLO_ERR_SHAPE, "scatter_add_cols needs " + std::to_string(t) + " rows");
    if (t == 0) return;
    scatter_add_cols_kernel<<<blocks_for(t, 128), 128, 0, in.stream>>>(
        static_cast<char*>(x->data), x->dtype, x->strides[0], x->strides[1], x->shape[1], id,
        offset, ignore, value);
    launched("scatter_add_cols kernel");
  });
}

}  // namespace oslo_cuda
