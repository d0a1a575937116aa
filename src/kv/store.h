// Store: the in-process KV block store. Blocks live in a RAM tier and, below
// it, a disk tier on a raw block volume; a full RAM tier demotes cold blocks
// to disk instead of refusing writes. Lookups find the longest cached prefix
// of a key chain in one call. A block that is missing, corrupt, of another
// namespace or unreadable is a miss with a counted reason, never an error
// and never wrong bytes.
//
// Errors (a non-OK Status) are reserved for bad input: an unknown namespace,
// an empty or oversized object, a buffer too small, the reserved zero key, a
// put of a key that another namespace holds (kAlreadyExists; keys are derived
// per namespace, so this is a client bug, never a dedup). Such calls change
// nothing.
//
// Thread-safety: every method may be called concurrently from any thread.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "blk/block_device.h"
#include "common/buffer.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/task_pool.h"
#include "kv/admission.h"
#include "kv/block_key.h"
#include "kv/disk_tier.h"
#include "kv/index.h"
#include "kv/namespace.h"
#include "kv/namespace_table.h"
#include "kv/ram_tier.h"
#include "kvtier/kv_store.h"
#include "kvtier/store_types.h"

namespace kvtier::kv {

struct StoreOptions {
  uint64_t ram_bytes = 1ull << 30;  // 0 = no RAM tier (direct-to-volume, case F)
  // Largest object; also the RAM slot size (KV blocks of one deployment have
  // one size, so slots waste nothing). 1.5 MiB = 16 tokens x 96 KiB.
  uint32_t max_object_bytes = 1536u << 10;
  std::shared_ptr<blk::BlockDevice> volume;  // null = no disk tier
  DiskTierOptions disk;
  bool promote_on_disk_hit = true;
  // Promote staged disk hits on a background thread after batch_get
  // returned, from the verified staging buffer (no second checksum pass);
  // direct reads are promoted before it returns, from the caller's buffer. A later read of a key
  // whose promotion is still queued waits for it, so every read sees the
  // promotions of the reads before it. Off: promote before returning.
  bool promote_in_background = true;
  // Put the RAM tier in a sealed memfd that same-host clients map read-only
  // and copy leased blocks from (lease_ram). Off: private memory with huge
  // pages. A client that maps the arena can read every block in RAM, of
  // every namespace: turn it off where tenants on one host must not.
  bool share_ram_arena = false;
  // Further RAM arenas cut out of ram_bytes, each a sealed memfd of its own
  // (arena 1, 2, ...): a namespace registered into one keeps its RAM blocks
  // there and evicts only blocks of that arena, so a client given that
  // arena's fd sees no other arena's blocks (a store service gives each
  // tenant that opts in an arena of its own). Each holds at least one object.
  std::vector<uint64_t> private_arena_bytes;
  uint64_t io_timeout_ms = 2000;
  // Index capacity in blocks; 0 = RAM slots + volume bytes / object size.
  uint64_t index_capacity = 0;
  unsigned index_shards = 64;
  // Namespace handles (at most 65,535). A handle no registration holds and
  // no block carries is reused when the table is full.
  uint32_t max_namespaces = 65535;
  // Disk admission: write budget in bytes per second (0 = unlimited) and the
  // burst it may run ahead. Over budget, a demotion drops the block and a
  // direct-to-disk put is refused with kAdmission.
  uint64_t disk_write_budget_bytes_per_sec = 0;
  uint64_t disk_write_burst_bytes = 256ull << 20;
  // Mooncake Store's lease semantics, for comparison (docs/simulator.md, the
  // fleet study): every lookup (match_prefix, Mooncake's ExistKey) and every
  // read of a RAM block grants it a lease of this many milliseconds,
  // eviction skips leased blocks, and a put that finds every RAM block
  // leased is refused (kNoSpace) instead of going to the disk tier. 0 (default): kvtier's policy,
  // read leases that last exactly one transfer, and demotion instead of refusal.
  uint64_t time_lease_ms = 0;
  // The clock of pins and time leases, in nanoseconds; empty: the steady
  // clock. A simulation passes its virtual clock, so a 300 s lease lasts 300
  // simulated seconds.
  std::function<uint64_t()> lease_clock_ns;
};

// A read lease on a block's RAM copy (Store::lease_ram): its bytes stay at
// [offset, offset + length) of the RAM arena until the lease is released.
struct RamLease {
  uint32_t slot = 0;
  uint64_t offset = 0;
  uint32_t length = 0;
  const std::byte* data = nullptr;  // the bytes, in this process
  uint32_t crc = 0;                 // CRC32C of the bytes, as stored
  uint16_t arena = 0;               // the arena `offset` is in
};

class Store final : public KvStore {
 public:
  static Result<std::unique_ptr<Store>> open(const StoreOptions& options);
  ~Store() override;

  // Validates `ns` and returns the handle that put/get take.
  Result<uint16_t> register_namespace(const Namespace& ns) override;
  // The same, keeping the namespace's RAM blocks in `arena` (0: the common
  // one; see StoreOptions::private_arena_bytes) from now on.
  Result<uint16_t> register_namespace(const Namespace& ns, uint16_t arena);

  Result<PutResult> put(uint16_t ns, const Key128& key, ByteView data) override;
  Result<GetResult> get(uint16_t ns, const Key128& key, MutableByteView out) override;
  // get() into memory another process can see (a client's shared-memory
  // area): no disk read lands there directly, so only verified bytes ever
  // do, whatever the device returns.
  Result<GetResult> get_into_shared(uint16_t ns, const Key128& key, MutableByteView out);
  Result<std::vector<PutResult>> batch_put(uint16_t ns, std::span<const Key128> keys,
                                           std::span<const ByteView> data) override;
  // Reads every item with the disk reads in flight together.
  Result<std::vector<GetResult>> batch_get(uint16_t ns,
                                           std::span<const BatchGetItem> items) override;
  Result<MatchResult> match_prefix(uint16_t ns, std::span<const Key128> keys) override;

  // Direct reads (a same-host client copies the block out of the shared RAM
  // arena itself): a lease on `key`'s RAM copy, counted as a RAM hit, or
  // nullopt when the block is not in RAM (then use get(), which reads the
  // disk tier and counts the miss). Every lease must be released once.
  Result<std::optional<RamLease>> lease_ram(uint16_t ns, const Key128& key);
  void release_ram_lease(uint32_t slot);
  // A RAM arena's sealed memfd (see StoreOptions::share_ram_arena and
  // private_arena_bytes), or -1 when that arena is not shareable.
  int ram_arena_fd(uint16_t arena = 0) const;
  uint64_t ram_arena_bytes(uint16_t arena = 0) const;
  size_t ram_arena_count() const;
  // Drops a block from every tier. Returns whether it was present.
  Result<bool> remove(uint16_t ns, const Key128& key) override;
  // Protects the RAM copies of `keys` from eviction for `ttl_ms` (a session
  // that is likely to return). Returns how many blocks were pinned.
  Result<size_t> pin(uint16_t ns, std::span<const Key128> keys, uint64_t ttl_ms) override;
  Result<size_t> unpin(uint16_t ns, std::span<const Key128> keys) override;

  // Makes every block stored so far durable on the volume (RAM-only blocks
  // are written down; they stay in RAM).
  Status flush();
  // flush() and write the disk tier's checkpoint; the store must be idle.
  Status close();

  // The counters now (KvStore::stats() returns the same, as a Result).
  StoreStats local_stats() const;
  Result<StoreStats> stats() override { return local_stats(); }
  MetricsRegistry& metrics() { return metrics_; }
  // Drops one registration of `ns` (a store service calls it when the
  // connection that registered it ends). At zero the handle is closed:
  // calls with it fail until the namespace is registered again, and once no
  // block carries it the handle may go to another namespace.
  void release_namespace(uint16_t ns);
  // What namespace `ns` holds now (exact, from the index).
  NamespaceUsage namespace_usage(uint16_t ns) const;
  size_t namespace_handles() const { return namespaces_.size(); }
  // The digest handle `ns` stands for now (handles are reused, see above).
  Key128 namespace_digest(uint16_t ns) const { return namespaces_.digest(ns); }
  const StoreOptions& options() const { return opts_; }

 private:
  Result<std::vector<GetResult>> batch_get_impl(uint16_t ns, std::span<const BatchGetItem> items,
                                                bool allow_direct);
  // batch_get's steps: reject a bad call before any I/O; copy one RAM hit or
  // say where the block is (the record to read from disk, or nothing when
  // `res` already says hit or miss); count what the call returned.
  Status check_batch_get(uint16_t ns, std::span<const BatchGetItem> items) const;
  std::optional<IndexRecord> get_from_ram(uint16_t ns, const BatchGetItem& item, GetResult* res);
  void count_gets(const std::vector<GetResult>& results, uint64_t started_ns);
  explicit Store(const StoreOptions& options);
  Status init();
  Status check_ns(uint16_t ns) const;
  Status check_key(const Key128& key) const;
  Status check_open() const;
  // Frees a RAM slot, demoting its block to disk when no disk copy exists.
  void evict_slot(uint32_t slot);
  // A RAM slot in namespace `ns`'s arena, evicting one of its blocks if needed.
  std::optional<uint32_t> obtain_slot(uint16_t ns);
  // The clock pins and time leases are measured on (lease_clock_ns).
  uint64_t lease_now_ns() const { return opts_.lease_clock_ns ? opts_.lease_clock_ns() : now_ns(); }
  // Under time_lease_ms: extends `slot`'s lease to now + the lease time.
  void grant_time_lease(uint32_t slot) {
    if (opts_.time_lease_ms > 0) ram_->pin(slot, lease_now_ns() + opts_.time_lease_ms * 1000000ull);
  }
  PutResult put_to_disk(uint16_t ns, const Key128& key, ByteView data, uint32_t crc);
  // Copies a disk hit into a RAM slot. `verify`: check `data` against
  // `expected_crc` after the copy (the caller's buffer, which it may reuse);
  // false for a buffer the store owns and verified already.
  void promote(uint16_t ns, const Key128& key, ByteView data, uint32_t expected_crc, bool verify);
  // Promotes a verified disk hit whose bytes the caller has in `out`: on
  // the promoter thread from `target`'s staging buffer, or now from `out`
  // after a direct read or without a promoter.
  void promote_hit(uint16_t ns, const Key128& key, ByteView out, uint32_t crc,
                   std::shared_ptr<ReadTarget> target);
  // Background promotion (store_promotion.cc): queue one disk hit whose
  // bytes lie in `data`, kept alive by `holder`; false when the queue is
  // full (the hit is then not promoted).
  bool queue_promotion(uint16_t ns, const Key128& key, ByteView data, uint32_t crc,
                       std::shared_ptr<const void> holder);
  // Waits until no queued promotion is for one of `keys`.
  void await_promotions(std::span<const Key128> keys) const;
  // Waits until every queued promotion is done.
  void await_all_promotions() const;
  void await_promotion(const Key128& key) const { await_promotions({&key, 1}); }
  void stop_promoter();
  // Classifies a failed disk read and drops a record that is really bad.
  MissReason disk_failure(const IndexRecord& rec, const Status& st);
  // Index insert that, when the index is full, reclaims the oldest disk
  // region to free records and tries again.
  Index::InsertResult insert_making_room(const IndexRecord& rec, IndexRecord* existing);
  Status foreign_key_error(const Key128& key) const;
  void count_miss(MissReason r);
  void count_refusal(RefuseReason r);

  StoreOptions opts_;
  MetricsRegistry metrics_;
  std::unique_ptr<Index> index_;
  NamespaceTable namespaces_;
  std::unique_ptr<RamTier> ram_;
  // Each namespace handle's RAM arena (written at registration).
  std::unique_ptr<std::atomic<uint16_t>[]> ns_arena_;
  std::unique_ptr<DiskTier> disk_;
  std::unique_ptr<DiskAdmission> admission_;
  std::atomic<bool> closed_{false};
  std::atomic<uint64_t> demotions_in_flight_{0};

  // Background promotion: one thread; the keys queued and not yet promoted,
  // each holding the buffer it is promoted from (at most
  // kMaxQueuedPromotionBytes of them).
  static constexpr uint64_t kMaxQueuedPromotionBytes = 64ull << 20;
  std::unique_ptr<TaskPool> promoter_;
  mutable Mutex promo_mu_;
  mutable std::condition_variable promo_cv_;
  std::vector<Key128> promoting_ KVTIER_GUARDED_BY(promo_mu_);
  std::atomic<size_t> promoting_count_{0};    // promoting_.size(), read without the lock
  std::atomic<uint64_t> promoting_bytes_{0};  // written under promo_mu_

  struct Metrics;
  std::unique_ptr<Metrics> m_;
};

}  // namespace kvtier::kv
