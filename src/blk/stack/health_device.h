// HealthDevice: a BlockDevice wrapper that watches a device for the storage
// engine: latency histograms per operation, error counters, and a state
// (online, degraded, failed, reconnecting, removed). Errors past
// `degraded_after` mark it degraded; past `error_budget` it is failed and
// from then on every request fails at once with kIoError, so a RAID array
// above takes it out instead of waiting on it. A remote device's transport
// reports its reconnects through set_reconnecting(); an operator removes a
// device with set_removed(). Counters are atomics; any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "blk/stack/stacked_device.h"
#include "common/metrics.h"

namespace kvtier::blk {

enum class HealthState : uint8_t { kOnline, kDegraded, kFailed, kReconnecting, kRemoved };
const char* health_state_name(HealthState s);

struct HealthOptions {
  uint64_t degraded_after = 1;  // errors before the state says degraded (0: never)
  uint64_t error_budget = 16;   // errors before the device is failed (0: never)
};

class HealthDevice : public StackedDevice {
 public:
  HealthDevice(std::shared_ptr<BlockDevice> inner, HealthOptions options = {});

  void read(uint64_t offset, MutableByteView dst, IoCallback cb) override;
  void write(uint64_t offset, ByteView src, IoCallback cb) override;
  // Forwarded whole, so the inner device can do it in one request.
  void readv(uint64_t offset, std::span<const MutableByteView> parts, IoCallback cb) override;
  void flush(IoCallback cb) override;
  void trim(uint64_t offset, uint64_t length, IoCallback cb) override;
  DeviceStats stats() const override;

  HealthState state() const { return state_.load(); }
  void set_reconnecting(bool on);
  void set_removed();
  // Back to online with the error count cleared (after an operator's check).
  void reset();

  uint64_t read_errors() const { return read_errors_.load(); }
  uint64_t write_errors() const { return write_errors_.load(); }
  const Histogram& read_latency() const { return read_lat_; }
  const Histogram& write_latency() const { return write_lat_; }
  const Histogram& flush_latency() const { return flush_lat_; }

 protected:
  bool forwards_readv() const override { return true; }

 private:
  IoCallback observe(IoCallback cb, Histogram* lat, std::atomic<uint64_t>* errors);
  bool refuse(IoCallback& cb);
  void on_error();

  const HealthOptions options_;
  std::atomic<HealthState> state_{HealthState::kOnline};
  std::atomic<uint64_t> errors_{0};
  std::atomic<uint64_t> read_errors_{0}, write_errors_{0}, other_errors_{0}, refused_{0};
  Histogram read_lat_, write_lat_, flush_lat_;
};

}  // namespace kvtier::blk
