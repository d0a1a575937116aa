#include "engine/hbm_prefix_pool.h"

namespace kvtier::engine {

size_t HbmPrefixPool::match_prefix(std::span<const kv::Key128> keys) {
  size_t n = 0;
  while (n < keys.size() && map_.count(keys[n])) ++n;
  for (size_t i = n; i-- > 0;) touch(keys[i]);
  return n;
}

void HbmPrefixPool::touch(const kv::Key128& key) {
  auto it = map_.find(key);
  if (it != map_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  if (capacity_ == 0) return;
  lru_.push_front(key);
  map_.emplace(key, lru_.begin());
  while (map_.size() > capacity_) {
    map_.erase(lru_.back());
    lru_.pop_back();
    ++evictions_;
  }
}

void HbmPrefixPool::insert(std::span<const kv::Key128> keys) {
  for (size_t i = keys.size(); i-- > 0;) touch(keys[i]);
}

}  // namespace kvtier::engine
