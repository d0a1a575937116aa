// StackedDevice: the base of a device that sits on one other device (a
// partition, a QoS limiter, a health watcher, a fault injector). By default
// it is transparent: every call goes to the inner device unchanged, so a
// subclass overrides only what it changes and the next reader sees at once
// what that is.
//
// readv is the exception: by default it is split into read() calls on this
// device (BlockDevice's default), so that a subclass that throttles, watches
// or fails reads sees every part. Such a device then answers
// vectored_reads = false. A subclass that forwards readv whole overrides it
// and says so with forwards_readv().
#pragma once

#include <memory>
#include <string>

#include "blk/block_device.h"

namespace kvtier::blk {

class StackedDevice : public BlockDevice {
 public:
  std::string name() const override { return inner_->name(); }
  uint32_t block_size() const override { return inner_->block_size(); }
  uint32_t buffer_alignment() const override { return inner_->buffer_alignment(); }
  uint64_t capacity() const override { return inner_->capacity(); }

  void read(uint64_t offset, MutableByteView dst, IoCallback cb) override {
    inner_->read(offset, dst, std::move(cb));
  }
  void write(uint64_t offset, ByteView src, IoCallback cb) override {
    inner_->write(offset, src, std::move(cb));
  }
  void flush(IoCallback cb) override { inner_->flush(std::move(cb)); }
  void trim(uint64_t offset, uint64_t length, IoCallback cb) override {
    inner_->trim(offset, length, std::move(cb));
  }
  DeviceStats stats() const override { return inner_->stats(); }

  // The inner device's, less vectored reads where readv is split here.
  DeviceCapabilities capabilities() const override {
    DeviceCapabilities c = inner_->capabilities();
    c.vectored_reads = c.vectored_reads && forwards_readv();
    return c;
  }
  // A buffer registered here is registered with the inner device: requests
  // reach it with the caller's buffer unchanged.
  Result<int> register_buffer(MutableByteView buf) override { return inner_->register_buffer(buf); }
  Status unregister_buffer(int handle) override { return inner_->unregister_buffer(handle); }

  const std::shared_ptr<BlockDevice>& inner() const { return inner_; }

 protected:
  explicit StackedDevice(std::shared_ptr<BlockDevice> inner) : inner_(std::move(inner)) {}
  // True for a subclass whose readv() hands the parts to the inner device in
  // one call.
  virtual bool forwards_readv() const { return false; }

  const std::shared_ptr<BlockDevice> inner_;
};

}  // namespace kvtier::blk
