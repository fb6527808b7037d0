// Element types and conversions. The CPU computes in f32; f16 and bf16 are
// storage types converted on the way in and out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "oslo.h"

namespace oslo {

size_t dtype_size(oslo_dtype dt);       // throws on an unknown dtype
const char* dtype_name(oslo_dtype dt);  // "f32", ...; "unknown" for bad values
bool dtype_valid(int dt);
bool dtype_is_float(oslo_dtype dt);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements between a storage dtype and f32 (f32 -> plain copy).
void to_f32(oslo_dtype src_dtype, const void* src, float* dst, size_t n);
void from_f32(oslo_dtype dst_dtype, const float* src, void* dst, size_t n);

}  // namespace oslo
