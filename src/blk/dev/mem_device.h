// MemDevice: a RAM-backed BlockDevice. It is the reference implementation of
// the BlockDevice contract for unit tests (of kvtier and of other devices such
// as Raid0 and FaultyDevice) and a zero-setup volume for tools. Requests
// complete inline, before read()/write() return.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "blk/block_device.h"
#include "common/buffer.h"

namespace kvtier::blk {

class MemDevice : public FixedGeometryDevice {
 public:
  // `capacity` is rounded down to a multiple of `block_size`. The memory is
  // zero-filled. `buffer_alignment` lets tests mimic an O_DIRECT device's
  // alignment rule without needing one.
  explicit MemDevice(uint64_t capacity, uint32_t block_size = 4096, uint32_t buffer_alignment = 1);

  std::string name() const override { return "mem"; }

  void read(uint64_t offset, MutableByteView dst, IoCallback cb) override;
  void write(uint64_t offset, ByteView src, IoCallback cb) override;
  void flush(IoCallback cb) override;
  // Zero-fills the range (a real device may return anything; zeros make test
  // failures easier to read).
  void trim(uint64_t offset, uint64_t length, IoCallback cb) override;

  DeviceStats stats() const override;

  // The whole backing store, for tests that inspect or corrupt stored bytes
  // behind the device's back.
  MutableByteView raw() { return storage_.subview(0, capacity_); }

 private:
  AlignedBuffer storage_;

  DeviceCounters io_;  // what stats() reports
};

}  // namespace kvtier::blk
