// Helpers shared by the blk unit tests: deterministic data patterns and a
// latch for waiting on many asynchronous completions.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

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
