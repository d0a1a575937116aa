// FlatInsertMap: a hash map that only grows (insert and find, no erase), with
// open addressing and linear probing in one array. For maps of millions of
// small entries filled once per run, where std::unordered_map's node per
// entry costs a cache miss per lookup (the study runner's first-touch map of
// every block). Keys must hash well (block keys are already hashes).
//
// Thread-safety: none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/prefetch.h"

namespace kvtier {

template <typename K, typename V, typename Hash>
class FlatInsertMap {
 public:
  // Inserts {key, value} unless `key` is present; returns the entry's value
  // and whether it was inserted (like std::unordered_map::emplace). The
  // pointer is good until the next emplace, which may move every entry.
  std::pair<V*, bool> emplace(const K& key, const V& value) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    Slot& s = probe(slots_, key);
    if (s.used) return {&s.value, false};
    s = Slot{key, value, true};
    ++size_;
    return {&s.value, true};
  }
  const V* find(const K& key) const {
    if (slots_.empty()) return nullptr;
    const Slot& s = probe(slots_, key);
    return s.used ? &s.value : nullptr;
  }
  // Starts loading `key`'s home slot into the cache. A caller walking many
  // keys prefetches a few ahead, so the loads of cold slots overlap instead
  // of costing a cache miss each, one after another.
  void prefetch(const K& key) const {
    if (!slots_.empty()) prefetch_for_read(&slots_[Hash{}(key) & (slots_.size() - 1)]);
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    K key{};
    V value{};
    bool used = false;
  };

  // The slot of `key`, or the empty one where it would go (capacity is a
  // power of two, at most half full, so an empty slot always ends the probe).
  template <typename Slots>  // const or not
  static auto& probe(Slots& slots, const K& key) {
    const size_t mask = slots.size() - 1;
    for (size_t i = Hash{}(key)&mask;; i = (i + 1) & mask) {
      if (!slots[i].used || slots[i].key == key) return slots[i];
    }
  }

  void grow() {
    std::vector<Slot> bigger(slots_.empty() ? 1024 : slots_.size() * 2);
    for (const Slot& s : slots_) {
      if (s.used) probe(bigger, s.key) = s;
    }
    slots_ = std::move(bigger);
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace kvtier
