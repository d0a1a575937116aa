#include "engine/hbm_prefix_pool.h"

#include "common/prefetch.h"

namespace kvtier::engine {

size_t HbmPrefixPool::match_prefix(std::span<const kv::Key128> keys) {
  matched_.clear();
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i + kPrefetchAhead < keys.size()) prefetch(keys[i + kPrefetchAhead]);
    const uint32_t n = find(keys[i]);
    if (n == kNone) break;
    matched_.push_back(n);
  }
  for (size_t i = matched_.size(); i-- > 0;) move_to_front(matched_[i]);
  return matched_.size();
}

void HbmPrefixPool::move_to_front(uint32_t n) {
  if (n == head_) return;
  unlink(n);
  push_front(n);
}

void HbmPrefixPool::insert(std::span<const kv::Key128> keys) {
  for (size_t i = keys.size(); i-- > 0;) {
    if (i >= kPrefetchAhead) prefetch(keys[i - kPrefetchAhead]);
    touch(keys[i]);
  }
}

uint32_t HbmPrefixPool::find(const kv::Key128& key) const {
  if (table_.empty()) return kNone;
  const size_t mask = table_.size() - 1;
  const uint32_t hash = hash_of(key);
  for (size_t i = home(hash);; i = (i + 1) & mask) {
    const Slot& s = table_[i];
    if (s.node == kNone || (s.hash == hash && nodes_[s.node].key == key)) return s.node;
  }
}

void HbmPrefixPool::prefetch(const kv::Key128& key) const {
  if (!table_.empty()) prefetch_for_read(&table_[home(hash_of(key))]);
}

void HbmPrefixPool::touch(const kv::Key128& key) {
  if (const uint32_t n = find(key); n != kNone) return move_to_front(n);
  if (capacity_ == 0) return;
  uint32_t n;
  if (nodes_.size() < capacity_) {
    if ((nodes_.size() + 1) * 2 > table_.size()) grow_table();
    n = static_cast<uint32_t>(nodes_.size());
    nodes_.push_back(Node{key});
  } else {
    // Full: the least recent block's node becomes the new one's.
    n = tail_;
    table_erase(nodes_[n].key);
    unlink(n);
    nodes_[n].key = key;
    ++evictions_;
  }
  table_insert(n, hash_of(key));
  push_front(n);
}

void HbmPrefixPool::unlink(uint32_t n) {
  Node& x = nodes_[n];
  (x.prev == kNone ? head_ : nodes_[x.prev].next) = x.next;
  (x.next == kNone ? tail_ : nodes_[x.next].prev) = x.prev;
  x.prev = x.next = kNone;
}

void HbmPrefixPool::push_front(uint32_t n) {
  nodes_[n].prev = kNone;
  nodes_[n].next = head_;
  (head_ == kNone ? tail_ : nodes_[head_].prev) = n;
  head_ = n;
}

void HbmPrefixPool::table_insert(uint32_t n, uint32_t hash) {
  const size_t mask = table_.size() - 1;
  size_t i = home(hash);
  while (table_[i].node != kNone) i = (i + 1) & mask;
  table_[i] = Slot{n, hash};
}

void HbmPrefixPool::table_erase(const kv::Key128& key) {
  const size_t mask = table_.size() - 1;
  const uint32_t hash = hash_of(key);
  size_t hole = home(hash);
  while (table_[hole].hash != hash || nodes_[table_[hole].node].key != key) {
    hole = (hole + 1) & mask;
  }
  // Backward-shift deletion: later entries of the probe run move into the
  // hole unless their home lies cyclically after it, so no lookup ever
  // stops at a hole before its key.
  for (size_t j = (hole + 1) & mask; table_[j].node != kNone; j = (j + 1) & mask) {
    const size_t h = home(table_[j].hash);
    const bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
    if (stays) continue;
    table_[hole] = table_[j];
    hole = j;
  }
  table_[hole] = Slot{};
}

void HbmPrefixPool::grow_table() {
  table_.assign(table_.empty() ? 64 : table_.size() * 2, Slot{});
  for (uint32_t n = 0; n < nodes_.size(); ++n) table_insert(n, hash_of(nodes_[n].key));
}

}  // namespace kvtier::engine
