#include "blk/stack/health_device.h"

#include "common/clock.h"
#include "common/enum_name.h"

namespace kvtier::blk {

const char* health_state_name(HealthState s) {
  static constexpr const char* kNames[] = {"online", "degraded", "failed", "reconnecting",
                                           "removed"};
  return enum_name<HealthState::kRemoved>(s, kNames, "unknown");
}

HealthDevice::HealthDevice(std::shared_ptr<BlockDevice> inner, HealthOptions options)
    : StackedDevice(std::move(inner)), options_(options) {}

void HealthDevice::on_error() {
  const uint64_t e = errors_.fetch_add(1) + 1;
  HealthState cur = state_.load();
  if (cur == HealthState::kRemoved || cur == HealthState::kFailed) return;
  HealthState next = cur;
  if (options_.error_budget && e >= options_.error_budget) {
    next = HealthState::kFailed;
  } else if (options_.degraded_after && e >= options_.degraded_after &&
             cur == HealthState::kOnline) {
    next = HealthState::kDegraded;
  }
  if (next != cur) state_.compare_exchange_strong(cur, next);
}

IoCallback HealthDevice::observe(IoCallback cb, Histogram* lat, std::atomic<uint64_t>* errors) {
  const uint64_t t0 = now_ns();
  return [this, cb = std::move(cb), lat, errors, t0](Status st) {
    lat->record(now_ns() - t0);
    if (!st.ok()) {
      errors->fetch_add(1);
      on_error();
    }
    cb(std::move(st));
  };
}

bool HealthDevice::refuse(IoCallback& cb) {
  const HealthState s = state_.load();
  if (s != HealthState::kFailed && s != HealthState::kRemoved) return false;
  refused_.fetch_add(1);
  cb(Status::io_error(inner_->name() + " is " + health_state_name(s)));
  return true;
}

void HealthDevice::read(uint64_t offset, MutableByteView dst, IoCallback cb) {
  if (refuse(cb)) return;
  inner_->read(offset, dst, observe(std::move(cb), &read_lat_, &read_errors_));
}
void HealthDevice::readv(uint64_t offset, std::span<const MutableByteView> parts, IoCallback cb) {
  if (refuse(cb)) return;
  inner_->readv(offset, parts, observe(std::move(cb), &read_lat_, &read_errors_));
}
void HealthDevice::write(uint64_t offset, ByteView src, IoCallback cb) {
  if (refuse(cb)) return;
  inner_->write(offset, src, observe(std::move(cb), &write_lat_, &write_errors_));
}
void HealthDevice::flush(IoCallback cb) {
  if (refuse(cb)) return;
  inner_->flush(observe(std::move(cb), &flush_lat_, &other_errors_));
}
void HealthDevice::trim(uint64_t offset, uint64_t length, IoCallback cb) {
  if (refuse(cb)) return;
  inner_->trim(offset, length, observe(std::move(cb), &flush_lat_, &other_errors_));
}

DeviceStats HealthDevice::stats() const {
  DeviceStats s = inner_->stats();
  s.errors += refused_.load();
  return s;
}

void HealthDevice::set_reconnecting(bool on) {
  HealthState cur = state_.load();
  if (on && (cur == HealthState::kOnline || cur == HealthState::kDegraded)) {
    state_.compare_exchange_strong(cur, HealthState::kReconnecting);
  } else if (!on && cur == HealthState::kReconnecting) {
    state_.compare_exchange_strong(cur,
                                   errors_.load() ? HealthState::kDegraded : HealthState::kOnline);
  }
}

void HealthDevice::set_removed() { state_.store(HealthState::kRemoved); }

void HealthDevice::reset() {
  errors_.store(0);
  state_.store(HealthState::kOnline);
}

}  // namespace kvtier::blk
