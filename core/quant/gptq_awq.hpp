// GPTQ and AWQ 4-bit checkpoints converted to Q4_G128 rows: pure functions
// over one linear layer's checkpoint tensors (already read into host
// memory). Layouts (docs/QUANTIZATION.md, "GPTQ and AWQ"), for a linear of
// K = in_features inputs and N = out_features outputs, groups of G = 128
// inputs:
//
//   GPTQ (AutoGPTQ, GPTQModel, transformers "gptq"):
//     qweight int32 [K / 8, N]   input k of output n: nibble k % 8 (bits
//                                4 (k % 8) ..) of qweight[k / 8][n]
//     qzeros  int32 [K / G, N / 8] zero of (group g, output n): nibble n % 8
//                                of qzeros[g][n / 8]; the classic format
//                                (checkpoint_format "gptq") stores zero - 1,
//                                "gptq_v2" stores the zero itself
//     scales  f16   [K / G, N]
//     g_idx   int32 [K]          the group of each input (act-order when
//                                not k / G)
//     W[n][k] = scales[g][n] * (q - zero), g = g_idx[k]
//   AWQ (AutoAWQ "gemm"):
//     qweight int32 [K, N / 8]   output n of input k: nibble p of
//                                qweight[k][n / 8] where p =
//                                kAwqNibble[n % 8] = {0, 4, 1, 5, 2, 6, 3, 7}
//                                (AutoAWQ packs column 8c + [0,2,4,6,1,3,5,7][i]
//                                into nibble i)
//     qzeros  int32 [K / G, N / 8] the same nibble order, zeros as they are
//     scales  f16   [K / G, N]
//     W[n][k] = (q - zero) * scales[k / G][n]
//
// The result is N rows of K / 128 Q4_G128 blocks: block g of row n holds
// d = scales[g][n] (the checkpoint's f16 bits), z = the zero point, and the
// 128 nibbles of its inputs, so dequantize_row gives (q - z) * d in f32.
// That f32 value is the exact product (|q - z| <= 16 needs 5 bits, d has 11
// significant bits: 16 bits fit f32's 24), so it equals transformers'
// dequantization (done in f16: fp16(exact product)) up to that one f16
// rounding: oslo's value rounded to f16 is transformers' bit for bit.
//
// Errors (oslo::Error, the message naming `name`): OSLO_ERR_SHAPE for
// tensors whose shapes disagree with K, N and G (or a group count that is
// not K / G); OSLO_ERR_NOT_SUPPORTED for a group size other than 128 (named)
// and K not a multiple of 128; OSLO_ERR_FORMAT for a zero point that
// q4_g128 cannot hold (a classic-format stored zero of 15 means 16), a
// g_idx entry out of range or groups of unequal sizes. Thread-safe (pure).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace oslo {
namespace quant {

enum class PackedKind { Gptq, Awq };

// The checkpoint tensors of one linear, as host arrays with their shapes.
struct PackedLinear {
  PackedKind kind = PackedKind::Gptq;
  std::string name;             // for messages (the linear's prefix)
  int64_t in_features = 0;      // K
  int64_t out_features = 0;     // N
  int64_t group_size = 128;     // G: must be 128
  bool zeros_minus_one = true;  // GPTQ classic format (ignored for AWQ)
  const int32_t* qweight = nullptr;
  std::vector<int64_t> qweight_shape;
  const int32_t* qzeros = nullptr;
  std::vector<int64_t> qzeros_shape;
  const uint16_t* scales = nullptr;  // f16 bits
  std::vector<int64_t> scales_shape;
  const int32_t* g_idx = nullptr;  // GPTQ only; nullptr: trivial
  std::vector<int64_t> g_idx_shape;
};

// AWQ's nibble of output column n % 8 (the inverse of AutoAWQ's pack order
// [0, 2, 4, 6, 1, 3, 5, 7]).
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// Checks every shape (see above; the data pointers may be null) without
// converting. Throws as above.
void check_packed(const PackedLinear& p);

// The input permutation of a GPTQ act-order g_idx: empty when g_idx is
// null or trivial (g_idx[k] == k / G for every k); otherwise perm of K
// entries, perm[j] = the input column at position j, sorting the inputs by
// group (stably), so that positions [128 g, 128 g + 128) are group g. The
// converted rows then hold W[n][perm[j]] at position j, and y = W x equals
// rows . x' with x'[j] = x[perm[j]]: the caller permutes activations.
std::vector<int64_t> act_order_permutation(const PackedLinear& p);

// Writes rows [row_begin, row_begin + rows) of the converted weight
// (outputs n), each row_bytes(Q4_G128, K) bytes, into dst; `perm` is
// act_order_permutation(p). Throws as above (OSLO_ERR_INVALID_ARGUMENT for
// a row range outside [0, N)).
void packed_to_q4_g128(const PackedLinear& p, const std::vector<int64_t>& perm, int64_t row_begin,
                       int64_t rows, uint8_t* dst);

}  // namespace quant
}  // namespace oslo
