// Internals of DiskTier shared by its files (disk_tier.cc: lifecycle, flush
// and stats; disk_tier_recovery.cc: init, checkpoint and scan;
// disk_tier_writer.cc: the region log; disk_tier_reader.cc: reads) and by
// nothing else.
#pragma once

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "common/crc32c.h"
#include "kv/disk_format.h"
#include "kv/disk_tier.h"

namespace kvtier::kv {

using namespace disk;  // NOLINT: the format's names are the tier's vocabulary

// Staging buffers for device reads, shared with in-flight completions so a
// completion arriving after the tier is gone still has somewhere to land.
class StagePool {
 public:
  StagePool(unsigned n, size_t bytes) {
    for (unsigned i = 0; i < n; ++i) {
      // Zeroed now: first-touch page faults belong to start-up, not to reads.
      bufs_.emplace_back(bytes, kDirectIoAlignment, /*zero=*/true);
      free_.push_back(static_cast<int>(i));
    }
  }
  int acquire(uint64_t deadline_ns) {
    MutexLock lock(mu_);
    while (free_.empty()) {
      uint64_t now = now_ns();
      if (now >= deadline_ns) return -1;
      lock.wait_for(cv_, std::chrono::nanoseconds(deadline_ns - now));
    }
    int i = free_.back();
    free_.pop_back();
    return i;
  }
  void release(int i) {
    MutexLock lock(mu_);
    free_.push_back(i);
    cv_.notify_one();
  }
  AlignedBuffer& buf(int i) { return bufs_[i]; }
  size_t size() const { return bufs_.size(); }

 private:
  Mutex mu_;
  std::condition_variable cv_;
  std::vector<AlignedBuffer> bufs_;  // fixed after construction
  std::vector<int> free_ KVTIER_GUARDED_BY(mu_);
};

struct DiskTier::Region {
  enum State { kFree, kOpen, kFlushing, kSealed, kReclaiming };
  State state = kFree;
  uint64_t seq = 0;
  uint32_t fill = 0;          // bytes appended
  uint32_t flushed = 0;       // bytes already submitted for writing
  int buf = -1;               // attached write buffer while open or flushing
  uint32_t pending = 0;       // writes in flight
  bool write_failed = false;  // some write of this generation failed
  std::vector<Key128> keys;   // entries appended (the index decides if still live)
  // Offsets of entries reserved but still being copied in outside mu_; the
  // region is not sealed, and nothing past the lowest is written or read,
  // until they are done.
  std::vector<uint32_t> copying;
};

struct DiskTier::Counters {
  std::atomic<uint64_t> appends{0}, bytes_appended{0}, tombstones{0};
  std::atomic<uint64_t> region_writes{0}, bytes_written{0}, write_errors{0}, write_timeouts{0};
  std::atomic<uint64_t> reads{0}, bytes_read{0}, buffer_reads{0}, direct_reads{0};
  std::atomic<uint64_t> coalesced_reads{0};
  std::atomic<uint64_t> direct_revoked{0}, direct_unpinned{0};
  std::atomic<uint64_t> read_corrupt{0}, read_io_errors{0};
  std::atomic<uint64_t> regions_reclaimed{0}, entries_evicted{0}, entries_reinserted{0};
  std::atomic<uint64_t> recovered_entries{0}, recovery_dropped{0}, recovered_tombstones{0};
  bool recovered_from_checkpoint = false;
};

namespace disk_internal {

inline constexpr auto kRelaxed = std::memory_order_relaxed;

// Entries in one coalesced read at most, whatever the device takes.
inline constexpr size_t kMaxCoalescedEntries = 64;

inline uint32_t header_crc_of(EntryHeader h) {
  h.header_crc = 0;
  return crc32c(&h, sizeof(h));
}

inline uint32_t superblock_crc_of(Superblock s) {
  s.header_crc = 0;
  return crc32c(&s, sizeof(s));
}

// Checks an entry header against what the index expects. kNotFound: a
// different, intact entry is there (the region was reused); kCorruption: the
// bytes do not verify.
inline Status check_header(const EntryHeader& h, uint64_t volume_id, const Key128& key,
                           const Key128& ns_digest, uint32_t length) {
  if (h.magic != kEntryMagic || h.version != kFormatVersion || h.header_bytes != sizeof(h) ||
      header_crc_of(h) != h.header_crc) {
    return Status::corruption("entry header does not verify");
  }
  if (h.volume_id != volume_id || h.key_hi != key.hi || h.key_lo != key.lo) {
    return Status::not_found("entry was replaced");
  }
  if (h.ns_hi != ns_digest.hi || h.ns_lo != ns_digest.lo) {
    return Status::not_found("entry belongs to another namespace");
  }
  if (h.payload_bytes != length) return Status::corruption("entry length mismatch");
  return Status::ok_status();
}

// The same for a whole entry image (header page, then the payload).
inline Status check_entry(const std::byte* entry, uint64_t volume_id, const Key128& key,
                          const Key128& ns_digest, uint32_t length) {
  EntryHeader h;
  std::memcpy(&h, entry, sizeof(h));
  KVTIER_RETURN_IF_ERROR(check_header(h, volume_id, key, ns_digest, length));
  if (crc32c(entry + kPayloadOffset, length) != h.payload_crc) {
    return Status::corruption("payload checksum mismatch");
  }
  return Status::ok_status();
}

inline uint32_t payload_crc_of(const std::byte* entry) {
  EntryHeader h;
  std::memcpy(&h, entry, sizeof(h));
  return h.payload_crc;
}

inline uint64_t random_volume_id() {
  std::random_device rd;
  uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ now_ns();
  return v == 0 ? 1 : v;
}

// Generations are reserved on the volume in steps of this many, so the
// superblock is rewritten once per this many region openings.
inline constexpr uint64_t kSeqReserveStep = 1024;

}  // namespace disk_internal
}  // namespace kvtier::kv
