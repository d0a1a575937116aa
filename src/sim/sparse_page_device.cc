#include "sim/sparse_page_device.h"

#include <algorithm>
#include <cstring>

namespace kvtier::sim {

namespace {
constexpr auto kRelaxed = std::memory_order_relaxed;

// Bytes of `page` up to and including its last non-zero byte. Words first:
// the pages of a simulated disk tier are zeros but for a header.
size_t used_prefix(const std::byte* page, size_t n) {
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, page + n - 8, 8);
    if (word != 0) break;
    n -= 8;
  }
  while (n > 0 && page[n - 1] == std::byte{0}) --n;
  return n;
}
}  // namespace

SparsePageDevice::SparsePageDevice(uint64_t capacity)
    : FixedGeometryDevice(kPageBytes, 1, capacity / kPageBytes * kPageBytes) {}

void SparsePageDevice::read(uint64_t offset, MutableByteView dst, blk::IoCallback cb) {
  if (refused(offset, dst.size(), dst.data(), cb, io_)) return;
  std::memset(dst.data(), 0, dst.size());
  {
    MutexLock lock(mu_);
    for (uint64_t at = 0; at < dst.size(); at += kPageBytes) {
      auto it = pages_.find((offset + at) / kPageBytes);
      if (it == pages_.end()) continue;
      std::memcpy(dst.data() + at, it->second.data(), it->second.size());
    }
  }
  io_.reads.fetch_add(1, kRelaxed);
  io_.bytes_read.fetch_add(dst.size(), kRelaxed);
  cb(Status::ok_status());
}

void SparsePageDevice::write(uint64_t offset, ByteView src, blk::IoCallback cb) {
  if (refused(offset, src.size(), src.data(), cb, io_)) return;
  {
    MutexLock lock(mu_);
    for (uint64_t at = 0; at < src.size(); at += kPageBytes) {
      const uint64_t page = (offset + at) / kPageBytes;
      const size_t used = used_prefix(src.data() + at, kPageBytes);
      auto it = pages_.find(page);
      if (it != pages_.end()) {
        bytes_held_ -= it->second.size();
        if (used == 0) {
          pages_.erase(it);
          continue;
        }
      } else if (used == 0) {
        continue;
      } else {
        it = pages_.emplace(page, std::vector<std::byte>()).first;
      }
      it->second.assign(src.data() + at, src.data() + at + used);
      bytes_held_ += used;
    }
  }
  io_.writes.fetch_add(1, kRelaxed);
  io_.bytes_written.fetch_add(src.size(), kRelaxed);
  cb(Status::ok_status());
}

void SparsePageDevice::flush(blk::IoCallback cb) {
  io_.flushes.fetch_add(1, kRelaxed);
  cb(Status::ok_status());
}

void SparsePageDevice::trim(uint64_t offset, uint64_t length, blk::IoCallback cb) {
  if (refused(offset, length, nullptr, cb, io_)) return;
  {
    MutexLock lock(mu_);
    for (uint64_t page = offset / kPageBytes; page < (offset + length) / kPageBytes; ++page) {
      auto it = pages_.find(page);
      if (it == pages_.end()) continue;
      bytes_held_ -= it->second.size();
      pages_.erase(it);
    }
  }
  io_.trims.fetch_add(1, kRelaxed);
  cb(Status::ok_status());
}

uint64_t SparsePageDevice::pages_held() const {
  MutexLock lock(mu_);
  return pages_.size();
}

uint64_t SparsePageDevice::bytes_held() const {
  MutexLock lock(mu_);
  return bytes_held_;
}

}  // namespace kvtier::sim
