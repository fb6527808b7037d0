// The CPU backend's fused attention backward (OSLO_BK_OP_ATTENTION_BACKWARD,
// contract in core/backend/oslo_backend.h; the composition in
// core/backend/fused_attention.cpp is the reference), without the
// [queries x keys] probability, gradient and score tensors the composition
// writes for the whole batch:
//
//  - One work item per (batch, key/value head); threads split the items.
//    Each item walks its queries in tiles of 64 (times the g query heads
//    sharing the key/value head) and keeps dK and dV of its keys in f32 until
//    the last tile.
//  - Per tile, against only the keys its queries see (a causal tile stops at
//    its last query's limit, so the masked part is never computed): the
//    scores Q K^T, their softmax (exactly the composition's: scale, mask,
//    causal limit, f64 sums), dP = dO V^T, dS = scale P (dP - rowsum(P dP)),
//    then dQ = dS K, dK += dS^T Q and dV += P^T dO: five oneDNN sgemm
//    products of [rows x keys] tiles that stay in the cache.
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_ops.hpp"
#include "core/common/error.hpp"

namespace oslo {
namespace cpu {
namespace {

constexpr int64_t kTile = 64;  // queries per tile
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A [B, H, T, D] operand as f32 rows with a unit inner stride: the view
// itself when it already is, else a converted contiguous copy.
struct Rows {
  const float* data = nullptr;
  int64_t sb = 0, sh = 0, st = 0;  // strides in floats
  std::vector<float> copy;
};

void f32_rows(int threads, const V& v, Rows* out) {
  if (v.dtype == OSLO_DTYPE_F32 && v.strides[3] == 1) {
    out->data = static_cast<const float*>(v.data);
    out->sb = v.strides[0];
    out->sh = v.strides[1];
    out->st = v.strides[2];
    return;
  }
  const int64_t B = v.shape[0], H = v.shape[1], T = v.shape[2], D = v.shape[3];
  out->copy.resize(static_cast<size_t>(B * H * T * D));
  V dst{};
  dst.data = out->copy.data();
  dst.dtype = OSLO_DTYPE_F32;
  dst.ndim = 4;
  const int64_t shape[4] = {B, H, T, D}, strides[4] = {H * T * D, T * D, D, 1};
  for (int i = 0; i < 4; ++i) {
    dst.shape[i] = shape[i];
    dst.strides[i] = strides[i];
  }
  convert(threads, dst, v);
  out->data = out->copy.data();
  out->sb = H * T * D;
  out->sh = T * D;
  out->st = D;
}

void sgemm(char ta, char tb, int64_t M, int64_t N, int64_t K, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const dnnl_status_t st = dnnl_sgemm(ta, tb, M, N, K, 1.f, a, lda, b, ldb, beta, c, ldc);
  OSLO_CHECK(st == dnnl_success, OSLO_ERR_INTERNAL, "attention_backward: dnnl_sgemm failed (",
             static_cast<int>(st), ")");
}

// Row `i` of head h of a [B, H, S, D] view, as f32 into dst.
void load(const V& t, int64_t b, int64_t h, int64_t i, int64_t D, float* dst) {
  const float* r =
      load_row(t, b * t.strides[0] + h * t.strides[1] + i * t.strides[2], D, t.strides[3], dst);
  if (r != dst) std::copy(r, r + D, dst);
}
void store(const V& t, int64_t b, int64_t h, int64_t i, int64_t D, const float* src) {
  store_row(t, b * t.strides[0] + h * t.strides[1] + i * t.strides[2], D, t.strides[3], src);
}

}  // namespace

void attention_backward(int threads, const V& dq, const V& dk, const V& dv, const V& q, const V& k,
                        const V& v, const V& dout, const V* mask, float scale, bool causal,
                        int64_t offset) {
  for (const V* t : {&dq, &dk, &dv, &q, &k, &v, &dout})
    OSLO_CHECK(t->ndim == 4, OSLO_ERR_SHAPE,
               "attention_backward operands must be 4-D views ([batch, heads, seq, head_dim]), "
               "got ",
               shape_of(*t));
  const int64_t B = q.shape[0], Hq = q.shape[1], S = q.shape[2], D = q.shape[3];
  const int64_t Hkv = k.shape[1], T = k.shape[2];
  OSLO_CHECK(Hkv > 0 && Hq % Hkv == 0 && k.shape[0] == B && k.shape[3] == D, OSLO_ERR_SHAPE,
             "attention_backward keys ", shape_of(k), " do not fit queries ", shape_of(q));
  if (B * Hkv * D == 0) return;
  if (S == 0 || T == 0) {  // no query or no key: every gradient is 0
    if (S > 0) fill(threads, dq, 0.0);
    if (T > 0) {
      fill(threads, dk, 0.0);
      fill(threads, dv, 0.0);
    }
    return;
  }
  const int64_t g = Hq / Hkv, tiles = (S + kTile - 1) / kTile;
  Rows K, Vr;
  f32_rows(threads, k, &K);
  f32_rows(threads, v, &Vr);
  std::vector<float> mk;  // the mask as f32 [B, T]
  if (mask) {
    mk.resize(static_cast<size_t>(B * T));
    for (int64_t b = 0; b < B; ++b) {
      const float* r =
          load_row(*mask, b * mask->strides[0], T, mask->strides[1], mk.data() + b * T);
      if (r != mk.data() + b * T) std::copy(r, r + T, mk.begin() + b * T);
    }
  }
  const int64_t work = B * Hkv;
  const int nt = work > 1 ? static_cast<int>(std::min<int64_t>(std::max(1, threads), work)) : 1;
#pragma omp parallel num_threads(nt)
  {
    omp_set_num_threads(1);  // this task's ICV: the dnnl_sgemm calls below stay on this thread
    std::vector<float> qt, ot, pt, dpt, dqt, dka, dva;
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < work; ++w) {
      const int64_t b = w / Hkv, kh = w % Hkv;
      const float* kb = K.data + b * K.sb + kh * K.sh;
      const float* vb = Vr.data + b * Vr.sb + kh * Vr.sh;
      const float* mrow = mask ? mk.data() + b * T : nullptr;
      dka.assign(static_cast<size_t>(T * D), 0.f);
      dva.assign(static_cast<size_t>(T * D), 0.f);
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t i0 = t * kTile, nq = std::min(kTile, S - i0), R = g * nq;
        // Keys any query of the tile sees.
        int64_t tl = T;
        if (causal) tl = std::min<int64_t>(T, std::max<int64_t>(0, i0 + nq - 1 + offset + 1));
        qt.resize(static_cast<size_t>(R * D));
        ot.resize(static_cast<size_t>(R * D));
        dqt.assign(static_cast<size_t>(R * D), 0.f);
        // Rows (hg, i): the queries and the output's gradient.
        for (int64_t hg = 0; hg < g; ++hg)
          for (int64_t ii = 0; ii < nq; ++ii) {
            const int64_t r = hg * nq + ii;
            load(q, b, kh * g + hg, i0 + ii, D, qt.data() + r * D);
            load(dout, b, kh * g + hg, i0 + ii, D, ot.data() + r * D);
          }
        if (tl > 0) {
          pt.resize(static_cast<size_t>(R * tl));
          dpt.resize(static_cast<size_t>(R * tl));
          sgemm('N', 'T', R, tl, D, qt.data(), D, kb, K.st, 0.f, pt.data(), tl);    // Q K^T
          sgemm('N', 'T', R, tl, D, ot.data(), D, vb, Vr.st, 0.f, dpt.data(), tl);  // dO V^T
          for (int64_t r = 0; r < R; ++r) {
            const int64_t i = i0 + r % nq;
            const int64_t lim =
                causal ? std::min<int64_t>(tl, std::max<int64_t>(0, i + offset + 1)) : tl;
            float* p = pt.data() + r * tl;
            float* d = dpt.data() + r * tl;
            // The probabilities as softmax() computes them.
            float mx = kNegInf;
            for (int64_t j = 0; j < lim; ++j) {
              p[j] = scale * p[j] + (mrow ? mrow[j] : 0.f);
              mx = std::max(mx, p[j]);
            }
            double sum = 0;
            if (mx == kNegInf)
              std::fill(p, p + lim, 0.f);
            else
              sum = exp_sum_f64(p, p, lim, mx, true);
            const float inv = sum > 0 ? static_cast<float>(1.0 / sum) : 0.f;
            for (int64_t j = 0; j < lim; ++j) p[j] *= inv;
            std::fill(p + lim, p + tl, 0.f);
            // dS as softmax_backward() computes it, into dP's row.
            double dot = 0;
            for (int64_t j = 0; j < lim; ++j) dot += static_cast<double>(p[j]) * d[j];
            const float delta = static_cast<float>(dot);
            for (int64_t j = 0; j < lim; ++j) d[j] = scale * p[j] * (d[j] - delta);
            std::fill(d + lim, d + tl, 0.f);
          }
          sgemm('N', 'N', R, D, tl, dpt.data(), tl, kb, K.st, 0.f, dqt.data(), D);      // dS K
          sgemm('T', 'N', tl, D, R, dpt.data(), tl, qt.data(), D, 1.f, dka.data(), D);  // dS^T Q
          sgemm('T', 'N', tl, D, R, pt.data(), tl, ot.data(), D, 1.f, dva.data(), D);   // P^T dO
        }
        for (int64_t hg = 0; hg < g; ++hg)
          for (int64_t ii = 0; ii < nq; ++ii)
            store(dq, b, kh * g + hg, i0 + ii, D, dqt.data() + (hg * nq + ii) * D);
      }
      for (int64_t j = 0; j < T; ++j) {
        store(dk, b, kh, j, D, dka.data() + j * D);
        store(dv, b, kh, j, D, dva.data() + j * D);
      }
    }
  }
}

}  // namespace cpu
}  // namespace oslo
