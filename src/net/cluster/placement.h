// Rendezvous (highest-random-weight) placement of block keys on store nodes:
// which node of a cluster owns a block. Every client computes the same owner
// from the same node set with no coordination, and when a node leaves only
// the keys it owned move (each to the node with the next-highest weight);
// when one joins it takes only the keys whose weight it now tops.
//
// Weight of (node, key) = XXH3-64 of the key's 16 bytes (hi then lo, little
// endian) with the seed XXH3-64(node id). The highest weight wins; equal
// weights (practically never) go to the smaller node id. Changing this
// function moves every key: it is part of the cluster's format
// (docs/store-service.md, "Several nodes"), pinned by golden values in
// placement_test.cc.
//
// Thread-safety: a Placement is immutable once built; share it freely.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kv/block_key.h"

namespace kvtier::net {

// The seed a node's id gives to the weight function.
uint64_t node_seed(const std::string& node_id);
uint64_t rendezvous_weight(uint64_t node_seed, const kv::Key128& key);

class Placement {
 public:
  // Node ids in any order; duplicates are kept once.
  explicit Placement(std::vector<std::string> node_ids);

  size_t size() const { return ids_.size(); }
  bool empty() const { return ids_.empty(); }
  // Sorted node ids; owner() returns an index into this list.
  const std::vector<std::string>& node_ids() const { return ids_; }
  // Index of the owning node; size() when there are no nodes.
  size_t owner(const kv::Key128& key) const;

 private:
  std::vector<std::string> ids_;
  std::vector<uint64_t> seeds_;
};

}  // namespace kvtier::net
