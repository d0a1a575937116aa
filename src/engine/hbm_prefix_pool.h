// The local HBM prefix pool of one prefill replica (the study's "local prefix
// cache", vLLM's automatic prefix caching): a set of block keys with a block
// capacity and LRU eviction. GPU memory is modeled, so the pool holds keys
// only; a hit costs no store I/O and no prefill time.
//
// Thread-safety: none; owned by the thread that runs its replica.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>

#include "kv/block_key.h"

namespace kvtier::engine {

class HbmPrefixPool {
 public:
  explicit HbmPrefixPool(uint64_t capacity_blocks) : capacity_(capacity_blocks) {}

  // Leading keys of `keys` present in the pool; touches them (most recent).
  size_t match_prefix(std::span<const kv::Key128> keys);
  // Inserts or touches every key, evicting least-recently-used blocks beyond
  // capacity. Keys are touched last to first so that a prompt's leading
  // blocks (shared by its later turns) are the most recent.
  void insert(std::span<const kv::Key128> keys);

  uint64_t size() const { return map_.size(); }
  uint64_t capacity() const { return capacity_; }
  uint64_t evictions() const { return evictions_; }

 private:
  void touch(const kv::Key128& key);

  uint64_t capacity_;
  uint64_t evictions_ = 0;
  std::list<kv::Key128> lru_;  // front = most recent
  std::unordered_map<kv::Key128, std::list<kv::Key128>::iterator, kv::Key128Hash> map_;
};

}  // namespace kvtier::engine
