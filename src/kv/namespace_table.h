// NamespaceTable: maps namespace digests to the 16-bit handles the index
// stores per block (so a record stays 32 bytes), and back. A namespace is
// "open" while at least one registration holds it (register_namespace adds
// one, release() drops one); digests found on the volume at restart get
// handles too, unopened, so their blocks stay findable once a client opens
// the namespace.
//
// Handles are reference-counted, so that clients that come and go with
// ever new namespaces cannot fill the table for everyone: when the table is
// full, a handle that no registration holds and no index record carries is
// given to the new namespace. The blocks_of callback says how many records
// carry a handle. Writers that insert records (Store::put) hold use() while
// they check the handle is open and insert, so a handle is never reused
// under a put in flight.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "kv/block_key.h"

namespace kvtier::kv {

class NamespaceTable {
 public:
  static constexpr uint32_t kMaxNamespaces = 65535;

  explicit NamespaceTable(uint32_t max_handles = kMaxNamespaces) : max_(max_handles) {}
  // How many index records carry a handle (0 lets a closed handle be reused).
  void set_blocks_of(std::function<uint64_t(uint16_t)> blocks_of) {
    blocks_of_ = std::move(blocks_of);
  }

  // Handle for `digest`, created if new; `open` adds a registration. Fails
  // only when every handle is open or still carried by blocks.
  Result<uint16_t> intern(const Key128& digest, bool open);
  // Drops one registration of `handle`; at zero the namespace is closed.
  void release(uint16_t handle);
  std::optional<uint16_t> find(const Key128& digest) const;
  bool is_open(uint16_t handle) const;
  uint32_t registrations(uint16_t handle) const;
  Key128 digest(uint16_t handle) const;
  size_t size() const;  // handles in use
  uint64_t reused() const;

  // Held (shared) by a writer from its is_open() check to its index insert.
  std::shared_lock<std::shared_timed_mutex> use() const { return std::shared_lock(use_mu_); }

 private:
  // With mu_ held: handles that no registration holds and no record carries
  // go back to the free list. Returns how many.
  size_t reclaim_locked();

  const uint32_t max_;
  std::function<uint64_t(uint16_t)> blocks_of_;
  // Before mu_ when both are taken. Timed: a full table's reclaim waits for
  // puts in flight at most kReclaimWaitMs, then refuses (a steady put load
  // must not stall a registration for ever).
  static constexpr int kReclaimWaitMs = 200;
  mutable std::shared_timed_mutex use_mu_;
  mutable std::shared_mutex mu_;
  std::vector<Key128> digests_;  // by handle
  std::vector<uint32_t> refs_;   // registrations, by handle
  std::vector<bool> live_;       // false: on the free list
  std::vector<uint16_t> free_;
  std::unordered_map<Key128, uint16_t, Key128Hash> by_digest_;
  uint64_t reused_ = 0;
};

}  // namespace kvtier::kv
