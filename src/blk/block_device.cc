#include "blk/block_device.h"

#include <fmt/format.h>

#include <atomic>
#include <future>
#include <mutex>

namespace kvtier::blk {

namespace {
template <typename Submit>
Status wait_for(Submit&& submit) {
  std::promise<Status> done;
  auto fut = done.get_future();
  submit([&done](Status s) { done.set_value(std::move(s)); });
  return fut.get();
}
}  // namespace

Status BlockDevice::read_sync(uint64_t offset, MutableByteView dst) {
  return wait_for([&](IoCallback cb) { read(offset, dst, std::move(cb)); });
}
Status BlockDevice::readv_sync(uint64_t offset, std::span<const MutableByteView> parts) {
  return wait_for([&](IoCallback cb) { readv(offset, parts, std::move(cb)); });
}

void BlockDevice::readv(uint64_t offset, std::span<const MutableByteView> parts, IoCallback cb) {
  if (parts.empty()) return cb(Status::invalid_argument(name() + ": readv of no buffers"));
  uint64_t total = 0;
  for (const auto& p : parts) {
    Status st = check_io(offset + total, p.size(), p.data());
    if (!st.ok()) return cb(std::move(st));
    total += p.size();
  }
  struct Join {
    std::atomic<size_t> left;
    std::mutex mu;
    Status first_error;  // guarded by mu
    IoCallback cb;
  };
  auto j = std::make_shared<Join>();
  j->left.store(parts.size(), std::memory_order_relaxed);
  j->cb = std::move(cb);
  uint64_t pos = offset;
  for (const auto& p : parts) {
    read(pos, p, [j](Status st) {
      if (!st.ok()) {
        std::lock_guard lk(j->mu);
        if (j->first_error.ok()) j->first_error = std::move(st);
      }
      if (j->left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
      Status result;
      {
        std::lock_guard lk(j->mu);
        result = std::move(j->first_error);
      }
      j->cb(std::move(result));
    });
    pos += p.size();
  }
}

DeviceCapabilities BlockDevice::capabilities() const {
  DeviceCapabilities c;
  c.alignment = buffer_alignment();
  return c;
}

Result<int> BlockDevice::register_buffer(MutableByteView) {
  return Status::failed_precondition(name() + ": cannot register buffers");
}

Status BlockDevice::unregister_buffer(int handle) {
  return Status::invalid_argument(name() + ": no registered buffer " + std::to_string(handle));
}

Status BlockDevice::write_sync(uint64_t offset, ByteView src) {
  return wait_for([&](IoCallback cb) { write(offset, src, std::move(cb)); });
}
Status BlockDevice::flush_sync() {
  return wait_for([&](IoCallback cb) { flush(std::move(cb)); });
}
Status BlockDevice::trim_sync(uint64_t offset, uint64_t length) {
  return wait_for([&](IoCallback cb) { trim(offset, length, std::move(cb)); });
}

Status BlockDevice::check_io(uint64_t offset, uint64_t length, const void* buf) const {
  const uint32_t bs = block_size();
  if (length == 0) return Status::invalid_argument("zero-length I/O");
  if (offset % bs != 0 || length % bs != 0) {
    return Status::invalid_argument(fmt::format(
        "{}: offset {} / length {} not multiples of block size {}", name(), offset, length, bs));
  }
  if (offset > capacity() || length > capacity() - offset) {
    return Status::invalid_argument(
        fmt::format("{}: I/O [{}, +{}) past capacity {}", name(), offset, length, capacity()));
  }
  if (buf != nullptr && !is_aligned_ptr(buf, buffer_alignment())) {
    return Status::invalid_argument(
        fmt::format("{}: buffer not aligned to {}", name(), buffer_alignment()));
  }
  return Status::ok_status();
}

}  // namespace kvtier::blk
