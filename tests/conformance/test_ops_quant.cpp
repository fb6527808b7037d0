// conf_ops, block-quantized weights (oslo_backend.h's dequantize and
// matmul_quant): the backend's entries where it offers them for the dtype,
// and the core's composition (core/backend/fused_quant.cpp:
// Backend::compose_matmul_quant), each checked against references written
// here, and against each other.
//
// Weights: q8_0 and q4_0 rows made by core/quant's quantize_row from random
// floats; q4_k and q6_k random bytes with sane f16 scales. Rows lie S
// elements apart (S > K in most cases) and the gap between rows holds blocks
// of junk (NaN and huge scales): a read past a row, or with a wrong stride,
// shows. References: core/quant's scalar dequantize_row (llama.cpp's values)
// for dequantize, which must match exactly (f32 out) or after one rounding
// (f16/bf16 out); an f64 product of a and that dequantized weight for
// matmul_quant, which must lie within oslo_backend.h's bound computed per
// output: sum over the blocks b of 32 of the row of (max_b |a| / 254) *
// sum_b |w|, plus 1e-5 * sum |a| |w| for f32 rounding, carried through the
// activation (Lipschitz constant at most 1.2 for those matmul_act supports)
// and the gate; and the mean of error / bound over a case's outputs at most
// 0.25 (independent rounding errors cancel; a subtly wrong kernel does not
// stay that far under the worst case everywhere). Shapes: K = 32/256/4096
// (the K-quants from 256), N = 1/7/96, M = 1/3/64/300/512 (both sides of the
// CPU's switch to a GEMM: M = 192 for the K-quants, 384 for q8_0/q4_0), bias,
// act and gate (separate or c itself) on and off. Where the backend packs
// the dtype (pack_weight; the CPU: q8_0, q4_0, q4_k in groups of 8 rows),
// matmul_packed through the copy is a fourth path under the same bound, on
// N = 8, 20 (groups and a rest) and 96 among the shapes. Where the copy
// holds the whole weight (PackedWeight::whole(), oslo_backend.h's
// unpack_weight), the product with the plain weight released (b's data
// NULL) equals the product through the copy bit for bit, on every path
// (decode rows and the GEMM's), and the weight written back from the copy
// equals its bytes, rows apart as they were, the gaps between them
// untouched. Errors: a weight
// that is not block-quantized, K not whole blocks, wrong a/c dtype or shape,
// a packed copy of another weight, named.
#include <algorithm>

#include "core/quant/quant.hpp"
#include "ops_common.hpp"

using namespace oslo;

namespace conf {
namespace {

const oslo_dtype kBlocks[] = {OSLO_DTYPE_Q8_0, OSLO_DTYPE_Q4_0, OSLO_DTYPE_Q4_K, OSLO_DTYPE_Q6_K};

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  p[0] = static_cast<uint8_t>(h & 0xff);
  p[1] = static_cast<uint8_t>(h >> 8);
}

// A weight [N, K] with row stride S, its bytes on the device and its values
// (core/quant's reference) on the host.
struct QWeight {
  std::shared_ptr<Backend> be;
  oslo_dtype dt;
  int64_t N, K, S, be_, bb_;
  std::vector<uint8_t> bytes;
  std::vector<float> ref;  // [N, K]
  void* p = nullptr;
  View v;

  QWeight(std::shared_ptr<Backend> b, oslo_dtype d, int64_t n, int64_t k, int64_t s)
      : be(std::move(b)), dt(d), N(n), K(k), S(s) {
    dtype_block(dt, &be_, &bb_);
    const quant::Format f = quant::format_of_dtype(dt);
    const size_t rb = static_cast<size_t>(S / be_ * bb_);
    bytes.assign(rb * static_cast<size_t>(std::max<int64_t>(N, 1)), 0);
    std::vector<float> x(static_cast<size_t>(K));
    for (int64_t r = 0; r < N; ++r) {
      uint8_t* row = bytes.data() + rb * r;
      if (quant::can_quantize(f)) {
        for (auto& e : x) e = static_cast<float>(rnd() * (1.0 + 0.5 * rnd()));
        quant::quantize_row(f, x.data(), row, static_cast<uint64_t>(K));
      } else {
        for (int64_t i = 0; i < K / be_ * bb_; ++i)
          row[i] = static_cast<uint8_t>(rnd() * 128 + 128);
        for (int64_t blk = 0; blk < K / be_; ++blk) {
          uint8_t* q = row + blk * bb_;
          if (dt == OSLO_DTYPE_Q4_K) {
            put_f16(q, static_cast<float>(0.002 + 0.001 * rnd()));
            put_f16(q + 2, static_cast<float>(0.004 + 0.002 * rnd()));
          } else {
            put_f16(q + 208, static_cast<float>(0.0008 + 0.0004 * rnd()));
          }
        }
      }
      // Junk between rows: NaN and huge scales.
      for (size_t i = static_cast<size_t>(K / be_ * bb_); i < rb; ++i)
        row[i] = static_cast<uint8_t>(i % 3 == 0 ? 0x7e : 0xff);
    }
    ref.resize(static_cast<size_t>(N * K));
    for (int64_t r = 0; r < N; ++r)
      quant::dequantize_row(f, bytes.data() + rb * r, ref.data() + r * K, static_cast<uint64_t>(K));
    p = be->allocate(bytes.size());
    be->copy(p, bytes.data(), bytes.size(), CopyKind::HostToDevice);
    v = strided_view(p, dt, {N, K}, {S, 1});
  }
  ~QWeight() { be->deallocate(p, bytes.size()); }
  QWeight(const QWeight&) = delete;
  QWeight& operator=(const QWeight&) = delete;
};

double act_ref(oslo_bk_unary act, double x) {
  switch (act) {
    case OSLO_BK_GELU: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case OSLO_BK_GELU_TANH:
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case OSLO_BK_SILU: return x / (1.0 + std::exp(-x));
    case OSLO_BK_RELU: return x > 0 ? x : 0;
    default: return std::tanh(x);
  }
}

void dequantize_cases(const std::shared_ptr<Backend>& be) {
  for (oslo_dtype dt : kBlocks) {
    const int64_t be_ = dt == OSLO_DTYPE_Q8_0 || dt == OSLO_DTYPE_Q4_0 ? 32 : 256;
    for (int64_t K : {int64_t(32), int64_t(256), int64_t(4096)}) {
      if (K % be_) continue;
      for (int64_t N : {int64_t(1), int64_t(7), int64_t(96)}) {
        const int64_t S = N == 7 ? K + 2 * be_ : K;
        QWeight w(be, dt, N, K, S);
        for (oslo_dtype ot : kFloats)
          for (int fused = 1; fused >= 0; --fused) {
            FusedToggle t(*be, fused == 1);
            g_case = fmt("dequantize %s N%lld K%lld S%lld -> %s fused %d", dtype_name(dt),
                         (long long)N, (long long)K, (long long)S, dtype_name(ot), fused);
            // out with a padded row stride (K + 3), the padding kept.
            const int64_t ld = K + 3;
            Dev out(be, ot, {N * ld});
            std::vector<double> init(static_cast<size_t>(N * ld), 7.0);
            out.upload(init);
            be->dequantize(strided_view(out.p, ot, {N, K}, {ld, 1}), w.v);
            const std::vector<double> got = out.download();
            int64_t bad = 0, first = -1;
            for (int64_t n = 0; n < N; ++n)
              for (int64_t k = 0; k < ld; ++k) {
                const double g = got[static_cast<size_t>(n * ld + k)];
                const double want = k < K ? quant(w.ref[static_cast<size_t>(n * K + k)], ot) : 7.0;
                const bool same = g == want || (std::isnan(g) && std::isnan(want));
                if (!same && bad++ == 0) first = n * ld + k;
              }
            check(bad == 0, fmt("%lld values differ from core/quant's (first at %lld)",
                                (long long)bad, (long long)first));
          }
      }
    }
  }
}

// One matmul_quant case on the current path (fused or composed) against f64.
// Returns c for the cross-check.
std::vector<double> product_case(const std::shared_ptr<Backend>& be, const QWeight& w, int64_t M,
                                 int64_t lda, const std::vector<double>& ah, const Dev& a,
                                 const std::vector<double>* bias, const Dev* bdev, int act_on,
                                 oslo_bk_unary act, int gate_mode, bool compose_direct,
                                 const PackedWeight* packed = nullptr, bool released = false) {
  const int64_t N = w.N, K = w.K;
  // c's old values and the gate: the same for every path of a case.
  const uint64_t seed = g_seed;
  g_seed = 0x5eed0000u + static_cast<uint64_t>(M * N);
  Dev c(be, OSLO_DTYPE_F32, {M, N});
  std::vector<double> ch = random_in(static_cast<size_t>(M * N), OSLO_DTYPE_F32);
  c.upload(ch);
  Dev g(be, OSLO_DTYPE_F32, {M, N});
  std::vector<double> gh = random_in(static_cast<size_t>(M * N), OSLO_DTYPE_F32);
  g.upload(gh);
  g_seed = seed;
  const View* gate = gate_mode == 1 ? &g.v : gate_mode == 2 ? &c.v : nullptr;
  const std::vector<double>& gv = gate_mode == 1 ? gh : ch;
  const View av = strided_view(a.p, OSLO_DTYPE_F32, {M, K}, {lda, 1});
  const oslo_bk_unary* ap = act_on ? &act : nullptr;
  View wv = w.v;
  if (released) wv.data = nullptr;  // the copy alone holds the weight
  if (packed)
    be->matmul_packed(c.v, av, wv, *packed, bdev ? &bdev->v : nullptr, ap, gate);
  else if (compose_direct)
    be->compose_matmul_quant(c.v, av, w.v, bdev ? &bdev->v : nullptr, ap, gate);
  else
    be->matmul_quant(c.v, av, w.v, bdev ? &bdev->v : nullptr, ap, gate);
  const std::vector<double> got = c.download();
  int64_t bad = 0;
  double worst = 0, ratio_sum = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double y = 0, abs_sum = 0, bound = 0;
      for (int64_t b0 = 0; b0 < K; b0 += 32) {
        double amax = 0, wsum = 0;
        for (int64_t k = b0; k < b0 + 32; ++k) {
          const double x = ah[static_cast<size_t>(m * lda + k)];
          const double wk = w.ref[static_cast<size_t>(n * K + k)];
          y += x * wk;
          abs_sum += std::fabs(x * wk);
          amax = std::max(amax, std::fabs(x));
          wsum += std::fabs(wk);
        }
        bound += amax / 254.0 * wsum;
      }
      bound += 1e-5 * abs_sum + 1e-30;
      if (bias) {
        y += (*bias)[static_cast<size_t>(n)];
        bound += 1e-6 * std::fabs((*bias)[static_cast<size_t>(n)]);
      }
      double want = y;
      if (act_on) {
        want = act_ref(act, y);
        bound = 1.2 * bound + 1e-6 * (std::fabs(want) + 1e-3);
        if (gate) {
          const double gg = gv[static_cast<size_t>(m * N + n)];
          want *= gg;
          bound = bound * std::fabs(gg) + 1e-7 * std::fabs(want);
        }
      }
      const double e = std::fabs(got[static_cast<size_t>(m * N + n)] - want);
      worst = std::max(worst, e / bound);
      ratio_sum += e / bound;
      if (!(e <= bound)) ++bad;
    }
  check(bad == 0,
        fmt("%lld outputs outside the bound (worst error / bound %.3g)", (long long)bad, worst));
  // The bound is a worst case (every rounding error of a with the sign of
  // w); independent rounding errors mostly cancel. A kernel off by a
  // fraction of the bound everywhere (a wrong sub-block scale, say) shows
  // in the mean over many outputs.
  if (M * N >= 32)
    check(ratio_sum / static_cast<double>(M * N) <= 0.25,
          fmt("mean error / bound %.3g over %lld outputs (above 0.25)",
              ratio_sum / static_cast<double>(M * N), (long long)(M * N)));
  return got;
}

void matmul_quant_cases(const std::shared_ptr<Backend>& be) {
  struct Shape {
    int64_t M, N, K;
  };
  const Shape shapes[] = {{1, 1, 32},    {3, 7, 32},    {1, 96, 256}, {3, 7, 256},   {64, 7, 256},
                          {300, 7, 256}, {1, 96, 4096}, {3, 7, 4096}, {64, 96, 256}, {300, 96, 512},
                          {1, 7, 4096},  {512, 7, 256}, {1, 20, 512}, {5, 20, 256},  {9, 8, 32}};
  const oslo_bk_unary acts[] = {OSLO_BK_GELU, OSLO_BK_SILU, OSLO_BK_RELU, OSLO_BK_GELU_TANH,
                                OSLO_BK_TANH};
  int variant = 0;
  for (oslo_dtype dt : kBlocks) {
    const int64_t be_ = dt == OSLO_DTYPE_Q8_0 || dt == OSLO_DTYPE_Q4_0 ? 32 : 256;
    for (const Shape& s : shapes) {
      if (s.K % be_) continue;
      const int64_t M = s.M, N = s.N, K = s.K;
      const int64_t S = variant % 2 ? K + be_ : K, lda = variant % 3 ? K : K + 5;
      QWeight w(be, dt, N, K, S);
      Dev a(be, OSLO_DTYPE_F32, {M * lda});
      std::vector<double> ah = random_in(static_cast<size_t>(M * lda), OSLO_DTYPE_F32, 2.0);
      a.upload(ah);
      // The backend's packed copy (pack_weight) where it packs this dtype:
      // made for N >= 8 (whole groups of eight rows, the rest read from w).
      std::unique_ptr<PackedWeight> packed;
      if (be->op_supported(OSLO_BK_OP_PACKED_MATMUL, dt)) {
        FusedToggle t(*be, true);
        packed = Backend::pack_weight(be, w.v);
        g_case = fmt("pack_weight %s N%lld K%lld S%lld", dtype_name(dt), (long long)N, (long long)K,
                     (long long)S);
        check(static_cast<bool>(packed) == (N >= 8),
              fmt("pack_weight %s for %lld rows", packed ? "packed" : "declined", (long long)N));
      }
      Dev bd(be, OSLO_DTYPE_F32, {N});
      std::vector<double> bh = random_in(static_cast<size_t>(N), OSLO_DTYPE_F32);
      bd.upload(bh);
      // Plain; bias; act (+ bias); act + gate; act + gate = c.
      for (int mode = 0; mode < 5; ++mode, ++variant) {
        const bool with_bias = mode == 1 || mode == 2 || mode == 4;
        const int act_on = mode >= 2 ? 1 : 0;
        const oslo_bk_unary act = acts[variant % 5];
        const int gate_mode = mode == 3 ? 1 : mode == 4 ? 2 : 0;
        std::vector<double> outs[4];
        // fused, composed, compose_matmul_quant, packed (where made)
        for (int path = 0; path < (packed ? 4 : 3); ++path) {
          FusedToggle t(*be, path == 0);
          g_case =
              fmt("matmul_quant %s M%lld N%lld K%lld S%lld lda%lld bias %d act %d(%d) "
                  "gate %d path %s",
                  dtype_name(dt), (long long)M, (long long)N, (long long)K, (long long)S,
                  (long long)lda, with_bias, act_on, static_cast<int>(act), gate_mode,
                  path == 0   ? (be->uses_fused(OSLO_BK_OP_MATMUL_QUANT, dt) ? "entry" : "core")
                  : path == 1 ? "composed"
                  : path == 2 ? "compose_matmul_quant"
                              : "matmul_packed");
          outs[path] = product_case(be, w, M, lda, ah, a, with_bias ? &bh : nullptr,
                                    with_bias ? &bd : nullptr, act_on, act, gate_mode, path == 2,
                                    path == 3 ? packed.get() : nullptr);
        }
        // The composed paths compute the same f32 product.
        g_case = fmt("matmul_quant %s M%lld N%lld K%lld mode %d: composed == compose_matmul_quant",
                     dtype_name(dt), (long long)M, (long long)N, (long long)K, mode);
        check(outs[1] == outs[2], "the two composed paths differ");
        if (packed && packed->whole()) {
          FusedToggle t(*be, true);
          g_case =
              fmt("matmul_packed %s M%lld N%lld K%lld S%lld mode %d, plain released",
                  dtype_name(dt), (long long)M, (long long)N, (long long)K, (long long)S, mode);
          packed->plain_released();
          const std::vector<double> got = product_case(
              be, w, M, lda, ah, a, with_bias ? &bh : nullptr, with_bias ? &bd : nullptr, act_on,
              act, gate_mode, false, packed.get(), true);
          check(got == outs[3], "the product with the plain weight released differs");
          packed->restore_plain(w.p);  // the same bytes, back where they were
        }
      }
      if (packed && packed->whole()) {
        // Written back into other memory: the weight's bytes row by row, the
        // gaps between rows (S > K) untouched.
        g_case = fmt("unpack_weight %s N%lld K%lld S%lld", dtype_name(dt), (long long)N,
                     (long long)K, (long long)S);
        const size_t n = w.bytes.size(), rb = static_cast<size_t>(K / w.be_ * w.bb_),
                     sb = static_cast<size_t>(S / w.be_ * w.bb_);
        void* fresh = be->allocate(n);
        std::vector<uint8_t> back(n, 0xab);
        be->copy(fresh, back.data(), n, CopyKind::HostToDevice);
        packed->plain_released();
        packed->restore_plain(fresh);
        be->copy(back.data(), fresh, n, CopyKind::DeviceToHost);
        int64_t bad = 0;
        for (size_t i = 0; i < n; ++i) {
          const bool in_row = i % sb < rb;
          if (back[i] != (in_row ? w.bytes[i] : 0xab)) ++bad;
        }
        check(bad == 0, fmt("%lld of %zu bytes differ from the weight's", (long long)bad, n));
        // Products now read through the copy made from `fresh`.
        check(packed->made_from(strided_view(fresh, dt, {N, K}, {S, 1})),
              "the written-back weight is the one the copy stands for");
        packed->plain_released();
        packed->restore_plain(w.p);
        be->deallocate(fresh, n);
      }
    }
  }
}

void error_cases(const std::shared_ptr<Backend>& be) {
  QWeight w(be, OSLO_DTYPE_Q8_0, 4, 64, 64);
  Dev a(be, OSLO_DTYPE_F32, {2, 64}), c(be, OSLO_DTYPE_F32, {2, 4}),
      wf(be, OSLO_DTYPE_F32, {4, 64});
  Dev ah(be, OSLO_DTYPE_F16, {2, 64}), cbad(be, OSLO_DTYPE_F32, {2, 5}),
      out(be, OSLO_DTYPE_F32, {4, 64});
  for (int fused = 1; fused >= 0; --fused) {
    FusedToggle t(*be, fused == 1);
    g_case = fmt("quant errors fused %d", fused);
    expect_refused(fused, "matmul_quant: f32 weight", OSLO_ERR_DTYPE,
                   [&] { be->matmul_quant(c.v, a.v, wf.v, nullptr, nullptr, nullptr); });
    expect_refused(fused, "dequantize: f32 weight", OSLO_ERR_DTYPE,
                   [&] { be->dequantize(out.v, wf.v); });
    const View w48 = strided_view(w.p, OSLO_DTYPE_Q8_0, {4, 48}, {64, 1});
    Dev a48(be, OSLO_DTYPE_F32, {2, 48}), o48(be, OSLO_DTYPE_F32, {4, 48});
    expect_refused(fused, "matmul_quant: K = 48 for q8_0", OSLO_ERR_SHAPE,
                   [&] { be->matmul_quant(c.v, a48.v, w48, nullptr, nullptr, nullptr); });
    expect_refused(fused, "dequantize: K = 48 for q8_0", OSLO_ERR_SHAPE,
                   [&] { be->dequantize(o48.v, w48); });
    const View wodd = strided_view(w.p, OSLO_DTYPE_Q8_0, {2, 32}, {48, 1});
    expect_refused(fused, "dequantize: row stride 48", OSLO_ERR_SHAPE, [&] {
      be->dequantize(strided_view(out.p, OSLO_DTYPE_F32, {2, 32}, {32, 1}), wodd);
    });
    expect_refused(fused, "matmul_quant: f16 a", OSLO_ERR_DTYPE,
                   [&] { be->matmul_quant(c.v, ah.v, w.v, nullptr, nullptr, nullptr); });
    expect_refused(fused, "matmul_quant: c [2, 5]", OSLO_ERR_SHAPE,
                   [&] { be->matmul_quant(cbad.v, a.v, w.v, nullptr, nullptr, nullptr); });
    expect_refused(fused, "matmul_quant: a [2, 48] against K 64", OSLO_ERR_SHAPE,
                   [&] { be->matmul_quant(c.v, a48.v, w.v, nullptr, nullptr, nullptr); });
    if (fused && be->op_supported(OSLO_BK_OP_PACKED_MATMUL, OSLO_DTYPE_Q4_0)) {
      QWeight w8(be, OSLO_DTYPE_Q4_0, 8, 64, 64), o8(be, OSLO_DTYPE_Q4_0, 8, 64, 64);
      auto pk = Backend::pack_weight(be, w8.v);
      check(static_cast<bool>(pk), "pack_weight declined q4_0 [8, 64]");
      Dev c8(be, OSLO_DTYPE_F32, {2, 8});
      if (pk) {
        expect_refused(fused, "matmul_packed: the copy of another weight",
                       OSLO_ERR_INVALID_ARGUMENT,
                       [&] { be->matmul_packed(c8.v, a.v, o8.v, *pk, nullptr, nullptr, nullptr); });
        expect_refused(fused, "matmul_packed: a [2, 48] against K 64", OSLO_ERR_SHAPE, [&] {
          be->matmul_packed(c8.v, a48.v, w8.v, *pk, nullptr, nullptr, nullptr);
        });
      }
    }
    expect_refused(fused, "dequantize: i32 out", OSLO_ERR_DTYPE, [&] {
      Dev oi(be, OSLO_DTYPE_I32, {4, 64});
      be->dequantize(oi.v, w.v);
    });
  }
}

}  // namespace

void test_quant(const std::shared_ptr<Backend>& be) {
  g_case = "quant";
  dequantize_cases(be);
  matmul_quant_cases(be);
  error_cases(be);
}

}  // namespace conf
