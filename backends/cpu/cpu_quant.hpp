// Products with block-quantized weights on the CPU (oslo_backend.h's
// dequantize and matmul_quant; the paths are described in cpu_quant.cpp).
#pragma once

#include <cstdint>

#include "backends/cpu/cpu_matmul.hpp"  // Matmul::Activation
#include "backends/cpu/cpu_ops.hpp"

namespace oslo {
namespace cpu {

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
void matmul_quant(int threads, const V& c, const V& a, const V& w, const V* bias,
                  const Matmul::Activation* activation, int64_t gemm_rows = -1);
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
struct QuantKernels {
  const char* isa;    // "avx512vnni", "avxvnni", "avx2" or "scalar"
  QuantDotFn dot[4];  // q8_0, q4_0, q4_k, q6_k
  QuantizeBlockFn quantize_block;
};
// The kernels of the best instruction set this CPU has (picked once); with
// `force_isa` (for the tests and the benchmark: "scalar", "avx2", ...) that
// set, or nullptr when the CPU lacks it.
const QuantKernels* quant_kernels(const char* force_isa = nullptr);

}  // namespace cpu
}  // namespace oslo
