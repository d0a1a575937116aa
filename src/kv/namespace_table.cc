#include "kv/namespace_table.h"

namespace kvtier::kv {

Result<uint16_t> NamespaceTable::intern(const Key128& digest, bool open) {
  std::unique_lock lock(mu_);
  auto it = by_digest_.find(digest);
  if (it != by_digest_.end()) {
    if (open) open_[it->second] = true;
    return it->second;
  }
  if (digests_.size() >= kMaxNamespaces) {
    return Status::out_of_space("namespace table full (65535 namespaces)");
  }
  auto handle = static_cast<uint16_t>(digests_.size());
  digests_.push_back(digest);
  open_.push_back(open);
  by_digest_.emplace(digest, handle);
  return handle;
}

std::optional<uint16_t> NamespaceTable::find(const Key128& digest) const {
  std::shared_lock lock(mu_);
  auto it = by_digest_.find(digest);
  if (it == by_digest_.end()) return std::nullopt;
  return it->second;
}

bool NamespaceTable::is_open(uint16_t handle) const {
  std::shared_lock lock(mu_);
  return handle < open_.size() && open_[handle];
}

Key128 NamespaceTable::digest(uint16_t handle) const {
  std::shared_lock lock(mu_);
  return handle < digests_.size() ? digests_[handle] : Key128{};
}

size_t NamespaceTable::size() const {
  std::shared_lock lock(mu_);
  return digests_.size();
}

}  // namespace kvtier::kv
