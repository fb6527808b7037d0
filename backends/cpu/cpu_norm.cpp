// The CPU backend's per-row fused ops (oslo_backend.h): norm,
// residual_norm, norm_backward, rope, and AdamW's update. Row statistics in
// f64 over 16 lanes in a fixed order (cpu_ops.cpp's sums), so the same bits
// for every thread count.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_ops.hpp"
#include "backends/cpu/cpu_rows.hpp"
#include "core/common/dtype.hpp"
#include "core/common/error.hpp"

namespace oslo {
namespace cpu {

namespace {

// gamma, beta or a bias of a norm as f32 [cols]: p is the view's own data
// when it is f32 with unit stride (no copy per call), else a converted
// copy; null when absent.
struct NormParam {
  const float* p = nullptr;
  std::vector<float> copy;
  bool empty() const { return p == nullptr; }
  float operator[](size_t i) const { return p[i]; }
};

void load_norm_param(const V* v, const char* what, int64_t cols, NormParam* dst) {
  if (!v) return;
  check_float(*v, what);
  OSLO_CHECK(numel(*v) == cols, OSLO_ERR_SHAPE, what, " ", shape_of(*v), " needs ", cols,
             " elements");
  const V a = align(*v, 1);
  if (a.dtype == OSLO_DTYPE_F32 && (a.strides[0] == 1 || cols <= 1)) {
    dst->p = static_cast<const float*>(a.data);
    return;
  }
  dst->copy.resize(static_cast<size_t>(cols));
  const float* row = load_row(a, 0, cols, a.strides[0], dst->copy.data());
  if (row != dst->copy.data()) std::copy(row, row + cols, dst->copy.begin());
  dst->p = dst->copy.data();
}

// The statistics of one row as norm() and norm_backward() use them: the
// mean (0 for RMS) and the mean squared deviation from it, in f64 over 16
// lanes combined in a fixed order (sum_f64's), so independent chains and
// the same bits for every thread count.
void row_stats(const float* xr, int64_t cols, bool rms, double* mean, double* var) {
  const double n = static_cast<double>(std::max<int64_t>(cols, 1));
  const double m = rms ? 0.0 : sum_f64(xr, cols) / n;
  *mean = m;
  *var = sq_dev_sum_f64(xr, cols, m) / n;
}

// One row of norm(): o = (x - mean) / sqrt(var + eps) (* g) (+ b), the
// statistics from row_stats.
void norm_row(const float* xr, int64_t cols, const NormParam& g, const NormParam& b, float eps,
              bool rms, float* o) {
  double mean, var;
  row_stats(xr, cols, rms, &mean, &var);
  const float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
  for (int64_t i = 0; i < cols; ++i) {
    float v = (xr[i] - static_cast<float>(mean)) * inv;
    if (!g.empty()) v *= g[static_cast<size_t>(i)];
    if (!b.empty()) v += b[static_cast<size_t>(i)];
    o[i] = v;
  }
}

}  // namespace

void norm(int threads, const V& out, const V& x, const V* gamma, const V* beta, float eps,
          bool rms) {
  check_float(out, "norm output");
  check_float(x, "norm input");
  OSLO_CHECK(numel(out) == numel(x) && cols_of(out) == cols_of(x), OSLO_ERR_SHAPE, "norm output ",
             shape_of(out), " differs from input ", shape_of(x));
  const int64_t rows = rows_of(x), cols = cols_of(x);
  NormParam g, b;
  load_norm_param(gamma, "norm gamma", cols, &g);
  if (!rms) load_norm_param(beta, "norm beta", cols, &b);
  for_rows(threads, rows, cols, [&](int64_t r, Scratch& s) {
    const float* xr = load_row(x, row_offset(x, x, r), cols, inner_stride(x), s.a.data());
    norm_row(xr, cols, g, b, eps, rms, s.c.data());
    store_row(out, row_offset(out, out, r), cols, inner_stride(out), s.c.data());
  });
}

namespace {

struct AdamW {
  float decay, keep, beta1, beta2, c1, c2, step_size, inv, eps;
};

void adamw_range(const AdamW& k, float* pp, const float* gp, float* mp, float* vp, int64_t lo,
                 int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) {
    float pi = k.decay != 0.f ? pp[i] * k.keep : pp[i];
    const float gi = gp[i];
    const float mi = k.beta1 * mp[i] + k.c1 * gi;
    const float vi = k.beta2 * vp[i] + k.c2 * (gi * gi);
    pi -= k.step_size * (mi / (std::sqrt(vi) * k.inv + k.eps));
    pp[i] = pi;
    mp[i] = mi;
    vp[i] = vi;
  }
}

// The same update eight lanes at a time (exact sqrt and division; products
// may fuse with the adds, within an ulp of the scalar form's steps).
__attribute__((target("avx2,fma"))) void adamw_avx2(const AdamW& k, float* pp, const float* gp,
                                                    float* mp, float* vp, int64_t lo, int64_t hi) {
  const __m256 keep = _mm256_set1_ps(k.keep), b1 = _mm256_set1_ps(k.beta1),
               b2 = _mm256_set1_ps(k.beta2), c1 = _mm256_set1_ps(k.c1), c2 = _mm256_set1_ps(k.c2),
               step = _mm256_set1_ps(k.step_size), inv = _mm256_set1_ps(k.inv),
               eps = _mm256_set1_ps(k.eps);
  const bool decay = k.decay != 0.f;
  int64_t i = lo;
  for (; i + 8 <= hi; i += 8) {
    __m256 p = _mm256_loadu_ps(pp + i);
    if (decay) p = _mm256_mul_ps(p, keep);
    const __m256 g = _mm256_loadu_ps(gp + i);
    const __m256 m =
        _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(mp + i)), _mm256_mul_ps(c1, g));
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(vp + i)),
                                   _mm256_mul_ps(c2, _mm256_mul_ps(g, g)));
    const __m256 den = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(v), inv), eps);
    p = _mm256_sub_ps(p, _mm256_mul_ps(step, _mm256_div_ps(m, den)));
    _mm256_storeu_ps(pp + i, p);
    _mm256_storeu_ps(mp + i, m);
    _mm256_storeu_ps(vp + i, v);
  }
  adamw_range(k, pp, gp, mp, vp, i, hi);
}

}  // namespace

void adamw(int threads, const V& p, const V& g, const V& m, const V& v, float decay, float beta1,
           float beta2, float step_size, float bc2_sqrt, float eps) {
  const int64_t n = numel(p);
  for (const V* t : {&p, &g, &m, &v}) {
    OSLO_CHECK(t->dtype == OSLO_DTYPE_F32 && flat(*t) && numel(*t) == n, OSLO_ERR_SHAPE,
               "adamw: operands must be contiguous f32 of ", n, " elements, not ", shape_of(*t),
               " ", dtype_name(t->dtype));
  }
  float* pp = static_cast<float*>(p.data);
  const float* gp = static_cast<const float*>(g.data);
  float* mp = static_cast<float*>(m.data);
  float* vp = static_cast<float*>(v.data);
  const AdamW k{decay,       1.f - decay, beta1,          beta2, 1.f - beta1,
                1.f - beta2, step_size,   1.f / bc2_sqrt, eps};
  const bool vec = has_avx2_fma();
  // Pieces of 64 K elements, as many per thread.
  const int64_t piece = 1 << 16, pieces = (n + piece - 1) / piece;
  const int nt = n > 32768 ? std::max(1, threads) : 1;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t q = 0; q < pieces; ++q) {
    const int64_t lo = q * piece, hi = std::min(n, lo + piece);
    if (vec)
      adamw_avx2(k, pp, gp, mp, vp, lo, hi);
    else
      adamw_range(k, pp, gp, mp, vp, lo, hi);
  }
}

void norm_backward(int threads, const V& gx, const V* ggamma, const V* gbeta, const V& x,
                   const V* gamma, const V& dy, float eps, bool rms) {
  check_float(gx, "norm_backward grad_x");
  check_float(x, "norm_backward x");
  check_float(dy, "norm_backward dy");
  OSLO_CHECK(x.ndim == 2 && dy.ndim == 2 && gx.ndim == 2 && dy.shape[0] == x.shape[0] &&
                 dy.shape[1] == x.shape[1] && gx.shape[0] == x.shape[0] &&
                 gx.shape[1] == x.shape[1],
             OSLO_ERR_SHAPE, "norm_backward: x ", shape_of(x), ", dy ", shape_of(dy),
             " and grad_x ", shape_of(gx), " must be the same [rows, H]");
  const int64_t rows = x.shape[0], cols = x.shape[1];
  NormParam g;
  load_norm_param(gamma, "norm_backward gamma", cols, &g);
  const V* gb = rms ? nullptr : gbeta;
  for (const V* p : {ggamma, gb})
    if (p)
      OSLO_CHECK(p->dtype == OSLO_DTYPE_F32 && numel(*p) == cols, OSLO_ERR_SHAPE,
                 "norm_backward: parameter gradients must be f32 [", cols, "], not ", shape_of(*p));
  if (rows * cols == 0) return;
  // 1. Row statistics exactly as norm() computes them (f64 sums, f32 rstd).
  std::vector<float> mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
  for_rows(threads, rows, cols, [&](int64_t r, Scratch& s) {
    const float* xr = load_row(x, r * x.strides[0], cols, x.strides[1], s.a.data());
    double m, var;
    row_stats(xr, cols, rms, &m, &var);
    mean[static_cast<size_t>(r)] = static_cast<float>(m);
    rstd[static_cast<size_t>(r)] = static_cast<float>(1.0 / std::sqrt(var + eps));
  });
  // 2. Parameter gradients (before grad_x is written: it may be dy):
  // columns in blocks across threads, rows in order, so the sums are the
  // same whatever the thread count.
  if (ggamma || gb) {
    const int64_t block = 256, blocks = (cols + block - 1) / block;
    const int nt = blocks > 1 && rows * cols > 16384 ? std::max(1, threads) : 1;
    const V gg1 = ggamma ? align(*ggamma, 1) : V{}, gb1 = gb ? align(*gb, 1) : V{};
#pragma omp parallel num_threads(nt)
    {
      std::vector<float> xb(static_cast<size_t>(block)), db(static_cast<size_t>(block)),
          cur(static_cast<size_t>(block)), w(static_cast<size_t>(block));
      std::vector<double> ag(static_cast<size_t>(block)), ab(static_cast<size_t>(block));
#pragma omp for schedule(static)
      for (int64_t bi = 0; bi < blocks; ++bi) {
        const int64_t j0 = bi * block, n = std::min(block, cols - j0);
        std::fill(ag.begin(), ag.end(), 0.0);
        std::fill(ab.begin(), ab.end(), 0.0);
        for (int64_t r = 0; r < rows; ++r) {
          const float* xr =
              load_row(x, r * x.strides[0] + j0 * x.strides[1], n, x.strides[1], xb.data());
          const float* dr =
              load_row(dy, r * dy.strides[0] + j0 * dy.strides[1], n, dy.strides[1], db.data());
          const float mf = mean[static_cast<size_t>(r)], inv = rstd[static_cast<size_t>(r)];
          for (int64_t j = 0; j < n; ++j) {
            ag[static_cast<size_t>(j)] += static_cast<double>(dr[j]) * ((xr[j] - mf) * inv);
            ab[static_cast<size_t>(j)] += dr[j];
          }
        }
        for (int k = 0; k < 2; ++k) {
          const V& p = k == 0 ? gg1 : gb1;
          const std::vector<double>& acc = k == 0 ? ag : ab;
          if (!p.data) continue;
          const float* c = load_row(p, j0 * p.strides[0], n, p.strides[0], cur.data());
          for (int64_t j = 0; j < n; ++j)
            w[static_cast<size_t>(j)] = c[j] + static_cast<float>(acc[static_cast<size_t>(j)]);
          store_row(p, j0 * p.strides[0], n, p.strides[0], w.data());
        }
      }
    }
  }
  // 3. grad_x, row by row (each row of dy read before its grad_x row is stored).
  for_rows(threads, rows, cols, [&](int64_t r, Scratch& s) {
    const float* xr = load_row(x, r * x.strides[0], cols, x.strides[1], s.a.data());
    const float* dr = load_row(dy, r * dy.strides[0], cols, dy.strides[1], s.b.data());
    const float mf = mean[static_cast<size_t>(r)], inv = rstd[static_cast<size_t>(r)];
    double s1 = 0, s2 = 0;  // sum g, sum g * xhat
    for (int64_t i = 0; i < cols; ++i) {
      const float gi = g.empty() ? dr[i] : dr[i] * g[static_cast<size_t>(i)];
      s1 += gi;
      s2 += static_cast<double>(gi) * ((xr[i] - mf) * inv);
    }
    const float a1 = rms ? 0.f : static_cast<float>(s1 / static_cast<double>(cols));
    const float a2 = static_cast<float>(s2 / static_cast<double>(cols));
    float* o = s.c.data();
    for (int64_t i = 0; i < cols; ++i) {
      const float gi = g.empty() ? dr[i] : dr[i] * g[static_cast<size_t>(i)];
      o[i] = inv * (gi - a1 - (xr[i] - mf) * inv * a2);
    }
    store_row(gx, r * gx.strides[0], cols, gx.strides[1], o);
  });
}

void residual_norm(int threads, const V& out, const V& x, const V* y, const V* bias, const V* gamma,
                   const V* beta, float eps, bool rms) {
  check_float(out, "residual_norm output");
  check_float(x, "residual_norm x");
  const int64_t rows = rows_of(x), cols = cols_of(x);
  OSLO_CHECK(numel(out) == numel(x) && cols_of(out) == cols, OSLO_ERR_SHAPE,
             "residual_norm output ", shape_of(out), " differs from x ", shape_of(x));
  if (y) {
    check_float(*y, "residual_norm y");
    OSLO_CHECK(numel(*y) == numel(x) && cols_of(*y) == cols, OSLO_ERR_SHAPE, "residual_norm y ",
               shape_of(*y), " differs from x ", shape_of(x));
  }
  NormParam bv, g, b;
  load_norm_param(bias, "residual_norm bias", cols, &bv);
  load_norm_param(gamma, "residual_norm gamma", cols, &g);
  if (!rms) load_norm_param(beta, "residual_norm beta", cols, &b);
  const bool round_x = x.dtype != OSLO_DTYPE_F32;
  for_rows(threads, rows, cols, [&](int64_t r, Scratch& s) {
    const int64_t xo = row_offset(x, x, r);
    const float* xr = load_row(x, xo, cols, inner_stride(x), s.a.data());
    const float* yr =
        y ? load_row(*y, row_offset(x, *y, r), cols, inner_stride(*y), s.b.data()) : nullptr;
    float* xn = s.c.data();
    // As the composition: t = y + bias in f32, then x + t rounded to x's dtype.
    for (int64_t i = 0; i < cols; ++i) {
      float t = yr ? yr[i] : 0.f;
      if (!bv.empty()) t = yr ? t + bv[static_cast<size_t>(i)] : bv[static_cast<size_t>(i)];
      xn[i] = (yr || !bv.empty()) ? xr[i] + t : xr[i];
    }
    store_row(x, xo, cols, inner_stride(x), xn);
    const float* xs = round_x ? load_row(x, xo, cols, inner_stride(x), s.a.data()) : xn;
    float* o = s.b.data();
    norm_row(xs, cols, g, b, eps, rms, o);
    store_row(out, row_offset(out, out, r), cols, inner_stride(out), o);
  });
}

void rope(int threads, const V& x, const V& cos, const V& sin) {
  check_float(x, "rope x");
  OSLO_CHECK(x.ndim == 3, OSLO_ERR_SHAPE, "rope x must be [rows, heads, head_dim], not ",
             shape_of(x));
  for (const V* t : {&cos, &sin}) {
    OSLO_CHECK(t->dtype == OSLO_DTYPE_F32, OSLO_ERR_DTYPE, "rope cos/sin must be f32, not ",
               dtype_name(t->dtype));
    OSLO_CHECK(t->ndim == 2 && t->shape[0] == x.shape[0] && t->shape[1] == cos.shape[1],
               OSLO_ERR_SHAPE, "rope cos/sin ", shape_of(*t), " must be [", x.shape[0], ", R]");
  }
  const int64_t rows = x.shape[0], heads = x.shape[1], D = x.shape[2], R = cos.shape[1];
  OSLO_CHECK(2 * R <= D, OSLO_ERR_SHAPE, "rope rotates 2 x ", R, " dimensions of heads of ", D);
  const int64_t xs = x.strides[2];
  const bool f32 = x.dtype == OSLO_DTYPE_F32;
  // Rounded as the composition rounds each op's output to x's dtype.
  auto rnd = [&](float v) {
    if (f32) return v;
    return x.dtype == OSLO_DTYPE_BF16 ? bf16_to_f32(f32_to_bf16(v)) : f16_to_f32(f32_to_f16(v));
  };
  for_rows(threads, rows * heads, 2 * R, [&](int64_t rh, Scratch& s) {
    const int64_t r = rh / heads, h = rh % heads;
    const int64_t off = r * x.strides[0] + h * x.strides[1];
    float* v = s.a.data();
    const float* in = load_row(x, off, 2 * R, xs, v);
    if (in != v) std::copy(in, in + 2 * R, v);
    const char* cb = static_cast<const char*>(cos.data);
    const char* sb = static_cast<const char*>(sin.data);
    float* o = s.c.data();
    for (int64_t i = 0; i < R; ++i) {
      float c, sn;
      std::memcpy(&c, cb + 4 * (r * cos.strides[0] + i * cos.strides[1]), 4);
      std::memcpy(&sn, sb + 4 * (r * sin.strides[0] + i * sin.strides[1]), 4);
      const float x1 = v[i], x2 = v[R + i];
      const float a = x1 * sn, b = x2 * sn;  // the composition's f32 scratches
      o[i] = rnd(rnd(x1 * c) - b);
      o[R + i] = rnd(rnd(x2 * c) + a);
    }
    store_row(x, off, 2 * R, xs, o);
  });
}

}  // namespace cpu
}  // namespace oslo
