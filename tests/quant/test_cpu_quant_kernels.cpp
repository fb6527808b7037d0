// The CPU backend's row-dot kernels of matmul_quant (backends/cpu/
// cpu_quant_dot.cpp) on every instruction set this CPU has: scalar always,
// avx2, avxvnni and avx512vnni where present (the others are reported as
// skipped). The conformance suite only reaches the set the CPU dispatches
// to; this runs each one directly.
//
// Weights: q8_0 and q4_0 rows from core/quant's quantize_row of random
// floats, q4_k and q6_k random bytes with sane f16 scales, K = 256 and 2048,
// each against 1 to 4 rows of activations quantized here (int8 codes, one
// f32 scale per 32, int16 sums per 16: cpu_quant.hpp's QuantRow). The
// reference is the f64 sum of (code * scale) * w over the row, with w from
// core/quant's dequantize_row: the kernels' only error against it is f32
// rounding, checked at 1e-5 * sum |code * scale * w| (+1e-6). The
// activation quantizer (quantize_block) of each set must give the scalar
// one's bytes. The eight-row kernels of the packed layouts (q8_0, q4_0,
// q4_k; cpu_quant_packed.cpp) the same way: eight such rows packed by
// pack_group, each of their 8 x R sums against f64 at the same tolerance.
// Exit 0 when all pass, 1 otherwise.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_quant.hpp"
#include "core/common/dtype.hpp"
#include "core/quant/quant.hpp"

using namespace oslo;

namespace {

uint64_t g_seed = 99;
float rndf() {  // uniform in [-1, 1]
  g_seed = g_seed * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<float>(static_cast<int64_t>(g_seed >> 11) % 2000001 - 1000000) * 1e-6f;
}

int g_failed = 0, g_passed = 0;

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// A weight row of K values in dtype dt: q8_0 and q4_0 quantized from
// random floats by core/quant, the K-quants random bytes with sane scales.
std::vector<uint8_t> random_row(oslo_dtype dt, int64_t K) {
  const quant::Format fm = quant::format_of_dtype(dt);
  std::vector<uint8_t> w(quant::row_bytes(fm, static_cast<uint64_t>(K)));
  if (quant::can_quantize(fm)) {
    std::vector<float> x(static_cast<size_t>(K));
    for (auto& e : x) e = rndf() * (1.f + rndf());
    quant::quantize_row(fm, x.data(), w.data(), static_cast<uint64_t>(K));
  } else {
    for (auto& b : w) b = static_cast<uint8_t>(rndf() * 127.f + 128.f);
    const size_t bb = dt == OSLO_DTYPE_Q4_K ? 144 : 210;
    for (size_t o = 0; o < w.size(); o += bb) {
      if (dt == OSLO_DTYPE_Q4_K) {
        put_f16(&w[o], 0.002f + 0.001f * rndf());
        put_f16(&w[o + 2], 0.004f + 0.002f * rndf());
      } else {
        put_f16(&w[o + 208], 0.001f + 0.0005f * rndf());
      }
    }
  }
  return w;
}

}  // namespace

int main() {
  const oslo_dtype dts[] = {OSLO_DTYPE_Q8_0, OSLO_DTYPE_Q4_0, OSLO_DTYPE_Q4_K, OSLO_DTYPE_Q6_K};
  const char* isas[] = {"scalar", "avx2", "avxvnni", "avx512vnni"};
  std::printf("dispatched: %s\n", cpu::quant_kernels()->isa);
  for (const char* isa : isas) {
    const cpu::QuantKernels* k = cpu::quant_kernels(isa);
    if (!k) {
      std::printf("%s: skipped (this CPU lacks it)\n", isa);
      continue;
    }
    for (int f = 0; f < 4; ++f) {
      const oslo_dtype dt = dts[f];
      const quant::Format fm = quant::format_of_dtype(dt);
      for (int64_t K : {int64_t(256), int64_t(2048)}) {
        std::vector<uint8_t> w = random_row(dt, K);
        std::vector<float> wr(static_cast<size_t>(K));
        quant::dequantize_row(fm, w.data(), wr.data(), static_cast<uint64_t>(K));
        // Four rows of codes: full range, small, zeros in a block, -127..127.
        std::vector<int8_t> q(static_cast<size_t>(4 * K));
        std::vector<float> d(static_cast<size_t>(4 * K / 32));
        std::vector<int16_t> s16(static_cast<size_t>(4 * K / 16));
        cpu::QuantRow rows[4];
        double want[4], tol[4];
        for (int r = 0; r < 4; ++r) {
          want[r] = 0;
          tol[r] = 1e-6;
          for (int64_t b = 0; b < K / 32; ++b) {
            const float db = (r == 2 && b == 1) ? 0.f : 0.01f * (1.f + std::fabs(rndf()));
            d[static_cast<size_t>(r * K / 32 + b)] = db;
            int ss[2] = {0, 0};
            for (int i = 0; i < 32; ++i) {
              const int qi = (r == 2 && b == 1) ? 0
                             : r == 3           ? (i % 2 ? 127 : -127)
                                      : static_cast<int>(std::lrint(rndf() * (r ? 20 : 127)));
              q[static_cast<size_t>(r * K + 32 * b + i)] = static_cast<int8_t>(qi);
              ss[i / 16] += qi;
              const double t = static_cast<double>(qi) * db * wr[static_cast<size_t>(32 * b + i)];
              want[r] += t;
              tol[r] += 1e-5 * std::fabs(t);
            }
            s16[static_cast<size_t>(r * K / 16 + 2 * b)] = static_cast<int16_t>(ss[0]);
            s16[static_cast<size_t>(r * K / 16 + 2 * b + 1)] = static_cast<int16_t>(ss[1]);
          }
          rows[r] = cpu::QuantRow{q.data() + r * K, d.data() + r * K / 32, s16.data() + r * K / 16};
        }
        // The eight-row kernel of the packed layout (q8_0, q4_0, q4_k):
        // eight rows (the one above first), packed by pack_group.
        if (k->dot8[f]) {
          std::vector<std::vector<uint8_t>> w8(8);
          const uint8_t* rp[8];
          double want8[4][8], tol8[4][8];
          for (int i = 0; i < 8; ++i) {
            w8[i] = i ? random_row(dt, K) : w;
            // q8_0 code -128 (valid in a file, never written by the
            // quantizer): |x| must read 128 as unsigned.
            if (dt == OSLO_DTYPE_Q8_0 && i == 7) w8[i][2 + 34] = 0x80;
            rp[i] = w8[i].data();
            std::vector<float> wi(static_cast<size_t>(K));
            quant::dequantize_row(fm, rp[i], wi.data(), static_cast<uint64_t>(K));
            for (int r = 0; r < 4; ++r) {
              want8[r][i] = 0;
              tol8[r][i] = 1e-6;
              for (int64_t c = 0; c < K; ++c) {
                const double t = static_cast<double>(q[static_cast<size_t>(r * K + c)]) *
                                 d[static_cast<size_t>(r * K / 32 + c / 32)] *
                                 wi[static_cast<size_t>(c)];
                want8[r][i] += t;
                tol8[r][i] += 1e-5 * std::fabs(t);
              }
            }
          }
          std::vector<uint8_t> packed(cpu::packed_group_bytes(f, K));
          cpu::pack_group(f, rp, K, packed.data());
          for (int R = 1; R <= 4; ++R) {
            float out8[32];
            k->dot8[f](packed.data(), K, rows, R, out8);
            for (int r = 0; r < R; ++r)
              for (int i = 0; i < 8; ++i) {
                const double e = std::fabs(out8[8 * r + i] - want8[r][i]);
                if (e <= tol8[r][i]) {
                  ++g_passed;
                } else {
                  ++g_failed;
                  std::printf(
                      "FAIL %s %s packed K%lld R%d row %d weight row %d: %.9g, want %.9g "
                      "(error %.3g > %.3g)\n",
                      isa, dtype_name(dt), (long long)K, R, r, i, out8[8 * r + i], want8[r][i], e,
                      tol8[r][i]);
                }
              }
          }
        } else if (dt != OSLO_DTYPE_Q6_K) {
          ++g_failed;
          std::printf("FAIL %s %s: no packed kernel\n", isa, dtype_name(dt));
        }
        for (int R = 1; R <= 4; ++R) {
          float out[4];
          k->dot[f](w.data(), K, rows, R, out);
          for (int r = 0; r < R; ++r) {
            const double e = std::fabs(out[r] - want[r]);
            if (e <= tol[r]) {
              ++g_passed;
            } else {
              ++g_failed;
              std::printf("FAIL %s %s K%lld R%d row %d: %.9g, want %.9g (error %.3g > %.3g)\n", isa,
                          dtype_name(dt), (long long)K, R, r, out[r], want[r], e, tol[r]);
            }
          }
        }
      }
    }
    // quantize_block: the same bytes, scale and sums as the scalar one, on
    // random blocks and on zeros, NaN, +-inf, 1e30, denormals and halves
    // (max |x| = 127: x / d = x, so 2.5 and -3.5 are ties to even).
    {
      const cpu::QuantKernels* ref = cpu::quant_kernels("scalar");
      const float specials[] = {0.f, NAN, INFINITY, -INFINITY, 1e30f, -1e-40f, 1e-45f, 2.5f, -3.5f};
      for (int t = 0; t < 200; ++t) {
        float x[32];
        for (int i = 0; i < 32; ++i) x[i] = rndf() * (t % 3 == 0 ? 1e3f : 1.f);
        if (t >= 100) x[(t * 7) % 32] = specials[t % 9];
        if (t % 10 == 1) x[3] = 127.f;  // the ties above stay ties
        if (t % 50 == 7)
          for (float& e : x) e = 0.f;  // all zero
        int8_t q0[32], q1[32];
        float d0 = -1.f, d1 = -2.f;
        int16_t s0[2] = {-1, -1}, s1[2] = {-2, -2};
        ref->quantize_block(x, q0, &d0, s0);
        k->quantize_block(x, q1, &d1, s1);
        if (std::memcmp(q0, q1, 32) == 0 && std::memcmp(&d0, &d1, 4) == 0 && s0[0] == s1[0] &&
            s0[1] == s1[1]) {
          ++g_passed;
        } else {
          ++g_failed;
          std::printf(
              "FAIL %s quantize_block case %d: d %.9g vs scalar %.9g, sums %d %d vs %d %d\n", isa,
              t, d1, d0, s1[0], s1[1], s0[0], s0[1]);
        }
      }
    }
    std::printf("%s: checked\n", isa);
  }
  std::printf("cpu quant kernels: %d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
