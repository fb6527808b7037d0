// conf_ops, the int8 KV cache's rows (oslo_backend.h's quantize_rows and
// dequantize_rows): the backend's entries where it offers them for the
// float dtype, and the core's host reference (core/backend/fused_kv8.cpp),
// both against the rule oslo_backend.h states, computed here in f32 step by
// step: a = max |x| of the row (NaN if any), d = a / 127, id = d ? 1 / d : 0,
// q = round-half-away(x * id) clamped to +-127, 0 for NaN. Bytes must be
// equal (q and the f32 scale); dequantize_rows must give q * d rounded once
// to the out dtype. Independently of that rule, every finite row read back
// lies within d / 2 of its input (plus the input dtype's rounding).
//
// Views: rows of D = 1, 16, 24, 33, 64 and 128 in 2-, 3- and 4-dimensional
// layouts whose rows lie apart (padding filled with sentinels that must
// stay), scales with strides of their own (a cache's [rows, heads, Tmax]);
// inputs f32, f16 and bf16 with rows of zeros, a NaN, an inf, 1e30 and
// 1e-30 values. Errors: wrong dtypes, shapes that differ, 1-D or 5-D rows,
// a non-unit last stride, each named.
#include <cmath>
#include <cstring>

#include "ops_common.hpp"

using namespace oslo;

namespace conf {
namespace {

struct Layout {
  std::vector<int64_t> shape;     // rows' shape [..., D]
  std::vector<int64_t> strides;   // float and int8 rows (elements)
  std::vector<int64_t> sstrides;  // scales
  int64_t fspan, sspan;           // elements the buffers hold
};

Layout layout(const std::vector<int64_t>& lead, int64_t D) {
  // Rows lie D + 5 elements apart, each outer dimension 7 more than its
  // inner ones need; scales 3 apart (a cache's Tmax gap), outer ones 2 more.
  Layout L;
  L.shape = lead;
  L.shape.push_back(D);
  const int nd = static_cast<int>(lead.size());
  L.strides.assign(static_cast<size_t>(nd + 1), 1);
  L.sstrides.assign(static_cast<size_t>(nd), 1);
  L.strides[static_cast<size_t>(nd - 1)] = D + 5;
  L.sstrides[static_cast<size_t>(nd - 1)] = 3;
  for (int i = nd - 2; i >= 0; --i) {
    const size_t u = static_cast<size_t>(i);
    L.strides[u] = L.strides[u + 1] * lead[u + 1] + 7;
    L.sstrides[u] = L.sstrides[u + 1] * lead[u + 1] + 2;
  }
  L.fspan = L.strides[0] * lead[0] + 7;
  L.sspan = L.sstrides[0] * lead[0] + 2;
  return L;
}

// Element offsets of every row and of its scale, row-major over the lead.
void offsets(const Layout& L, std::vector<int64_t>* rows, std::vector<int64_t>* scales) {
  rows->assign(1, 0);
  scales->assign(1, 0);
  for (size_t d = 0; d + 1 < L.shape.size(); ++d) {
    std::vector<int64_t> r2, s2;
    for (size_t j = 0; j < rows->size(); ++j)
      for (int64_t i = 0; i < L.shape[d]; ++i) {
        r2.push_back((*rows)[j] + i * L.strides[d]);
        s2.push_back((*scales)[j] + i * L.sstrides[d]);
      }
    rows->swap(r2);
    scales->swap(s2);
  }
}

// The rule, in f32.
void reference_row(const float* x, int64_t D, int8_t* q, float* d_out) {
  float a = 0.0f;
  for (int64_t i = 0; i < D; ++i) {
    const float m = std::fabs(x[i]);
    if (std::isnan(m) || m > a) a = m;
  }
  const volatile float d = a / 127.0f;
  const volatile float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int64_t i = 0; i < D; ++i) {
    const volatile float v = x[i] * id;
    float r = std::isnan(v) ? 0.0f : std::round(v);
    if (r > 127.0f) r = 127.0f;
    if (r < -127.0f) r = -127.0f;
    q[i] = static_cast<int8_t>(r);
  }
  *d_out = d;
}

std::vector<uint8_t> raw_download(const Dev& d) {
  std::vector<uint8_t> out(d.bytes);
  d.be->copy(out.data(), d.p, d.bytes, CopyKind::DeviceToHost);
  return out;
}

void round_trip_cases(const std::shared_ptr<Backend>& be) {
  const std::vector<std::vector<int64_t>> leads = {{7}, {2, 3}, {2, 2, 3}};
  for (oslo_dtype xt : kFloats)
    for (int64_t D : {int64_t(1), int64_t(16), int64_t(24), int64_t(33), int64_t(64), int64_t(128)})
      for (const auto& lead : leads) {
        const Layout L = layout(lead, D);
        std::vector<int64_t> rows, srows;
        offsets(L, &rows, &srows);
        // Inputs: random rows, and special rows in the first few.
        std::vector<double> xs(static_cast<size_t>(L.fspan), 0.0);
        for (size_t r = 0; r < rows.size(); ++r)
          for (int64_t i = 0; i < D; ++i) {
            double v = rnd() * (1 + 3 * rnd());
            if (r == 1) v = 0.0;                                   // zeros
            if (r == 2 && i == D / 2) v = NAN;                     // a NaN
            if (r == 3 && i == 0) v = INFINITY;                    // an inf
            if (r == 4) v *= 1e30;                                 // huge
            if (r == 5) v *= 1e-30;                                // tiny
            if (r == 6 && i % 3 == 0) v = 2.5 * (i % 2 ? 1 : -1);  // repeated values
            xs[static_cast<size_t>(rows[r] + i)] = quant(v, xt);
          }
        // In the fp16 range: huge rows overflow f16 to inf; keep that (a
        // dtype's own rounding is the input).
        Dev x(be, xt, {L.fspan});
        x.upload(xs);
        const std::vector<double> xin = x.download();
        // Reference bytes.
        std::vector<int8_t> qref(static_cast<size_t>(L.fspan), 0x55);
        std::vector<float> sref(static_cast<size_t>(L.sspan), -3.0f);
        std::vector<float> row(static_cast<size_t>(D));
        for (size_t r = 0; r < rows.size(); ++r) {
          for (int64_t i = 0; i < D; ++i)
            row[static_cast<size_t>(i)] = static_cast<float>(xin[static_cast<size_t>(rows[r] + i)]);
          reference_row(row.data(), D, qref.data() + rows[r], &sref[static_cast<size_t>(srows[r])]);
        }
        for (int fused = 1; fused >= 0; --fused) {
          FusedToggle t(*be, fused == 1);
          g_case = fmt("quantize_rows %s D%lld lead %zu-D fused %d (%s)", dtype_name(xt),
                       (long long)D, lead.size(), fused,
                       be->uses_fused(OSLO_BK_OP_QUANTIZE_ROWS, xt) ? "entry" : "core");
          Dev q(be, OSLO_DTYPE_I8, {L.fspan}), s(be, OSLO_DTYPE_F32, {L.sspan});
          std::vector<uint8_t> q0(static_cast<size_t>(L.fspan), 0x55);
          be->copy(q.p, q0.data(), q0.size(), CopyKind::HostToDevice);
          s.upload(std::vector<double>(static_cast<size_t>(L.sspan), -3.0));
          be->quantize_rows(strided_view(q.p, OSLO_DTYPE_I8, L.shape, L.strides),
                            strided_view(s.p, OSLO_DTYPE_F32, lead, L.sstrides),
                            strided_view(x.p, xt, L.shape, L.strides));
          const std::vector<uint8_t> qgot = raw_download(q);
          const std::vector<uint8_t> sgot = raw_download(s);
          int64_t badq = 0, bads = 0;
          for (int64_t i = 0; i < L.fspan; ++i)
            if (static_cast<int8_t>(qgot[static_cast<size_t>(i)]) != qref[static_cast<size_t>(i)])
              ++badq;
          for (int64_t i = 0; i < L.sspan; ++i) {
            float g;
            std::memcpy(&g, sgot.data() + 4 * i, 4);
            const float w = sref[static_cast<size_t>(i)];
            if (!(g == w || (std::isnan(g) && std::isnan(w)))) ++bads;
          }
          check(badq == 0,
                fmt("%lld int8 bytes differ from the rule (padding included)", (long long)badq));
          check(bads == 0,
                fmt("%lld scales (or padding between them) differ from the rule", (long long)bads));

          // dequantize_rows into every float dtype, from the reference bytes.
          for (oslo_dtype ot : kFloats) {
            g_case = fmt("dequantize_rows -> %s D%lld lead %zu-D fused %d (%s)", dtype_name(ot),
                         (long long)D, lead.size(), fused,
                         be->uses_fused(OSLO_BK_OP_DEQUANTIZE_ROWS, ot) ? "entry" : "core");
            Dev out(be, ot, {L.fspan});
            out.upload(std::vector<double>(static_cast<size_t>(L.fspan), 9.0));
            be->copy(q.p, qref.data(), qref.size(), CopyKind::HostToDevice);
            std::vector<double> sd(sref.begin(), sref.end());
            s.upload(sd);
            be->dequantize_rows(strided_view(out.p, ot, L.shape, L.strides),
                                strided_view(q.p, OSLO_DTYPE_I8, L.shape, L.strides),
                                strided_view(s.p, OSLO_DTYPE_F32, lead, L.sstrides));
            const std::vector<double> got = out.download();
            std::vector<double> want(static_cast<size_t>(L.fspan), 9.0);
            for (size_t r = 0; r < rows.size(); ++r)
              for (int64_t i = 0; i < D; ++i) {
                const size_t at = static_cast<size_t>(rows[r] + i);
                want[at] = quant(static_cast<double>(static_cast<float>(qref[at]) *
                                                     sref[static_cast<size_t>(srows[r])]),
                                 ot);
              }
            int64_t bad = 0;
            for (size_t i = 0; i < got.size(); ++i)
              if (!(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])))) ++bad;
            check(bad == 0,
                  fmt("%lld values differ from q * scale (padding included)", (long long)bad));
            // The rule's promise, independent of it: finite rows come back
            // within d / 2 (+ out's rounding) of their input.
            if (ot != OSLO_DTYPE_F32) continue;
            int64_t far = 0;
            for (size_t r = 0; r < rows.size(); ++r) {
              const double d = sref[static_cast<size_t>(srows[r])];
              if (!std::isfinite(d)) continue;
              for (int64_t i = 0; i < D; ++i) {
                const size_t at = static_cast<size_t>(rows[r] + i);
                if (std::fabs(got[at] - xin[at]) > 0.5 * d + 2.4e-7 * std::fabs(xin[at]) + 1e-45)
                  ++far;
              }
            }
            check(far == 0,
                  fmt("%lld values are further than scale / 2 from their input", (long long)far));
          }
        }
      }
}

void error_cases(const std::shared_ptr<Backend>& be) {
  Dev x(be, OSLO_DTYPE_F32, {4, 16}), q(be, OSLO_DTYPE_I8, {4, 16}), s(be, OSLO_DTYPE_F32, {4});
  Dev xi(be, OSLO_DTYPE_I32, {4, 16}), sh(be, OSLO_DTYPE_F16, {4}), s5(be, OSLO_DTYPE_F32, {5});
  for (int fused = 1; fused >= 0; --fused) {
    FusedToggle t(*be, fused == 1);
    g_case = fmt("kv8 errors fused %d", fused);
    expect_refused(fused, "quantize_rows: i32 x", OSLO_ERR_DTYPE,
                   [&] { be->quantize_rows(q.v, s.v, xi.v); });
    expect_refused(fused, "quantize_rows: f32 q", OSLO_ERR_DTYPE,
                   [&] { be->quantize_rows(x.v, s.v, x.v); });
    expect_refused(fused, "quantize_rows: f16 scales", OSLO_ERR_DTYPE,
                   [&] { be->quantize_rows(q.v, sh.v, x.v); });
    expect_refused(fused, "quantize_rows: 5 scales for 4 rows", OSLO_ERR_SHAPE,
                   [&] { be->quantize_rows(q.v, s5.v, x.v); });
    expect_refused(fused, "quantize_rows: 1-D rows", OSLO_ERR_SHAPE, [&] {
      be->quantize_rows(make_view(q.p, OSLO_DTYPE_I8, {64}), make_view(s.p, OSLO_DTYPE_F32, {}),
                        make_view(x.p, OSLO_DTYPE_F32, {64}));
    });
    expect_refused(fused, "quantize_rows: 5-D rows", OSLO_ERR_SHAPE, [&] {
      be->quantize_rows(make_view(q.p, OSLO_DTYPE_I8, {1, 1, 1, 4, 16}),
                        make_view(s.p, OSLO_DTYPE_F32, {1, 1, 1, 4}),
                        make_view(x.p, OSLO_DTYPE_F32, {1, 1, 1, 4, 16}));
    });
    expect_refused(fused, "quantize_rows: last stride 2", OSLO_ERR_SHAPE, [&] {
      be->quantize_rows(strided_view(q.p, OSLO_DTYPE_I8, {4, 8}, {16, 2}), s.v,
                        strided_view(x.p, OSLO_DTYPE_F32, {4, 8}, {16, 2}));
    });
    expect_refused(fused, "quantize_rows: q [4, 8] for x [4, 16]", OSLO_ERR_SHAPE, [&] {
      be->quantize_rows(strided_view(q.p, OSLO_DTYPE_I8, {4, 8}, {16, 1}), s.v, x.v);
    });
    expect_refused(fused, "dequantize_rows: i32 out", OSLO_ERR_DTYPE,
                   [&] { be->dequantize_rows(xi.v, q.v, s.v); });
    expect_refused(fused, "dequantize_rows: f32 q", OSLO_ERR_DTYPE,
                   [&] { be->dequantize_rows(x.v, x.v, s.v); });
    expect_refused(fused, "dequantize_rows: 5 scales for 4 rows", OSLO_ERR_SHAPE,
                   [&] { be->dequantize_rows(x.v, q.v, s5.v); });
  }
}

void attention_case(const std::shared_ptr<Backend>& be, oslo_dtype dt, int64_t B, int64_t Hq,
                    int64_t Hkv, int64_t S, int64_t T, int64_t D, bool causal, int64_t off,
                    bool with_mask) {
  // q and out [B, S, Hq, D] seen as [B, Hq, S, D]; the caches [B, Hkv,
  // Tmax, D] i8 and their scales [B, Hkv, Tmax], of which T positions are
  // used.
  const int64_t Tmax = T + 3;
  Dev qb(be, dt, {B, S, Hq, D}), ob(be, OSLO_DTYPE_F32, {B, S, Hq, D}),
      oc(be, OSLO_DTYPE_F32, {B, S, Hq, D}), mb(be, OSLO_DTYPE_F32, {B, std::max<int64_t>(T, 1)});
  Dev kb(be, OSLO_DTYPE_I8, {B, Hkv, Tmax, D}), vb(be, OSLO_DTYPE_I8, {B, Hkv, Tmax, D});
  Dev ksb(be, OSLO_DTYPE_F32, {B, Hkv, Tmax}), vsb(be, OSLO_DTYPE_F32, {B, Hkv, Tmax});
  const auto hq = random_in(static_cast<size_t>(B * S * Hq * D), dt, 2.0);
  std::vector<int8_t> hk(static_cast<size_t>(B * Hkv * Tmax * D)), hv(hk.size());
  for (auto* c : {&hk, &hv})
    for (auto& x : *c) x = static_cast<int8_t>(std::lround(127.0 * rnd()));
  std::vector<double> hks(static_cast<size_t>(B * Hkv * Tmax)), hvs(hks.size());
  for (size_t i = 0; i < hks.size(); ++i) {
    hks[i] = static_cast<float>(0.004 + 0.012 * (rnd() + 1.0));
    hvs[i] = static_cast<float>(0.004 + 0.006 * (rnd() + 1.0));
  }
  hks[1] = hvs[2] = 0.0;  // rows of zeros
  std::vector<double> hm(static_cast<size_t>(B * T), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      double& m = hm[static_cast<size_t>(b * T + t)];
      if (b == 1 && t < 3) m = -INFINITY;  // left padding of row 1
      if (t % 7 == 5) m = -0.75;
    }
  qb.upload(hq);
  be->copy(kb.p, hk.data(), hk.size(), CopyKind::HostToDevice);
  be->copy(vb.p, hv.data(), hv.size(), CopyKind::HostToDevice);
  ksb.upload(hks);
  vsb.upload(hvs);
  if (T > 0) mb.upload(hm);
  const View mask = strided_view(mb.p, OSLO_DTYPE_F32, {B, T}, {T, 1});
  const View q = strided_view(qb.p, dt, {B, Hq, S, D}, {S * Hq * D, D, Hq * D, 1});
  const std::vector<int64_t> rs = {Hkv * Tmax * D, Tmax * D, D, 1}, ss = {Hkv * Tmax, Tmax, 1};
  const View k = strided_view(kb.p, OSLO_DTYPE_I8, {B, Hkv, T, D}, rs);
  const View v = strided_view(vb.p, OSLO_DTYPE_I8, {B, Hkv, T, D}, rs);
  const View ks = strided_view(ksb.p, OSLO_DTYPE_F32, {B, Hkv, T}, ss);
  const View vs = strided_view(vsb.p, OSLO_DTYPE_F32, {B, Hkv, T}, ss);
  auto out_view = [&](void* p) {
    return strided_view(p, OSLO_DTYPE_F32, {B, Hq, S, D}, {S * Hq * D, D, Hq * D, 1});
  };
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // f64 reference over the values the bytes stand for.
  auto kval = [&](int64_t b, int64_t kh, int64_t j, int64_t d) {
    const size_t r = static_cast<size_t>((b * Hkv + kh) * Tmax + j);
    return hk[r * static_cast<size_t>(D) + static_cast<size_t>(d)] * hks[r];
  };
  auto vval = [&](int64_t b, int64_t kh, int64_t j, int64_t d) {
    const size_t r = static_cast<size_t>((b * Hkv + kh) * Tmax + j);
    return hv[r * static_cast<size_t>(D) + static_cast<size_t>(d)] * hvs[r];
  };
  const AttnCase ac{B, Hq, Hkv, S, T, D, causal, off, with_mask};
  const std::vector<double> ref = attention_f64(
      ac, static_cast<double>(scale),
      [&](int64_t b, int64_t h, int64_t i, int64_t d) {
        return hq[static_cast<size_t>(((b * S + i) * Hq + h) * D + d)];
      },
      kval, vval,
      [&](int64_t b, int64_t j) { return with_mask ? hm[static_cast<size_t>(b * T + j)] : 0.0; });
  for (int fused = 1; fused >= 0; --fused) {
    FusedToggle f(*be, fused == 1);
    be->attention_kv8(out_view(fused ? ob.p : oc.p), q, k, ks, v, vs, with_mask ? &mask : nullptr,
                      scale, causal, off);
  }
  const auto got = ob.download(), comp = oc.download();
  // The composition rounds the rows to q's dtype first.
  const double t = std::max(tol(dt), 2e-5);
  double e1 = 0, e2 = 0, e3 = 0;
  const bool ok1 = close(got, ref, t, &e1), ok2 = close(comp, ref, t, &e2),
             ok3 = close(got, comp, t, &e3);
  check(ok1, fmt("fused err %g", e1));
  check(ok2, fmt("composed err %g", e2));
  check(ok3, fmt("fused vs composed %g", e3));
}

void attention_cases(const std::shared_ptr<Backend>& be) {
  const AttnCase cases[] = {
      {1, 12, 12, 1, 40, 64, true, 39, true},   // decode, MHA (GPT-2's heads)
      {2, 8, 2, 1, 130, 64, true, 129, true},   // decode, GQA 4
      {1, 8, 1, 1, 300, 128, true, 299, true},  // MQA, long cache: split over keys
      {1, 4, 2, 1, 70, 72, true, 69, false},    // D = 64 + 8
      {2, 4, 4, 3, 9, 24, true, 6, true},       // a few queries, D not a multiple of 8
      {1, 2, 2, 3, 5, 8, true, -2, false},      // queries with no key: 0
      {2, 6, 2, 20, 26, 32, true, 6, true},     // prefill tiles, GQA 3
      {1, 4, 4, 1, 0, 16, true, -1, false},     // no key at all
      {2, 4, 2, 6, 6, 16, false, 0, true},      // no causal mask
  };
  for (oslo_dtype dt : kFloats)
    for (const AttnCase& c : cases) {
      g_case = attn_case_name("attention_kv8", dt, c);
      attention_case(be, dt, c.B, c.Hq, c.Hkv, c.S, c.T, c.D, c.causal, c.off, c.mask);
    }
  g_case = "attention_kv8 errors";
  Dev q(be, OSLO_DTYPE_F32, {1, 4, 1, 8}), o(be, OSLO_DTYPE_F32, {1, 4, 1, 8});
  Dev k(be, OSLO_DTYPE_I8, {1, 2, 5, 8}), kf(be, OSLO_DTYPE_F32, {1, 2, 5, 8});
  Dev s(be, OSLO_DTYPE_F32, {1, 2, 5}), sh(be, OSLO_DTYPE_F16, {1, 2, 5}),
      s4(be, OSLO_DTYPE_F32, {1, 2, 4}), m(be, OSLO_DTYPE_F32, {1, 6});
  Dev k3(be, OSLO_DTYPE_I8, {1, 3, 5, 8}), s3(be, OSLO_DTYPE_F32, {1, 3, 5});
  for (int fused = 1; fused >= 0; --fused) {
    FusedToggle t(*be, fused == 1);
    expect_refused(fused, "attention_kv8: f32 keys", OSLO_ERR_DTYPE, [&] {
      be->attention_kv8(o.v, q.v, kf.v, s.v, k.v, s.v, nullptr, 1.f, true, 0);
    });
    expect_refused(fused, "attention_kv8: f16 scales", OSLO_ERR_DTYPE, [&] {
      be->attention_kv8(o.v, q.v, k.v, sh.v, k.v, s.v, nullptr, 1.f, true, 0);
    });
    expect_refused(fused, "attention_kv8: 4 value scales for 5 rows", OSLO_ERR_SHAPE, [&] {
      be->attention_kv8(o.v, q.v, k.v, s.v, k.v, s4.v, nullptr, 1.f, true, 0);
    });
    expect_refused(fused, "attention_kv8: 4 query heads over 3 key heads", OSLO_ERR_SHAPE, [&] {
      be->attention_kv8(o.v, q.v, k3.v, s3.v, k3.v, s3.v, nullptr, 1.f, true, 0);
    });
    expect_refused(fused, "attention_kv8: a mask of 6 keys over 5", OSLO_ERR_SHAPE,
                   [&] { be->attention_kv8(o.v, q.v, k.v, s.v, k.v, s.v, &m.v, 1.f, true, 0); });
  }
}

}  // namespace

void test_kv8(const std::shared_ptr<Backend>& be) {
  g_case = "kv8";
  round_trip_cases(be);
  error_cases(be);
  attention_cases(be);
}

}  // namespace conf
