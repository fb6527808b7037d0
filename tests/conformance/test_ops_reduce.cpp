// conf_ops, reductions and row ops: sums and maxima over rows and columns,
// softmax and the norms, gather / scatter and the label checks.
#include "ops_common.hpp"

using namespace oslo;

namespace conf {

void test_reduce(const std::shared_ptr<Backend>& be) {
  for (oslo_dtype dt : kFloats)
    for (int64_t cols : {int64_t(1), int64_t(37), int64_t(1000)})
      for (int64_t valid : {int64_t(-1), cols / 2})
        for (oslo_bk_reduce op : {OSLO_BK_REDUCE_SUM, OSLO_BK_REDUCE_MAX, OSLO_BK_REDUCE_SUM_EXP,
                                  OSLO_BK_REDUCE_MAX_ABS})
          for (int acc = 0; acc < 2; ++acc) {
            g_case = fmt("reduce %d %s cols %lld valid %lld acc %d", static_cast<int>(op),
                         dtype_name(dt), static_cast<long long>(cols),
                         static_cast<long long>(valid), acc);
            const int64_t R = 6;
            Dev x(be, dt, {R, cols});
            auto hx = random_in(static_cast<size_t>(R * cols), dt, 2.0);
            x.upload(hx);
            Dev shift(be, OSLO_DTYPE_F32, {R});
            auto hs = random_in(static_cast<size_t>(R), OSLO_DTYPE_F32);
            shift.upload(hs);
            Dev out(be, OSLO_DTYPE_F32, {R});
            auto ho = random_in(static_cast<size_t>(R), OSLO_DTYPE_F32);
            out.upload(ho);
            be->reduce(op, out.v, x.v, &shift.v, valid, acc != 0);
            const int64_t n = valid < 0 ? cols : valid;
            std::vector<double> ref(static_cast<size_t>(R));
            for (int64_t r = 0; r < R; ++r) {
              double v = op == OSLO_BK_REDUCE_MAX ? -INFINITY : 0;
              for (int64_t c = 0; c < n; ++c) {
                double x0 = hx[r * cols + c];
                if (op == OSLO_BK_REDUCE_SUM) v += x0;
                if (op == OSLO_BK_REDUCE_SUM_EXP) v += std::exp(x0 - hs[r]);
                if (op == OSLO_BK_REDUCE_MAX) v = std::max(v, x0);
                if (op == OSLO_BK_REDUCE_MAX_ABS) v = std::max(v, std::fabs(x0));
              }
              bool is_max = op == OSLO_BK_REDUCE_MAX || op == OSLO_BK_REDUCE_MAX_ABS;
              if (acc) v = is_max ? std::max(v, ho[r]) : v + ho[r];
              ref[r] = v;
            }
            double e;
            {
              const bool ok_ = close(out.download(), ref, 1e-5, &e);
              check(ok_, fmt("err %g", e));
            }
          }
  g_case = "reduce long row";
  {
    const int64_t n = 300001;
    Dev x(be, OSLO_DTYPE_F32, {1, n});
    auto hx = random_in(static_cast<size_t>(n), OSLO_DTYPE_F32);
    x.upload(hx);
    Dev out(be, OSLO_DTYPE_F32, {1});
    be->reduce(OSLO_BK_REDUCE_SUM, out.v, x.v);
    double s = 0;
    for (double v : hx) s += v;
    check(std::fabs(out.download()[0] - s) <= 1e-6 * std::max(1.0, std::fabs(s)),
          fmt("sum %g vs %g", out.download()[0], s));
  }
  // SUM_EXP over rows whose terms span f32's range (exp(x - shift) from
  // e^-140, which underflows to 0, up to e^80), with -inf elements (masked
  // logits: 0), rows of 37 and 1000 elements (vector tails) and one longer
  // than a 64 K piece.
  for (int64_t cols : {int64_t(37), int64_t(1000), int64_t(200003)}) {
    g_case = fmt("reduce sum_exp wide range cols %lld", static_cast<long long>(cols));
    const int64_t R = cols > 100000 ? 1 : 3;
    std::vector<double> hx(static_cast<size_t>(R * cols)), hs(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
      double mx = -INFINITY;
      for (int64_t c = 0; c < cols; ++c) {
        const double v = c % 7 == 3 ? -INFINITY : quant(70.0 * rnd() + 20.0, OSLO_DTYPE_F32);
        hx[r * cols + c] = v;
        mx = std::max(mx, v);
      }
      hs[r] = quant(r == 2 ? mx - 80.0 : mx, OSLO_DTYPE_F32);
    }
    Dev x(be, OSLO_DTYPE_F32, {R, cols}), shift(be, OSLO_DTYPE_F32, {R}),
        out(be, OSLO_DTYPE_F32, {R});
    x.upload(hx);
    shift.upload(hs);
    be->reduce(OSLO_BK_REDUCE_SUM_EXP, out.v, x.v, &shift.v, -1, false);
    std::vector<double> ref(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
      double v = 0;
      for (int64_t c = 0; c < cols; ++c) v += std::exp(hx[r * cols + c] - hs[r]);
      ref[r] = v;
    }
    const auto got = out.download();
    for (int64_t r = 0; r < R; ++r)
      check(std::fabs(got[r] - ref[r]) <= 2e-6 * ref[r],
            fmt("row %lld: %.9g vs %.9g", static_cast<long long>(r), got[r], ref[r]));
  }
  g_case = "reduce max NaN";
  {
    Dev x(be, OSLO_DTYPE_F32, {1, 4});
    x.upload({1, NAN, 3, 2});
    Dev out(be, OSLO_DTYPE_F32, {1});
    be->reduce(OSLO_BK_REDUCE_MAX, out.v, x.v);
    check(std::isnan(out.download()[0]), "NaN wins max");
  }
  for (oslo_dtype dt : kFloats) {
    g_case = fmt("sum_rows %s", dtype_name(dt));
    const int64_t R = 77, C = 600;
    Dev x(be, dt, {R, C});
    auto hx = random_in(static_cast<size_t>(R * C), dt);
    x.upload(hx);
    Dev out(be, OSLO_DTYPE_F32, {C});
    auto ho = random_in(static_cast<size_t>(C), OSLO_DTYPE_F32);
    out.upload(ho);
    be->sum_rows(out.v, x.v, true);
    std::vector<double> ref = ho;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) ref[c] += hx[r * C + c];
    check(close(out.download(), ref, 1e-5), "column sums accumulated");
  }
}

void test_softmax_norm(const std::shared_ptr<Backend>& be) {
  for (oslo_dtype dt : kFloats)
    for (int causal = 0; causal < 2; ++causal)
      for (int with_mask = 0; with_mask < 2; ++with_mask) {
        g_case = fmt("softmax %s causal %d mask %d", dtype_name(dt), causal, with_mask);
        const int64_t B = 2, Q = 5, K = 9, off = 3;
        Dev x(be, dt, {B, Q, K}), y(be, dt, {B, Q, K});
        auto hx = random_in(static_cast<size_t>(B * Q * K), dt, 4.0);
        x.upload(hx);
        Dev mask(be, OSLO_DTYPE_F32, {K});
        std::vector<double> hm(static_cast<size_t>(K), 0.0);
        hm[2] = -INFINITY;
        hm[4] = -1.5;
        mask.upload(hm);
        const float scale = 0.7f;
        be->softmax(y.v, x.v, with_mask ? &mask.v : nullptr, scale, causal != 0, off);
        std::vector<double> ref(hx.size());
        for (int64_t b = 0; b < B; ++b)
          for (int64_t q = 0; q < Q; ++q) {
            double mx = -INFINITY;
            std::vector<double> z(static_cast<size_t>(K));
            for (int64_t k = 0; k < K; ++k) {
              bool masked = causal && k > q + off;
              z[k] = masked ? -INFINITY : scale * hx[(b * Q + q) * K + k] + (with_mask ? hm[k] : 0);
              mx = std::max(mx, z[k]);
            }
            double s = 0;
            for (auto& v : z) s += (v = std::exp(v - mx));
            for (int64_t k = 0; k < K; ++k) ref[(b * Q + q) * K + k] = z[k] / s;
          }
        double e;
        {
          const bool ok_ = close(y.download(), ref, tol(dt), &e);
          check(ok_, fmt("err %g", e));
        }
        // Backward.
        Dev gy(be, dt, {B, Q, K}), gx(be, OSLO_DTYPE_F32, {B, Q, K});
        auto hg = random_in(hx.size(), dt);
        gy.upload(hg);
        auto hy = y.download();
        be->softmax_backward(gx.v, y.v, gy.v, scale);
        std::vector<double> rg(hx.size());
        for (int64_t r = 0; r < B * Q; ++r) {
          double dot = 0;
          for (int64_t k = 0; k < K; ++k) dot += hy[r * K + k] * hg[r * K + k];
          for (int64_t k = 0; k < K; ++k)
            rg[r * K + k] = scale * hy[r * K + k] * (hg[r * K + k] - dot);
        }
        {
          const bool ok_ = close(gx.download(), rg, std::max(tol(dt), 1e-5), &e);
          check(ok_, fmt("backward err %g", e));
        }
      }
  // Long rows with a wide range of scores (probabilities from 1 down to
  // underflow), -inf mask entries and causal limits that are no multiple of
  // a vector's width.
  {
    g_case = "softmax f32 long rows";
    const int64_t Q = 5, K = 300, off = 150;
    Dev x(be, OSLO_DTYPE_F32, {Q, K}), y(be, OSLO_DTYPE_F32, {Q, K}), mask(be, OSLO_DTYPE_F32, {K});
    auto hx = random_in(static_cast<size_t>(Q * K), OSLO_DTYPE_F32, 60.0);
    x.upload(hx);
    std::vector<double> hm(static_cast<size_t>(K), 0.0);
    for (int64_t k = 0; k < K; k += 11) hm[k] = -INFINITY;
    mask.upload(hm);
    be->softmax(y.v, x.v, &mask.v, 1.0f, true, off);
    std::vector<double> ref(hx.size(), 0.0);
    for (int64_t q = 0; q < Q; ++q) {
      const int64_t lim = std::min<int64_t>(K, q + off + 1);
      double mx = -INFINITY, sum = 0;
      for (int64_t k = 0; k < lim; ++k) mx = std::max(mx, hx[q * K + k] + hm[k]);
      for (int64_t k = 0; k < lim; ++k) sum += std::exp(hx[q * K + k] + hm[k] - mx);
      for (int64_t k = 0; k < lim; ++k) ref[q * K + k] = std::exp(hx[q * K + k] + hm[k] - mx) / sum;
    }
    double e;
    const bool ok_ = close(y.download(), ref, 1e-5, &e);
    check(ok_, fmt("err %g", e));
  }
  for (oslo_dtype dt : kFloats)
    for (int rms = 0; rms < 2; ++rms) {
      g_case = fmt("norm %s rms %d", dtype_name(dt), rms);
      const int64_t R = 7, H = 96;
      Dev x(be, dt, {R, H}), y(be, dt, {R, H}), g(be, dt, {H}), b(be, dt, {H});
      auto hx = random_in(static_cast<size_t>(R * H), dt, 3.0);
      auto hgm = random_in(static_cast<size_t>(H), dt);
      auto hb = random_in(static_cast<size_t>(H), dt);
      x.upload(hx);
      g.upload(hgm);
      b.upload(hb);
      const float eps = 1e-5f;
      be->norm(y.v, x.v, &g.v, rms ? nullptr : &b.v, eps, rms != 0);
      std::vector<double> ref(hx.size());
      for (int64_t r = 0; r < R; ++r) {
        double mean = 0, var = 0;
        if (!rms) {
          for (int64_t i = 0; i < H; ++i) mean += hx[r * H + i];
          mean /= H;
        }
        for (int64_t i = 0; i < H; ++i) var += (hx[r * H + i] - mean) * (hx[r * H + i] - mean);
        var /= H;
        for (int64_t i = 0; i < H; ++i)
          ref[r * H + i] =
              (hx[r * H + i] - mean) / std::sqrt(var + eps) * hgm[i] + (rms ? 0 : hb[i]);
      }
      double e;
      {
        const bool ok_ = close(y.download(), ref, tol(dt) * 2, &e);
        check(ok_, fmt("err %g", e));
      }
    }
}

void test_gather_scatter(const std::shared_ptr<Backend>& be) {
  for (oslo_dtype dt : kFloats)
    for (oslo_dtype it : {OSLO_DTYPE_I32, OSLO_DTYPE_I64}) {
      g_case = fmt("gather_rows %s %s", dtype_name(dt), dtype_name(it));
      const int64_t rows = 5, H = 8, offset = 10, limit = 20;
      Dev table(be, dt, {rows, H});
      auto ht = random_in(static_cast<size_t>(rows * H), dt);
      table.upload(ht);
      std::vector<double> ids = {10, 14, 3, 12, 19, 10};
      Dev id(be, it, {static_cast<int64_t>(ids.size())});
      id.upload(ids);
      Dev out(be, OSLO_DTYPE_F32, {static_cast<int64_t>(ids.size()), H});
      be->gather_rows(out.v, table.v, id.v, offset, limit);
      std::vector<double> ref(ids.size() * H, 0.0);
      for (size_t t = 0; t < ids.size(); ++t) {
        int64_t l = static_cast<int64_t>(ids[t]) - offset;
        if (l >= 0 && l < rows)
          for (int64_t h = 0; h < H; ++h) ref[t * H + h] = ht[l * H + h];
      }
      check(close(out.download(), ref, 0), "gathered rows, zeros off range");
      // Scatter: table += src at each in-range id, in order (10 twice).
      Dev grad(be, OSLO_DTYPE_F32, {rows, H});
      be->fill(grad.v, 0);
      Dev src(be, dt, {static_cast<int64_t>(ids.size()), H});
      auto hs = random_in(ids.size() * H, dt);
      src.upload(hs);
      be->scatter_add_rows(grad.v, id.v, src.v, offset);
      std::vector<double> rg(static_cast<size_t>(rows * H), 0.0);
      for (size_t t = 0; t < ids.size(); ++t) {
        int64_t l = static_cast<int64_t>(ids[t]) - offset;
        if (l >= 0 && l < rows)
          for (int64_t h = 0; h < H; ++h) rg[l * H + h] += hs[t * H + h];
      }
      check(close(grad.download(), rg, 1e-6), "scattered rows");
      // An id outside [0, limit) is an error naming it.
      Dev bad(be, it, {2});
      bad.upload({1, 25});
      oslo_status st = OSLO_OK;
      std::string msg;
      try {
        be->gather_rows(make_view(out.p, OSLO_DTYPE_F32, {2, H}), table.v, bad.v, offset, limit);
      } catch (const Error& e) {
        st = e.status();
        msg = e.what();
      }
      check(st == OSLO_ERR_INVALID_ARGUMENT && msg.find("25") != std::string::npos,
            "out-of-range id refused, named: " + msg);
    }
  for (oslo_dtype dt : kFloats) {
    g_case = fmt("gather_cols/scatter_add_cols %s", dtype_name(dt));
    const int64_t T = 5, C = 6, offset = 6, limit = 12, ignore = -100;
    Dev x(be, dt, {T, C});
    auto hx = random_in(static_cast<size_t>(T * C), dt);
    x.upload(hx);
    std::vector<double> idx = {7, 2, -100, 11, 6};
    Dev id(be, OSLO_DTYPE_I64, {T});
    id.upload(idx);
    Dev out(be, OSLO_DTYPE_F32, {T});
    be->gather_cols(out.v, x.v, id.v, offset, limit, ignore);
    std::vector<double> ref(static_cast<size_t>(T), 0.0);
    for (int64_t t = 0; t < T; ++t) {
      int64_t c = static_cast<int64_t>(idx[t]) - offset;
      if (idx[t] != ignore && c >= 0 && c < C) ref[t] = hx[t * C + c];
    }
    check(close(out.download(), ref, 0), "picked columns");
    Dev g(be, OSLO_DTYPE_F32, {T, C});
    be->fill(g.v, 1.0);
    be->scatter_add_cols(g.v, id.v, offset, ignore, -0.25f);
    std::vector<double> rg(static_cast<size_t>(T * C), 1.0);
    for (int64_t t = 0; t < T; ++t) {
      int64_t c = static_cast<int64_t>(idx[t]) - offset;
      if (idx[t] != ignore && c >= 0 && c < C) rg[t * C + c] -= 0.25;
    }
    check(close(g.download(), rg, 0), "added at columns");
    Dev bad(be, OSLO_DTYPE_I64, {T});
    bad.upload({7, 2, 12, 11, 6});
    oslo_status st = OSLO_OK;
    try {
      be->gather_cols(out.v, x.v, bad.v, offset, limit, ignore);
    } catch (const Error& e) {
      st = e.status();
    }
    check(st == OSLO_ERR_INVALID_ARGUMENT, "label 12 outside [0, 12) refused");
  }
}

}  // namespace conf
