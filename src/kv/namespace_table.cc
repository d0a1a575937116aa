#include "kv/namespace_table.h"

#include <chrono>

#include <fmt/format.h>

namespace kvtier::kv {

Result<uint16_t> NamespaceTable::intern(const Key128& digest, bool open) {
  for (int pass = 0;; ++pass) {
    // The second pass, with the table full, waits for writers in flight
    // (use_mu_) so that no put is between its check and its insert while
    // handles are reclaimed.
    std::unique_lock<std::shared_timed_mutex> writers(use_mu_, std::defer_lock);
    if (pass == 1 && !writers.try_lock_for(std::chrono::milliseconds(kReclaimWaitMs))) {
      return Status::out_of_space(
          "namespace table full, and puts in flight kept it from being reclaimed; try again");
    }
    std::unique_lock lock(mu_);
    auto it = by_digest_.find(digest);
    if (it != by_digest_.end()) {
      if (open) ++refs_[it->second];
      return it->second;
    }
    if (free_.empty() && digests_.size() >= max_ && pass == 1) reclaim_locked();
    uint16_t handle;
    if (!free_.empty()) {
      handle = free_.back();
      free_.pop_back();
      digests_[handle] = digest;
      refs_[handle] = open ? 1 : 0;
      live_[handle] = true;
      ++reused_;
    } else if (digests_.size() < max_) {
      handle = static_cast<uint16_t>(digests_.size());
      digests_.push_back(digest);
      refs_.push_back(open ? 1 : 0);
      live_.push_back(true);
    } else if (pass == 0) {
      continue;  // reclaim, then try again
    } else {
      return Status::out_of_space(
          fmt::format("namespace table full ({} namespaces open or still holding blocks)", max_));
    }
    by_digest_.emplace(digest, handle);
    return handle;
  }
}

size_t NamespaceTable::reclaim_locked() {
  size_t n = 0;
  for (size_t h = 0; h < digests_.size(); ++h) {
    if (!live_[h] || refs_[h] > 0) continue;
    if (blocks_of_ && blocks_of_(static_cast<uint16_t>(h)) > 0) continue;
    by_digest_.erase(digests_[h]);
    live_[h] = false;
    free_.push_back(static_cast<uint16_t>(h));
    ++n;
  }
  return n;
}

void NamespaceTable::release(uint16_t handle) {
  std::unique_lock lock(mu_);
  if (handle < refs_.size() && live_[handle] && refs_[handle] > 0) --refs_[handle];
}

std::optional<uint16_t> NamespaceTable::find(const Key128& digest) const {
  std::shared_lock lock(mu_);
  auto it = by_digest_.find(digest);
  if (it == by_digest_.end()) return std::nullopt;
  return it->second;
}

bool NamespaceTable::is_open(uint16_t handle) const {
  std::shared_lock lock(mu_);
  return handle < refs_.size() && live_[handle] && refs_[handle] > 0;
}

uint32_t NamespaceTable::registrations(uint16_t handle) const {
  std::shared_lock lock(mu_);
  return handle < refs_.size() && live_[handle] ? refs_[handle] : 0;
}

Key128 NamespaceTable::digest(uint16_t handle) const {
  std::shared_lock lock(mu_);
  return handle < digests_.size() ? digests_[handle] : Key128{};
}

size_t NamespaceTable::size() const {
  std::shared_lock lock(mu_);
  return by_digest_.size();
}

uint64_t NamespaceTable::reused() const {
  std::shared_lock lock(mu_);
  return reused_;
}

}  // namespace kvtier::kv
