// The CUDA plugin's fused entries of backend ABI v2 (oslo_backend.h: attention,
// residual_norm, rope, matmul_act, argmax, norm_backward, adamw). Each does in
// one or a few kernels what the core otherwise composes from the required
// entries (core/backend/fused.cpp, the reference the conformance suite checks
// them against), so a decode step issues fewer launches. Contracts are
// exactly those of the compositions; where the composition rounds between
// steps (rope, residual_norm) these kernels round at the same points, with
// explicitly rounded f32 operations (no contraction into FMAs), so results
// agree bit for bit where the suite asks it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "cuda_backend.hpp"
#include "cuda_kernels.cuh"

namespace oslo_cuda {
namespace {

// v rounded to dtype dt and read back as f32 (what a store then a load does).
__device__ __forceinline__ float rnd(int dt, float v) {
  switch (dt) {
    case OSLO_DTYPE_F16: return __half2float(__float2half_rn(v));
    case OSLO_DTYPE_BF16: return __bfloat162float(__float2bfloat16_rn(v));
    default: return v;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The stride of a parameter vector ([H] or any view of H elements): that of
// its one dimension with extent > 1, else of its last.
int64_t vec_stride(const oslo_bk_view& p) {
  int64_t s = p.ndim ? p.strides[p.ndim - 1] : 1;
  for (int i = 0; i < p.ndim; ++i)
    if (p.shape[i] > 1) s = p.strides[i];
  return s;
}

// Rows and columns of a view treated as a matrix [rows, cols]: the last two
// dimensions' strides (a 1-D view is one row). Views with more dimensions
// must be row-contiguous over the leading ones.
struct M2 {
  char* p;
  int dt;
  int64_t rows, cols, s0, s1;
};
M2 matrix_of(const oslo_bk_view& v, const char* what) {
  M2 m{static_cast<char*>(v.data),        v.dtype, rows_of(v), cols_of(v), cols_of(v),
       v.ndim ? v.strides[v.ndim - 1] : 1};
  if (v.ndim >= 2) m.s0 = v.strides[v.ndim - 2];
  // Leading dimensions must merge into the row dimension.
  int64_t expect = m.s0 * (v.ndim >= 2 ? v.shape[v.ndim - 2] : 1);
  for (int i = v.ndim - 3; i >= 0; --i) {
    if (v.shape[i] != 1 && v.strides[i] != expect)
      fail(OSLO_ERR_NOT_SUPPORTED,
           std::string(what) + " " + shape_string(v) + " is not a matrix of rows");
    expect *= v.shape[i];
  }
  return m;
}

// -- attention ------------------------------------------------------------------

struct AttnArgs {
  const char *q, *k, *v, *mask;
  char* out;
  int dt, odt, mdt;
  int64_t qs[4], ks[4], vs[4], os[4], ms[2];
  int64_t S, Hq, T, D, g;
  float scale;
  int causal;
  int64_t off;
  int64_t chunk;  // keys per split
  int nsplit;
  float* part;  // [rows, nsplit, D + 2] partial results when nsplit > 1
};

constexpr int kAttnWarps = 4;

// One block per (query row, split of the keys): its warps take the split's
// keys in turn, each keeping an online softmax (running max, sum, weighted
// values in f32); the block merges its warps, then either writes the output
// or (several splits: flash-decoding) a partial result the combine kernel
// merges. NPL: head dimensions per lane (D <= 32 NPL).
template <int NPL>
__global__ void attention_kernel(AttnArgs a) {
  __shared__ float wm[kAttnWarps], wl[kAttnWarps];
  __shared__ float wacc[kAttnWarps][32 * NPL];
  const int64_t row = blockIdx.x;
  const int64_t i = row % a.S, h = (row / a.S) % a.Hq, b = row / (a.S * a.Hq), kh = h / a.g;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int64_t jend = a.T;
  if (a.causal) jend = max(int64_t(0), min(a.T, i + a.off + 1));
  const int64_t j0 = blockIdx.y * a.chunk, j1 = min(jend, j0 + a.chunk);
  float q[NPL], acc[NPL];
  const int64_t qo = b * a.qs[0] + h * a.qs[1] + i * a.qs[2];
#pragma unroll
  for (int c = 0; c < NPL; ++c) {
    const int64_t d = lane + 32 * c;
    q[c] = d < a.D ? ld(a.q, a.dt, qo + d * a.qs[3]) : 0.f;
    acc[c] = 0.f;
  }
  const int64_t ko = b * a.ks[0] + kh * a.ks[1], vo = b * a.vs[0] + kh * a.vs[1];
  float mx = -INFINITY, l = 0.f;
  for (int64_t j = j0 + warp; j < j1; j += kAttnWarps) {
    float mval = 0.f;
    if (a.mask) {
      mval = ld(a.mask, a.mdt, b * a.ms[0] + j * a.ms[1]);
      if (mval == -INFINITY) continue;
    }
    float dot = 0.f;
#pragma unroll
    for (int c = 0; c < NPL; ++c) {
      const int64_t d = lane + 32 * c;
      if (d < a.D) dot += q[c] * ld(a.k, a.dt, ko + j * a.ks[2] + d * a.ks[3]);
    }
    dot = warp_sum(dot);
    const float z = a.scale * dot + mval;
    if (z > mx) {
      const float corr = expf(mx - z);
      l *= corr;
#pragma unroll
      for (int c = 0; c < NPL; ++c) acc[c] *= corr;
      mx = z;
    }
    const float p = expf(z - mx);
    l += p;
#pragma unroll
    for (int c = 0; c < NPL; ++c) {
      const int64_t d = lane + 32 * c;
      if (d < a.D) acc[c] += p * ld(a.v, a.dt, vo + j * a.vs[2] + d * a.vs[3]);
    }
  }
  if (lane == 0) {
    wm[warp] = mx;
    wl[warp] = l;
  }
#pragma unroll
  for (int c = 0; c < NPL; ++c) wacc[warp][lane + 32 * c] = acc[c];
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, wm[w]);
  float L = 0.f;
  if (M != -INFINITY)
    for (int w = 0; w < kAttnWarps; ++w)
      if (wm[w] != -INFINITY) L += wl[w] * expf(wm[w] - M);
  for (int64_t d = threadIdx.x; d < a.D; d += blockDim.x) {
    float o = 0.f;
    if (M != -INFINITY)
      for (int w = 0; w < kAttnWarps; ++w)
        if (wm[w] != -INFINITY) o += wacc[w][d] * expf(wm[w] - M);
    if (a.nsplit == 1) {
      st(a.out, a.odt, b * a.os[0] + h * a.os[1] + i * a.os[2] + d * a.os[3],
         L > 0.f ? o / L : 0.f);
    } else {
      float* pp = a.part + (row * a.nsplit + blockIdx.y) * (a.D + 2);
      pp[d] = o;
      if (d == 0) {
        pp[a.D] = M;
        pp[a.D + 1] = L;
      }
    }
  }
}

// Prefill: one block per (batch, head, tile of kBQ queries), key/value tiles
// of kBK keys staged through shared memory and shared by the tile's queries
// (flash-attention's blocking on CUDA cores, f32 throughout). Queries and
// keys are stored transposed ([d][row]) so a thread's 4 x 4 score tile takes
// two 16-byte loads per head dimension; each thread keeps an 8 x 8 block of
// the output ([kBQ, D], D <= kTileMaxD, D % 4 == 0) in registers. An online
// softmax per query row; key tiles past the causal limit of the tile's last
// query are skipped.
constexpr int kBQ = 64, kBK = 32, kTileThreads = 128, kTileMaxD = 128, kPsPitch = kBQ + 4;
// Row pitches of the transposed queries and keys: multiples of 4 (16-byte
// loads) that spread a column's stores over 8 banks.
constexpr int kQPitch = kBQ + 4, kKPitch = kBK + 4;

__global__ void __launch_bounds__(kTileThreads) attention_tile_kernel(AttnArgs a) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  const int64_t D = a.D;
  float* QsT = smem;                     // [D][kQPitch]
  float* KsT = QsT + D * kQPitch;        // [D][kKPitch]
  float* Vs = KsT + D * kKPitch;         // [kBK][D]
  float* PsT = Vs + kBK * D;             // [kBK][kPsPitch]
  float* corr_s = PsT + kBK * kPsPitch;  // [kBQ]
  float* l_s = corr_s + kBQ;             // [kBQ]
  const int t = threadIdx.x;
  const int64_t tiles = (a.S + kBQ - 1) / kBQ;
  const int64_t qt = blockIdx.x % tiles, h = (blockIdx.x / tiles) % a.Hq,
                b = blockIdx.x / (tiles * a.Hq), kh = h / a.g;
  const int64_t i0 = qt * kBQ;
  // Loads: each thread one head dimension ld_d of rows ld_r0, ld_r0 +
  // ld_step, ... (consecutive threads read consecutive d: coalesced), the
  // queries and keys stored transposed.
  const int Di = static_cast<int>(D), ld_step = kTileThreads / Di, ld_r0 = t / Di, ld_d = t % Di;
  const bool loader = ld_r0 < ld_step;
  const int64_t qo = b * a.qs[0] + h * a.qs[1];
  if (loader)
    for (int r = ld_r0; r < kBQ; r += ld_step) {
      const int64_t i = i0 + r;
      QsT[ld_d * kQPitch + r] = i < a.S ? ld(a.q, a.dt, qo + i * a.qs[2] + ld_d * a.qs[3]) : 0.f;
    }
  int64_t jend = a.T;
  if (a.causal) jend = max(int64_t(0), min(a.T, min(i0 + kBQ, a.S) - 1 + a.off + 1));
  // Scores: queries 4 tq + x, keys 4 tk + u. Output: queries 8 oq + x,
  // dimensions 4 od + 64 v + e.
  const int tq = t >> 3, tk = t & 7, oq = t >> 4, od = t & 15;
  float m_run[4], l_run[4];
#pragma unroll
  for (int x = 0; x < 4; ++x) {
    m_run[x] = -INFINITY;
    l_run[x] = 0.f;
  }
  float acc[8][8];
#pragma unroll
  for (int x = 0; x < 8; ++x)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[x][e] = 0.f;
  const int64_t ko = b * a.ks[0] + kh * a.ks[1], vo = b * a.vs[0] + kh * a.vs[1];
  const float4* Q4 = reinterpret_cast<const float4*>(QsT);
  const float4* K4 = reinterpret_cast<const float4*>(KsT);
  for (int64_t j0 = 0; j0 < jend; j0 += kBK) {
    __syncthreads();  // the previous tile's keys, values and P are read
    if (loader)
      for (int r = ld_r0; r < kBK; r += ld_step) {
        const int64_t j = j0 + r;
        const bool in = j < jend;
        KsT[ld_d * kKPitch + r] = in ? ld(a.k, a.dt, ko + j * a.ks[2] + ld_d * a.ks[3]) : 0.f;
        Vs[r * D + ld_d] = in ? ld(a.v, a.dt, vo + j * a.vs[2] + ld_d * a.vs[3]) : 0.f;
      }
    __syncthreads();
    float s[4][4];
#pragma unroll
    for (int x = 0; x < 4; ++x)
#pragma unroll
      for (int u = 0; u < 4; ++u) s[x][u] = 0.f;
    for (int64_t d = 0; d < D; ++d) {
      const float4 q4 = Q4[d * (kQPitch / 4) + tq], k4 = K4[d * (kKPitch / 4) + tk];
      const float qv[4] = {q4.x, q4.y, q4.z, q4.w}, kv[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
      for (int x = 0; x < 4; ++x)
#pragma unroll
        for (int u = 0; u < 4; ++u) s[x][u] += qv[x] * kv[u];
    }
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const int64_t i = i0 + 4 * tq + x;
      float tmax = -INFINITY;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t j = j0 + 4 * tk + u;
        float z = -INFINITY;
        if (j < jend && i < a.S && (!a.causal || j <= i + a.off)) {
          const float mv = a.mask ? ld(a.mask, a.mdt, b * a.ms[0] + j * a.ms[1]) : 0.f;
          if (mv != -INFINITY) z = a.scale * s[x][u] + mv;
        }
        s[x][u] = z;
        tmax = fmaxf(tmax, z);
      }
      // A row's 32 scores are in 8 consecutive lanes.
      for (int o = 1; o < 8; o <<= 1) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
      const float mnew = fmaxf(m_run[x], tmax);
      const float c = m_run[x] == -INFINITY ? 0.f : expf(m_run[x] - mnew);
      float psum = 0.f;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const float p = s[x][u] == -INFINITY ? 0.f : expf(s[x][u] - mnew);
        PsT[(4 * tk + u) * kPsPitch + 4 * tq + x] = p;
        psum += p;
      }
      for (int o = 1; o < 8; o <<= 1) psum += __shfl_xor_sync(0xffffffffu, psum, o);
      l_run[x] = l_run[x] * c + psum;
      m_run[x] = mnew;
      if (tk == 0) corr_s[4 * tq + x] = c;
    }
    __syncthreads();
#pragma unroll
    for (int x = 0; x < 8; ++x) {
      const float c = corr_s[8 * oq + x];
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[x][e] *= c;
    }
    const int kn = static_cast<int>(min(int64_t(kBK), jend - j0));
    const bool hi = 64 + 4 * od < D;  // the second group of 4 dimensions exists
    const bool lo = 4 * od < D;
    for (int kk = 0; kk < kn; ++kk) {
      const float4 p0 = *reinterpret_cast<const float4*>(PsT + kk * kPsPitch + 8 * oq);
      const float4 p1 = *reinterpret_cast<const float4*>(PsT + kk * kPsPitch + 8 * oq + 4);
      const float pv[8] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
      float4 v0 = make_float4(0.f, 0.f, 0.f, 0.f), v1 = v0;
      if (lo) v0 = *reinterpret_cast<const float4*>(Vs + kk * D + 4 * od);
      if (hi) v1 = *reinterpret_cast<const float4*>(Vs + kk * D + 64 + 4 * od);
      const float vv[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
      for (int x = 0; x < 8; ++x)
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[x][e] += pv[x] * vv[e];
    }
  }
  if (tk == 0)
#pragma unroll
    for (int x = 0; x < 4; ++x) l_s[4 * tq + x] = l_run[x];
  __syncthreads();
#pragma unroll
  for (int x = 0; x < 8; ++x) {
    const int64_t i = i0 + 8 * oq + x;
    if (i >= a.S) continue;
    const float l = l_s[8 * oq + x];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int64_t d = (e < 4 ? 4 * od + e : 64 + 4 * od + e - 4);
      if (d < D)
        st(a.out, a.odt, b * a.os[0] + h * a.os[1] + i * a.os[2] + d * a.os[3],
           l > 0.f ? acc[x][e] / l : 0.f);
    }
  }
}

size_t tile_smem_bytes(int64_t D) {
  return static_cast<size_t>(D * kQPitch + D * kKPitch + kBK * D + kBK * kPsPitch + 2 * kBQ) *
         sizeof(float);
}

// Merges the splits of each query row (one block per row).
__global__ void attention_combine_kernel(AttnArgs a) {
  const int64_t row = blockIdx.x;
  const int64_t i = row % a.S, h = (row / a.S) % a.Hq, b = row / (a.S * a.Hq);
  const float* base = a.part + row * a.nsplit * (a.D + 2);
  float M = -INFINITY;
  for (int s = 0; s < a.nsplit; ++s) M = fmaxf(M, base[s * (a.D + 2) + a.D]);
  float L = 0.f;
  if (M != -INFINITY)
    for (int s = 0; s < a.nsplit; ++s) {
      const float m = base[s * (a.D + 2) + a.D];
      if (m != -INFINITY) L += base[s * (a.D + 2) + a.D + 1] * expf(m - M);
    }
  for (int64_t d = threadIdx.x; d < a.D; d += blockDim.x) {
    float o = 0.f;
    if (M != -INFINITY)
      for (int s = 0; s < a.nsplit; ++s) {
        const float m = base[s * (a.D + 2) + a.D];
        if (m != -INFINITY) o += base[s * (a.D + 2) + d] * expf(m - M);
      }
    st(a.out, a.odt, b * a.os[0] + h * a.os[1] + i * a.os[2] + d * a.os[3], L > 0.f ? o / L : 0.f);
  }
}

// -- residual_norm ----------------------------------------------------------------

// One block per row: x += y (+ bias) rounded to x's dtype, then the norm of
// the new row exactly as norm_kernel computes it (f64 statistics).
__global__ void residual_norm_kernel(M2 x, M2 y, int has_y, const char* bias, int bdt, int64_t bst,
                                     M2 out, const char* g, int gdt, int64_t gs, const char* bb,
                                     int bbdt, int64_t bbs, float eps, int rms) {
  const int64_t r = blockIdx.x, cols = x.cols;
  const int64_t xb = r * x.s0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = ld(x.p, x.dt, xb + c * x.s1);
    if (has_y && bias) {
      const float t = __fadd_rn(ld(y.p, y.dt, r * y.s0 + c * y.s1), ld(bias, bdt, c * bst));
      v = __fadd_rn(v, t);
    } else if (has_y) {
      v = __fadd_rn(v, ld(y.p, y.dt, r * y.s0 + c * y.s1));
    } else if (bias) {
      v = __fadd_rn(v, ld(bias, bdt, c * bst));
    }
    st(x.p, x.dt, xb + c * x.s1, v);  // each thread reads back only what it wrote
  }
  double mean = 0;
  if (!rms) {
    double s = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += ld(x.p, x.dt, xb + c * x.s1);
    mean = block_all(s, Add()) / static_cast<double>(max(cols, int64_t(1)));
  }
  double var = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const double d = ld(x.p, x.dt, xb + c * x.s1) - mean;
    var += d * d;
  }
  var = block_all(var, Add()) / static_cast<double>(max(cols, int64_t(1)));
  const float inv = static_cast<float>(1.0 / sqrt(var + eps));
  const float fm = static_cast<float>(mean);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = (ld(x.p, x.dt, xb + c * x.s1) - fm) * inv;
    if (g) v *= ld(g, gdt, c * gs);
    if (bb) v += ld(bb, bbdt, c * bbs);
    st(out.p, out.dt, r * out.s0 + c * out.s1, v);
  }
}

// -- rope ------------------------------------------------------------------------

// One thread per (row, head, i < R), rounding where the composition's
// separate ops round: x1' = (x1 c)_r - x2 s, x2' = (x2 c)_r + x1 s.
__global__ void rope_kernel(char* x, int dt, int64_t rs, int64_t hs, int64_t es, int64_t heads,
                            int64_t R, int64_t n, const float* cs, int64_t c0, int64_t c1,
                            const float* sn, int64_t s0, int64_t s1) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t % R, hh = (t / R) % heads, r = t / (R * heads);
    const int64_t o1 = r * rs + hh * hs + i * es, o2 = o1 + R * es;
    const float co = cs[r * c0 + i * c1], si = sn[r * s0 + i * s1];
    const float x1 = ld(x, dt, o1), x2 = ld(x, dt, o2);
    const float a = __fmul_rn(x1, si), b = __fmul_rn(x2, si);
    const float x1c = rnd(dt, __fmul_rn(x1, co)), x2c = rnd(dt, __fmul_rn(x2, co));
    st(x, dt, o1, __fsub_rn(x1c, b));
    st(x, dt, o2, __fadd_rn(x2c, a));
  }
}

// -- matmul_act's epilogue ----------------------------------------------------------

// c = act(acc) * gate (acc f32 [M, N] contiguous; gate may be c itself:
// each element is read before it is written, by the same thread).
__global__ void act_gate_kernel(M2 c, const float* acc, int act, M2 gate, int has_gate) {
  const int64_t n = c.rows * c.cols;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = t / c.cols, col = t % c.cols;
    float v = apply_unary(act, acc[t], 0.f);
    if (has_gate) v *= ld(gate.p, gate.dt, r * gate.s0 + col * gate.s1);
    st(c.p, c.dt, r * c.s0 + col * c.s1, v);
  }
}

// -- argmax ------------------------------------------------------------------------

// One block per row: the first NaN, else the largest value at its lowest
// position; an empty row gives -1 / -inf.
__global__ void argmax_kernel(const char* x, int dt, int64_t s0, int64_t s1, int64_t n,
                              int64_t* index, float* value) {
  __shared__ int64_t bi[32];
  __shared__ float bv[32];
  const int64_t r = blockIdx.x;
  int64_t best = -1;
  float bestv = -INFINITY;
  bool nan = false;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float v = ld(x, dt, r * s0 + j * s1);
    if (isnan(v)) {
      if (!nan) {  // the first NaN this thread sees is its lowest
        nan = true;
        best = j;
        bestv = v;
      }
    } else if (!nan && (best < 0 || v > bestv)) {
      best = j;
      bestv = v;
    }
  }
  // (index, value) pairs combine: NaN first (lowest position among NaNs),
  // else the larger value, else the lower position.
  auto better = [](int64_t ia, float va, int64_t ib, float vb) {
    if (ib < 0) return false;
    if (ia < 0) return true;
    const bool na = isnan(va), nb = isnan(vb);
    if (na != nb) return nb;
    if (na) return ib < ia;
    return vb > va || (vb == va && ib < ia);
  };
  for (int o = 16; o > 0; o >>= 1) {
    const int64_t oi = __shfl_down_sync(0xffffffffu, best, o);
    const float ov = __shfl_down_sync(0xffffffffu, bestv, o);
    if (better(best, bestv, oi, ov)) {
      best = oi;
      bestv = ov;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) {
    bi[warp] = best;
    bv[warp] = bestv;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t fi = bi[0];
    float fv = bv[0];
    for (int w = 1; w < nw; ++w)
      if (better(fi, fv, bi[w], bv[w])) {
        fi = bi[w];
        fv = bv[w];
      }
    index[r] = fi;
    value[r] = fi < 0 ? -INFINITY : fv;
  }
}

// -- norm_backward -------------------------------------------------------------------

// Row statistics: mean (0 for rms) and rstd, as norm() computes them.
__global__ void norm_stats_kernel(M2 x, int rms, float eps, float* mean_out, float* rstd_out) {
  const int64_t r = blockIdx.x, cols = x.cols;
  double mean = 0;
  if (!rms) {
    double s = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      s += ld(x.p, x.dt, r * x.s0 + c * x.s1);
    mean = block_all(s, Add()) / static_cast<double>(max(cols, int64_t(1)));
  }
  double var = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const double d = ld(x.p, x.dt, r * x.s0 + c * x.s1) - mean;
    var += d * d;
  }
  var = block_all(var, Add()) / static_cast<double>(max(cols, int64_t(1)));
  if (threadIdx.x == 0) {
    mean_out[r] = static_cast<float>(mean);
    rstd_out[r] = static_cast<float>(1.0 / sqrt(var + eps));
  }
}

// The parameter gradients, one thread per column, rows in order (the same
// sum on every run): grad_gamma += sum dy * xhat, grad_beta += sum dy.
__global__ void norm_param_grads_kernel(M2 x, M2 dy, const float* mean, const float* rstd,
                                        float* gg, int64_t ggs, float* gb, int64_t gbs) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= x.cols) return;
  double sg = 0, sb = 0;
  for (int64_t r = 0; r < x.rows; ++r) {
    const float d = ld(dy.p, dy.dt, r * dy.s0 + c * dy.s1);
    const float xh = (ld(x.p, x.dt, r * x.s0 + c * x.s1) - mean[r]) * rstd[r];
    sg += static_cast<double>(d) * xh;
    sb += d;
  }
  if (gg) gg[c * ggs] += static_cast<float>(sg);
  if (gb) gb[c * gbs] += static_cast<float>(sb);
}

// grad_x per row (it may be dy itself: every read of the row's dy happens
// before the block's first write).
__global__ void norm_grad_x_kernel(M2 x, M2 dy, M2 gx, const char* gamma, int gdt, int64_t gs,
                                   const float* mean, const float* rstd, int rms) {
  const int64_t r = blockIdx.x, cols = x.cols;
  const float m = mean[r], rs = rstd[r];
  double s1 = 0, s2 = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float xh = (ld(x.p, x.dt, r * x.s0 + c * x.s1) - m) * rs;
    float g = ld(dy.p, dy.dt, r * dy.s0 + c * dy.s1);
    if (gamma) g *= ld(gamma, gdt, c * gs);
    s1 += g;
    s2 += static_cast<double>(g) * xh;
  }
  const double n = static_cast<double>(max(cols, int64_t(1)));
  const float mg = static_cast<float>(block_all(s1, Add()) / n);  // syncs the block
  const float mgx = static_cast<float>(block_all(s2, Add()) / n);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float xh = (ld(x.p, x.dt, r * x.s0 + c * x.s1) - m) * rs;
    float g = ld(dy.p, dy.dt, r * dy.s0 + c * dy.s1);
    if (gamma) g *= ld(gamma, gdt, c * gs);
    float t = g - xh * mgx;
    if (!rms) t -= mg;
    st(gx.p, gx.dt, r * gx.s0 + c * gx.s1, rs * t);
  }
}

// -- adamw -------------------------------------------------------------------------

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n, float decay,
                             float beta1, float beta2, float step_size, float bc2_sqrt, float eps) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = g[i];
    float pi = p[i];
    if (decay != 0.f) pi *= 1.f - decay;
    const float mi = beta1 * m[i] + (1.f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * (mi / (sqrtf(vi) / bc2_sqrt + eps));
  }
}

// -- skinny products (decode's linears) -------------------------------------------

template <class T>
struct Vec;  // 16 bytes of T as f32
template <>
struct Vec<float> {
  static constexpr int E = 4;
  __device__ static void load(const float* p, float* o) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    o[0] = v.x;
    o[1] = v.y;
    o[2] = v.z;
    o[3] = v.w;
  }
  __device__ static float one(const float* p) { return *p; }
};
template <>
struct Vec<__nv_bfloat16> {
  static constexpr int E = 8;
  __device__ static void load(const __nv_bfloat16* p, float* o) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      o[2 * i] = f.x;
      o[2 * i + 1] = f.y;
    }
  }
  __device__ static float one(const __nv_bfloat16* p) {
    return __bfloat162float(*p);
  }
};
template <>
struct Vec<__half> {
  static constexpr int E = 8;
  __device__ static void load(const __half* p, float* o) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(h[i]);
      o[2 * i] = f.x;
      o[2 * i + 1] = f.y;
    }
  }
  __device__ static float one(const __half* p) {
    return __half2float(*p);
  }
};

// E elements of x for a product in T: x's own T, or f32 rounded to T (what
// converting it to T first gives).
__device__ __forceinline__ float round_to(const __nv_bfloat16*, float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}
__device__ __forceinline__ float round_to(const __half*, float v) {
  return __half2float(__float2half_rn(v));
}
__device__ __forceinline__ float round_to(const float*, float v) {
  return v;
}
template <class T, class X>
struct XLoad {  // X == T
  __device__ static void load(const X* p, float* o) { Vec<T>::load(p, o); }
  __device__ static float one(const X* p) { return Vec<T>::one(p); }
};
template <class T>
struct XLoad<T, float> {
  __device__ static void load(const float* p, float* o) {
#pragma unroll
    for (int i = 0; i < Vec<T>::E; i += 4) {
      const float4 v = *reinterpret_cast<const float4*>(p + i);
      o[i] = round_to(static_cast<const T*>(nullptr), v.x);
      o[i + 1] = round_to(static_cast<const T*>(nullptr), v.y);
      o[i + 2] = round_to(static_cast<const T*>(nullptr), v.z);
      o[i + 3] = round_to(static_cast<const T*>(nullptr), v.w);
    }
  }
  __device__ static float one(const float* p) {
    return round_to(static_cast<const T*>(nullptr), *p);
  }
};

constexpr int kGemvMaxM = 8;
constexpr int kGemvWarps = 8;

// c[m, n] = alpha sum_k x[m, k] w[n, k] (+ bias[n]) (+ beta c[m, n]) for
// M <= 8 rows of x: one warp per n reads w's row once (16-byte loads when
// vec) for every m, f32 accumulation.
template <class T, class X>
__global__ void gemv_kernel(const T* w, int64_t ldw, const X* x, int64_t ldx, int M, int64_t K,
                            int64_t N, char* c, int cdt, int64_t cs0, int64_t cs1, const char* bias,
                            int bdt, int64_t bs, float alpha, float beta, int vec) {
  const int lane = threadIdx.x & 31;
  const int64_t n = blockIdx.x * int64_t(kGemvWarps) + (threadIdx.x >> 5);
  if (n >= N) return;
  float acc[kGemvMaxM];
#pragma unroll
  for (int m = 0; m < kGemvMaxM; ++m) acc[m] = 0.f;
  const T* wr = w + n * ldw;
  if (vec) {
    constexpr int E = Vec<T>::E;
    for (int64_t k = int64_t(lane) * E; k < K; k += 32 * E) {
      float wv[E], xv[E];
      Vec<T>::load(wr + k, wv);
#pragma unroll
      for (int m = 0; m < kGemvMaxM; ++m) {
        if (m >= M) break;
        XLoad<T, X>::load(x + m * ldx + k, xv);
#pragma unroll
        for (int e = 0; e < E; ++e) acc[m] += wv[e] * xv[e];
      }
    }
  } else {
    for (int64_t k = lane; k < K; k += 32) {
      const float wv = Vec<T>::one(wr + k);
#pragma unroll
      for (int m = 0; m < kGemvMaxM; ++m) {
        if (m >= M) break;
        acc[m] += wv * XLoad<T, X>::one(x + m * ldx + k);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kGemvMaxM; ++m) {
    if (m >= M) break;
    const float s = warp_sum(acc[m]);
    if (lane == m) {
      float v = alpha * s;
      if (bias) v += ld(bias, bdt, n * bs);
      const int64_t co = m * cs0 + n * cs1;
      if (beta != 0.f) v += beta * ld(c, cdt, co);
      st(c, cdt, co, v);
    }
  }
}

void check_dims(const oslo_bk_view* v, int ndim, const char* what) {
  check_float(v, what, false);
  if (v->ndim != ndim)
    fail(OSLO_ERR_SHAPE, std::string(what) + " " + shape_string(*v) + " must have " +
                             std::to_string(ndim) + " dimensions");
}

int sm_count(Instance& in) {
  if (in.sms == 0) {
    int n = 0;
    check_cuda(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, in.device),
               "cudaDeviceGetAttribute");
    in.sms = std::max(n, 1);
  }
  return in.sms;
}

}  // namespace

bool skinny_matmul(Instance& in, const oslo_bk_view& c, const oslo_bk_view& a,
                   const oslo_bk_view& b, const oslo_bk_view* bias, float alpha, float beta) {
  // c [M, N] (or [1, M, N]) = a [M, K] @ b [K, N] where b is W^T of a
  // row-major W [N, K] (b's K stride 1) and a's rows are contiguous; a in
  // b's dtype or (mixed) f32.
  const int64_t M = c.shape[c.ndim - 2], N = c.shape[c.ndim - 1], K = a.shape[a.ndim - 1];
  if (M < 1 || M > kGemvMaxM || K < 1 || N < 1) return false;
  if ((a.ndim == 3 && a.shape[0] != 1) || (b.ndim == 3 && b.shape[0] != 1)) return false;
  const int64_t bk = b.strides[b.ndim - 2], bn = b.strides[b.ndim - 1];
  const int64_t ak = a.strides[a.ndim - 1], am = M > 1 ? a.strides[a.ndim - 2] : K;
  if (bk != 1 || (N > 1 && bn < K) || (K > 1 && ak != 1) || (M > 1 && am < K)) return false;
  const int64_t ldw = N > 1 ? bn : K;
  const int64_t ws = static_cast<int64_t>(dtype_size(b.dtype)),
                xs = static_cast<int64_t>(dtype_size(a.dtype));
  const uintptr_t wp = reinterpret_cast<uintptr_t>(b.data),
                  xp = reinterpret_cast<uintptr_t>(a.data);
  const int64_t E = 16 / ws;
  const bool vec =
      K % E == 0 && wp % 16 == 0 && xp % 16 == 0 && (ldw * ws) % 16 == 0 && (am * xs) % 16 == 0;
  const int64_t cs0 = c.strides[c.ndim - 2], cs1 = c.strides[c.ndim - 1];
  const char* bp = bias ? static_cast<const char*>(bias->data) : nullptr;
  const int64_t bs = bias ? vec_stride(*bias) : 1;
  const int bdt = bias ? bias->dtype : 0;
  const unsigned blocks = static_cast<unsigned>((N + kGemvWarps - 1) / kGemvWarps);
  char* cp = static_cast<char*>(c.data);
  const bool mixed = a.dtype == OSLO_DTYPE_F32 && b.dtype != OSLO_DTYPE_F32;
  auto launch = [&](auto* w, auto* x) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(w)>>;
    using X = std::remove_const_t<std::remove_pointer_t<decltype(x)>>;
    gemv_kernel<T, X><<<blocks, 32 * kGemvWarps, 0, in.stream>>>(w, ldw, x, am, static_cast<int>(M),
                                                                 K, N, cp, c.dtype, cs0, cs1, bp,
                                                                 bdt, bs, alpha, beta, vec ? 1 : 0);
  };
  const float* xf = static_cast<const float*>(a.data);
  switch (b.dtype) {
    case OSLO_DTYPE_F32: launch(static_cast<const float*>(b.data), xf); break;
    case OSLO_DTYPE_BF16:
      if (mixed)
        launch(static_cast<const __nv_bfloat16*>(b.data), xf);
      else
        launch(static_cast<const __nv_bfloat16*>(b.data),
               static_cast<const __nv_bfloat16*>(a.data));
      break;
    case OSLO_DTYPE_F16:
      if (mixed)
        launch(static_cast<const __half*>(b.data), xf);
      else
        launch(static_cast<const __half*>(b.data), static_cast<const __half*>(a.data));
      break;
    default: return false;
  }
  launched("skinny matmul kernel");
  return true;
}

oslo_status fused_attention(void* self, const oslo_bk_view* out, const oslo_bk_view* q,
                            const oslo_bk_view* k, const oslo_bk_view* v, const oslo_bk_view* mask,
                            float scale, int causal, int64_t causal_offset) {
  return guard(self, "attention", [&](Instance& in) {
    check_dims(q, 4, "attention q");
    check_dims(k, 4, "attention k");
    check_dims(v, 4, "attention v");
    check_dims(out, 4, "attention output");
    check_float(out, "attention output", true);
    if (q->dtype != k->dtype || q->dtype != v->dtype)
      fail(OSLO_ERR_DTYPE, std::string("attention q, k and v must share a dtype (") +
                               dtype_name(q->dtype) + ", " + dtype_name(k->dtype) + ", " +
                               dtype_name(v->dtype) + ")");
    const int64_t B = q->shape[0], Hq = q->shape[1], S = q->shape[2], D = q->shape[3];
    const int64_t Hkv = k->shape[1], T = k->shape[2];
    if (k->shape[0] != B || k->shape[3] != D || Hkv <= 0 || Hq % Hkv != 0)
      fail(OSLO_ERR_SHAPE,
           "attention keys " + shape_string(*k) + " do not fit queries " + shape_string(*q));
    for (int i = 0; i < 4; ++i) {
      if (v->shape[i] != k->shape[i])
        fail(OSLO_ERR_SHAPE,
             "attention values " + shape_string(*v) + " differ from keys " + shape_string(*k));
      if (out->shape[i] != q->shape[i])
        fail(OSLO_ERR_SHAPE, "attention output " + shape_string(*out) + " differs from queries " +
                                 shape_string(*q));
    }
    if (mask) {
      check_dims(mask, 2, "attention mask");
      if (mask->shape[0] != B || mask->shape[1] != T)
        fail(OSLO_ERR_SHAPE, "attention mask " + shape_string(*mask) + " must be [" +
                                 std::to_string(B) + ", " + std::to_string(T) + "]");
    }
    if (D > 512)
      fail(OSLO_ERR_NOT_SUPPORTED,
           "attention: head_dim " + std::to_string(D) + " is over the cuda kernel's 512");
    const int64_t rows = B * Hq * S;
    if (rows * D == 0) return;
    AttnArgs a{};
    a.q = static_cast<const char*>(q->data);
    a.k = static_cast<const char*>(k->data);
    a.v = static_cast<const char*>(v->data);
    a.mask = mask ? static_cast<const char*>(mask->data) : nullptr;
    a.out = static_cast<char*>(out->data);
    a.dt = q->dtype;
    a.odt = out->dtype;
    a.mdt = mask ? mask->dtype : 0;
    for (int i = 0; i < 4; ++i) {
      a.qs[i] = q->strides[i];
      a.ks[i] = k->strides[i];
      a.vs[i] = v->strides[i];
      a.os[i] = out->strides[i];
    }
    if (mask) {
      a.ms[0] = mask->strides[0];
      a.ms[1] = mask->strides[1];
    }
    a.S = S;
    a.Hq = Hq;
    a.T = T;
    a.D = D;
    a.g = Hq / Hkv;
    a.scale = scale;
    a.causal = causal ? 1 : 0;
    a.off = causal_offset;
    if (rows > 0x7fffffffLL) fail(OSLO_ERR_NOT_SUPPORTED, "attention: too many query rows");
    // Prefill (16+ queries a head): the tiled kernel.
    if (S >= 16 && D <= kTileMaxD && D % 4 == 0) {
      const size_t bytes = tile_smem_bytes(D);
      if (!in.tile_smem_set) {
        check_cuda(
            cudaFuncSetAttribute(attention_tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(tile_smem_bytes(kTileMaxD))),
            "cudaFuncSetAttribute");
        in.tile_smem_set = true;
      }
      const int64_t blocks = B * Hq * ((S + kBQ - 1) / kBQ);
      a.nsplit = 1;
      attention_tile_kernel<<<static_cast<unsigned>(blocks), kTileThreads, bytes, in.stream>>>(a);
      launched("attention tile kernel");
      return;
    }
    // Split the keys over blocks (flash-decoding) when the query rows alone
    // do not fill the device: about four blocks per SM, 32+ keys a split.
    const int64_t want = 4 * static_cast<int64_t>(sm_count(in));
    int64_t nsplit = std::max<int64_t>(1, (want + rows - 1) / rows);
    nsplit = std::min<int64_t>({nsplit, std::max<int64_t>(1, T / 32), 64});
    a.chunk = std::max<int64_t>(1, (T + nsplit - 1) / nsplit);
    nsplit = std::max<int64_t>(1, (T + a.chunk - 1) / a.chunk);
    a.nsplit = static_cast<int>(nsplit);
    Instance::Temp part;
    if (nsplit > 1) {
      part = Instance::Temp(&in, static_cast<size_t>(rows * nsplit * (D + 2)) * sizeof(float));
      a.part = static_cast<float*>(part.p);
    }
    const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(nsplit));
    const int threads = 32 * kAttnWarps;
    if (D <= 64)
      attention_kernel<2><<<grid, threads, 0, in.stream>>>(a);
    else if (D <= 128)
      attention_kernel<4><<<grid, threads, 0, in.stream>>>(a);
    else if (D <= 256)
      attention_kernel<8><<<grid, threads, 0, in.stream>>>(a);
    else
      attention_kernel<16><<<grid, threads, 0, in.stream>>>(a);
    launched("attention kernel");
    if (nsplit > 1) {
      attention_combine_kernel<<<static_cast<unsigned>(rows), 128, 0, in.stream>>>(a);
      launched("attention combine kernel");
    }
  });
}

oslo_status fused_residual_norm(void* self, const oslo_bk_view* out, const oslo_bk_view* x,
                                const oslo_bk_view* y, const oslo_bk_view* bias,
                                const oslo_bk_view* gamma, const oslo_bk_view* beta, float eps,
                                int rms) {
  return guard(self, "residual_norm", [&](Instance& in) {
    check_float(x, "residual_norm x", true);
    check_float(out, "residual_norm output", true);
    const M2 xm = matrix_of(*x, "residual_norm x"), om = matrix_of(*out, "residual_norm output");
    if (om.rows != xm.rows || om.cols != xm.cols)
      fail(OSLO_ERR_SHAPE,
           "residual_norm output " + shape_string(*out) + " differs from x " + shape_string(*x));
    M2 ym{};
    if (y) {
      check_float(y, "residual_norm y", false);
      ym = matrix_of(*y, "residual_norm y");
      if (ym.rows != xm.rows || ym.cols != xm.cols)
        fail(OSLO_ERR_SHAPE,
             "residual_norm y " + shape_string(*y) + " differs from x " + shape_string(*x));
    }
    auto param = [&](const oslo_bk_view* p, const char* what, const char** ptr, int* dt,
                     int64_t* s) {
      *ptr = nullptr;
      *dt = 0;
      *s = 1;
      if (!p) return;
      check_float(p, what, false);
      if (numel(*p) != xm.cols)
        fail(OSLO_ERR_SHAPE, std::string(what) + " " + shape_string(*p) + " needs " +
                                 std::to_string(xm.cols) + " elements");
      *ptr = static_cast<const char*>(p->data);
      *dt = p->dtype;
      *s = vec_stride(*p);
    };
    const char *bp, *gp, *bbp;
    int bdt, gdt, bbdt;
    int64_t bs, gs, bbs;
    param(bias, "residual_norm bias", &bp, &bdt, &bs);
    param(gamma, "residual_norm gamma", &gp, &gdt, &gs);
    param(rms ? nullptr : beta, "residual_norm beta", &bbp, &bbdt, &bbs);
    if (xm.rows == 0 || xm.cols == 0) return;
    residual_norm_kernel<<<static_cast<unsigned>(xm.rows), row_threads(xm.cols), 0, in.stream>>>(
        xm, ym, y ? 1 : 0, bp, bdt, bs, om, gp, gdt, gs, bbp, bbdt, bbs, eps, rms ? 1 : 0);
    launched("residual_norm kernel");
  });
}

oslo_status fused_rope(void* self, const oslo_bk_view* x, const oslo_bk_view* cos,
                       const oslo_bk_view* sin) {
  return guard(self, "rope", [&](Instance& in) {
    check_dims(x, 3, "rope x");
    check_float(x, "rope x", true);
    check_dims(cos, 2, "rope cos");
    check_dims(sin, 2, "rope sin");
    if (cos->dtype != OSLO_DTYPE_F32 || sin->dtype != OSLO_DTYPE_F32)
      fail(OSLO_ERR_DTYPE, "rope: cos and sin must be f32");
    const int64_t rows = x->shape[0], heads = x->shape[1], R = cos->shape[1];
    if (cos->shape[0] != rows || sin->shape[0] != rows || sin->shape[1] != R || 2 * R > x->shape[2])
      fail(OSLO_ERR_SHAPE, "rope: x " + shape_string(*x) +
                               " must be [rows, heads, D] and cos/sin " + shape_string(*cos) +
                               " [rows, R] with 2R <= D");
    const int64_t n = rows * heads * R;
    if (n == 0) return;
    rope_kernel<<<blocks_for(n, 256), 256, 0, in.stream>>>(
        static_cast<char*>(x->data), x->dtype, x->strides[0], x->strides[1], x->strides[2], heads,
        R, n, static_cast<const float*>(cos->data), cos->strides[0], cos->strides[1],
        static_cast<const float*>(sin->data), sin->strides[0], sin->strides[1]);
    launched("rope kernel");
  });
}

oslo_status fused_matmul_act(void* self, const oslo_bk_view* c, const oslo_bk_view* a,
                             const oslo_bk_view* b, const oslo_bk_view* bias, oslo_bk_unary act_arg,
                             const oslo_bk_view* gate) {
  const int act = enum_value(act_arg);
  return guard(self, "matmul_act", [&](Instance& in) {
    check_dims(c, 2, "matmul_act c");
    check_float(c, "matmul_act c", true);
    check_dims(a, 2, "matmul_act a");
    check_dims(b, 2, "matmul_act b");
    if (act != OSLO_BK_GELU && act != OSLO_BK_GELU_TANH && act != OSLO_BK_SILU &&
        act != OSLO_BK_RELU && act != OSLO_BK_TANH)
      fail(OSLO_ERR_INVALID_ARGUMENT, "matmul_act: " + std::to_string(act) +
                                          " is not an activation (GELU, GELU_TANH, SILU, RELU or "
                                          "TANH)");
    const int64_t M = c->shape[0], N = c->shape[1];
    M2 gm{};
    if (gate) {
      check_dims(gate, 2, "matmul_act gate");
      if (gate->shape[0] != M || gate->shape[1] != N)
        fail(OSLO_ERR_SHAPE, "matmul_act gate " + shape_string(*gate) +
                                 " must be a float view of c's shape " + shape_string(*c));
      gm = matrix_of(*gate, "matmul_act gate");
    }
    // The product (and bias) in f32, then one pass: activation, gate,
    // rounding to c's dtype.
    Instance::Temp acc(&in, static_cast<size_t>(std::max<int64_t>(M * N, 1)) * sizeof(float));
    oslo_bk_view av{};
    av.data = acc.p;
    av.dtype = OSLO_DTYPE_F32;
    av.ndim = 2;
    av.shape[0] = M;
    av.shape[1] = N;
    av.strides[0] = N;
    av.strides[1] = 1;
    const oslo_status st = op_matmul(self, &av, a, b, bias, 1.0f, 0.0f);
    if (st != OSLO_OK) fail(st, in.error);
    if (M * N == 0) return;
    const M2 cm = matrix_of(*c, "matmul_act c");
    act_gate_kernel<<<blocks_for(M * N, 256), 256, 0, in.stream>>>(
        cm, static_cast<const float*>(acc.p), act, gm, gate ? 1 : 0);
    launched("matmul_act epilogue kernel");
  });
}

oslo_status fused_argmax(void* self, const oslo_bk_view* index, const oslo_bk_view* value,
                         const oslo_bk_view* x, int64_t valid) {
  return guard(self, "argmax", [&](Instance& in) {
    check_dims(x, 2, "argmax x");
    check_view(index, "argmax index", true);
    check_view(value, "argmax value", true);
    const int64_t rows = x->shape[0];
    if (index->dtype != OSLO_DTYPE_I64 || index->ndim != 1 || index->shape[0] != rows ||
        (rows > 1 && index->strides[0] != 1))
      fail(OSLO_ERR_SHAPE, "argmax: index " + shape_string(*index) + " must be contiguous i64 [" +
                               std::to_string(rows) + "]");
    if (value->dtype != OSLO_DTYPE_F32 || value->ndim != 1 || value->shape[0] != rows ||
        (rows > 1 && value->strides[0] != 1))
      fail(OSLO_ERR_SHAPE, "argmax: value " + shape_string(*value) + " must be contiguous f32 [" +
                               std::to_string(rows) + "]");
    if (valid > x->shape[1])
      fail(OSLO_ERR_INVALID_ARGUMENT, "argmax: " + std::to_string(valid) +
                                          " valid elements in rows of " +
                                          std::to_string(x->shape[1]));
    const int64_t n = valid < 0 ? x->shape[1] : valid;
    if (rows == 0) return;
    argmax_kernel<<<static_cast<unsigned>(rows), 512, 0, in.stream>>>(
        static_cast<const char*>(x->data), x->dtype, x->strides[0], x->strides[1], n,
        static_cast<int64_t*>(index->data), static_cast<float*>(value->data));
    launched("argmax kernel");
  });
}

oslo_status fused_norm_backward(void* self, const oslo_bk_view* grad_x,
                                const oslo_bk_view* grad_gamma, const oslo_bk_view* grad_beta,
                                const oslo_bk_view* x, const oslo_bk_view* gamma,
                                const oslo_bk_view* dy, float eps, int rms) {
  return guard(self, "norm_backward", [&](Instance& in) {
    check_dims(x, 2, "norm_backward x");
    check_dims(dy, 2, "norm_backward dy");
    check_dims(grad_x, 2, "norm_backward grad_x");
    check_float(grad_x, "norm_backward grad_x", true);
    const M2 xm = matrix_of(*x, "norm_backward x"), dm = matrix_of(*dy, "norm_backward dy"),
             gxm = matrix_of(*grad_x, "norm_backward grad_x");
    if (dm.rows != xm.rows || dm.cols != xm.cols || gxm.rows != xm.rows || gxm.cols != xm.cols)
      fail(OSLO_ERR_SHAPE, "norm_backward: dy " + shape_string(*dy) + " and grad_x " +
                               shape_string(*grad_x) + " must have x's shape " + shape_string(*x));
    const int64_t H = xm.cols;
    const char* gp = nullptr;
    int gdt = 0;
    int64_t gs = 1;
    if (gamma) {
      check_float(gamma, "norm_backward gamma", false);
      if (numel(*gamma) != H)
        fail(OSLO_ERR_SHAPE, "norm_backward: gamma " + shape_string(*gamma) + " needs " +
                                 std::to_string(H) + " elements");
      gp = static_cast<const char*>(gamma->data);
      gdt = gamma->dtype;
      gs = vec_stride(*gamma);
    }
    auto pgrad = [&](const oslo_bk_view* p, const char* what, int64_t* s) -> float* {
      *s = 1;
      if (!p) return nullptr;
      check_view(p, what, true);
      if (p->dtype != OSLO_DTYPE_F32)
        fail(OSLO_ERR_DTYPE, std::string("norm_backward: ") + what + " must be f32");
      if (numel(*p) != H)
        fail(OSLO_ERR_SHAPE, std::string("norm_backward: ") + what + " " + shape_string(*p) +
                                 " needs " + std::to_string(H) + " elements");
      *s = vec_stride(*p);
      return static_cast<float*>(p->data);
    };
    int64_t ggs, gbs;
    float* gg = pgrad(grad_gamma, "grad_gamma", &ggs);
    float* gb = pgrad(rms ? nullptr : grad_beta, "grad_beta", &gbs);
    const int64_t R = xm.rows;
    if (R * H == 0) return;
    Instance::Temp stats(&in, static_cast<size_t>(2 * R) * sizeof(float));
    float* mean = static_cast<float*>(stats.p);
    float* rstd = mean + R;
    norm_stats_kernel<<<static_cast<unsigned>(R), row_threads(H), 0, in.stream>>>(xm, rms ? 1 : 0,
                                                                                  eps, mean, rstd);
    launched("norm_backward statistics kernel");
    if (gg || gb) {
      norm_param_grads_kernel<<<blocks_for(H, 128), 128, 0, in.stream>>>(xm, dm, mean, rstd, gg,
                                                                         ggs, gb, gbs);
      launched("norm_backward parameter kernel");
    }
    norm_grad_x_kernel<<<static_cast<unsigned>(R), row_threads(H), 0, in.stream>>>(
        xm, dm, gxm, gp, gdt, gs, mean, rstd, rms ? 1 : 0);
    launched("norm_backward kernel");
  });
}

oslo_status fused_adamw(void* self, const oslo_bk_view* p, const oslo_bk_view* g,
                        const oslo_bk_view* m, const oslo_bk_view* v, float decay, float beta1,
                        float beta2, float step_size, float bc2_sqrt, float eps) {
  return guard(self, "adamw", [&](Instance& in) {
    const oslo_bk_view* ops[4] = {p, g, m, v};
    const char* names[4] = {"adamw parameter", "adamw gradient", "adamw first moment",
                            "adamw second moment"};
    for (int i = 0; i < 4; ++i) {
      check_view(ops[i], names[i], i != 1);
      if (ops[i]->dtype != OSLO_DTYPE_F32)
        fail(OSLO_ERR_DTYPE,
             std::string(names[i]) + " must be f32, not " + dtype_name(ops[i]->dtype));
      if (numel(*ops[i]) != numel(*p) || !flat(*ops[i]))
        fail(OSLO_ERR_SHAPE, std::string(names[i]) + " " + shape_string(*ops[i]) +
                                 " must be contiguous with the parameter's " +
                                 std::to_string(numel(*p)) + " elements");
    }
    const int64_t n = numel(*p);
    if (n == 0) return;
    adamw_kernel<<<blocks_for(n, 256), 256, 0, in.stream>>>(
        static_cast<float*>(p->data), static_cast<const float*>(g->data),
        static_cast<float*>(m->data), static_cast<float*>(v->data), n, decay, beta1, beta2,
        step_size, bc2_sqrt, eps);
    launched("adamw kernel");
  });
}

}  // namespace oslo_cuda
