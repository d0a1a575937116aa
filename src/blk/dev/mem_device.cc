#include "blk/dev/mem_device.h"

#include <cstring>

namespace kvtier::blk {

namespace {
constexpr auto kRelaxed = std::memory_order_relaxed;
}  // namespace

MemDevice::MemDevice(uint64_t capacity, uint32_t block_size, uint32_t buffer_alignment)
    : FixedGeometryDevice(block_size == 0 ? 4096 : block_size,
                          buffer_alignment == 0 ? 1 : buffer_alignment,
                          align_down(capacity, block_size == 0 ? 4096 : block_size)),
      // Zeroed so that reads of never-written blocks are deterministic.
      storage_(capacity_, kDirectIoAlignment, /*zero=*/true) {}

void MemDevice::read(uint64_t offset, MutableByteView dst, IoCallback cb) {
  if (refused(offset, dst.size(), dst.data(), cb, io_)) return;
  std::memcpy(dst.data(), storage_.data() + offset, dst.size());
  io_.reads.fetch_add(1, kRelaxed);
  io_.bytes_read.fetch_add(dst.size(), kRelaxed);
  cb(Status::ok_status());
}

void MemDevice::write(uint64_t offset, ByteView src, IoCallback cb) {
  if (refused(offset, src.size(), src.data(), cb, io_)) return;
  std::memcpy(storage_.data() + offset, src.data(), src.size());
  io_.writes.fetch_add(1, kRelaxed);
  io_.bytes_written.fetch_add(src.size(), kRelaxed);
  cb(Status::ok_status());
}

void MemDevice::flush(IoCallback cb) {
  io_.flushes.fetch_add(1, kRelaxed);
  cb(Status::ok_status());
}

void MemDevice::trim(uint64_t offset, uint64_t length, IoCallback cb) {
  if (refused(offset, length, nullptr, cb, io_)) return;
  std::memset(storage_.data() + offset, 0, length);
  io_.trims.fetch_add(1, kRelaxed);
  cb(Status::ok_status());
}

DeviceStats MemDevice::stats() const { return io_.snapshot(); }

}  // namespace kvtier::blk
