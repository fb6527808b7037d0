// Block formats of quantized weights: llama.cpp's GGUF block types Q8_0,
// Q4_0, Q4_K and Q6_K with their exact byte layouts, oslo's Q4_G128 (4-bit
// groups of 128 with an f16 scale and a zero point: GPTQ/AWQ), plus the F32,
// F16 and BF16 passthrough types (see README.md in this folder for the
// layouts).
//
// A row of n elements is stored as n / block_elems blocks of block_bytes
// each, little-endian; a tensor is its rows one after another (the row is the
// innermost, contiguous dimension: GGUF's ne[0]). The scalar reference code
// here is the definition the later kernels (CPU SIMD, CUDA) are checked
// against: dequantize_row computes exactly what llama.cpp's
// dequantize_row_* and gguf-py's gguf.quants compute (no fused multiply-add,
// the same order of operations), and quantize_row gives the bytes of
// llama.cpp's reference quantizers quantize_row_q8_0_ref, _q4_0_ref,
// _q4_K_ref and _q6_K_ref.
//
// Errors: oslo::Error with OSLO_ERR_INVALID_ARGUMENT naming the format, the
// tensor where one is given, and the offending length or range. All functions
// are pure (no state); any thread may call them concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace oslo {
namespace quant {

// The formats. The numeric values are oslo's own (dense, for tables); GGUF's
// type ids are in gguf_type_id().
enum class Format : uint8_t { F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, Q4_G128 };
constexpr int kFormatCount = static_cast<int>(Format::Q4_G128) + 1;

// Elements of a Q4_G128 group.
constexpr size_t kGroup128 = 128;

// Elements of a K-quant super-block (llama.cpp's QK_K).
constexpr size_t kSuperBlock = 256;

// "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k", "q4_g128". Never
// null; an out-of-range value gives "unknown".
const char* format_name(Format f);

// Parses an exact lower-case name from format_name; false if unknown.
bool parse_format(const std::string& name, Format* out);

// The format of a block-quantized oslo dtype (OSLO_DTYPE_Q8_0 -> Q8_0, ...;
// also F32/F16/BF16). OSLO_ERR_DTYPE naming the dtype for any other.
Format format_of_dtype(int dtype);
// The oslo dtype of a format (as an int: oslo.h's oslo_dtype values).
int dtype_of_format(Format f);

// GGUF's (ggml's) numeric type id: F32 0, F16 1, Q4_0 2, Q8_0 8, Q4_K 12,
// Q6_K 14, BF16 30. Q4_G128 has none: OSLO_ERR_NOT_SUPPORTED saying so.
uint32_t gguf_type_id(Format f);
// False for the formats GGUF has no type for (Q4_G128).
bool has_gguf_type(Format f);

// The format of a GGUF type id; false for ids oslo does not read (it never
// throws: the caller names the file and tensor in its error). No id maps
// to Q4_G128.
bool from_gguf_type_id(uint32_t id, Format* out);

// ggml's name of a GGUF type id ("Q5_K", "IQ2_XXS", ...) for messages about
// types oslo refuses; "type <id>" for ids ggml does not define.
std::string gguf_type_name(uint32_t id);

// Elements per block (1 for F32/F16/BF16, 32 for Q8_0/Q4_0, 256 for the
// K-quants, 128 for Q4_G128) and bytes per block (4, 2, 2, 34, 18, 144,
// 210, 68).
size_t block_elems(Format f);
size_t block_bytes(Format f);

// True for the block formats (Q8_0, Q4_0, Q4_K, Q6_K, Q4_G128).
bool is_quantized(Format f);

// Whether quantize_row supports the format (all of them).
bool can_quantize(Format f);

// Bytes of one row of n elements. OSLO_ERR_INVALID_ARGUMENT naming `tensor`
// (when not empty), the row length and the block size when n is not a
// multiple of block_elems(f), or when the size overflows.
uint64_t row_bytes(Format f, uint64_t n, const std::string& tensor = "");

// Bytes of a tensor of this shape (outermost first, the row last; an empty
// shape is a scalar, which only the passthrough formats allow). Same errors
// as row_bytes, plus overflow of the product.
uint64_t tensor_bytes(Format f, const std::vector<uint64_t>& shape, const std::string& tensor = "");

// Dequantizes one row of n elements: reads row_bytes(f, n) bytes at src,
// writes n floats at dst. Throws as row_bytes for a bad n. Any byte pattern
// is valid input (NaN/inf scales give NaN/inf values, as in llama.cpp; a
// Q4_G128 zero point above 15 is used as it is): bytes read from a file
// go through check_blocks first.
void dequantize_row(Format f, const void* src, float* dst, uint64_t n);

// Validates blocks read from a file: `rows` rows of n elements at src.
// Only Q4_G128 has invalid patterns: a zero point above 15 or a reserved
// byte that is not 0 is OSLO_ERR_FORMAT naming `tensor` (when not empty),
// the row and the group. Other formats: only row_bytes's checks.
void check_blocks(Format f, const void* src, uint64_t rows, uint64_t n,
                  const std::string& tensor = "");

// Dequantizes `rows` rows of n elements each (src rows are row_bytes apart).
void dequantize_rows(Format f, const void* src, float* dst, uint64_t rows, uint64_t n);

// Quantizes one row of n floats into row_bytes(f, n) bytes at dst, bit for
// bit as llama.cpp's reference quantizer (Q8_0: d = amax / 127, q =
// roundf(x / d); Q4_0: d = (value of largest magnitude) / -8, q = min(15,
// (int8)(x / d + 8.5)); Q4_K and Q6_K: the iterative scale searches of
// quantize_row_q4_K_ref / _q6_K_ref, README.md; F16/BF16 round to nearest
// even). Q4_G128 (oslo's own, GPTQ's round-to-nearest): per group of 128,
// lo = min(0, min x), hi = max(0, max x), d = f16((hi - lo) / 15) (capped
// at 65504, the largest f16), z = clamp(rint(-lo / d), 0, 15), q =
// clamp(rint(x / d) + z, 0, 15) with rint rounding half to even and d the
// stored f16 value read back (d = 0: z = 0, q = 0). Throws as row_bytes for
// a bad n. Inputs should be finite: for inf/NaN the result is defined (no
// undefined behaviour) but does not necessarily match llama.cpp.
void quantize_row(Format f, const float* src, void* dst, uint64_t n);

// Tensor parallelism cuts tensors along one dimension. Every row holds whole
// blocks, so a cut along an outer dimension always falls on block
// boundaries; a cut along the row (the last dimension of `shape`) must start
// and end at multiples of block_elems(f). check_shard_range validates a cut
// [begin, end) of dimension `dim` of a tensor of this shape: OSLO_ERR_
// INVALID_ARGUMENT naming the tensor, the range, the dimension and the block
// size when a block would be split, when the range is empty-reversed or past
// the dimension, or when dim is out of range.
// (Q4_G128: rows are cut at multiples of 128.)
void check_shard_range(Format f, const std::string& tensor, const std::vector<uint64_t>& shape,
                       size_t dim, uint64_t begin, uint64_t end);

}  // namespace quant
}  // namespace oslo
