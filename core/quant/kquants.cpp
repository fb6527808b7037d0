// The K-quant quantizers: quantize_q4_k_block and quantize_q6_k_block give,
// for one super-block of 256 floats, the bytes of llama.cpp's reference
// quantizers quantize_row_q4_K_ref and quantize_row_q6_K_ref (ggml-quants.c,
// no importance matrix). The algorithm is re-implemented from its
// description (README.md, "K-quant quantizers"): per sub-block a weighted
// least-squares search over candidate scales (Q4_K: scale and min, 21
// candidates; Q6_K: a symmetric scale, 19 candidates), then the sub-block
// scales themselves quantized to 6 (Q4_K) or 8 (Q6_K) bits against one f16
// super-block scale, then every value re-quantized with its final scale.
// Bit-exactness needs llama.cpp's order of operations, float (not double)
// arithmetic and no fused multiply-add: this file is compiled with
// -ffp-contract=off (CMakeLists.txt), as libggml-base is built without FMA.
#include <cmath>
#include <cstring>

#include "core/common/dtype.hpp"
#include "core/quant/kernels.hpp"

namespace oslo {
namespace quant {

namespace {

// Rounds to the nearest integer, ties to even, by adding 1.5 * 2^23 and
// reading the low mantissa bits (llama.cpp's nearest_int). Exact for
// |v| <= 4194303; beyond that (only reached by pathological inputs) the
// result is the same garbage llama.cpp computes, without undefined behaviour.
int nearest_int(float v) {
  const float t = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &t, sizeof i);
  return (i & 0x007fffff) - 0x00400000;
}

int clampi(int v, int lo, int hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

void store16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xff);
  p[1] = static_cast<uint8_t>(v >> 8);
}

// Asymmetric search for n values quantized to 0..nmax as x ~ scale * L - m
// (m >= 0 returned in *the_min), minimising the weighted squared error.
// Start: min = min(0, min x), scale = (max - min) / nmax. Then for each
// step s in 0..nstep the candidate inverse scale (rmin + rdelta * s + nmax)
// / (max - min) rounds the values, and the weighted least-squares scale
// and min for those integers (the min clamped to <= 0, the scale then
// refitted alone) replace the best so far when their error is strictly
// smaller. L receives the best integers (Laux is scratch).
float search_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep) {
  float lo = x[0], hi = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;
  if (hi == lo) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -lo;
    return 0.0f;
  }
  float iscale = nmax / (hi - lo);
  float scale = 1 / iscale;
  float best = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(clampi(nearest_int(iscale * (x[i] - lo)), 0, nmax));
    float diff = scale * L[i] + lo - x[i];
    diff = diff * diff;
    best += w[i] * diff;
  }
  for (int s = 0; s <= nstep; ++s) {
    iscale = (rmin + rdelta * s + nmax) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clampi(nearest_int(iscale * (x[i] - lo)), 0, nmax);
      Laux[i] = static_cast<uint8_t>(l);
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float err = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = diff * diff;
        err += w[i] * diff;
      }
      if (err < best) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best = err;
        scale = this_scale;
        lo = this_min;
      }
    }
  }
  *the_min = -lo;
  return scale;
}

// Symmetric search for n values quantized to -nmax..nmax-1 (stored + nmax
// in L) with weights x^2: the value of largest magnitude (its sign kept)
// maps to -nmax; the least-squares scale of those integers, then 18 more
// inverse scales -(nmax + 0.1 * s) / max (s = -9..9, not 0), each kept
// when it explains more of the weighted energy (sumlx^2 / suml2 larger).
float search_scale_sym(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < 1e-15f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int s = -9; s <= 9; ++s) {
    if (s == 0) continue;
    iscale = -(nmax + 0.1f * s) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i)
        L[i] = static_cast<int8_t>(nmax + clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

}  // namespace

// block_q4_K: f16 d; f16 dmin; uint8 scales[12]; uint8 qs[128].
void quantize_q4_k_block(const float* x, uint8_t* b) {
  uint8_t L[256], Laux[32];
  float w[32], mins[8], scales[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(xs[l]);
    scales[j] = search_scale_min(32, 15, xs, w, L + 32 * j, &mins[j], Laux, -1.0f, 0.1f, 20);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t* sc = b + 4;
  std::memset(sc, 0, 12);
  for (int j = 0; j < 8; ++j) {
    // The 6-bit codes, through uint8_t as in llama.cpp, then capped at 63.
    uint8_t ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
    if (ls > 63) ls = 63;
    if (lm > 63) lm = 63;
    if (j < 4) {
      sc[j] = ls;
      sc[j + 4] = lm;
    } else {
      sc[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      sc[j - 4] = static_cast<uint8_t>(sc[j - 4] | ((ls >> 4) << 6));
      sc[j] = static_cast<uint8_t>(sc[j] | ((lm >> 4) << 6));
    }
  }
  const uint16_t dh = f32_to_f16(max_scale / 63.0f), mh = f32_to_f16(max_min / 63.0f);
  store16(b, dh);
  store16(b + 2, mh);
  const float dd = f16_to_f32(dh), dm = f16_to_f32(mh);
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    if (j < 4) {
      s = sc[j] & 63;
      m = sc[j + 4] & 63;
    } else {
      s = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4));
      m = static_cast<uint8_t>((sc[j + 4] >> 4) | ((sc[j] >> 6) << 4));
    }
    const float d = dd * s;
    if (d == 0) continue;  // the search's integers stay
    const float mm = dm * m;
    for (int i = 0; i < 32; ++i)
      L[32 * j + i] = static_cast<uint8_t>(clampi(nearest_int((x[32 * j + i] + mm) / d), 0, 15));
  }
  uint8_t* q = b + 16;
  for (int j = 0; j < 256; j += 64) {
    for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    q += 32;
  }
}

// block_q6_K: uint8 ql[128]; uint8 qh[64]; int8 scales[16]; f16 d.
void quantize_q6_k_block(const float* x, uint8_t* b) {
  int8_t L[256];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int g = 0; g < 16; ++g) {
    scales[g] = search_scale_sym(16, 32, x + 16 * g, L + 16 * g);
    const float a = std::fabs(scales[g]);
    if (a > max_abs_scale) {
      max_abs_scale = a;
      max_scale = scales[g];
    }
  }
  if (max_abs_scale < 1e-15f) {
    std::memset(b, 0, 210);
    return;
  }
  const float iscale = -128.0f / max_scale;
  const uint16_t dh = f32_to_f16(1 / iscale);
  int8_t* sc = reinterpret_cast<int8_t*>(b + 192);
  for (int g = 0; g < 16; ++g) {
    const int v = nearest_int(iscale * scales[g]);
    sc[g] = static_cast<int8_t>(v < 127 ? v : 127);
  }
  store16(b + 208, dh);
  const float dd = f16_to_f32(dh);
  for (int g = 0; g < 16; ++g) {
    const float d = dd * sc[g];
    if (d == 0) continue;
    for (int i = 0; i < 16; ++i)
      L[16 * g + i] = static_cast<int8_t>(clampi(nearest_int(x[16 * g + i] / d), -32, 31) + 32);
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  for (int j = 0; j < 256; j += 128) {
    for (int l = 0; l < 32; ++l) {
      const int q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
      const int q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
      ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
      ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
      qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                   ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
    }
    ql += 64;
    qh += 32;
  }
}

}  // namespace quant
}  // namespace oslo
