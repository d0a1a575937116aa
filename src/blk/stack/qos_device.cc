#include "blk/stack/qos_device.h"

#include <algorithm>
#include <chrono>

#include "common/clock.h"

namespace kvtier::blk {

void QosDevice::Bucket::configure(uint64_t r, double burst_seconds, double min_cap) {
  rate = static_cast<double>(r);
  cap = std::max(rate * std::max(burst_seconds, 0.0), min_cap);
  tokens = std::min(tokens, cap);
  if (rate == 0) tokens = 0;
}

QosDevice::QosDevice(std::shared_ptr<BlockDevice> inner, QosLimits limits)
    : StackedDevice(std::move(inner)) {
  last_refill_ns_ = now_ns();
  set_limits(limits);
  // Start full: a fresh volume may burst.
  {
    MutexLock lk(mu_);
    for (Bucket* b :
         {&read_iops_, &write_iops_, &total_iops_, &read_bps_, &write_bps_, &total_bps_}) {
      b->tokens = b->cap;
    }
  }
  dispatcher_ = std::thread([this] { dispatcher_loop(); });
}

QosDevice::~QosDevice() {
  std::deque<Pending> left;
  {
    MutexLock lk(mu_);
    stop_ = true;
    for (auto& q : queue_) {
      for (auto& p : q) left.push_back(std::move(p));
      q.clear();
    }
  }
  cv_.notify_all();
  dispatcher_.join();
  for (auto& p : left) p.fail(Status::unavailable("qos device closed"));
}

void QosDevice::set_limits(const QosLimits& l) {
  {
    MutexLock lk(mu_);
    refill_locked();
    limits_ = l;
    const double b = l.burst_seconds;
    read_iops_.configure(l.read_iops, b, 1);
    write_iops_.configure(l.write_iops, b, 1);
    total_iops_.configure(l.total_iops, b, 1);
    // A byte bucket always holds at least one large request.
    read_bps_.configure(l.read_bps, b, 1 << 20);
    write_bps_.configure(l.write_bps, b, 1 << 20);
    total_bps_.configure(l.total_bps, b, 1 << 20);
  }
  cv_.notify_all();
}

QosLimits QosDevice::limits() const {
  MutexLock lk(mu_);
  return limits_;
}

QosStats QosDevice::qos_stats() const {
  MutexLock lk(mu_);
  return QosStats{admitted_inline_, queued_, queue_[0].size() + queue_[1].size()};
}

void QosDevice::refill_locked() {
  const uint64_t now = now_ns();
  const double dt = static_cast<double>(now - last_refill_ns_) * 1e-9;
  last_refill_ns_ = now;
  for (Bucket* b :
       {&read_iops_, &write_iops_, &total_iops_, &read_bps_, &write_bps_, &total_bps_}) {
    b->refill(dt);
  }
}

bool QosDevice::try_admit_locked(bool is_write, uint64_t bytes, double* wait_s) {
  Bucket& iops = is_write ? write_iops_ : read_iops_;
  Bucket& bps = is_write ? write_bps_ : read_bps_;
  const double nb = static_cast<double>(bytes);
  if (iops.has(1) && total_iops_.has(1) && bps.has(nb) && total_bps_.has(nb)) {
    iops.take(1);
    total_iops_.take(1);
    bps.take(nb);
    total_bps_.take(nb);
    return true;
  }
  *wait_s = std::max({iops.wait(1), total_iops_.wait(1), bps.wait(nb), total_bps_.wait(nb)});
  return false;
}

void QosDevice::admit_or_queue(bool is_write, uint64_t bytes, std::function<void()> submit,
                               IoCallback cb) {
  {
    MutexLock lk(mu_);
    refill_locked();
    double wait = 0;
    // FIFO: nothing overtakes a request already waiting in this direction.
    // A combined limit is shared with the other direction's waiters too.
    const bool combined = limits_.total_iops || limits_.total_bps;
    const bool waiters = !queue_[is_write].empty() || (combined && !queue_[!is_write].empty());
    if (waiters || !try_admit_locked(is_write, bytes, &wait)) {
      queue_[is_write].push_back(Pending{bytes, std::move(submit), std::move(cb)});
      ++queued_;
      cv_.notify_all();
      return;
    }
    ++admitted_inline_;
  }
  submit();
}

void QosDevice::dispatcher_loop() {
  MutexLock lk(mu_);
  while (!stop_) {
    refill_locked();
    double next_wait = -1;  // < 0: nothing waiting
    std::vector<std::function<void()>> ready;
    // Alternate directions one request at a time, so a combined limit is
    // shared instead of going to whichever queue is looked at first.
    bool blocked[2] = {queue_[0].empty(), queue_[1].empty()};
    for (int turn = rr_; !(blocked[0] && blocked[1]); turn ^= 1) {
      if (blocked[turn]) continue;
      auto& q = queue_[turn];
      double wait = 0;
      if (!try_admit_locked(turn == 1, q.front().bytes, &wait)) {
        next_wait = next_wait < 0 ? wait : std::min(next_wait, wait);
        blocked[turn] = true;
        continue;
      }
      ready.push_back(std::move(q.front().submit));
      q.pop_front();
      blocked[turn] = q.empty();
    }
    rr_ ^= 1;
    if (!ready.empty()) {
      // Submit without the lock: inner devices may complete inline and the
      // callback may submit again.
      lk.unlock();
      for (auto& s : ready) s();
      lk.lock();
      continue;
    }
    if (next_wait < 0) {
      lk.wait(cv_);
    } else {
      lk.wait_for(cv_, std::chrono::nanoseconds(static_cast<int64_t>(next_wait * 1e9) + 1000));
    }
  }
}

template <typename Submit>
void QosDevice::admit_checked(bool is_write, uint64_t offset, size_t bytes, const void* buf,
                              IoCallback cb, Submit submit) {
  if (Status st = check_io(offset, bytes, buf); !st.ok()) return cb(std::move(st));
  // Shared: exactly one of the two runs, the submit or the refusal.
  auto shared_cb = std::make_shared<IoCallback>(std::move(cb));
  admit_or_queue(
      is_write, bytes, [submit = std::move(submit), shared_cb] { submit(std::move(*shared_cb)); },
      [shared_cb](Status st) { (*shared_cb)(std::move(st)); });
}

void QosDevice::read(uint64_t offset, MutableByteView dst, IoCallback cb) {
  admit_checked(
      false, offset, dst.size(), dst.data(), std::move(cb),
      [this, offset, dst](IoCallback done) { inner_->read(offset, dst, std::move(done)); });
}

void QosDevice::write(uint64_t offset, ByteView src, IoCallback cb) {
  admit_checked(
      true, offset, src.size(), src.data(), std::move(cb),
      [this, offset, src](IoCallback done) { inner_->write(offset, src, std::move(done)); });
}

}  // namespace kvtier::blk
