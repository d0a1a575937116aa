#include "net/cluster/placement.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

namespace kvtier::net {

uint64_t node_seed(const std::string& node_id) {
  return XXH3_64bits(node_id.data(), node_id.size());
}

uint64_t rendezvous_weight(uint64_t seed, const kv::Key128& key) {
  uint8_t bytes[16];
  for (int i = 0; i < 8; ++i) {
    bytes[i] = static_cast<uint8_t>(key.hi >> (8 * i));
    bytes[8 + i] = static_cast<uint8_t>(key.lo >> (8 * i));
  }
  return XXH3_64bits_withSeed(bytes, sizeof(bytes), seed);
}

Placement::Placement(std::vector<std::string> node_ids) : ids_(std::move(node_ids)) {
  std::sort(ids_.begin(), ids_.end());
  ids_.erase(std::unique(ids_.begin(), ids_.end()), ids_.end());
  seeds_.reserve(ids_.size());
  for (const auto& id : ids_) seeds_.push_back(node_seed(id));
}

size_t Placement::owner(const kv::Key128& key) const {
  size_t best = ids_.size();
  uint64_t best_weight = 0;
  // Ids are sorted, so a strict > keeps the smaller id on a tie.
  for (size_t i = 0; i < seeds_.size(); ++i) {
    uint64_t w = rendezvous_weight(seeds_[i], key);
    if (best == ids_.size() || w > best_weight) {
      best = i;
      best_weight = w;
    }
  }
  return best;
}

}  // namespace kvtier::net
