#include "sim/sparse_page_device.h"

#include <algorithm>
#include <cstring>

namespace kvtier::sim {

namespace {
constexpr auto kRelaxed = std::memory_order_relaxed;

// Bytes of `page` up to and including its last non-zero byte. The pages of
// a simulated disk tier are zeros but for a header, so this scan of zeros is
// most of a write's time: 256 bytes a step, as eight 32-byte vectors ORed
// together (the compiler's vector extension; plain 64-bit words measured
// 2.5x slower), then 64-byte steps and single bytes for the rest.
size_t used_prefix(const std::byte* page, size_t n) {
  using Vec = uint64_t __attribute__((vector_size(32)));
  while (n >= 256) {
    const std::byte* p = page + n - 256;
    Vec v[8];
    std::memcpy(v, p, sizeof(v));
    const Vec any = (v[0] | v[1]) | (v[2] | v[3]) | ((v[4] | v[5]) | (v[6] | v[7]));
    if ((any[0] | any[1] | any[2] | any[3]) != 0) break;
    n -= 256;
  }
  while (n >= 64) {
    uint64_t words[8];
    std::memcpy(words, page + n - 64, 64);
    uint64_t any = 0;
    for (uint64_t w : words) any |= w;
    if (any != 0) break;
    n -= 64;
  }
  while (n > 0 && page[n - 1] == std::byte{0}) --n;
  return n;
}
}  // namespace

SparsePageDevice::SparsePageDevice(uint64_t capacity)
    : FixedGeometryDevice(kPageBytes, 1, capacity / kPageBytes * kPageBytes) {
  MutexLock lock(mu_);
  chunks_.resize((capacity / kPageBytes + kChunkPages - 1) / kChunkPages);
}

const SparsePageDevice::StoredPage* SparsePageDevice::find_page(uint64_t page) const {
  const auto& chunk = chunks_[page / kChunkPages];
  if (!chunk) return nullptr;
  const StoredPage& p = chunk[page % kChunkPages];
  return p.size > 0 ? &p : nullptr;
}

SparsePageDevice::StoredPage& SparsePageDevice::page_to_write(uint64_t page) {
  auto& chunk = chunks_[page / kChunkPages];
  if (!chunk) chunk = std::make_unique<StoredPage[]>(kChunkPages);
  return chunk[page % kChunkPages];
}

void SparsePageDevice::read(uint64_t offset, MutableByteView dst, blk::IoCallback cb) {
  if (refused(offset, dst.size(), dst.data(), cb, io_)) return;
  {
    // Each page: its stored prefix, then zeros (the bytes never written).
    MutexLock lock(mu_);
    for (uint64_t at = 0; at < dst.size(); at += kPageBytes) {
      const size_t page_bytes = std::min<uint64_t>(kPageBytes, dst.size() - at);
      size_t copied = 0;
      if (const StoredPage* p = find_page((offset + at) / kPageBytes)) {
        copied = std::min<size_t>(p->size, page_bytes);
        std::memcpy(dst.data() + at, p->bytes.get(), copied);
      }
      std::memset(dst.data() + at + copied, 0, page_bytes - copied);
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
      if (used == 0 && !find_page(page)) continue;  // zeros over zeros
      StoredPage& p = page_to_write(page);
      bytes_held_ -= p.size;
      pages_held_ -= p.size > 0 ? 1 : 0;
      if (used != p.size) {
        p.bytes = used > 0 ? std::make_unique<std::byte[]>(used) : nullptr;
        p.size = static_cast<uint32_t>(used);
      }
      if (used > 0) std::memcpy(p.bytes.get(), src.data() + at, used);
      bytes_held_ += used;
      pages_held_ += used > 0 ? 1 : 0;
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
      if (!find_page(page)) continue;
      StoredPage& p = page_to_write(page);
      bytes_held_ -= p.size;
      --pages_held_;
      p.bytes.reset();
      p.size = 0;
    }
  }
  io_.trims.fetch_add(1, kRelaxed);
  cb(Status::ok_status());
}

uint64_t SparsePageDevice::pages_held() const {
  MutexLock lock(mu_);
  return pages_held_;
}

uint64_t SparsePageDevice::bytes_held() const {
  MutexLock lock(mu_);
  return bytes_held_;
}

}  // namespace kvtier::sim
