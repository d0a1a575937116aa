// Store: promotion of disk hits into RAM. batch_get hands each disk hit to
// one background thread together with the staging buffer its bytes were
// verified in, so the caller has its bytes after one verification and one
// copy, and the RAM slot (which may first evict and demote another block) is
// filled after batch_get returned. A direct read (no staging buffer) is
// promoted from the caller's buffer before batch_get returns.
// A read of a key whose promotion is still queued waits for it: every read
// sees the promotions of the reads before it, as when promotion ran inline.
// The queue is bounded in bytes; a hit it has no room for is not promoted
// (counted as skipped): the caller is never made to wait for promotion.
#include <algorithm>

#include "common/block_copy.h"
#include "common/crc32c.h"
#include "kv/read_target.h"
#include "kv/store.h"
#include "kv/store_metrics.h"

namespace kvtier::kv {

void Store::promote(uint16_t ns, const Key128& key, ByteView data, uint32_t expected_crc,
                    bool verify) {
  auto slot = obtain_slot(ns);
  if (!slot) return;
  copy_block(ram_->data(*slot), data.data(), data.size());
  // The caller's buffer may have been reused or overlapped: promote only
  // what still matches the verified CRC.
  if (verify && crc32c(ram_->data(*slot), data.size()) != expected_crc) {
    ram_->release_slot(*slot);
    return;
  }
  ram_->publish(*slot, key, ns, static_cast<uint32_t>(data.size()), expected_crc, true);
  bool attached = false;
  index_->update(key, [&](IndexRecord& r) {
    if (r.in_ram() || r.ns != ns) return true;
    r.ram_slot = *slot;
    attached = true;
    return true;
  });
  if (attached) {
    ram_->release(*slot);
    m_->promotions.add();
    return;
  }
  ram_->abandon(*slot);
}

void Store::promote_hit(uint16_t ns, const Key128& key, ByteView out, uint32_t crc,
                        std::shared_ptr<ReadTarget> target) {
  if (!promoter_) {
    promote(ns, key, out, crc, /*verify=*/true);
    return;
  }
  const ByteView staged = target->staged_payload();
  if (staged.empty()) {
    // A direct read left the bytes only in the caller's buffer, which it may
    // reuse once batch_get returns: promote from it now, checked against the
    // CRC. (Copying it aside for the promoter measured slower on two cores:
    // an allocation and a copy here, a second copy there.)
    promote(ns, key, out, crc, /*verify=*/true);
    return;
  }
  if (!queue_promotion(ns, key, staged, crc, std::move(target))) m_->promotions_skipped.add();
}

bool Store::queue_promotion(uint16_t ns, const Key128& key, ByteView data, uint32_t crc,
                            std::shared_ptr<const void> holder) {
  {
    MutexLock lock(promo_mu_);
    const uint64_t bytes = promoting_bytes_.load(std::memory_order_relaxed) + data.size();
    if (bytes > kMaxQueuedPromotionBytes) return false;
    promoting_.push_back(key);
    promoting_bytes_.store(bytes, std::memory_order_relaxed);
    promoting_count_.store(promoting_.size(), std::memory_order_release);
  }
  promoter_->post([this, ns, key, data, crc, holder = std::move(holder)]() mutable {
    promote(ns, key, data, crc, /*verify=*/false);
    holder.reset();  // the staging buffer goes back before the key is released
    MutexLock lock(promo_mu_);
    promoting_.erase(std::find(promoting_.begin(), promoting_.end(), key));
    promoting_bytes_.fetch_sub(data.size(), std::memory_order_relaxed);
    promoting_count_.store(promoting_.size(), std::memory_order_release);
    promo_cv_.notify_all();
  });
  return true;
}

void Store::await_all_promotions() const {
  if (promoting_count_.load(std::memory_order_acquire) == 0) return;
  MutexLock lock(promo_mu_);
  lock.wait(promo_cv_, [&]() KVTIER_REQUIRES(promo_mu_) { return promoting_.empty(); });
}

void Store::await_promotions(std::span<const Key128> keys) const {
  if (keys.empty() || promoting_count_.load(std::memory_order_acquire) == 0) return;
  MutexLock lock(promo_mu_);
  lock.wait(promo_cv_, [&]() KVTIER_REQUIRES(promo_mu_) {
    for (const Key128& k : keys) {
      if (std::find(promoting_.begin(), promoting_.end(), k) != promoting_.end()) return false;
    }
    return true;
  });
}

void Store::stop_promoter() {
  promoter_.reset();  // runs every queued promotion, then joins
}

}  // namespace kvtier::kv
