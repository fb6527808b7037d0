// The CPU backend's paged attention (OSLO_BK_OP_PAGED_ATTENTION, contract in
// core/backend/oslo_backend.h): every chunk of a serving step reads its keys
// and values straight out of the pools through its block table, without the
// gathered per-chunk copies of the composition (core/backend/fused_paged.cpp).
//
//  - Work items: (chunk, kv head, tile of queries), each for the g query
//    heads of its group, so a key block is read once for all of them. A
//    chunk of fewer than 16 queries (decode, short continuations) is one
//    tile; a longer one (prefill) is cut into tiles of 64 queries.
//  - Online softmax over the blocks the tile's last query sees (causal: no
//    block past it is read): a running max, sum and output per row, rescaled
//    as blocks come, in steps of whole blocks (at least 64 keys). Small
//    tiles score each block where it lies with attention's row kernels
//    (cpu_fused.cpp: dots and axpys, AVX2 + FMA where the CPU has them);
//    prefill tiles pack a step's keys and values for two oneDNN products.
//  - When the items are fewer than twice the threads (few sequences
//    decoding), each small tile's blocks are split into ranges with their own
//    running state, merged at the end (split-K, as flash-decoding does).
// f16 and bf16 pools are read into f32 a block at a time; f32 throughout.
// int8 pools (paged_attention_kv8) likewise: a block's codes times their
// row scales, converted where it is read (a quarter of the f32 pool's
// bytes), the same values dequantize_rows gives.
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_ops.hpp"
#include "backends/cpu/cpu_rows.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

namespace oslo {
namespace cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kTileMin = 16;  // queries from which a chunk runs in tiles
constexpr int64_t kTile = 64;     // queries per tile
constexpr int64_t kKeys = 64;     // keys per step of a tile (whole blocks)

// One work item: queries [i0, i0 + nq) of chunk c for the heads of kv head
// kh, over blocks [b0, b1) of the chunk's table. Its results (R = g * nq
// rows: the unnormalised output [R, D], then the running max [R] and sum
// [R]) start at float `part` of the partial buffer.
struct Item {
  int64_t c, kh, i0, nq, b0, b1, part;
};
// The items of one (chunk, kv head, tile): `count` consecutive ones.
struct Group {
  int64_t first, count;
};

struct Step {
  const V &out, &q, &kp, &vp;
  const V *ks, *vs;  // int8 pools: their scales [blocks, Hkv, bs] (else null)
  const int64_t* chunks;
  std::vector<std::vector<int64_t>> ids;  // each chunk's block ids (checked)
  int64_t Hkv, g, bs, D;
  float scale;
};

// Per-thread buffers.
struct Work {
  std::vector<float> qt, sc, kbuf, vbuf, qrow;
};

// The [m, D] keys (or values) of block b, kv head kh: the pool itself when
// it is f32, else converted into buf (int8: times the rows' scales).
const float* slab(const V& pool, const V* scales, int64_t b, int64_t kh, int64_t m, int64_t bs,
                  int64_t D, float* buf) {
  if (scales) {
    int8_rows_to_f32(static_cast<const int8_t*>(pool.data) + b * pool.strides[0] + kh * bs * D,
                     static_cast<const float*>(scales->data) + b * scales->strides[0] + kh * bs, m,
                     D, buf);
    return buf;
  }
  return load_row(pool, b * pool.strides[0] + kh * bs * D, m * D, 1, buf);
}

// Scores sc [R, mk] of keys [t, t + mk) become probabilities against each
// row's running max (row r's query at position start + i0 + r % nq sees keys
// up to it); the running sums and outputs are rescaled to the new maxima.
// lim[r]: the keys of the step row r sees (0: none, its row of sc zeroed).
void online_update(float* sc, int64_t R, int64_t mk, int64_t nq, int64_t first_pos, int64_t t,
                   float* acc, float* m, float* l, int64_t D, int64_t* lim) {
  for (int64_t r = 0; r < R; ++r) {
    float* row = sc + r * mk;
    const int64_t n = std::min(mk, first_pos + r % nq - t + 1);
    lim[r] = std::max<int64_t>(0, n);
    if (n <= 0) {
      std::fill(row, row + mk, 0.f);
      continue;
    }
    float bm = kNegInf;
    for (int64_t j = 0; j < n; ++j) bm = std::max(bm, row[j]);
    const float mnew = std::max(m[r], bm);
    if (m[r] != kNegInf && mnew > m[r]) {
      const float corr = std::exp(m[r] - mnew);
      l[r] *= corr;
      float* o = acc + r * D;
      for (int64_t d = 0; d < D; ++d) o[d] *= corr;
    }
    m[r] = mnew;
    l[r] += static_cast<float>(exp_sum_f64(row, row, n, mnew, true));
    std::fill(row + n, row + mk, 0.f);
  }
}

void run_item(const Step& s, const Item& it, float* part, Work& w) {
  const int64_t row0 = s.chunks[3 * it.c], start = s.chunks[3 * it.c + 1];
  const int64_t D = s.D, bs = s.bs, nq = it.nq, R = s.g * nq;
  float* acc = part;
  float* m = part + R * D;
  float* l = m + R;
  std::fill(acc, acc + R * D, 0.f);
  std::fill(m, m + R, kNegInf);
  std::fill(l, l + R, 0.f);
  // Scaled queries, rows (head of the group, query).
  w.qt.resize(static_cast<size_t>(R * D));
  for (int64_t hg = 0; hg < s.g; ++hg)
    for (int64_t ii = 0; ii < nq; ++ii) {
      const int64_t h = it.kh * s.g + hg, r = row0 + it.i0 + ii;
      const float* qr =
          load_row(s.q, r * s.q.strides[0] + h * s.q.strides[1], D, s.q.strides[2], w.qrow.data());
      float* d = w.qt.data() + (hg * nq + ii) * D;
      for (int64_t e = 0; e < D; ++e) d[e] = qr[e] * s.scale;
    }
  const int64_t first_pos = start + it.i0;  // position of the tile's first query
  const int64_t t_end = std::min(it.b1 * bs, first_pos + nq);
  const std::vector<int64_t>& ids = s.ids[static_cast<size_t>(it.c)];
  std::vector<int64_t> lim(static_cast<size_t>(R));
  const int64_t per_step = std::max<int64_t>(1, kKeys / bs) * bs;  // whole blocks, >= 64 keys
  if (nq < kTileMin) {
    // Steps of whole blocks through the row kernels, each block read where
    // it lies: the scores of a step's blocks side by side in sc, one online
    // update per step, then the values block by block.
    const AttentionRowKernels& rk = attention_row_kernels();
    w.sc.resize(static_cast<size_t>(R * per_step));
    for (int64_t t = it.b0 * bs; t < t_end; t += per_step) {
      const int64_t mk = std::min(per_step, t_end - t);
      for (int64_t u = 0; u < mk; u += bs) {
        const int64_t b = ids[static_cast<size_t>((t + u) / bs)], n = std::min(bs, mk - u);
        const float* K = slab(s.kp, s.ks, b, it.kh, n, bs, D, w.kbuf.data());
        for (int64_t r = 0; r < R; ++r)
          rk.dots(w.qt.data() + r * D, K, D, n, D, w.sc.data() + r * mk + u);
      }
      online_update(w.sc.data(), R, mk, nq, first_pos, t, acc, m, l, D, lim.data());
      for (int64_t u = 0; u < mk; u += bs) {
        const int64_t b = ids[static_cast<size_t>((t + u) / bs)], n = std::min(bs, mk - u);
        const float* Vb = slab(s.vp, s.vs, b, it.kh, n, bs, D, w.vbuf.data());
        for (int64_t r = 0; r < R; ++r) {
          const int64_t seen = std::min(n, lim[static_cast<size_t>(r)] - u);
          if (seen > 0) rk.axpys(w.sc.data() + r * mk + u, Vb, D, seen, D, acc + r * D);
        }
      }
    }
    return;
  }
  // Prefill tiles: steps of whole blocks, packed, two products per step.
  w.sc.resize(static_cast<size_t>(R * per_step));
  for (int64_t t = it.b0 * bs; t < t_end; t += per_step) {
    const int64_t mk = std::min(per_step, t_end - t);
    const float *K, *Vb;
    if (mk <= bs && s.kp.dtype == OSLO_DTYPE_F32 && !s.ks) {  // one block: read in place
      const int64_t b = ids[static_cast<size_t>(t / bs)];
      K = slab(s.kp, s.ks, b, it.kh, mk, bs, D, nullptr);
      Vb = slab(s.vp, s.vs, b, it.kh, mk, bs, D, nullptr);
    } else {
      for (int64_t u = 0; u < mk; u += bs) {
        const int64_t b = ids[static_cast<size_t>((t + u) / bs)], n = std::min(bs, mk - u);
        const float* kr = slab(s.kp, s.ks, b, it.kh, n, bs, D, w.kbuf.data() + u * D);
        if (kr != w.kbuf.data() + u * D)
          std::memcpy(w.kbuf.data() + u * D, kr, static_cast<size_t>(n * D) * 4);
        const float* vr = slab(s.vp, s.vs, b, it.kh, n, bs, D, w.vbuf.data() + u * D);
        if (vr != w.vbuf.data() + u * D)
          std::memcpy(w.vbuf.data() + u * D, vr, static_cast<size_t>(n * D) * 4);
      }
      K = w.kbuf.data();
      Vb = w.vbuf.data();
    }
    // sc [R, mk] = qt [R, D] x K^T.
    dnnl_status_t st =
        dnnl_sgemm('N', 'T', R, mk, D, 1.f, w.qt.data(), D, K, D, 0.f, w.sc.data(), mk);
    OSLO_CHECK(st == dnnl_success, OSLO_ERR_INTERNAL, "paged_attention: dnnl_sgemm failed (",
               static_cast<int>(st), ")");
    online_update(w.sc.data(), R, mk, nq, first_pos, t, acc, m, l, D, lim.data());
    // acc [R, D] += sc [R, mk] x V [mk, D].
    st = dnnl_sgemm('N', 'N', R, D, mk, 1.f, w.sc.data(), mk, Vb, D, 1.f, acc, D);
    OSLO_CHECK(st == dnnl_success, OSLO_ERR_INTERNAL, "paged_attention: dnnl_sgemm failed (",
               static_cast<int>(st), ")");
  }
}

// The chunks' block ids, read from the table and checked against the pools.
std::vector<std::vector<int64_t>> read_ids(const V& table, const int64_t* chunks, int64_t C,
                                           int64_t bs, int64_t NB) {
  std::vector<std::vector<int64_t>> ids(static_cast<size_t>(C));
  const int64_t* tp = static_cast<const int64_t*>(table.data);
  for (int64_t c = 0; c < C; ++c) {
    const int64_t nb = (chunks[3 * c + 1] + chunks[3 * c + 2] + bs - 1) / bs;
    auto& v = ids[static_cast<size_t>(c)];
    v.resize(static_cast<size_t>(nb));
    for (int64_t j = 0; j < nb; ++j) {
      const int64_t id = tp[c * table.strides[0] + j * table.strides[1]];
      OSLO_CHECK(id >= 0 && id < NB, OSLO_ERR_INVALID_ARGUMENT, "paged_attention: block id ", id,
                 " (chunk ", c, ", table entry ", j, ") is outside [0, ", NB, ")");
      v[static_cast<size_t>(j)] = id;
    }
  }
  return ids;
}

void paged(int threads, const V& out, const V& q, const V& kp, const V* ks, const V& vp,
           const V* vs, const V& table, const int64_t* chunks, int64_t C, float scale) {
  // The checks that keep every read in bounds (the core checks the rest).
  const bool int8 = ks != nullptr;
  OSLO_CHECK(out.ndim == 3 && q.ndim == 3 && kp.ndim == 4 && vp.ndim == 4 && table.ndim == 2 &&
                 is_float(out.dtype) && is_float(q.dtype) &&
                 kp.dtype == (int8 ? OSLO_DTYPE_I8 : q.dtype) && vp.dtype == kp.dtype &&
                 table.dtype == OSLO_DTYPE_I64,
             OSLO_ERR_SHAPE,
             "paged_attention: out, q [tokens, heads, D], pools [blocks, kv heads, block size, D] "
             "of q's float dtype (int8 with scales) and an i64 block table expected");
  const int64_t T = q.shape[0], Hq = q.shape[1], D = q.shape[2];
  const int64_t NB = kp.shape[0], Hkv = kp.shape[1], bs = kp.shape[2];
  bool fit = Hkv > 0 && bs > 0 && Hq % Hkv == 0 && kp.shape[3] == D && table.shape[0] == C &&
             (C == 0 || chunks != nullptr);
  for (int i = 0; i < 4; ++i) fit = fit && vp.shape[i] == kp.shape[i];
  for (int i = 0; i < 3; ++i) fit = fit && out.shape[i] == q.shape[i];
  for (const V* p : {&kp, &vp})
    fit = fit && p->strides[3] == 1 && p->strides[2] == D && p->strides[1] == bs * D;
  for (const V* sc : {ks, vs})
    fit = fit &&
          (!int8 || (sc && sc->ndim == 3 && sc->dtype == OSLO_DTYPE_F32 && sc->shape[0] == NB &&
                     sc->shape[1] == Hkv && sc->shape[2] == bs && sc->strides[2] == 1 &&
                     sc->strides[1] == bs && sc->strides[0] == Hkv * bs));
  OSLO_CHECK(fit, OSLO_ERR_SHAPE, "paged_attention: q ", shape_of(q), ", out ", shape_of(out),
             ", pools ", shape_of(kp), " and ", shape_of(vp), " (blocks contiguous), table ",
             shape_of(table), " for ", C, " chunks do not fit");
  for (int64_t c = 0; c < C; ++c) {
    const int64_t row = chunks[3 * c], start = chunks[3 * c + 1], n = chunks[3 * c + 2];
    OSLO_CHECK(row >= 0 && start >= 0 && n >= 0 && row <= T - n &&
                   (start + n + bs - 1) / bs <= table.shape[1],
               OSLO_ERR_INVALID_ARGUMENT, "paged_attention chunk ", c, " (row ", row, ", start ",
               start, ", n ", n, ") does not fit ", T, " rows and a table of ", table.shape[1],
               " blocks");
  }
  if (C == 0 || T * Hq * D == 0) return;
  Step s{out, q,        kp, vp, ks,   vs, chunks, read_ids(table, chunks, C, bs, NB),
         Hkv, Hq / Hkv, bs, D,  scale};
  const int64_t g = s.g;

  // The items: one per (chunk, kv head, tile); small tiles split over their
  // blocks when the items alone do not keep the threads busy.
  const int nt = std::max(1, threads);
  int64_t base = 0;
  for (int64_t c = 0; c < C; ++c) {
    const int64_t n = chunks[3 * c + 2];
    if (n > 0) base += Hkv * (n < kTileMin ? 1 : (n + kTile - 1) / kTile);
  }
  if (base == 0) return;  // every chunk empty
  const int64_t want = base < 2 * nt ? (2 * nt + base - 1) / base : 1;
  std::vector<Item> items;
  std::vector<Group> groups;
  int64_t floats = 0;
  double flops = 0;
  for (int64_t c = 0; c < C; ++c) {
    const int64_t start = chunks[3 * c + 1], n = chunks[3 * c + 2];
    const int64_t tile = n < kTileMin ? n : kTile;
    for (int64_t kh = 0; kh < Hkv && n > 0; ++kh)
      for (int64_t i0 = 0; i0 < n; i0 += tile) {
        const int64_t nq = std::min(tile, n - i0), nb = (start + i0 + nq + bs - 1) / bs;
        // Splits of at least 64 keys (whole blocks), small tiles only.
        const int64_t min_blocks = std::max<int64_t>(1, kKeys / bs);
        const int64_t splits =
            nq < kTileMin ? std::max<int64_t>(1, std::min(want, nb / min_blocks)) : 1;
        const int64_t per = (nb + splits - 1) / splits;
        groups.push_back({static_cast<int64_t>(items.size()), 0});
        for (int64_t b0 = 0; b0 < nb; b0 += per) {
          items.push_back({c, kh, i0, nq, b0, std::min(nb, b0 + per), floats});
          floats += g * nq * (D + 2);
          ++groups.back().count;
        }
        flops += static_cast<double>(g * nq) * static_cast<double>((start + i0 + nq) * D);
      }
  }
  std::vector<float> part(static_cast<size_t>(floats));
  const int64_t work = static_cast<int64_t>(items.size());
  const int used = work > 1 && flops > 32768.0 ? nt : 1;
  const int64_t step_keys = std::max<int64_t>(1, kKeys / bs) * bs;

#pragma omp parallel num_threads(used)
  {
    omp_set_num_threads(1);  // this task's ICV: the dnnl_sgemm calls below stay on this thread
    Work w;
    w.qrow.resize(static_cast<size_t>(D));
    w.kbuf.resize(static_cast<size_t>(std::max(step_keys, bs) * D));
    w.vbuf.resize(w.kbuf.size());
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < work; ++i) {
      const Item& it = items[static_cast<size_t>(i)];
      run_item(s, it, part.data() + it.part, w);
    }
  }

  // Merge each group's splits and write its rows.
  const int64_t ngroups = static_cast<int64_t>(groups.size());
  const int merge_nt = used > 1 && ngroups > 1 ? nt : 1;
#pragma omp parallel num_threads(merge_nt)
  {
    std::vector<float> row(static_cast<size_t>(D));
#pragma omp for schedule(static)
    for (int64_t gi = 0; gi < ngroups; ++gi) {
      const Group& G = groups[static_cast<size_t>(gi)];
      const Item& it0 = items[static_cast<size_t>(G.first)];
      const int64_t R = g * it0.nq, row0 = chunks[3 * it0.c];
      for (int64_t r = 0; r < R; ++r) {
        float M = kNegInf;
        for (int64_t k = 0; k < G.count; ++k) {
          const float* p = part.data() + items[static_cast<size_t>(G.first + k)].part;
          M = std::max(M, p[R * D + r]);
        }
        std::fill(row.begin(), row.end(), 0.f);
        float L = 0;
        if (M != kNegInf)
          for (int64_t k = 0; k < G.count; ++k) {
            const float* p = part.data() + items[static_cast<size_t>(G.first + k)].part;
            const float mk = p[R * D + r];
            if (mk == kNegInf) continue;
            const float f = G.count == 1 ? 1.f : std::exp(mk - M);
            L += p[R * D + R + r] * f;
            for (int64_t d = 0; d < D; ++d) row[static_cast<size_t>(d)] += f * p[r * D + d];
          }
        const float inv = L > 0 ? 1.0f / L : 0.f;
        for (int64_t d = 0; d < D; ++d) row[static_cast<size_t>(d)] *= inv;
        const int64_t hg = r / it0.nq, ii = r % it0.nq, h = it0.kh * g + hg;
        store_row(out, (row0 + it0.i0 + ii) * out.strides[0] + h * out.strides[1], D,
                  out.strides[2], row.data());
      }
    }
  }
}

}  // namespace

void paged_attention(int threads, const V& out, const V& q, const V& kp, const V& vp,
                     const V& table, const int64_t* chunks, int64_t C, float scale) {
  paged(threads, out, q, kp, nullptr, vp, nullptr, table, chunks, C, scale);
}

void paged_attention_kv8(int threads, const V& out, const V& q, const V& kp, const V& ks,
                         const V& vp, const V& vs, const V& table, const int64_t* chunks, int64_t C,
                         float scale) {
  paged(threads, out, q, kp, &ks, vp, &vs, table, chunks, C, scale);
}

}  // namespace cpu
}  // namespace oslo
