// Element types and conversions. The CPU computes in f32; f16 and bf16 are
// storage types converted on the way in and out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "oslo.h"

namespace oslo {

// Bytes of one element (1 for OSLO_DTYPE_I8, the int8 KV cache's storage,
// which dtype_valid() still refuses). Throws OSLO_ERR_DTYPE on an unknown
// dtype and on a block-quantized one (no element size: use dtype_bytes).
size_t dtype_size(oslo_dtype dt);
const char* dtype_name(oslo_dtype dt);  // "f32", ..., "q8_0"; "unknown" for bad values
// The element dtypes (f32, f16, bf16, i32, i64): what calls taking element
// data accept. False for the block-quantized ones.
bool dtype_valid(int dt);
bool dtype_is_float(oslo_dtype dt);
// The block-quantized weight dtypes (OSLO_DTYPE_Q8_0 ...).
bool dtype_is_block(int dt);
// Any dtype a weight may be stored in: dtype_valid or dtype_is_block.
bool dtype_known(int dt);
// Elements and bytes of one block: 1 and dtype_size for element dtypes.
// Throws OSLO_ERR_DTYPE on an unknown dtype.
void dtype_block(oslo_dtype dt, int64_t* elems, int64_t* bytes);
// Bytes of `elements` consecutive elements (a whole row or a run of rows):
// elements * dtype_size, or for a block dtype whole blocks (OSLO_ERR_SHAPE
// naming the block size when `elements` is not a multiple of it).
size_t dtype_bytes(oslo_dtype dt, int64_t elements);
// Parses "f32", "f16", "bf16", "i32", "i64", "q8_0", "q4_0", "q4_k", "q6_k",
// "q4_g128" (exact, lower case); false if unknown.
bool dtype_parse(const char* name, oslo_dtype* out);

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
