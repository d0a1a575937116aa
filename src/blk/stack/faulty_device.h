// FaultyDevice: a BlockDevice wrapper that injects failures for tests of the
// layers above (retry logic, timeouts, checksums after torn writes, RAID
// error propagation). Everything is configurable at runtime from any thread:
//  - random read/write errors with a given probability (seeded, so a test
//    sees the same sequence every run),
//  - errors for every I/O touching a byte range,
//  - extra latency on every completion,
//  - "hang" mode: completions held back for a long time, to trip callers'
//    timeouts,
//  - torn writes: only the first N blocks reach the inner device, yet the
//    write reports success (a power cut mid-write),
//  - fail-everything mode.
// Delayed completions run on an internal timer thread, never by sleeping in
// the caller. The destructor completes anything still held back (hung ones
// with kUnavailable) so that nothing leaks or hangs at shutdown.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "blk/stack/stacked_device.h"
#include "common/mutex.h"

namespace kvtier::blk {

struct FaultCounters {
  uint64_t read_errors = 0;      // from the read error rate
  uint64_t write_errors = 0;     // from the write error rate
  uint64_t range_errors = 0;     // I/Os that touched a faulty range
  uint64_t fail_all_errors = 0;  // I/Os failed by fail-everything mode
  uint64_t torn_writes = 0;      // writes cut short
  uint64_t delayed = 0;          // completions delayed by the added latency
  uint64_t hung = 0;             // completions held back by hang mode
  uint64_t cancelled = 0;        // hung completions failed by the destructor
};

class FaultyDevice : public StackedDevice {
 public:
  // set_torn_writes() count meaning "every write until cleared".
  static constexpr uint64_t kEveryWrite = UINT64_MAX;

  explicit FaultyDevice(std::shared_ptr<BlockDevice> inner, uint64_t seed = 1);
  // Waits for requests in flight on the inner device, then completes every
  // held-back completion at once: latency-delayed ones with their real
  // status, hung ones with kUnavailable.
  ~FaultyDevice() override;

  FaultyDevice(const FaultyDevice&) = delete;
  FaultyDevice& operator=(const FaultyDevice&) = delete;

  std::string name() const override { return "faulty(" + inner_->name() + ")"; }

  void read(uint64_t offset, MutableByteView dst, IoCallback cb) override;
  void write(uint64_t offset, ByteView src, IoCallback cb) override;
  void flush(IoCallback cb) override;
  void trim(uint64_t offset, uint64_t length, IoCallback cb) override;

  // The inner device's stats, with injected errors added to `errors`.
  DeviceStats stats() const override;

  // Probability in [0, 1] that a read (write) fails with kIoError without
  // reaching the inner device.
  void set_read_error_rate(double p);
  void set_write_error_rate(double p);
  // Every read, write or trim overlapping [offset, offset + length) fails
  // with kIoError without reaching the inner device.
  void add_fault_range(uint64_t offset, uint64_t length);
  void clear_fault_ranges();
  // Added to every completion (0 disables).
  void set_latency(std::chrono::nanoseconds latency);
  // While on, completions are held back for `hold` (a long time by default).
  // Turning it off does not release completions already held; see
  // release_hung().
  void set_hang(bool on, std::chrono::nanoseconds hold = std::chrono::hours(1));
  // Runs every held-back hung completion now, with its real status.
  void release_hung();
  // The next `count` writes write only their first `keep_blocks` blocks to the
  // inner device and report success.
  void set_torn_writes(uint32_t keep_blocks, uint64_t count = kEveryWrite);
  void clear_torn_writes();
  // Every request fails with kIoError without reaching the inner device.
  void set_fail_all(bool on);
  // Back to a pass-through device (counters are kept).
  void clear_faults();

  FaultCounters fault_counters() const;
  // Completions currently waiting on the timer thread.
  size_t pending_delayed() const;

 private:
  enum class Op : uint8_t { kRead, kWrite, kFlush, kTrim };
  struct Range {
    uint64_t offset;
    uint64_t length;
  };
  struct Delayed {
    bool hung = false;
    IoCallback cb;
    Status status;
  };
  using Clock = std::chrono::steady_clock;

  // Which fault, if any, hits this request (kOk: none).
  Status decide(Op op, uint64_t offset, uint64_t length);
  // Delivers a completion now or through the timer, per latency/hang.
  void complete(IoCallback cb, Status st);
  // Wraps `cb` so the inner device's completion goes through complete().
  IoCallback track(IoCallback cb);
  void inner_done();
  void timer_loop();

  mutable Mutex cfg_mu_;  // guards the settings and the RNG below
  std::mt19937_64 rng_ KVTIER_GUARDED_BY(cfg_mu_);
  double read_error_rate_ KVTIER_GUARDED_BY(cfg_mu_) = 0;
  double write_error_rate_ KVTIER_GUARDED_BY(cfg_mu_) = 0;
  std::vector<Range> ranges_ KVTIER_GUARDED_BY(cfg_mu_);
  std::chrono::nanoseconds latency_ KVTIER_GUARDED_BY(cfg_mu_) = std::chrono::nanoseconds::zero();
  bool hang_ KVTIER_GUARDED_BY(cfg_mu_) = false;
  std::chrono::nanoseconds hang_hold_ KVTIER_GUARDED_BY(cfg_mu_) = std::chrono::nanoseconds::zero();
  uint32_t torn_keep_blocks_ KVTIER_GUARDED_BY(cfg_mu_) = 0;
  uint64_t torn_left_ KVTIER_GUARDED_BY(cfg_mu_) = 0;
  bool fail_all_ KVTIER_GUARDED_BY(cfg_mu_) = false;

  std::atomic<uint64_t> read_errors_{0};
  std::atomic<uint64_t> write_errors_{0};
  std::atomic<uint64_t> range_errors_{0};
  std::atomic<uint64_t> fail_all_errors_{0};
  std::atomic<uint64_t> torn_writes_{0};
  std::atomic<uint64_t> delayed_{0};
  std::atomic<uint64_t> hung_{0};
  std::atomic<uint64_t> cancelled_{0};

  // Requests on the inner device whose completion has not been handled yet.
  // Decremented under idle_mu_ so the destructor cannot overtake it.
  std::atomic<uint64_t> inner_outstanding_{0};
  Mutex idle_mu_;
  std::condition_variable idle_cv_;

  mutable Mutex timer_mu_;
  std::condition_variable timer_cv_;
  std::multimap<Clock::time_point, Delayed> queue_ KVTIER_GUARDED_BY(timer_mu_);
  bool stop_ KVTIER_GUARDED_BY(timer_mu_) = false;
  std::thread timer_;
};

}  // namespace kvtier::blk
