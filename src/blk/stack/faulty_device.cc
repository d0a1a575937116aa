#include "blk/stack/faulty_device.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace kvtier::blk {

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;
// Caps delays so that Clock::now() + delay cannot overflow.
constexpr std::chrono::nanoseconds kMaxDelay = std::chrono::hours(24 * 365);

}  // namespace

FaultyDevice::FaultyDevice(std::shared_ptr<BlockDevice> inner, uint64_t seed)
    : StackedDevice(std::move(inner)), rng_(seed) {
  timer_ = std::thread([this] { timer_loop(); });
}

FaultyDevice::~FaultyDevice() {
  {
    MutexLock lk(idle_mu_);
    lk.wait(idle_cv_, [this] { return inner_outstanding_.load(std::memory_order_acquire) == 0; });
  }
  std::multimap<Clock::time_point, Delayed> left;
  {
    MutexLock lk(timer_mu_);
    stop_ = true;
    left.swap(queue_);
  }
  timer_cv_.notify_all();
  timer_.join();
  // In deadline order, so that latency-delayed completions keep their order.
  for (auto& [when, d] : left) {
    if (d.hung) {
      cancelled_.fetch_add(1, kRelaxed);
      d.cb(Status::unavailable(name() + ": device destroyed while the completion was hung"));
    } else {
      d.cb(std::move(d.status));
    }
  }
}

Status FaultyDevice::decide(Op op, uint64_t offset, uint64_t length) {
  MutexLock lk(cfg_mu_);
  if (fail_all_) {
    fail_all_errors_.fetch_add(1, kRelaxed);
    return Status::io_error(name() + ": injected failure (fail-all mode)");
  }
  if (op != Op::kFlush) {
    for (const Range& r : ranges_) {
      if (offset < r.offset + r.length && r.offset < offset + length) {
        range_errors_.fetch_add(1, kRelaxed);
        return Status::io_error(
            fmt::format("{}: injected failure: [{}, +{}) touches faulty range "
                        "[{}, +{})",
                        name(), offset, length, r.offset, r.length));
      }
    }
  }
  const double rate = op == Op::kRead ? read_error_rate_ : op == Op::kWrite ? write_error_rate_ : 0;
  if (rate > 0) {
    // 53 random bits give a uniform double in [0, 1) that is the same on every
    // platform, unlike std::uniform_real_distribution.
    const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    if (u < rate) {
      (op == Op::kRead ? read_errors_ : write_errors_).fetch_add(1, kRelaxed);
      return Status::io_error(fmt::format("{}: injected random {} error at offset {}", name(),
                                          op == Op::kRead ? "read" : "write", offset));
    }
  }
  return Status::ok_status();
}

void FaultyDevice::complete(IoCallback cb, Status st) {
  bool hung = false;
  std::chrono::nanoseconds delay{0};
  {
    MutexLock lk(cfg_mu_);
    hung = hang_;
    delay = hang_ ? hang_hold_ : latency_;
  }
  if (delay.count() > 0) {
    MutexLock lk(timer_mu_);
    if (!stop_) {
      (hung ? hung_ : delayed_).fetch_add(1, kRelaxed);
      const Clock::time_point when = Clock::now() + std::min(delay, kMaxDelay);
      auto it = queue_.emplace(when, Delayed{hung, std::move(cb), std::move(st)});
      const bool earliest = it == queue_.begin();
      lk.unlock();
      if (earliest) timer_cv_.notify_one();
      return;
    }
    // Shutting down: deliver now rather than strand the caller.
  }
  cb(std::move(st));
}

IoCallback FaultyDevice::track(IoCallback cb) {
  inner_outstanding_.fetch_add(1, kRelaxed);
  return [this, cb = std::move(cb)](Status s) mutable {
    complete(std::move(cb), std::move(s));
    inner_done();
  };
}

void FaultyDevice::inner_done() {
  MutexLock lk(idle_mu_);
  if (inner_outstanding_.fetch_sub(1, std::memory_order_acq_rel) == 1) idle_cv_.notify_all();
}

void FaultyDevice::timer_loop() {
  std::vector<Delayed> due;
  MutexLock lk(timer_mu_);
  while (!stop_) {
    if (queue_.empty()) {
      lk.wait(timer_cv_);
      continue;
    }
    const Clock::time_point first = queue_.begin()->first;
    Clock::time_point now = Clock::now();
    if (first > now) {
      lk.wait_until(timer_cv_, first);
      continue;
    }
    while (!queue_.empty() && queue_.begin()->first <= now) {
      due.push_back(std::move(queue_.begin()->second));
      queue_.erase(queue_.begin());
    }
    lk.unlock();
    for (Delayed& d : due) d.cb(std::move(d.status));
    due.clear();
    lk.lock();
  }
}

void FaultyDevice::read(uint64_t offset, MutableByteView dst, IoCallback cb) {
  Status st = check_io(offset, dst.size(), dst.data());
  if (!st.ok()) return cb(std::move(st));
  st = decide(Op::kRead, offset, dst.size());
  if (!st.ok()) return complete(std::move(cb), std::move(st));
  inner_->read(offset, dst, track(std::move(cb)));
}

void FaultyDevice::write(uint64_t offset, ByteView src, IoCallback cb) {
  Status st = check_io(offset, src.size(), src.data());
  if (!st.ok()) return cb(std::move(st));
  st = decide(Op::kWrite, offset, src.size());
  if (!st.ok()) return complete(std::move(cb), std::move(st));
  uint64_t len = src.size();
  {
    MutexLock lk(cfg_mu_);
    if (torn_left_ > 0) {
      if (torn_left_ != kEveryWrite) --torn_left_;
      len = std::min<uint64_t>(len, uint64_t{torn_keep_blocks_} * block_size());
    }
  }
  if (len < src.size()) torn_writes_.fetch_add(1, kRelaxed);
  if (len == 0) return complete(std::move(cb), Status::ok_status());
  inner_->write(offset, src.first(len), track(std::move(cb)));
}

void FaultyDevice::flush(IoCallback cb) {
  Status st = decide(Op::kFlush, 0, 0);
  if (!st.ok()) return complete(std::move(cb), std::move(st));
  inner_->flush(track(std::move(cb)));
}

void FaultyDevice::trim(uint64_t offset, uint64_t length, IoCallback cb) {
  Status st = check_io(offset, length, nullptr);
  if (!st.ok()) return cb(std::move(st));
  st = decide(Op::kTrim, offset, length);
  if (!st.ok()) return complete(std::move(cb), std::move(st));
  inner_->trim(offset, length, track(std::move(cb)));
}

DeviceStats FaultyDevice::stats() const {
  DeviceStats s = inner_->stats();
  s.errors += read_errors_.load(kRelaxed) + write_errors_.load(kRelaxed) +
              range_errors_.load(kRelaxed) + fail_all_errors_.load(kRelaxed);
  return s;
}

void FaultyDevice::set_read_error_rate(double p) {
  MutexLock lk(cfg_mu_);
  read_error_rate_ = std::clamp(p, 0.0, 1.0);
}

void FaultyDevice::set_write_error_rate(double p) {
  MutexLock lk(cfg_mu_);
  write_error_rate_ = std::clamp(p, 0.0, 1.0);
}

void FaultyDevice::add_fault_range(uint64_t offset, uint64_t length) {
  MutexLock lk(cfg_mu_);
  ranges_.push_back(Range{offset, length});
}

void FaultyDevice::clear_fault_ranges() {
  MutexLock lk(cfg_mu_);
  ranges_.clear();
}

void FaultyDevice::set_latency(std::chrono::nanoseconds latency) {
  MutexLock lk(cfg_mu_);
  latency_ = latency;
}

void FaultyDevice::set_hang(bool on, std::chrono::nanoseconds hold) {
  MutexLock lk(cfg_mu_);
  hang_ = on;
  hang_hold_ = hold;
}

void FaultyDevice::release_hung() {
  std::vector<Delayed> released;
  {
    MutexLock lk(timer_mu_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (it->second.hung) {
        released.push_back(std::move(it->second));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Delayed& d : released) d.cb(std::move(d.status));
}

void FaultyDevice::set_torn_writes(uint32_t keep_blocks, uint64_t count) {
  MutexLock lk(cfg_mu_);
  torn_keep_blocks_ = keep_blocks;
  torn_left_ = count;
}

void FaultyDevice::clear_torn_writes() { set_torn_writes(0, 0); }

void FaultyDevice::set_fail_all(bool on) {
  MutexLock lk(cfg_mu_);
  fail_all_ = on;
}

void FaultyDevice::clear_faults() {
  MutexLock lk(cfg_mu_);
  read_error_rate_ = 0;
  write_error_rate_ = 0;
  ranges_.clear();
  latency_ = std::chrono::nanoseconds{0};
  hang_ = false;
  torn_keep_blocks_ = 0;
  torn_left_ = 0;
  fail_all_ = false;
}

FaultCounters FaultyDevice::fault_counters() const {
  FaultCounters c;
  c.read_errors = read_errors_.load(kRelaxed);
  c.write_errors = write_errors_.load(kRelaxed);
  c.range_errors = range_errors_.load(kRelaxed);
  c.fail_all_errors = fail_all_errors_.load(kRelaxed);
  c.torn_writes = torn_writes_.load(kRelaxed);
  c.delayed = delayed_.load(kRelaxed);
  c.hung = hung_.load(kRelaxed);
  c.cancelled = cancelled_.load(kRelaxed);
  return c;
}

size_t FaultyDevice::pending_delayed() const {
  MutexLock lk(timer_mu_);
  return queue_.size();
}

}  // namespace kvtier::blk
