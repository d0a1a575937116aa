#include "engine/hbm_prefix_pool.h"

namespace kvtier::engine {

size_t HbmPrefixPool::match_prefix(std::span<const kv::Key128> keys) {
  matched_.clear();
  for (const kv::Key128& key : keys) {
    const uint32_t n = find(key);
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
  for (size_t i = keys.size(); i-- > 0;) touch(keys[i]);
}

uint32_t HbmPrefixPool::find(const kv::Key128& key) const {
  if (table_.empty()) return kNone;
  const size_t mask = table_.size() - 1;
  for (size_t i = home(key);; i = (i + 1) & mask) {
    if (table_[i] == kNone || nodes_[table_[i]].key == key) return table_[i];
  }
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
  table_insert(n);
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

void HbmPrefixPool::table_insert(uint32_t n) {
  const size_t mask = table_.size() - 1;
  size_t i = home(nodes_[n].key);
  while (table_[i] != kNone) i = (i + 1) & mask;
  table_[i] = n;
}

void HbmPrefixPool::table_erase(const kv::Key128& key) {
  const size_t mask = table_.size() - 1;
  size_t hole = home(key);
  while (nodes_[table_[hole]].key != key) hole = (hole + 1) & mask;
  // Backward-shift deletion: later entries of the probe run move into the
  // hole unless their home lies cyclically after it, so no lookup ever
  // stops at a hole before its key.
  for (size_t j = (hole + 1) & mask; table_[j] != kNone; j = (j + 1) & mask) {
    const size_t h = home(nodes_[table_[j]].key);
    const bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
    if (stays) continue;
    table_[hole] = table_[j];
    hole = j;
  }
  table_[hole] = kNone;
}

void HbmPrefixPool::grow_table() {
  table_.assign(table_.empty() ? 64 : table_.size() * 2, kNone);
  for (uint32_t n = 0; n < nodes_.size(); ++n) table_insert(n);
}

}  // namespace kvtier::engine
