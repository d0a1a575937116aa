// Index: the in-RAM map from block key to where the block lives (RAM slot,
// disk page, or both). Sharded open addressing with linear probing and
// backward-shift deletion; fixed capacity chosen at construction so memory is
// known up front (no rehash pauses, ~43 bytes per block at the 0.75 design
// load).
//
// Concurrency: readers never take a lock. Each shard has a sequence counter
// (seqlock): a writer (holding the shard mutex) makes it odd, edits, makes it
// even; a reader retries when the counter moved under it. All slot words are
// atomics, so torn reads are detected, never undefined.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "common/buffer.h"
#include "kv/block_key.h"

namespace kvtier::kv {

constexpr uint32_t kNoRamSlot = 0xFFFFFFFFu;
constexpr uint32_t kNoDiskPage = 0xFFFFFFFFu;

// What the index knows of one block. 32 bytes in the table.
struct IndexRecord {
  Key128 key;
  uint32_t ram_slot = kNoRamSlot;    // RamTier slot, or kNoRamSlot
  uint32_t disk_page = kNoDiskPage;  // first 4 KiB page of the entry on the volume
  uint32_t length = 0;               // payload bytes
  uint16_t ns = 0;                   // namespace handle (Store's table)
  uint16_t disk_hits = 0;            // reads served from disk, saturating
  bool in_ram() const { return ram_slot != kNoRamSlot; }
  bool on_disk() const { return disk_page != kNoDiskPage; }

  // A block that is in RAM slot `slot` only, or on the disk at `page` only.
  static IndexRecord in_ram_slot(const Key128& key, uint16_t ns, uint32_t length, uint32_t slot) {
    return IndexRecord{key, slot, kNoDiskPage, length, ns};
  }
  static IndexRecord at_disk_page(const Key128& key, uint16_t ns, uint32_t length, uint32_t page) {
    return IndexRecord{key, kNoRamSlot, page, length, ns};
  }
};

// What one namespace holds, as the index counts it (payload bytes: a RAM
// slot or disk entry takes at least that much).
struct NamespaceUsage {
  uint64_t blocks = 0;
  uint64_t ram_bytes = 0;   // payload bytes of its blocks in RAM
  uint64_t disk_bytes = 0;  // payload bytes of its blocks on disk
};

class Index {
 public:
  // Sized so that `max_entries` blocks fill the table to at most 0.75.
  // `shards` is rounded up to a power of two.
  explicit Index(uint64_t max_entries, unsigned shards = 64);
  ~Index();
  Index(const Index&) = delete;
  Index& operator=(const Index&) = delete;

  std::optional<IndexRecord> find(const Key128& key) const;

  enum class InsertResult { kInserted, kExists, kFull };
  // Inserts when absent. On kExists, *existing (if given) gets the record.
  InsertResult insert(const IndexRecord& rec, IndexRecord* existing = nullptr);

  // Read-modify-write of one record under its shard lock. `fn` returns false
  // to erase the record. Returns false when the key is absent.
  bool update(const Key128& key, const std::function<bool(IndexRecord&)>& fn);
  bool erase(const Key128& key);

  // Number of leading keys present. When `out` is given, out[i] receives the
  // record of key i for every matched i. Stops at the first absent key.
  size_t match_prefix(std::span<const Key128> keys, IndexRecord* out = nullptr) const;
  // Starts loading `key`'s home slot into the cache: a loop over many keys
  // that prefetches a few keys ahead overlaps their cache misses.
  void prefetch(const Key128& key) const;
  static constexpr size_t kPrefetchAhead = 16;

  // Visits every record (shard by shard, each under its lock).
  void for_each(const std::function<void(const IndexRecord&)>& fn) const;

  uint64_t size() const;
  // Per namespace handle, kept exact by insert/update/erase (a tenant's
  // byte quotas, and whether a namespace handle may be reused).
  NamespaceUsage usage(uint16_t ns) const;
  uint64_t capacity() const { return total_slots_; }
  // Bytes of memory the index holds (table plus shard headers).
  uint64_t memory_bytes() const;

 private:
  struct Slot;
  struct Shard;
  Shard& shard_of(const Key128& key) const;
  static size_t home_of(const Shard& s, const Key128& key);

  void account(const IndexRecord& r, int64_t sign);

  unsigned shard_count_;
  uint64_t total_slots_;
  // Every shard's table in one allocation, from 2 MiB up a mapping with
  // transparent huge pages: a lookup is a random access into tens or
  // hundreds of megabytes, and with 4 KiB pages nearly each one also misses
  // the TLB.
  AlignedBuffer table_memory_;
  std::unique_ptr<Shard[]> shards_;
  struct NamespaceCounters {
    std::atomic<uint64_t> blocks{0}, ram_bytes{0}, disk_bytes{0};
  };
  std::unique_ptr<NamespaceCounters[]> by_ns_;  // 65,536: one per possible handle
};

}  // namespace kvtier::kv
