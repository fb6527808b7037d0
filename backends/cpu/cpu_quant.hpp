// Products with block-quantized weights on the CPU (oslo_backend.h's
// dequantize and matmul_quant; the paths are described in cpu_quant.cpp).
#pragma once

#include <cstdint>
#include <memory>

#include "backends/cpu/cpu_matmul.hpp"  // Matmul::Activation
#include "backends/cpu/cpu_ops.hpp"

namespace oslo {
namespace cpu {

struct QuantPacked;  // below

// Whether dequantize / matmul_quant take weights of this dtype (the four
// block dtypes: q8_0, q4_0, q4_k, q6_k).
bool quant_supported(oslo_dtype dtype);

// out [N, K] (f32, f16 or bf16, any strides) = the values of w [N, K]
// (block-quantized, strides {S, 1}), bit for bit as core/quant's reference
// (llama.cpp's dequantize_row_*) and rounded once to out's dtype. Threads
// split the rows. Throws oslo::Error (OSLO_ERR_DTYPE, OSLO_ERR_SHAPE,
// OSLO_ERR_INVALID_ARGUMENT) naming the problem.
void dequantize(int threads, const V& out, const V& w);

// c [M, N] = a [M, K] @ dequantize(w)^T (+ bias), then with `activation`
// act(...) * gate: oslo_backend.h's matmul_quant, including its error bound
// (each block of 32 values of a row of a is quantized to 8 bits with an f32
// scale). Threads split N. From quant_gemm_rows(w's dtype) rows of a on, the
// product goes through oneDNN's f32 GEMM on dequantized tiles of w instead
// (exact up to f32 rounding); `gemm_rows` (>= 0) moves that switch
// (bench/quant measures both paths with it). Throws as dequantize.
// With `packed` (pack_quant(w)), every path reads the weight from it alone
// (the integer path through the eight-row kernels, the GEMM path through
// unpacked groups): w gives the dtype and shape, and its data may be NULL.
void matmul_quant(int threads, const V& c, const V& a, const V& w, const V* bias,
                  const Matmul::Activation* activation, int64_t gemm_rows = -1,
                  const QuantPacked* packed = nullptr);
// The rows of a from which matmul_quant multiplies through the GEMM: 384 for
// q8_0 and q4_0, 192 for the K-quants (bench_quant --prefill, Zen 3).
int64_t quant_gemm_rows(oslo_dtype dtype);

// The row-dot kernels (cpu_quant_dot.cpp), for the SIMD level of this CPU.
// A row of activations quantized in blocks of 32: q (K int8), d (K / 32 f32
// scales: value = q * d), s16 (K / 16 sums of q over each 16).
struct QuantRow {
  const int8_t* q;
  const float* d;
  const int16_t* s16;
};
// out[r] = sum over the K elements of row w (whole blocks of `dtype`) times
// rows[r] (r < R, 1 <= R <= 4), accumulated in f32 block by block.
using QuantDotFn = void (*)(const uint8_t* w, int64_t K, const QuantRow* rows, int R, float* out);
// Quantizes one block of 32 activations x: q[i] = nearbyint(x[i] / d)
// clamped to [-127, 127] (NaN: 0), *d = max |x| / 127 (NaN ignored), s16[0]
// and s16[1] the sums of q[0..15] and q[16..31]. Every instruction set gives
// the same bytes (quant_cpu_kernels checks it).
using QuantizeBlockFn = void (*)(const float* x, int8_t* q, float* d, int16_t* s16);
// The eight-row kernels of the packed layouts (cpu_quant_packed.cpp):
// out[8 r + i] = sum over K of row i of the group at p times rows[r]
// (r < R, 1 <= R <= 4).
using QuantDot8Fn = void (*)(const uint8_t* p, int64_t K, const QuantRow* rows, int R, float* out);
struct QuantKernels {
  const char* isa;    // "avx512vnni", "avxvnni", "avx2" or "scalar"
  QuantDotFn dot[4];  // q8_0, q4_0, q4_k, q6_k
  QuantizeBlockFn quantize_block;
  QuantDot8Fn dot8[4];  // the packed layouts' (nullptr: q6_k has none)
};
// The kernels of the best instruction set this CPU has (picked once); with
// `force_isa` (for the tests and the benchmark: "scalar", "avx2", ...) that
// set, or nullptr when the CPU lacks it.
const QuantKernels* quant_kernels(const char* force_isa = nullptr);

// --- packed copies (oslo_backend.h's pack_weight for block dtypes) ----------
// Eight weight rows interleaved so that one contiguous stream feeds eight
// dot products whose sums sit in the eight lanes of one vector (the shape
// of llama.cpp's q4_0_8x8 repacking; the layouts here are oslo's own). A
// group is rows 8g..8g+7; its blocks follow one another, each:
//   q8_0  (272 bytes per 32 columns): the eight rows' f16 scales, then 8
//         chunks of 32 bytes: chunk v holds row i's codes 4v..4v+3 at 4i;
//   q4_0  (144 bytes per 32 columns): the eight f16 scales, then 4 chunks
//         of 32 bytes: chunk v holds row i's bytes 4v..4v+3 at 4i (low
//         nibbles columns 4v.., high nibbles 16 + 4v..);
//   q4_k  (1184 bytes per 256 columns): f16 d[8], f16 dmin[8], the 6-bit
//         scales unpacked to bytes sc[8 sub-blocks][8 rows], the mins
//         mn[8][8], then for each pair i of sub-blocks 8 chunks of 32 bytes:
//         chunk v holds row i's quant bytes 32i + 4v..+3 at 4i (low nibbles
//         sub-block 2i, high nibbles 2i + 1).
// The rows past the last whole group (fewer than 8) follow the groups in
// their plain layout, so the copy holds the whole weight: the products
// never read the plain weight, and unpack_quant() gives its bytes back
// (oslo_backend.h's unpack_weight). q6_k has no packed layout.
// Where a packed copy's memory comes from (the backend's allocator, whose
// big blocks go back to the system when freed); without one, aligned_alloc.
struct QuantMemory {
  void* (*alloc)(void* ctx, size_t bytes);  // throws on failure
  void (*free)(void* ctx, void* p, size_t bytes);
  void* ctx;
};
struct QuantPacked {
  oslo_dtype dtype = OSLO_DTYPE_Q4_0;
  int64_t N = 0, K = 0;     // the plain weight's shape
  int64_t groups = 0;       // N / 8
  size_t group_bytes = 0;   // one group's bytes (all of K)
  size_t row_bytes = 0;     // one plain row's bytes (all of K)
  uint8_t* data = nullptr;  // the groups, then the tail rows; 64-byte aligned
  QuantMemory mem{};        // data's allocator (mem.free null: std::free)
  size_t alloc_bytes = 0;   // data's allocated size
  QuantPacked() = default;
  QuantPacked(const QuantPacked&) = delete;
  QuantPacked& operator=(const QuantPacked&) = delete;
  ~QuantPacked();
  // The plain rows past the groups (N - 8 * groups of them, row_bytes apart).
  const uint8_t* tail() const { return data + static_cast<size_t>(groups) * group_bytes; }
  size_t bytes() const {
    return static_cast<size_t>(groups) * group_bytes +
           static_cast<size_t>(N - 8 * groups) * row_bytes;
  }
};

// Whether pack_quant() has a layout for dtype (q8_0, q4_0, q4_k).
bool quant_packs(oslo_dtype dtype);
// The packed copy of w [N, K] (block-quantized, strides {S, 1}: matmul_quant's
// weight), or nullptr when dtype has no layout or N < 8 (nothing to group).
// Threads split the groups. Throws as dequantize (a bad view) and
// OSLO_ERR_OUT_OF_MEMORY.
std::unique_ptr<QuantPacked> pack_quant(int threads, const V& w, const QuantMemory* mem = nullptr);
// Writes the weight pk was made from into w (pk's dtype and shape, row
// stride any whole blocks covering the row). Threads split the groups.
// Throws OSLO_ERR_DTYPE / OSLO_ERR_SHAPE when w is not that weight's dtype
// and shape, OSLO_ERR_INVALID_ARGUMENT when it has no data.
void unpack_quant(int threads, const QuantPacked& pk, const V& w);
// Packs rows [8g, 8g + 8) of one format (fmt_index order: q8_0, q4_0, q4_k)
// whose plain rows start at row[0..7] (K columns) into dst (group_bytes).
void pack_group(int fmt, const uint8_t* const row[8], int64_t K, uint8_t* dst);
// The inverse: the eight plain rows (K columns each) of the packed group src.
void unpack_group(int fmt, const uint8_t* src, int64_t K, uint8_t* const row[8]);
// A packed group's bytes for K columns of format fmt.
size_t packed_group_bytes(int fmt, int64_t K);
// The eight-row kernels (cpu_quant_packed.cpp) of format fmt for
// instruction set isa: 0 scalar, 1 avx2, 2 avxvnni, 3 avx512vnni (the AVX2
// ones where the compiler cannot target a VNNI set); nullptr for q6_k.
QuantDot8Fn quant_dot8(int fmt, int isa);
// A Q4_K super-block's eight 6-bit scales and mins from its 12 bytes q
// (llama.cpp's get_scale_min_k4).
void q4_k_scales(const uint8_t* q, uint8_t* sc, uint8_t* mn);

}  // namespace cpu
}  // namespace oslo
