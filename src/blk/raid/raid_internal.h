// Internals of RaidArray shared by its files (raid_array.cc: creation and
// assembly; raid_array_state.cc: state, superblocks and the write-intent
// bitmap; raid_array_io.cc: requests, parity and mirror I/O;
// raid_array_resync.cc: resync, rebuild and scrub) and by nothing else.
#pragma once

#include <time.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <random>

#include "blk/raid/raid_array.h"
#include "common/buffer.h"

namespace kvtier::blk::raid_internal {

inline constexpr auto kRelaxed = std::memory_order_relaxed;
inline constexpr uint64_t kBitmapMaxBits = 64 * 1024 * 8;  // a 64 KiB bitmap at most
// Member bytes one bit covers, at least: every newly set bit costs a bitmap
// write and flush on each member before the data write, so bits are coarse.
inline constexpr uint64_t kMinBytesPerBit = 64ull << 20;
inline constexpr uint64_t kDataAlign = 1ull << 20;
enum Op { kOpRead = 0, kOpWrite = 1, kOpFlush = 2, kOpTrim = 3 };

inline uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

inline size_t parity_count(RaidLevel l) {
  return l == RaidLevel::kRaid5 ? 1 : l == RaidLevel::kRaid6 ? 2 : 0;
}

// Per-thread scratch memory for stripe work, kept between requests so that
// encode and copies do not pay first-touch page faults on every request.
inline std::byte* scratch(size_t bytes) {
  thread_local AlignedBuffer buf;
  if (buf.size() < bytes) {
    buf = AlignedBuffer(align_up(bytes, 1 << 20), 4096);
    std::memset(buf.data(), 0, buf.size());
  }
  return buf.data();
}

inline std::array<uint8_t, 16> random_uuid() {
  std::random_device rd;
  std::array<uint8_t, 16> u{};
  for (auto& b : u) b = static_cast<uint8_t>(rd());
  return u;
}

}  // namespace kvtier::blk::raid_internal
