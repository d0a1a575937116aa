// SparsePageDevice: a volume of any size that keeps, for each 4 KiB page ever
// written, only the bytes up to the page's last non-zero byte. Reads give
// those bytes back and zeros for the rest.
//
// For the simulator (docs/simulator.md): the real disk tier runs on it with
// blocks of a few bytes, so a disk entry (a 128-byte header and its payload
// in one page) costs its header in memory, not a page, and a study-scale
// disk tier of millions of entries fits in a few hundred megabytes. Nothing
// about the device's speed is modeled here: the simulator charges I/O time
// from its profile. Requests complete inline, before read()/write() return.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "blk/block_device.h"
#include "common/mutex.h"

namespace kvtier::sim {

class SparsePageDevice : public blk::FixedGeometryDevice {
 public:
  static constexpr uint32_t kPageBytes = 4096;

  // `capacity` is rounded down to whole pages.
  explicit SparsePageDevice(uint64_t capacity);

  std::string name() const override { return "sparse"; }
  void read(uint64_t offset, MutableByteView dst, blk::IoCallback cb) override;
  void write(uint64_t offset, ByteView src, blk::IoCallback cb) override;
  void flush(blk::IoCallback cb) override;
  // Forgets the range's pages (they read back as zeros).
  void trim(uint64_t offset, uint64_t length, blk::IoCallback cb) override;
  blk::DeviceStats stats() const override { return io_.snapshot(); }

  // Pages held, and the bytes they keep (what the device costs in memory).
  uint64_t pages_held() const;
  uint64_t bytes_held() const;

 private:
  // A page's bytes up to its last non-zero one (size 0: never written, or
  // all zeros).
  struct StoredPage {
    std::unique_ptr<std::byte[]> bytes;
    uint32_t size = 0;
  };
  // Pages are found by number in chunks of kChunkPages, each allocated on its
  // first write: one lookup per page, no hashing, and untouched stretches of
  // a huge volume cost a null pointer per chunk.
  static constexpr uint64_t kChunkPages = 1u << 16;
  const StoredPage* find_page(uint64_t page) const KVTIER_REQUIRES(mu_);
  StoredPage& page_to_write(uint64_t page) KVTIER_REQUIRES(mu_);

  mutable Mutex mu_;
  std::vector<std::unique_ptr<StoredPage[]>> chunks_ KVTIER_GUARDED_BY(mu_);
  uint64_t pages_held_ KVTIER_GUARDED_BY(mu_) = 0;
  uint64_t bytes_held_ KVTIER_GUARDED_BY(mu_) = 0;
  blk::DeviceCounters io_;
};

}  // namespace kvtier::sim
