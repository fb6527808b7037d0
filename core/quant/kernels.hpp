// Internal to core/quant: the per-block quantizers that blocks.cpp
// dispatches to (kquants.cpp). Not part of quant.hpp's interface.
#pragma once

#include <cstdint>

namespace oslo {
namespace quant {

// One super-block of 256 floats to 144 bytes of Q4_K / 210 bytes of Q6_K,
// bit for bit as llama.cpp's quantize_row_q4_K_ref / quantize_row_q6_K_ref.
void quantize_q4_k_block(const float* x, uint8_t* b);
void quantize_q6_k_block(const float* x, uint8_t* b);

}  // namespace quant
}  // namespace oslo
