// CRC32C (Castagnoli), the checksum of every stored piece of a version-2
// checkpoint (core/checkpoint/FORMAT.md).
#pragma once

#include <cstddef>
#include <cstdint>

namespace oslo {

// CRC32C of n bytes, continuing from `crc` (0 to start; pass the previous
// result to checksum data that arrives in pieces). Uses the SSE4.2
// instruction where the CPU has it, a table otherwise (same result).
// Thread-safe; no allocation; never throws.
uint32_t crc32c(uint32_t crc, const void* data, size_t n);

}  // namespace oslo
