#include "bench/memcpy_limit.h"

#include <algorithm>
#include <cstring>

#include "common/buffer.h"
#include "common/clock.h"

namespace kvtier::bench {

MemcpyLimit measure_memcpy(uint64_t object_bytes, uint64_t pool_bytes, double seconds, int rounds) {
  const uint64_t objects = std::max<uint64_t>(1, pool_bytes / object_bytes);
  AlignedBuffer pool(objects * object_bytes);
  AlignedBuffer dst(object_bytes);
  std::memset(pool.data(), 0x5A, pool.size());  // fault the pages in
  std::memset(dst.data(), 0, dst.size());
  MemcpyLimit best;
  for (int r = 0; r < rounds; ++r) {
    const uint64_t t0 = now_ns();
    const uint64_t until = t0 + static_cast<uint64_t>(seconds / rounds * 1e9);
    uint64_t copied = 0, i = 0;
    uint64_t t = t0;
    while (t < until) {
      std::memcpy(dst.data(), pool.data() + (i % objects) * object_bytes, object_bytes);
      asm volatile("" : : "r"(dst.data()) : "memory");
      copied += object_bytes;
      ++i;
      t = now_ns();
    }
    best.bytes_per_second =
        std::max(best.bytes_per_second, copied * 1e9 / static_cast<double>(t - t0));
  }
  return best;
}

}  // namespace kvtier::bench
