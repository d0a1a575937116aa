// CRC32C (Castagnoli), the checksum of every kvtier block on disk and on the
// wire. Uses the SSE4.2 crc32 instruction over three interleaved streams when
// the CPU has it, and a portable slicing-by-8 table otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/buffer.h"

namespace kvtier {

// Extends `crc` (a finished CRC32C value, 0 for an empty prefix) over `data`.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t len);

inline uint32_t crc32c(const void* data, size_t len) { return crc32c_extend(0, data, len); }
inline uint32_t crc32c(ByteView v) { return crc32c_extend(0, v.data(), v.size()); }

// The same computation forced onto the portable path (for tests and for
// machines without SSE4.2).
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t len);

// True when the hardware path is in use.
bool crc32c_hardware_available();

}  // namespace kvtier
