// The CUDA plugin's paged attention (oslo_backend.h's paged_attention): one
// serving step's queries over the paged KV cache, reading every key and
// value through the chunks' block tables (no gathered copy, as the core's
// composition makes in core/backend/fused_paged.cpp).
//
// One kernel, kept simple: a block of four warps per (query row, query
// head), as the fused attention's decode kernel (cuda_fused.cu): its warps
// take the keys the query sees (positions 0 .. its own) in turn, each with
// an online softmax in f32, then the block merges them and writes the row.
// The chunks (row, start, n) travel as kernel arguments, up to kBatch per
// launch, so nothing is uploaded and a recorded step (graphs) replays them
// by value. The block ids are checked first by a small kernel and a flag
// read back (a wait point, as gather_rows' ids); while a graph is being
// recorded that check cannot run, and the kernel reads an id out of range
// as no key instead of out of bounds.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "cuda_backend.hpp"
#include "cuda_kernels.cuh"

namespace oslo_cuda {
namespace {

constexpr int kBatch = 64;  // chunks per launch
constexpr int kWarps = 4;

struct PagedArgs {
  const char *q, *kp, *vp;
  char* out;
  const int64_t* table;
  int dt, odt;
  int count;  // chunks in this launch
  int64_t qs0, qs1, qs2, os0, os1, os2, ks0, vs0, ts0, ts1;
  int64_t g, bs, D, NB;
  float scale;
  int64_t
      first[kBatch + 1];  // token t of the launch is chunk c's when first[c] <= t < first[c + 1]
  int64_t row[kBatch], start[kBatch], trow[kBatch];  // trow: the chunk's row of the table
};

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block (token of the launch, query head h). NPL: head dimensions per lane.
template <int NPL>
__global__ void paged_attention_kernel(PagedArgs a) {
  __shared__ float wm[kWarps], wl[kWarps];
  __shared__ float wacc[kWarps][32 * NPL];
  const int64_t tok = blockIdx.x, h = blockIdx.y, kh = h / a.g;
  int c = 0;
  while (c + 1 < a.count && a.first[c + 1] <= tok) ++c;
  const int64_t i = tok - a.first[c], r = a.row[c] + i, pos = a.start[c] + i;
  const int64_t* tab = a.table + a.trow[c] * a.ts0;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float q[NPL], acc[NPL];
  const int64_t qo = r * a.qs0 + h * a.qs1;
#pragma unroll
  for (int e = 0; e < NPL; ++e) {
    const int64_t d = lane + 32 * e;
    q[e] = d < a.D ? ld(a.q, a.dt, qo + d * a.qs2) : 0.f;
    acc[e] = 0.f;
  }
  float mx = -INFINITY, l = 0.f;
  for (int64_t j = warp; j <= pos; j += kWarps) {
    const int64_t b = tab[(j / a.bs) * a.ts1];
    if (b < 0 || b >= a.NB) continue;  // only while recording (checked otherwise)
    const int64_t slot = (kh * a.bs + j % a.bs) * a.D;
    const int64_t ko = b * a.ks0 + slot, vo = b * a.vs0 + slot;
    float dot = 0.f;
#pragma unroll
    for (int e = 0; e < NPL; ++e) {
      const int64_t d = lane + 32 * e;
      if (d < a.D) dot += q[e] * ld(a.kp, a.dt, ko + d);
    }
    const float z = a.scale * warp_sum(dot);
    if (z > mx) {
      const float corr = expf(mx - z);
      l *= corr;
#pragma unroll
      for (int e = 0; e < NPL; ++e) acc[e] *= corr;
      mx = z;
    }
    const float p = expf(z - mx);
    l += p;
#pragma unroll
    for (int e = 0; e < NPL; ++e) {
      const int64_t d = lane + 32 * e;
      if (d < a.D) acc[e] += p * ld(a.vp, a.dt, vo + d);
    }
  }
  if (lane == 0) {
    wm[warp] = mx;
    wl[warp] = l;
  }
#pragma unroll
  for (int e = 0; e < NPL; ++e) wacc[warp][lane + 32 * e] = acc[e];
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, wm[w]);
  float L = 0.f;
  if (M != -INFINITY)
    for (int w = 0; w < kWarps; ++w)
      if (wm[w] != -INFINITY) L += wl[w] * expf(wm[w] - M);
  for (int64_t d = threadIdx.x; d < a.D; d += blockDim.x) {
    float o = 0.f;
    if (M != -INFINITY)
      for (int w = 0; w < kWarps; ++w)
        if (wm[w] != -INFINITY) o += wacc[w][d] * expf(wm[w] - M);
    st(a.out, a.odt, r * a.os0 + h * a.os1 + d * a.os2, L > 0.f ? o / L : 0.f);
  }
}

// Block c of the launch checks the ids its chunk reads; the flag gets the
// first bad one's position in the table (table row * width + entry).
__global__ void paged_check_kernel(PagedArgs a, int64_t width, int* flag) {
  const int c = blockIdx.x;
  const int64_t n = a.first[c + 1] - a.first[c];
  const int64_t nb = (a.start[c] + n + a.bs - 1) / a.bs;
  for (int64_t j = threadIdx.x; j < nb; j += blockDim.x) {
    const int64_t b = a.table[a.trow[c] * a.ts0 + j * a.ts1];
    if (b < 0 || b >= a.NB)
      atomicMin(flag, static_cast<int>(min(a.trow[c] * width + j, int64_t(INT_MAX - 1))));
  }
}

void check_paged_views(const oslo_bk_view* out, const oslo_bk_view* q, const oslo_bk_view* kp,
                       const oslo_bk_view* vp, const oslo_bk_view* table, const int64_t* chunks,
                       int64_t C) {
  check_float(q, "paged_attention q", false);
  check_float(out, "paged_attention output", true);
  check_float(kp, "paged_attention key pool", false);
  check_float(vp, "paged_attention value pool", false);
  check_view(table, "paged_attention block table", false);
  if (q->ndim != 3 || out->ndim != 3 || kp->ndim != 4 || vp->ndim != 4 || table->ndim != 2)
    fail(OSLO_ERR_SHAPE,
         "paged_attention: q and out [tokens, heads, D], pools [blocks, kv heads, "
         "block size, D] and a 2-D block table expected");
  if (q->dtype != kp->dtype || q->dtype != vp->dtype)
    fail(OSLO_ERR_DTYPE, std::string("paged_attention q and the pools must share a dtype (") +
                             dtype_name(q->dtype) + ", " + dtype_name(kp->dtype) + ", " +
                             dtype_name(vp->dtype) + ")");
  if (table->dtype != OSLO_DTYPE_I64)
    fail(OSLO_ERR_DTYPE,
         std::string("paged_attention block table must be i64, not ") + dtype_name(table->dtype));
  const int64_t T = q->shape[0], Hq = q->shape[1], D = q->shape[2];
  const int64_t Hkv = kp->shape[1], bs = kp->shape[2];
  bool fit = Hkv > 0 && bs > 0 && Hq % Hkv == 0 && kp->shape[3] == D && table->shape[0] == C &&
             (C == 0 || chunks != nullptr);
  for (int i = 0; i < 4; ++i) fit = fit && vp->shape[i] == kp->shape[i];
  for (int i = 0; i < 3; ++i) fit = fit && out->shape[i] == q->shape[i];
  for (const oslo_bk_view* p : {kp, vp})
    fit = fit && p->strides[3] == 1 && p->strides[2] == D && p->strides[1] == bs * D;
  if (!fit)
    fail(OSLO_ERR_SHAPE, "paged_attention: q " + shape_string(*q) + ", out " + shape_string(*out) +
                             ", pools " + shape_string(*kp) + " and " + shape_string(*vp) +
                             " (blocks contiguous), table " + shape_string(*table) + " for " +
                             std::to_string(C) + " chunks do not fit");
  for (int64_t c = 0; c < C; ++c) {
    const int64_t row = chunks[3 * c], start = chunks[3 * c + 1], n = chunks[3 * c + 2];
    if (row < 0 || start < 0 || n < 0 || row > T - n || (start + n + bs - 1) / bs > table->shape[1])
      fail(OSLO_ERR_INVALID_ARGUMENT, "paged_attention chunk " + std::to_string(c) + " (row " +
                                          std::to_string(row) + ", start " + std::to_string(start) +
                                          ", n " + std::to_string(n) + ") does not fit " +
                                          std::to_string(T) + " rows and a table of " +
                                          std::to_string(table->shape[1]) + " blocks");
  }
}

}  // namespace

oslo_status fused_paged_attention(void* self, const oslo_bk_view* out, const oslo_bk_view* q,
                                  const oslo_bk_view* k_pool, const oslo_bk_view* v_pool,
                                  const oslo_bk_view* block_table, const int64_t* chunks,
                                  int64_t num_chunks, float scale) {
  return guard(self, "paged_attention", [&](Instance& in) {
    check_paged_views(out, q, k_pool, v_pool, block_table, chunks, num_chunks);
    const int64_t Hq = q->shape[1], D = q->shape[2], Hkv = k_pool->shape[1];
    if (D > 512)
      fail(OSLO_ERR_NOT_SUPPORTED,
           "paged_attention: head_dim " + std::to_string(D) + " is over the cuda kernel's 512");
    if (Hq > 65535) fail(OSLO_ERR_NOT_SUPPORTED, "paged_attention: more than 65535 query heads");
    if (num_chunks == 0 || q->shape[0] * Hq * D == 0) return;
    PagedArgs base{};
    base.q = static_cast<const char*>(q->data);
    base.kp = static_cast<const char*>(k_pool->data);
    base.vp = static_cast<const char*>(v_pool->data);
    base.out = static_cast<char*>(out->data);
    base.table = static_cast<const int64_t*>(block_table->data);
    base.dt = q->dtype;
    base.odt = out->dtype;
    base.qs0 = q->strides[0];
    base.qs1 = q->strides[1];
    base.qs2 = q->strides[2];
    base.os0 = out->strides[0];
    base.os1 = out->strides[1];
    base.os2 = out->strides[2];
    base.ks0 = k_pool->strides[0];
    base.vs0 = v_pool->strides[0];
    base.ts0 = block_table->strides[0];
    base.ts1 = block_table->strides[1];
    base.g = Hq / Hkv;
    base.bs = k_pool->shape[2];
    base.D = D;
    base.NB = k_pool->shape[0];
    base.scale = scale;
    // The launches: the non-empty chunks, kBatch at a time.
    std::vector<PagedArgs> launches;
    for (int64_t c = 0; c < num_chunks; ++c) {
      const int64_t n = chunks[3 * c + 2];
      if (n == 0) continue;
      if (launches.empty() || launches.back().count == kBatch) {
        launches.push_back(base);
        launches.back().first[0] = 0;
      }
      PagedArgs& a = launches.back();
      a.row[a.count] = chunks[3 * c];
      a.start[a.count] = chunks[3 * c + 1];
      a.trow[a.count] = c;
      a.first[a.count + 1] = a.first[a.count] + n;
      ++a.count;
    }
    if (launches.empty()) return;  // every chunk empty
    if (!in.capturing) {
      const int64_t width = block_table->shape[1];
      if (num_chunks * width >= INT_MAX)
        fail(OSLO_ERR_NOT_SUPPORTED, "paged_attention: a block table of 2^31 entries or more");
      flag_reset(in);
      for (const PagedArgs& a : launches) {
        paged_check_kernel<<<static_cast<unsigned>(a.count), 128, 0, in.stream>>>(a, width,
                                                                                  in.flag);
        launched("paged_attention id check kernel");
      }
      const int64_t pos = flag_read(in);
      if (pos >= 0) {
        const int64_t c = pos / width, j = pos % width;
        int64_t id = 0;
        check_cuda(cudaMemcpy(&id, base.table + c * base.ts0 + j * base.ts1, sizeof id,
                              cudaMemcpyDeviceToHost),
                   "cudaMemcpy");
        fail(OSLO_ERR_INVALID_ARGUMENT,
             "block id " + std::to_string(id) + " (chunk " + std::to_string(c) + ", table entry " +
                 std::to_string(j) + ") is outside [0, " + std::to_string(base.NB) + ")");
      }
    }
    for (const PagedArgs& a : launches) {
      const int64_t tokens = a.first[a.count];
      if (tokens > 0x7fffffffLL) fail(OSLO_ERR_NOT_SUPPORTED, "paged_attention: too many rows");
      const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(Hq));
      const int threads = 32 * kWarps;
      if (D <= 64)
        paged_attention_kernel<2><<<grid, threads, 0, in.stream>>>(a);
      else if (D <= 128)
        paged_attention_kernel<4><<<grid, threads, 0, in.stream>>>(a);
      else if (D <= 256)
        paged_attention_kernel<8><<<grid, threads, 0, in.stream>>>(a);
      else
        paged_attention_kernel<16><<<grid, threads, 0, in.stream>>>(a);
      launched("paged_attention kernel");
    }
  });
}

}  // namespace oslo_cuda
