// The RAM limit a store is measured against: single-thread copies of
// objects of one size from a pool larger than the caches into one
// destination buffer, exactly the copy a RAM-tier get must make; the faster
// of one memcpy per object and the chunked copy_block (common/block_copy.h).
#pragma once

#include <cstdint>

namespace kvtier::bench {

struct MemcpyLimit {
  double bytes_per_second = 0;
};

// Copies `object_bytes` objects taken round-robin from a `pool_bytes` pool for
// about `seconds`; best of `rounds` for each way of copying.
MemcpyLimit measure_memcpy(uint64_t object_bytes, uint64_t pool_bytes, double seconds,
                           int rounds = 3);

}  // namespace kvtier::bench
