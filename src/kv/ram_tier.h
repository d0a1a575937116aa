// RamTier: the store's RAM tier. One large arena cut into fixed-size slots
// (KV blocks of a deployment have one size, so a slab of equal slots wastes
// nothing and allocates in O(1)), per-slot metadata for leases and pins, and
// a CLOCK hand that finds eviction victims in amortised O(1).
//
// The slots may be cut into partitions, each its own arena with its own
// free list and CLOCK hand: a block placed in a partition only ever evicts
// blocks of that partition, and a client that maps a partition's arena sees
// only what was placed there (one arena per tenant of a store service).
// Slot numbers run across all partitions; offsets are within a partition.
//
// Slot life cycle (state word = state << 24 | lease count):
//   kFree --allocate--> kFilling --publish--> kReady --claim_victim--> kEvicting --release_slot-->
//   kFree
// A read lease (lease count > 0) is only granted in kReady and blocks
// claim_victim, so a transfer in progress can never lose its bytes. A session
// pin (pin_until_ns in the future) makes CLOCK skip the slot; it expires by
// itself, so a client that forgets to unpin cannot fill the tier forever.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "common/buffer.h"
#include "common/shared_arena.h"
#include "kv/block_key.h"

namespace kvtier::kv {

// One partition of the tier: `bytes / slot_bytes` slots in an arena of its
// own. `shared`: the arena is a sealed memfd that same-host clients may map
// read-only (arena_fd()), to copy leased blocks out themselves.
struct RamPartitionSpec {
  uint64_t bytes = 0;
  bool shared = false;
};

class RamTier {
 public:
  // One partition of `capacity_bytes / slot_bytes` slots; zero slots is a
  // valid, disabled tier.
  RamTier(uint64_t capacity_bytes, uint32_t slot_bytes, bool shared_arena = false);
  // Partitions in order (partition 0 first); any may have zero slots.
  RamTier(uint32_t slot_bytes, std::span<const RamPartitionSpec> partitions);

  // The bytes a slot takes for objects of `object_bytes` (rounded up to 64,
  // a cache line, so that no two slots share one).
  static uint32_t slot_bytes_for(uint32_t object_bytes) {
    return static_cast<uint32_t>(align_up(object_bytes, 64));
  }

  uint32_t slot_count() const { return slot_count_; }
  uint32_t slot_bytes() const { return slot_bytes_; }
  size_t partition_count() const { return parts_.size(); }
  uint32_t partition_slots(size_t part) const { return parts_[part]->count; }
  uint32_t partition_of(uint32_t slot) const { return meta_[slot].part; }
  uint64_t arena_bytes(size_t part = 0) const { return parts_[part]->arena.size(); }
  // The partition's memfd (read-only to whoever maps it later), or -1.
  int arena_fd(size_t part = 0) const { return parts_[part]->arena.fd(); }
  // Where `slot` lies in its partition's arena.
  uint64_t slot_offset(uint32_t slot) const {
    return static_cast<uint64_t>(slot - parts_[meta_[slot].part]->first) * slot_bytes_;
  }

  // Takes a free slot of partition `part` (state kFilling), or nothing when
  // all of its slots are in use.
  std::optional<uint32_t> allocate(size_t part = 0);
  // Fills in the slot's identity and makes it readable (kReady). When
  // `hold_lease`, the caller keeps one lease and must release() it.
  void publish(uint32_t slot, const Key128& key, uint16_t ns, uint32_t length, uint32_t crc,
               bool hold_lease);

  // A read lease on `slot` if it is ready and holds `key` of namespace `ns`.
  bool try_lease(uint32_t slot, const Key128& key, uint16_t ns);
  void release(uint32_t slot);

  // Finds a slot of partition `part` with no lease, no live pin and no
  // recent reference, and moves it to kEvicting. Scans at most two turns of
  // the partition's clock. With `next_key`, also says which key sits where
  // the clock hand now points (nullopt when that slot is not ready): the
  // likely next victim, whose index record a caller can start loading.
  std::optional<uint32_t> claim_victim(uint64_t now_ns, size_t part = 0,
                                       std::optional<Key128>* next_key = nullptr);
  // Returns a kEvicting or kFilling slot to the free list.
  void release_slot(uint32_t slot);
  // Turns a claimed (kEvicting) slot straight into a kFilling one for the
  // caller, so the slot it just emptied cannot be taken by another thread.
  void recycle(uint32_t slot);
  // Claims a specific slot for eviction (remove()); false if leased or busy.
  bool try_claim(uint32_t slot);
  // Gives back a slot the caller published and still holds one lease on
  // (a put that lost a race): waits out other transient leases, then frees
  // it. Holding the lease throughout keeps CLOCK from taking the slot first.
  void abandon(uint32_t slot);

  void pin(uint32_t slot, uint64_t until_ns);
  void unpin(uint32_t slot);
  // Whether any slot was ever pinned. Until then claim_victim() never
  // compares a time, so a caller may pass it 0 instead of reading a clock
  // (a clock read is a few percent of an eviction's time).
  bool ever_pinned() const { return ever_pinned_.load(std::memory_order_relaxed); }
  void touch(uint32_t slot) { meta_[slot].referenced.store(1, std::memory_order_relaxed); }

  std::byte* data(uint32_t slot) {
    return parts_[meta_[slot].part]->arena.data() + slot_offset(slot);
  }
  const Key128& key(uint32_t slot) const { return meta_[slot].key; }
  uint16_t ns(uint32_t slot) const { return meta_[slot].ns; }
  uint32_t length(uint32_t slot) const { return meta_[slot].length; }
  uint32_t crc(uint32_t slot) const { return meta_[slot].crc; }
  uint32_t lease_count(uint32_t slot) const;

  uint32_t used_slots() const { return used_.load(std::memory_order_relaxed); }
  uint64_t leased_slots() const;

 private:
  enum State : uint32_t { kFree = 0, kFilling = 1, kReady = 2, kEvicting = 3 };
  static constexpr uint32_t kLeaseMask = (1u << 24) - 1;

  struct alignas(64) Meta {
    std::atomic<uint32_t> state{0};  // State << 24 | lease count
    std::atomic<uint8_t> referenced{0};
    std::atomic<uint64_t> pin_until_ns{0};
    // The key again, readable at any time (claim_victim's next_key hint
    // reads it without holding the slot).
    std::atomic<uint64_t> hint_hi{0}, hint_lo{0};
    // Written only in kFilling by the owner; stable while kReady.
    Key128 key;
    uint32_t length = 0;
    uint32_t crc = 0;
    uint16_t ns = 0;
    uint16_t part = 0;  // fixed at construction
  };
  struct Partition {
    uint32_t first = 0;  // its slots are [first, first + count)
    uint32_t count = 0;
    SharedArena arena;
    std::mutex free_mu;
    std::vector<uint32_t> free;  // guarded by free_mu
    std::mutex clock_mu;
    uint32_t hand = 0;  // an offset within the partition, guarded by clock_mu
    // A full sweep that found every slot pinned records the earliest pin
    // end here; until then claim_victim() answers at once instead of
    // sweeping again (a RAM tier of time-leased blocks refuses each put in
    // O(1)). Pins only grow, so it stays a lower bound; publish(), unpin()
    // and release_slot() clear it.
    std::atomic<uint64_t> all_pinned_until_ns{0};
  };

  uint32_t slot_bytes_;
  uint32_t slot_count_ = 0;
  std::vector<std::unique_ptr<Partition>> parts_;
  std::unique_ptr<Meta[]> meta_;
  std::atomic<uint32_t> used_{0};
  std::atomic<bool> ever_pinned_{false};
};

}  // namespace kvtier::kv
