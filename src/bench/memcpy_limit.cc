#include "bench/memcpy_limit.h"

#include <algorithm>
#include <cstring>

#include "common/block_copy.h"
#include "common/buffer.h"
#include "common/clock.h"

namespace kvtier::bench {

namespace {

// Best rate of `copy` over `rounds` rounds of about seconds/rounds each.
template <typename Copy>
double best_rate(const AlignedBuffer& pool, AlignedBuffer& dst, uint64_t objects,
                 uint64_t object_bytes, double seconds, int rounds, Copy copy) {
  double best = 0;
  for (int r = 0; r < rounds; ++r) {
    const uint64_t t0 = now_ns();
    const uint64_t until = t0 + static_cast<uint64_t>(seconds / rounds * 1e9);
    uint64_t copied = 0, i = 0;
    uint64_t t = t0;
    while (t < until) {
      copy(dst.data(), pool.data() + (i % objects) * object_bytes, object_bytes);
      asm volatile("" : : "r"(dst.data()) : "memory");
      copied += object_bytes;
      ++i;
      t = now_ns();
    }
    best = std::max(best, copied * 1e9 / static_cast<double>(t - t0));
  }
  return best;
}

}  // namespace

MemcpyLimit measure_memcpy(uint64_t object_bytes, uint64_t pool_bytes, double seconds, int rounds) {
  const uint64_t objects = std::max<uint64_t>(1, pool_bytes / object_bytes);
  AlignedBuffer pool(objects * object_bytes);
  AlignedBuffer dst(object_bytes);
  std::memset(pool.data(), 0x5A, pool.size());  // fault the pages in
  std::memset(dst.data(), 0, dst.size());
  // Half the time each: one memcpy per object, and the chunked copy_block
  // (common/block_copy.h); the limit is the faster of the two.
  MemcpyLimit best;
  best.bytes_per_second =
      std::max(best_rate(pool, dst, objects, object_bytes, seconds / 2, rounds,
                         [](void* d, const void* s, size_t n) { std::memcpy(d, s, n); }),
               best_rate(pool, dst, objects, object_bytes, seconds / 2, rounds,
                         [](void* d, const void* s, size_t n) { copy_block(d, s, n); }));
  return best;
}

}  // namespace kvtier::bench
