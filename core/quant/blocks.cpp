// The scalar reference kernels of quant.hpp: dequantize and quantize one row,
// block by block, in llama.cpp's order of operations (ggml-quants.c:
// dequantize_row_q8_0, _q4_0, _q4_K, _q6_K, quantize_row_q8_0_ref,
// _q4_0_ref; the K-quant quantizers are in kquants.cpp), and oslo's Q4_G128.
// This file is compiled with -ffp-contract=off (CMakeLists.txt): a fused
// multiply-add would round once where llama.cpp rounds twice.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/common/dtype.hpp"
#include "core/common/error.hpp"
#include "core/quant/kernels.hpp"
#include "core/quant/quant.hpp"

namespace oslo {
namespace quant {

namespace {

uint16_t load16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
void store16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xff);
  p[1] = static_cast<uint8_t>(v >> 8);
}
float half(const uint8_t* p) {
  return f16_to_f32(load16(p));
}

// block_q8_0: f16 d; int8 qs[32]. x = d * q.
void deq_q8_0(const uint8_t* b, float* y) {
  const float d = half(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// block_q4_0: f16 d; uint8 qs[16]: element j in the low nibble of qs[j],
// element j + 16 in its high nibble. x = (q - 8) * d.
void deq_q4_0(const uint8_t* b, float* y) {
  const float d = half(b);
  for (int j = 0; j < 16; ++j) {
    const int x0 = (b[2 + j] & 0x0F) - 8;
    const int x1 = (b[2 + j] >> 4) - 8;
    y[j] = static_cast<float>(x0) * d;
    y[j + 16] = static_cast<float>(x1) * d;
  }
}

// The 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes of
// a Q4_K super-block (llama.cpp's get_scale_min_k4).
void scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

// block_q4_K: f16 d; f16 dmin; uint8 scales[12]; uint8 qs[128]. Eight
// sub-blocks of 32; sub-block pair (2i, 2i+1) shares qs[32i .. 32i+31], low
// nibbles then high nibbles. x = (d * sc) * q - (dmin * m).
void deq_q4_k(const uint8_t* b, float* y) {
  const float d = half(b);
  const float min = half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  int is = 0;
  for (int j = 0; j < 256; j += 64) {
    uint8_t sc, m;
    scale_min_k4(is + 0, scales, &sc, &m);
    const float d1 = d * sc;
    const float m1 = min * m;
    scale_min_k4(is + 1, scales, &sc, &m);
    const float d2 = d * sc;
    const float m2 = min * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    q += 32;
    is += 2;
  }
}

// block_q6_K: uint8 ql[128] (low 4 bits); uint8 qh[64] (high 2 bits);
// int8 scales[16] (one per 16 elements); f16 d. x = (d * sc) * (q - 32).
void deq_q6_k(const uint8_t* b, float* y) {
  const float d = half(b + 208);
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l + 0] = d * sc[is + 0] * static_cast<float>(q1);
      y[l + 32] = d * sc[is + 2] * static_cast<float>(q2);
      y[l + 64] = d * sc[is + 4] * static_cast<float>(q3);
      y[l + 96] = d * sc[is + 6] * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

// A float -> integer conversion without undefined behaviour: C++ leaves it
// undefined for NaN and out-of-range values (which only non-finite inputs
// reach here); those give lo.
int to_int_clamped(float v, int lo, int hi) {
  if (!(v >= static_cast<float>(lo))) return lo;
  if (v > static_cast<float>(hi)) return hi;
  return static_cast<int>(v);
}

// quantize_row_q8_0_ref: d = amax / 127, id = 1 / d (0 if d is 0),
// q = roundf(x * id) (half away from zero).
void quant_q8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store16(b, f32_to_f16(d));
  for (int j = 0; j < 32; ++j) {
    const float x0 = x[j] * id;
    b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(to_int_clamped(std::round(x0), -128, 127)));
  }
}

// quantize_row_q4_0_ref: max = the value of largest magnitude (its sign
// kept; the first one on ties), d = max / -8, id = 1 / d (0 if d is 0),
// q = min(15, (int8)(x * id + 8.5)).
void quant_q4_0(const float* x, uint8_t* b) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float v = x[j];
    if (amax < std::fabs(v)) {
      amax = std::fabs(v);
      max = v;
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store16(b, f32_to_f16(d));
  for (int j = 0; j < 16; ++j) {
    const float x0 = x[j] * id;
    const float x1 = x[16 + j] * id;
    const int q0 = std::min(15, to_int_clamped(x0 + 8.5f, 0, 127));
    const int q1 = std::min(15, to_int_clamped(x1 + 8.5f, 0, 127));
    b[2 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

// Q4_G128: f16 d; uint8 z; uint8 reserved (0); uint8 qs[64]: element j
// (0..63) in the low nibble of qs[j], element j + 64 in its high nibble.
// x = (q - z) * d: the exact small integer q - z times d, one f32 rounding.
void deq_q4_g128(const uint8_t* b, float* y) {
  const float d = half(b);
  const int z = b[2];
  for (int j = 0; j < 64; ++j) {
    y[j] = static_cast<float>((b[4 + j] & 0x0F) - z) * d;
    y[j + 64] = static_cast<float>((b[4 + j] >> 4) - z) * d;
  }
}

// Round to nearest, ties to even, clamped to [lo, hi] (NaN gives lo).
int rint_clamped(float v, int lo, int hi) {
  return to_int_clamped(std::nearbyint(v), lo, hi);
}

// GPTQ's round-to-nearest quantizer for one group of 128 (quant.hpp).
void quant_q4_g128(const float* x, uint8_t* b) {
  float lo = 0.0f, hi = 0.0f;  // the range always holds 0
  for (int j = 0; j < 128; ++j) {
    lo = std::fmin(lo, x[j]);
    hi = std::fmax(hi, x[j]);
  }
  float d32 = (hi - lo) / 15.0f;
  if (d32 > 65504.0f) d32 = 65504.0f;  // the largest finite f16
  const uint16_t dh = f32_to_f16(d32);
  const float d = f16_to_f32(dh);
  store16(b, dh);
  b[3] = 0;
  if (!(d > 0.0f)) {  // all zeros, or a range below f16's smallest step
    b[2] = 0;
    std::memset(b + 4, 0, 64);
    return;
  }
  const int z = rint_clamped(-lo / d, 0, 15);
  b[2] = static_cast<uint8_t>(z);
  for (int j = 0; j < 64; ++j) {
    const int q0 = std::min(15, std::max(0, rint_clamped(x[j] / d, -16, 31) + z));
    const int q1 = std::min(15, std::max(0, rint_clamped(x[j + 64] / d, -16, 31) + z));
    b[4 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

}  // namespace

void check_blocks(Format f, const void* src, uint64_t rows, uint64_t n, const std::string& tensor) {
  const uint64_t rb = row_bytes(f, n, tensor);
  if (f != Format::Q4_G128) return;
  const uint8_t* s = static_cast<const uint8_t*>(src);
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t g = 0; g < n / 128; ++g) {
      const uint8_t* b = s + r * rb + g * 68;
      if (b[2] > 15 || b[3] != 0)
        fail(OSLO_ERR_FORMAT, tensor.empty() ? std::string() : "tensor " + quote(tensor) + ": ",
             "q4_g128 row ", r, ", group ", g, ": ",
             b[2] > 15 ? "zero point " + std::to_string(b[2]) + " is above 15"
                       : "reserved byte is " + std::to_string(b[3]) + ", not 0");
    }
}

void dequantize_row(Format f, const void* src, float* dst, uint64_t n) {
  const uint64_t nbytes = row_bytes(f, n);
  const uint8_t* s = static_cast<const uint8_t*>(src);
  const size_t bb = block_bytes(f), be = block_elems(f);
  switch (f) {
    case Format::F32: std::memcpy(dst, s, nbytes); return;
    case Format::F16:
      for (uint64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load16(s + 2 * i));
      return;
    case Format::BF16:
      for (uint64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load16(s + 2 * i));
      return;
    default: break;
  }
  void (*deq)(const uint8_t*, float*) = nullptr;
  switch (f) {
    case Format::Q8_0: deq = deq_q8_0; break;
    case Format::Q4_0: deq = deq_q4_0; break;
    case Format::Q4_K: deq = deq_q4_k; break;
    case Format::Q6_K: deq = deq_q6_k; break;
    case Format::Q4_G128: deq = deq_q4_g128; break;
    default: fail(OSLO_ERR_INTERNAL, "dequantize_row: no kernel for ", format_name(f));
  }
  for (uint64_t i = 0; i < n / be; ++i) deq(s + i * bb, dst + i * be);
}

void dequantize_rows(Format f, const void* src, float* dst, uint64_t rows, uint64_t n) {
  const uint64_t rb = row_bytes(f, n);
  const uint8_t* s = static_cast<const uint8_t*>(src);
  for (uint64_t r = 0; r < rows; ++r) dequantize_row(f, s + r * rb, dst + r * n, n);
}

void quantize_row(Format f, const float* src, void* dst, uint64_t n) {
  const uint64_t nbytes = row_bytes(f, n);
  uint8_t* d = static_cast<uint8_t*>(dst);
  switch (f) {
    case Format::F32: std::memcpy(d, src, nbytes); return;
    case Format::F16:
      for (uint64_t i = 0; i < n; ++i) store16(d + 2 * i, f32_to_f16(src[i]));
      return;
    case Format::BF16:
      for (uint64_t i = 0; i < n; ++i) store16(d + 2 * i, f32_to_bf16(src[i]));
      return;
    case Format::Q8_0:
      for (uint64_t i = 0; i < n / 32; ++i) quant_q8_0(src + 32 * i, d + 34 * i);
      return;
    case Format::Q4_0:
      for (uint64_t i = 0; i < n / 32; ++i) quant_q4_0(src + 32 * i, d + 18 * i);
      return;
    case Format::Q4_K:
      for (uint64_t i = 0; i < n / 256; ++i) quantize_q4_k_block(src + 256 * i, d + 144 * i);
      return;
    case Format::Q6_K:
      for (uint64_t i = 0; i < n / 256; ++i) quantize_q6_k_block(src + 256 * i, d + 210 * i);
      return;
    case Format::Q4_G128:
      for (uint64_t i = 0; i < n / 128; ++i) quant_q4_g128(src + 128 * i, d + 68 * i);
      return;
  }
  fail(OSLO_ERR_INVALID_ARGUMENT, "unknown quant format ", static_cast<int>(f));
}

}  // namespace quant
}  // namespace oslo
