// NamespaceTable: maps namespace digests to the 16-bit handles the index
// stores per block (so a record stays 32 bytes), and back. Handles are dense
// and never reused while the store runs. A namespace becomes "open" when a
// client registers it; digests found on the volume at restart get handles
// too, so their blocks stay findable once a client opens the namespace.
#pragma once

#include <cstdint>
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

  // Handle for `digest`, created if new. Fails only when the table is full.
  Result<uint16_t> intern(const Key128& digest, bool open);
  std::optional<uint16_t> find(const Key128& digest) const;
  bool is_open(uint16_t handle) const;
  Key128 digest(uint16_t handle) const;
  size_t size() const;

 private:
  mutable std::shared_mutex mu_;
  std::vector<Key128> digests_;  // by handle
  std::vector<bool> open_;       // by handle
  std::unordered_map<Key128, uint16_t, Key128Hash> by_digest_;
};

}  // namespace kvtier::kv
