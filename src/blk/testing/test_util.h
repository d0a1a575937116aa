// Helpers shared by the blk unit tests: deterministic data patterns and a
// latch for waiting on many asynchronous completions.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "blk/dev/mem_device.h"
#include "common/buffer.h"
#include "common/status.h"

namespace kvtier::blk::testing {

// Fills `dst` with bytes derived from `seed`, so different writes differ.
inline void fill_pattern(MutableByteView dst, uint64_t seed) {
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= dst.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(dst.data() + i, &v, 8);
  }
  for (; i < dst.size(); ++i) dst[i] = static_cast<std::byte>(rng());
}

// `n` in-memory devices of `bytes` each: the members of a test array.
inline std::vector<std::shared_ptr<MemDevice>> mem_members(size_t n, uint64_t bytes,
                                                           uint32_t block) {
  std::vector<std::shared_ptr<MemDevice>> mems;
  for (size_t i = 0; i < n; ++i) mems.push_back(std::make_shared<MemDevice>(bytes, block));
  return mems;
}

// The same devices as the BlockDevices an array is made of.
inline std::vector<std::shared_ptr<BlockDevice>> as_devices(
    const std::vector<std::shared_ptr<MemDevice>>& mems) {
  return {mems.begin(), mems.end()};
}

// Counts completions (and failed ones) and lets a test wait for a number of
// them with a deadline, so a lost completion fails the test instead of
// hanging it.
class Completions {
 public:
  void done(const Status& st) {
    std::lock_guard lk(mu_);
    ++count_;
    if (!st.ok()) {
      ++failed_;
      last_error_ = st;
    }
    cv_.notify_all();
  }
  bool wait_for(uint64_t n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, timeout, [&] { return count_ >= n; });
  }
  uint64_t count() const {
    std::lock_guard lk(mu_);
    return count_;
  }
  uint64_t failed() const {
    std::lock_guard lk(mu_);
    return failed_;
  }
  Status last_error() const {
    std::lock_guard lk(mu_);
    return last_error_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t count_ = 0;
  uint64_t failed_ = 0;
  Status last_error_;
};

}  // namespace kvtier::blk::testing
