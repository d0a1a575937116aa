// Partition: a BlockDevice that is a byte range [offset, offset + length) of
// another device, so one volume (a RAID array, a namespace) can be carved
// into several volumes for different tenants or tiers. Offsets are shifted
// and bounded; everything else is the inner device's. Stateless apart from
// its counters: any thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "blk/stack/stacked_device.h"

namespace kvtier::blk {

class Partition : public StackedDevice {
 public:
  // `offset` and `length` must be non-zero multiples (offset may be 0) of the
  // inner block size and lie inside the inner device.
  static Result<std::unique_ptr<Partition>> create(std::shared_ptr<BlockDevice> inner,
                                                   uint64_t offset, uint64_t length,
                                                   std::string label = "");

  std::string name() const override { return name_; }
  uint64_t capacity() const override { return length_; }

  void read(uint64_t offset, MutableByteView dst, IoCallback cb) override;
  void write(uint64_t offset, ByteView src, IoCallback cb) override;
  // Forwarded whole (shifted), so the parent can do it in one request.
  void readv(uint64_t offset, std::span<const MutableByteView> parts, IoCallback cb) override;
  void flush(IoCallback cb) override;
  void trim(uint64_t offset, uint64_t length, IoCallback cb) override;
  DeviceStats stats() const override;

  uint64_t offset() const { return offset_; }

 protected:
  bool forwards_readv() const override { return true; }

 private:
  Partition(std::shared_ptr<BlockDevice> inner, uint64_t offset, uint64_t length, std::string name)
      : StackedDevice(std::move(inner)), offset_(offset), length_(length), name_(std::move(name)) {}
  IoCallback count(IoCallback cb, int op, uint64_t bytes);

  const uint64_t offset_;
  const uint64_t length_;
  const std::string name_;
  DeviceCounters io_;  // what stats() reports
};

}  // namespace kvtier::blk
