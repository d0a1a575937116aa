// QosDevice: a BlockDevice wrapper that holds a volume to configured limits:
// read and write IOPS and bytes per second, separately or combined, each a
// token bucket with its own burst. Requests over the limit wait in a FIFO per
// direction (reads never queue behind throttled writes unless a combined
// limit says so) and are released by one dispatcher thread that waits on a
// timer until the head request's tokens exist: no thread sleeps per request,
// and a request under the limit goes straight to the inner device from the
// caller's thread. flush and trim pass through unthrottled.
//
// Limits can be changed at any time (set_limits) from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "blk/stack/stacked_device.h"
#include "common/mutex.h"

namespace kvtier::blk {

// 0 means unlimited. Burst is in seconds of the rate (0.1 s by default): a
// bucket holds at most rate * burst_seconds tokens, and at least one
// request's worth.
struct QosLimits {
  uint64_t read_iops = 0;
  uint64_t write_iops = 0;
  uint64_t total_iops = 0;
  uint64_t read_bps = 0;
  uint64_t write_bps = 0;
  uint64_t total_bps = 0;
  double burst_seconds = 0.1;
  bool unlimited() const {
    return !read_iops && !write_iops && !total_iops && !read_bps && !write_bps && !total_bps;
  }
};

struct QosStats {
  uint64_t admitted_inline = 0;  // went straight through
  uint64_t queued = 0;           // waited for tokens
  uint64_t queued_now = 0;
};

class QosDevice : public StackedDevice {
 public:
  QosDevice(std::shared_ptr<BlockDevice> inner, QosLimits limits);
  // Fails every queued request with kUnavailable, then stops the dispatcher.
  ~QosDevice() override;

  std::string name() const override { return "qos(" + inner_->name() + ")"; }

  // Throttled; flush, trim and the rest pass straight through (StackedDevice).
  void read(uint64_t offset, MutableByteView dst, IoCallback cb) override;
  void write(uint64_t offset, ByteView src, IoCallback cb) override;

  void set_limits(const QosLimits& limits);
  QosLimits limits() const;
  QosStats qos_stats() const;

 private:
  struct Bucket {
    double rate = 0;  // tokens per second, 0 = unlimited
    double cap = 0;
    double tokens = 0;
    void configure(uint64_t r, double burst_seconds, double min_cap);
    void refill(double dt) {
      if (rate > 0) tokens = std::min(cap, tokens + rate * dt);
    }
    bool has(double cost) const { return rate == 0 || tokens >= std::min(cost, cap); }
    void take(double cost) {
      if (rate > 0) tokens -= cost;
    }
    // Seconds until has(cost).
    double wait(double cost) const {
      return rate == 0 ? 0 : std::max(0.0, (std::min(cost, cap) - tokens) / rate);
    }
  };
  struct Pending {
    uint64_t bytes = 0;
    std::function<void()> submit;
    IoCallback fail;
  };

  // Under mu_: refills, then whether a request of `bytes` in direction `is_write`
  // may go now (and takes its tokens if so); otherwise seconds to wait.
  bool try_admit_locked(bool is_write, uint64_t bytes, double* wait_s) KVTIER_REQUIRES(mu_);
  void refill_locked() KVTIER_REQUIRES(mu_);
  void admit_or_queue(bool is_write, uint64_t bytes, std::function<void()> submit, IoCallback cb);
  // A read or write: checked, then admitted or queued; `submit` passes the
  // request to the inner device with the callback it is given.
  // (A template, so that the submit travels inside admit_or_queue's one
  // function object instead of in a second one per request.)
  template <typename Submit>
  void admit_checked(bool is_write, uint64_t offset, size_t bytes, const void* buf, IoCallback cb,
                     Submit submit);
  void dispatcher_loop();

  mutable Mutex mu_;
  std::condition_variable cv_;
  QosLimits limits_ KVTIER_GUARDED_BY(mu_);
  Bucket read_iops_ KVTIER_GUARDED_BY(mu_), write_iops_ KVTIER_GUARDED_BY(mu_),
      total_iops_ KVTIER_GUARDED_BY(mu_), read_bps_ KVTIER_GUARDED_BY(mu_),
      write_bps_ KVTIER_GUARDED_BY(mu_), total_bps_ KVTIER_GUARDED_BY(mu_);
  uint64_t last_refill_ns_ KVTIER_GUARDED_BY(mu_) = 0;
  std::deque<Pending> queue_[2] KVTIER_GUARDED_BY(mu_);  // [0] reads, [1] writes
  bool stop_ KVTIER_GUARDED_BY(mu_) = false;
  int rr_ KVTIER_GUARDED_BY(mu_) = 0;  // direction the dispatcher looks at first
  uint64_t admitted_inline_ KVTIER_GUARDED_BY(mu_) = 0;
  uint64_t queued_ KVTIER_GUARDED_BY(mu_) = 0;
  std::thread dispatcher_;
};

}  // namespace kvtier::blk
