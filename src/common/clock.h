// Monotonic time in nanoseconds, the one clock every latency in kvtier uses.
#pragma once

#include <chrono>
#include <cstdint>

namespace kvtier {

inline uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace kvtier
