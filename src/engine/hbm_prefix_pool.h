// The local HBM prefix pool of one prefill replica (the study's "local prefix
// cache", vLLM's automatic prefix caching): a set of block keys with a block
// capacity and LRU eviction. GPU memory is modeled, so the pool holds keys
// only; a hit costs no store I/O and no prefill time.
//
// Thread-safety: none; owned by the thread that runs its replica.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

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

  uint64_t size() const { return nodes_.size(); }
  uint64_t capacity() const { return capacity_; }
  uint64_t evictions() const { return evictions_; }

 private:
  // The pool is on every prefill's path (thousands of blocks a request at
  // the study's scale): the LRU list is intrusive, in one vector of nodes,
  // and the key index is an open-addressing table of node numbers, so a
  // lookup or touch costs no allocation and few cache misses.
  static constexpr uint32_t kNone = UINT32_MAX;
  // Keys whose home slots are prefetched ahead of a walk over a prompt.
  static constexpr size_t kPrefetchAhead = 8;
  struct Node {
    kv::Key128 key;
    uint32_t prev = kNone, next = kNone;  // towards the most / least recent
  };

  // A table slot keeps the key's hash beside its node number: probes and
  // the deletion's shifts compare and place by hash without loading the
  // node (a cache miss each), and load it only when the hashes are equal.
  struct Slot {
    uint32_t node = kNone;
    uint32_t hash = 0;  // the low 32 bits of the key's hash
  };
  static uint32_t hash_of(const kv::Key128& key) {
    return static_cast<uint32_t>(kv::Key128Hash{}(key));
  }

  uint32_t find(const kv::Key128& key) const;  // node number, or kNone
  void prefetch(const kv::Key128& key) const;  // the key's home slot
  void touch(const kv::Key128& key);
  void move_to_front(uint32_t n);
  void unlink(uint32_t n);
  void push_front(uint32_t n);
  // The table holds at most 2^32 slots (node numbers are 32-bit), so the
  // hash's low 32 bits give the home slot.
  size_t home(uint32_t hash) const { return hash & (table_.size() - 1); }
  void table_insert(uint32_t n, uint32_t hash);
  void table_erase(const kv::Key128& key);
  void grow_table();

  uint64_t capacity_;
  uint64_t evictions_ = 0;
  std::vector<Node> nodes_;               // at most capacity_; reused from the tail when full
  uint32_t head_ = kNone, tail_ = kNone;  // most and least recent
  std::vector<Slot> table_;               // power of two, at most half full
  std::vector<uint32_t> matched_;         // match_prefix's nodes, kept for its capacity
};

}  // namespace kvtier::engine
