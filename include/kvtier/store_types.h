// The results and statistics every kvtier store returns (kvtier::KvStore and
// its implementations). A miss is a result with a reason, never an error; a
// refused put is a result with a reason too. Errors (a non-OK Status) are for
// bad input only, and a call that returns one changed nothing.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/bytes.h"

namespace kvtier::kv {

enum class Tier : uint8_t { kNone = 0, kRam = 1, kDisk = 2 };
const char* tier_name(Tier t);

enum class MissReason : uint8_t {
  kNone = 0,
  kNotFound,          // never stored, removed, or evicted from every tier
  kEvicted,           // evicted while the lookup was in progress
  kForeignNamespace,  // the key exists under another namespace
  kCorrupt,           // stored bytes failed verification (entry dropped)
  kIoError,           // the device (or the store service) could not be reached
  kTimeout,           // the device (or the store service) did not answer in time
  kCount
};
const char* miss_reason_name(MissReason r);

enum class RefuseReason : uint8_t {
  kNone = 0,
  kNoSpace,    // neither tier could take the block
  kIndexFull,  // the index reached its fixed capacity
  kDiskError,  // the disk tier (or the store service) failed to accept the block
  kAdmission,  // the disk write budget (admission policy) said no
  kQuota,      // the tenant is at its byte quota (store service, docs/security.md)
  kCount
};
const char* refuse_reason_name(RefuseReason r);

struct PutResult {
  enum class Outcome : uint8_t { kStored, kDeduplicated, kRefused };
  Outcome outcome = Outcome::kStored;
  Tier tier = Tier::kNone;  // where the block was stored
  RefuseReason refuse = RefuseReason::kNone;
  bool stored() const { return outcome != Outcome::kRefused; }
};

struct GetResult {
  bool hit = false;
  Tier tier = Tier::kNone;
  MissReason miss = MissReason::kNone;
  uint32_t length = 0;  // payload bytes written to the caller's buffer
};

struct MatchResult {
  size_t blocks = 0;        // leading keys present
  size_t ram_blocks = 0;    // of those, in RAM
  size_t disk_blocks = 0;   // of those, on disk only
  std::vector<Tier> tiers;  // per matched block
};

// One block of a batch get: its key and the caller's buffer it is read into.
struct BatchGetItem {
  Key128 key;
  MutableByteView out;
};

struct DiskTierStats {
  uint64_t appends = 0, bytes_appended = 0;
  uint64_t region_writes = 0, bytes_written = 0, write_errors = 0;
  uint64_t write_timeouts = 0;  // appends/flushes refused: device writes pending too long
  uint64_t reads = 0, bytes_read = 0, buffer_reads = 0;
  uint64_t direct_reads = 0;  // of `reads`, those that went straight into the caller's buffer
  // Direct reads whose caller took its pages back at the deadline (the
  // device answered later, into pages no one sees), and reads that could
  // have gone direct but were staged because the device could not pin the
  // caller's pages (e.g. RLIMIT_MEMLOCK).
  uint64_t direct_revoked = 0, direct_unpinned = 0;
  // Direct reads past their deadline whose device has not answered yet; while
  // any is, reads are staged.
  uint64_t direct_overdue_now = 0;
  uint64_t read_corrupt = 0, read_io_errors = 0;
  uint64_t regions_reclaimed = 0, entries_evicted = 0, entries_reinserted = 0;
  uint64_t recovered_entries = 0, recovery_dropped = 0, recovered_tombstones = 0;
  uint64_t tombstones = 0;  // appended by remove()
  bool recovered_from_checkpoint = false;
  uint32_t region_count = 0, regions_in_use = 0;
  // Of `reads`, those that went to the device in one vectored request with
  // the read before them (adjacent entries of one batch).
  uint64_t coalesced_reads = 0;
};

struct StoreStats {
  uint64_t puts = 0, dedups = 0, put_bytes = 0;
  uint64_t hits_ram = 0, hits_disk = 0, get_bytes = 0;
  std::array<uint64_t, static_cast<size_t>(MissReason::kCount)> misses{};
  std::array<uint64_t, static_cast<size_t>(RefuseReason::kCount)> refusals{};
  uint64_t evictions = 0, demotions = 0, demotion_bytes = 0, eviction_drops = 0;
  uint64_t promotions = 0, disk_direct_puts = 0, demotions_rejected = 0;
  uint64_t index_full_reclaims = 0;  // oldest disk regions reclaimed to free index records
  uint64_t ram_slots = 0, ram_used = 0, ram_leased = 0;
  uint64_t index_entries = 0, index_capacity = 0, index_bytes = 0;
  DiskTierStats disk;
  bool has_disk = false;
};

}  // namespace kvtier::kv
