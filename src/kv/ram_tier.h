// RamTier: the store's RAM tier. One large arena cut into fixed-size slots
// (KV blocks of a deployment have one size, so a slab of equal slots wastes
// nothing and allocates in O(1)), per-slot metadata for leases and pins, and
// a CLOCK hand that finds eviction victims in amortised O(1).
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
#include <vector>

#include "common/buffer.h"
#include "common/shared_arena.h"
#include "kv/block_key.h"

namespace kvtier::kv {

class RamTier {
 public:
  // `capacity_bytes / slot_bytes` slots; zero slots is a valid, disabled tier.
  // `shared_arena`: the slots live in a sealed memfd that same-host clients
  // may map read-only (arena_fd()), to copy leased blocks out themselves.
  RamTier(uint64_t capacity_bytes, uint32_t slot_bytes, bool shared_arena = false);

  uint32_t slot_count() const { return slot_count_; }
  uint32_t slot_bytes() const { return slot_bytes_; }
  uint64_t arena_bytes() const { return arena_.size(); }
  // The arena's memfd (read-only to whoever maps it later), or -1.
  int arena_fd() const { return arena_.fd(); }
  uint64_t slot_offset(uint32_t slot) const { return static_cast<uint64_t>(slot) * slot_bytes_; }

  // Takes a free slot (state kFilling), or nothing when all are in use.
  std::optional<uint32_t> allocate();
  // Fills in the slot's identity and makes it readable (kReady). When
  // `hold_lease`, the caller keeps one lease and must release() it.
  void publish(uint32_t slot, const Key128& key, uint16_t ns, uint32_t length, uint32_t crc,
               bool hold_lease);

  // A read lease on `slot` if it is ready and holds `key` of namespace `ns`.
  bool try_lease(uint32_t slot, const Key128& key, uint16_t ns);
  void release(uint32_t slot);

  // Finds a slot with no lease, no live pin and no recent reference, and
  // moves it to kEvicting. Scans at most two turns of the clock.
  std::optional<uint32_t> claim_victim(uint64_t now_ns);
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
  void touch(uint32_t slot) { meta_[slot].referenced.store(1, std::memory_order_relaxed); }

  std::byte* data(uint32_t slot) {
    return arena_.data() + static_cast<uint64_t>(slot) * slot_bytes_;
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
    // Written only in kFilling by the owner; stable while kReady.
    Key128 key;
    uint32_t length = 0;
    uint32_t crc = 0;
    uint16_t ns = 0;
  };

  uint32_t slot_bytes_;
  uint32_t slot_count_;
  SharedArena arena_;
  std::unique_ptr<Meta[]> meta_;

  std::mutex free_mu_;
  std::vector<uint32_t> free_;  // guarded by free_mu_
  std::mutex clock_mu_;
  uint32_t hand_ = 0;  // guarded by clock_mu_
  std::atomic<uint32_t> used_{0};
};

}  // namespace kvtier::kv
