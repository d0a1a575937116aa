// Store: the read path: get, batch_get (RAM hits copied under a lease, disk
// reads in a sliding window, each given up at its deadline), handing disk
// hits to promotion (store_promotion.cc), and leases of RAM slots for zero-copy readers.
#include <fmt/format.h>

#include <cstring>
#include <thread>

#include "common/block_copy.h"
#include "common/clock.h"
#include "common/crc32c.h"
#include "kv/store.h"
#include "kv/store_metrics.h"

namespace kvtier::kv {

MissReason Store::disk_failure(const IndexRecord& rec, const Status& st) {
  switch (st.code()) {
    case StatusCode::kTimeout:
      return MissReason::kTimeout;
    case StatusCode::kIoError:
      return MissReason::kIoError;
    case StatusCode::kUnavailable:  // not readable yet: keep the record
      return MissReason::kEvicted;
    default:
      break;
  }
  // The bytes did not verify. If the index still points there, the stored
  // entry is bad: drop the disk copy. Otherwise the block moved or was
  // evicted while we read.
  bool dropped = false;
  index_->update(rec.key, [&](IndexRecord& r) {
    if (r.disk_page != rec.disk_page) return true;
    dropped = true;
    r.disk_page = kNoDiskPage;
    return r.in_ram();
  });
  return dropped ? MissReason::kCorrupt : MissReason::kEvicted;
}

Result<GetResult> Store::get(uint16_t ns, const Key128& key, MutableByteView out) {
  BatchGetItem item{key, out};
  auto r = batch_get(ns, std::span<const BatchGetItem>(&item, 1));
  if (!r.ok()) return r.status();
  return (*r)[0];
}

Result<GetResult> Store::get_into_shared(uint16_t ns, const Key128& key, MutableByteView out) {
  BatchGetItem item{key, out};
  auto r = batch_get_impl(ns, std::span<const BatchGetItem>(&item, 1), /*allow_direct=*/false);
  if (!r.ok()) return r.status();
  return (*r)[0];
}

Result<std::vector<GetResult>> Store::batch_get(uint16_t ns, std::span<const BatchGetItem> items) {
  return batch_get_impl(ns, items, /*allow_direct=*/true);
}

// Validates everything before any I/O starts, so a rejected call touches no
// buffer: keys, non-empty buffers, buffers large enough for what the index
// holds, and buffers that do not overlap (a disk read completing into one must
// not be clobbered by another item's copy).
Status Store::check_batch_get(uint16_t ns, std::span<const BatchGetItem> items) const {
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& it = items[i];
    if (i + Index::kPrefetchAhead < items.size()) {
      index_->prefetch(items[i + Index::kPrefetchAhead].key);
    }
    KVTIER_RETURN_IF_ERROR(check_key(it.key));
    if (it.out.empty()) return Status::invalid_argument("get into an empty buffer");
    auto rec = index_->find(it.key);
    if (rec && rec->ns == ns && it.out.size() < rec->length) {
      return Status::invalid_argument(
          fmt::format("buffer of {} bytes is too small for block {} of {} bytes", it.out.size(),
                      it.key.to_hex(), rec->length));
    }
  }
  if (items.size() > 1) {
    std::vector<std::pair<const std::byte*, const std::byte*>> ranges;
    ranges.reserve(items.size());
    for (const auto& it : items) ranges.emplace_back(it.out.data(), it.out.data() + it.out.size());
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) {
      if (ranges[i].first < ranges[i - 1].second) {
        return Status::invalid_argument("batch_get: output buffers overlap");
      }
    }
  }
  return Status::ok_status();
}

std::optional<IndexRecord> Store::get_from_ram(uint16_t ns, const BatchGetItem& item,
                                               GetResult* res) {
  for (int attempt = 0;; ++attempt) {
    auto rec = index_->find(item.key);
    if (!rec) {
      res->miss = attempt == 0 ? MissReason::kNotFound : MissReason::kEvicted;
      return std::nullopt;
    }
    if (rec->ns != ns) {
      res->miss = MissReason::kForeignNamespace;
      return std::nullopt;
    }
    if (item.out.size() < rec->length) {
      // The block changed since validation (removed and stored again with
      // another length): a miss, not an error, since the call is under way.
      res->miss = MissReason::kEvicted;
      return std::nullopt;
    }
    if (rec->in_ram()) {
      if (ram_->try_lease(rec->ram_slot, item.key, ns)) {
        const uint32_t len = ram_->length(rec->ram_slot);
        copy_block(item.out.data(), ram_->data(rec->ram_slot), len);
        grant_time_lease(rec->ram_slot);
        ram_->release(rec->ram_slot);
        res->hit = true;
        res->tier = Tier::kRam;
        res->length = len;
        return std::nullopt;
      }
      // The slot is being demoted or was reused: look again shortly.
      if (attempt > 1000) {
        res->miss = MissReason::kEvicted;
        return std::nullopt;
      }
      if (attempt > 8) std::this_thread::yield();
      continue;
    }
    if (rec->on_disk() && disk_) return rec;
    res->miss = MissReason::kNotFound;
    return std::nullopt;
  }
}

void Store::count_gets(const std::vector<GetResult>& results, uint64_t started_ns) {
  for (const GetResult& res : results) {
    if (res.hit) {
      (res.tier == Tier::kRam ? m_->hits_ram : m_->hits_disk).add();
      m_->get_bytes.add(res.length);
    } else {
      count_miss(res.miss);
    }
  }
  m_->get_latency.record(now_ns() - started_ns);
}

Result<std::vector<GetResult>> Store::batch_get_impl(uint16_t ns,
                                                     std::span<const BatchGetItem> items,
                                                     bool allow_direct) {
  KVTIER_RETURN_IF_ERROR(check_open());
  KVTIER_RETURN_IF_ERROR(check_ns(ns));
  KVTIER_RETURN_IF_ERROR(check_batch_get(ns, items));
  if (promoting_count_.load(std::memory_order_acquire) != 0) {
    for (const auto& it : items) await_promotion(it.key);
  }
  const uint64_t t0 = now_ns();
  const uint64_t deadline = t0 + opts_.io_timeout_ms * 1000000ull;
  std::vector<GetResult> results(items.size());
  struct Pending {
    size_t item;
    IndexRecord rec;
    std::shared_ptr<ReadTarget> target;
    uint32_t crc = 0;
  };
  std::vector<Pending> pending;

  // Collects one disk read: waits for it (the copy out of the staging buffer
  // happens here, on this thread, while the device thread verifies the next).
  auto finish = [&](Pending& p) {
    GetResult& res = results[p.item];
    Status st = p.target->wait_until(deadline);
    if (st.ok()) {
      res.hit = true;
      res.tier = Tier::kDisk;
      res.length = p.rec.length;
      p.crc = p.target->payload_crc();
      index_->update(p.rec.key, [](IndexRecord& r) {
        if (r.disk_hits < 0xFFFF) ++r.disk_hits;
        return true;
      });
      // Promote at once, so the promoter works while the rest are read.
      if (opts_.promote_on_disk_hit && ram_->slot_count() > 0) {
        promote_hit(ns, items[p.item].key, ByteView(items[p.item].out.data(), res.length), p.crc,
                    std::move(p.target));
      }
    } else {
      res.miss = disk_failure(p.rec, st);
    }
  };
  // Disk reads in flight at once: a staging buffer is freed only when its
  // block has been copied out, so never ask for more than there are.
  const size_t window = std::max<size_t>(1, opts_.disk.read_depth);
  size_t finished = 0;

  // RAM hits are copied first, before a promotion of one of this batch's
  // disk hits could evict them; then disk reads go out in a sliding window.
  std::vector<std::pair<size_t, IndexRecord>> on_disk;
  for (size_t i = 0; i < items.size(); ++i) {
    // check_batch_get's loads of a long batch's first records are gone from
    // the cache by now: load them again ahead of use.
    if (i + Index::kPrefetchAhead < items.size()) {
      index_->prefetch(items[i + Index::kPrefetchAhead].key);
    }
    auto rec = get_from_ram(ns, items[i], &results[i]);
    if (rec) on_disk.emplace_back(i, *rec);
  }
  // Where the disk tier coalesces, reads go out a group at a time (half the
  // window once it is full), so blocks that lie back to back on the volume
  // can be one device request; elsewhere the window slides one read at a
  // time, which keeps the device's queue fullest.
  const size_t refill_below = disk_ && disk_->coalesces() ? window / 2 : window - 1;
  pending.reserve(on_disk.size());
  std::vector<IndexRecord> group_recs;
  std::vector<std::shared_ptr<ReadTarget>> group_targets;
  for (size_t next = 0; next < on_disk.size();) {
    const size_t room = window - (pending.size() - finished);
    const size_t n = std::min(room, on_disk.size() - next);
    group_recs.clear();
    group_targets.clear();
    for (size_t k = next; k < next + n; ++k) {
      const auto& [i, rec] = on_disk[k];
      auto target = std::make_shared<ReadTarget>(items[i].out, allow_direct);
      if (promoter_) target->keep_staging();  // the promoter copies from it
      group_recs.push_back(rec);
      group_targets.push_back(target);
      pending.push_back({i, rec, std::move(target)});
    }
    disk_->read_batch_async(group_recs, group_targets, deadline);
    next += n;
    if (next == on_disk.size()) break;
    while (pending.size() - finished > refill_below) finish(pending[finished++]);
  }
  while (finished < pending.size()) finish(pending[finished++]);
  count_gets(results, t0);
  return results;
}

Result<std::optional<RamLease>> Store::lease_ram(uint16_t ns, const Key128& key) {
  KVTIER_RETURN_IF_ERROR(check_open());
  KVTIER_RETURN_IF_ERROR(check_ns(ns));
  KVTIER_RETURN_IF_ERROR(check_key(key));
  await_promotion(key);
  const uint64_t t0 = now_ns();
  // A slot being demoted or reused fails the lease: look again a few times,
  // as get() does, then let the caller fall back to get().
  for (int attempt = 0; attempt < 64; ++attempt) {
    auto rec = index_->find(key);
    if (!rec || rec->ns != ns || !rec->in_ram()) return std::optional<RamLease>();
    if (ram_->try_lease(rec->ram_slot, key, ns)) {
      const uint32_t slot = rec->ram_slot;
      grant_time_lease(slot);
      RamLease lease{slot,
                     ram_->slot_offset(slot),
                     ram_->length(slot),
                     ram_->data(slot),
                     ram_->crc(slot),
                     static_cast<uint16_t>(ram_->partition_of(slot))};
      m_->hits_ram.add();
      m_->get_bytes.add(lease.length);
      m_->get_latency.record(now_ns() - t0);
      return std::optional<RamLease>(lease);
    }
    if (attempt > 8) std::this_thread::yield();
  }
  return std::optional<RamLease>();
}

void Store::release_ram_lease(uint32_t slot) { ram_->release(slot); }

int Store::ram_arena_fd(uint16_t arena) const {
  return arena < ram_->partition_count() ? ram_->arena_fd(arena) : -1;
}

uint64_t Store::ram_arena_bytes(uint16_t arena) const {
  return arena < ram_->partition_count() ? ram_->arena_bytes(arena) : 0;
}

size_t Store::ram_arena_count() const { return ram_->partition_count(); }

}  // namespace kvtier::kv
