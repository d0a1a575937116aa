#include "kv/store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <thread>

#include "common/block_copy.h"
#include "common/clock.h"
#include "common/crc32c.h"
#include "common/enum_name.h"
#include "kv/store_metrics.h"

namespace kvtier::kv {

const char* tier_name(Tier t) {
  static constexpr const char* kNames[] = {"none", "ram", "disk"};
  return enum_name<Tier::kDisk>(t, kNames, "?");
}

const char* miss_reason_name(MissReason r) {
  static constexpr const char* kNames[] = {"none",    "not_found", "evicted", "foreign_namespace",
                                           "corrupt", "io_error",  "timeout"};
  static_assert(std::size(kNames) == static_cast<size_t>(MissReason::kCount));
  return enum_name<MissReason::kTimeout>(r, kNames, "?");
}

const char* refuse_reason_name(RefuseReason r) {
  static constexpr const char* kNames[] = {"none",       "no_space",  "index_full",
                                           "disk_error", "admission", "quota"};
  static_assert(std::size(kNames) == static_cast<size_t>(RefuseReason::kCount));
  return enum_name<RefuseReason::kQuota>(r, kNames, "?");
}

Store::Store(const StoreOptions& options)
    : opts_(options), namespaces_(std::clamp<uint32_t>(options.max_namespaces, 1, 65535)) {}

Store::~Store() {
  if (!closed_) {
    Status st = close();
    if (!st.ok()) spdlog::warn("store: close at destruction failed: {}", st.to_string());
  }
}

Result<std::unique_ptr<Store>> Store::open(const StoreOptions& options) {
  std::unique_ptr<Store> store(new Store(options));
  KVTIER_RETURN_IF_ERROR(store->init());
  return store;
}

Status Store::init() {
  if (opts_.max_object_bytes == 0) return Status::invalid_argument("max_object_bytes is 0");
  if (opts_.ram_bytes > 0 && opts_.ram_bytes < opts_.max_object_bytes) {
    return Status::invalid_argument(
        fmt::format("ram_bytes {} is smaller than one object of {} bytes", opts_.ram_bytes,
                    opts_.max_object_bytes));
  }
  if (opts_.ram_bytes == 0 && !opts_.volume) {
    return Status::invalid_argument("a store needs a RAM tier, a volume, or both");
  }
  uint64_t private_bytes = 0;
  for (uint64_t b : opts_.private_arena_bytes) {
    if (b < opts_.max_object_bytes) {
      return Status::invalid_argument(
          fmt::format("a private RAM arena of {} bytes cannot hold one object of {} bytes", b,
                      opts_.max_object_bytes));
    }
    private_bytes += b;
  }
  if (private_bytes > opts_.ram_bytes) {
    return Status::invalid_argument(
        fmt::format("private RAM arenas of {} bytes in all do not fit in ram_bytes {}",
                    private_bytes, opts_.ram_bytes));
  }
  if (opts_.private_arena_bytes.size() >= 0xffff) {
    return Status::invalid_argument("too many private RAM arenas");
  }
  m_ = std::make_unique<Metrics>(metrics_);
  std::vector<RamPartitionSpec> parts{{opts_.ram_bytes - private_bytes, opts_.share_ram_arena}};
  for (uint64_t b : opts_.private_arena_bytes) parts.push_back({b, true});
  ram_ = std::make_unique<RamTier>(opts_.max_object_bytes, parts);
  ns_arena_ = std::make_unique<std::atomic<uint16_t>[]>(65536);
  uint64_t capacity = opts_.index_capacity;
  if (capacity == 0) {
    capacity = ram_->slot_count() + 1024;
    if (opts_.volume)
      capacity += opts_.volume->capacity() / disk::entry_bytes(opts_.max_object_bytes);
  }
  index_ = std::make_unique<Index>(capacity, opts_.index_shards);
  namespaces_.set_blocks_of([index = index_.get()](uint16_t h) { return index->usage(h).blocks; });
  admission_ = std::make_unique<DiskAdmission>(opts_.disk_write_budget_bytes_per_sec,
                                               opts_.disk_write_burst_bytes);
  if (opts_.volume) {
    DiskTierOptions d = opts_.disk;
    d.max_payload_bytes = opts_.max_object_bytes;
    auto disk = DiskTier::open(opts_.volume, d, index_.get(), &namespaces_);
    if (!disk.ok()) return disk.status();
    disk_ = std::move(disk).value();
  }
  if (opts_.promote_on_disk_hit && opts_.promote_in_background && disk_ && ram_->slot_count()) {
    promoter_ = std::make_unique<TaskPool>(1);
  }
  return Status::ok_status();
}

Result<uint16_t> Store::register_namespace(const Namespace& ns) {
  return register_namespace(ns, 0);
}

Result<uint16_t> Store::register_namespace(const Namespace& ns, uint16_t arena) {
  KVTIER_RETURN_IF_ERROR(ns.validate());
  if (arena >= ram_->partition_count()) {
    return Status::invalid_argument(
        fmt::format("no RAM arena {} (the store has {})", arena, ram_->partition_count()));
  }
  auto handle = namespaces_.intern(ns.digest(), true);
  if (handle.ok()) ns_arena_[*handle].store(arena, std::memory_order_release);
  return handle;
}

void Store::release_namespace(uint16_t ns) { namespaces_.release(ns); }

NamespaceUsage Store::namespace_usage(uint16_t ns) const { return index_->usage(ns); }

Status Store::check_ns(uint16_t ns) const {
  if (!namespaces_.is_open(ns)) {
    return Status::invalid_argument(fmt::format("unknown namespace handle {}", ns));
  }
  return Status::ok_status();
}

Status Store::check_open() const {
  if (closed_.load(std::memory_order_acquire)) {
    return Status::failed_precondition("the store is closed");
  }
  return Status::ok_status();
}

Status Store::check_key(const Key128& key) const {
  if (key.is_zero()) return Status::invalid_argument("the all-zero key is reserved");
  return Status::ok_status();
}

void Store::count_miss(MissReason r) { m_->misses[static_cast<size_t>(r)]->add(); }
void Store::count_refusal(RefuseReason r) { m_->refusals[static_cast<size_t>(r)]->add(); }

void Store::evict_slot(uint32_t slot) {
  const Key128 key = ram_->key(slot);
  m_->evictions.add();
  auto rec = index_->find(key);
  if (!rec || rec->ram_slot != slot) return;  // orphan of a remove(): nothing to keep
  const uint32_t len = ram_->length(slot);
  // flush() waits for demotions in flight: a block it could not lease
  // because it was being demoted must be on the volume before flush returns.
  demotions_in_flight_.fetch_add(1, std::memory_order_acq_rel);
  struct Done {
    std::atomic<uint64_t>& n;
    ~Done() { n.fetch_sub(1, std::memory_order_acq_rel); }
  } done{demotions_in_flight_};
  bool admitted = !rec->on_disk() && disk_ && admission_->admit(len, now_ns());
  if (!rec->on_disk() && disk_ && !admitted) m_->demotions_rejected.add();
  if (admitted) {
    auto page =
        disk_->append(key, ram_->ns(slot), ByteView(ram_->data(slot), len), ram_->crc(slot));
    if (page.ok()) {
      index_->update(key, [&](IndexRecord& r) {
        if (r.ram_slot == slot) {
          r.ram_slot = kNoRamSlot;
          r.disk_page = *page;
        }
        return true;
      });
      m_->demotions.add();
      m_->demotion_bytes.add(len);
      return;
    }
  }
  bool dropped = false;
  index_->update(key, [&](IndexRecord& r) {
    if (r.ram_slot != slot) return true;
    r.ram_slot = kNoRamSlot;
    dropped = !r.on_disk();
    return r.on_disk();
  });
  if (dropped) m_->eviction_drops.add();
}

std::optional<uint32_t> Store::obtain_slot(uint16_t ns) {
  const uint16_t arena = ns_arena_[ns].load(std::memory_order_acquire);
  if (ram_->partition_slots(arena) == 0) return std::nullopt;
  if (auto s = ram_->allocate(arena)) return s;
  std::optional<Key128> next_victim;
  // Without pins a victim is chosen without comparing times, so a time of 0
  // (no clock read) gives the same choice. A pin set meanwhile by another
  // thread still holds under time 0: its slot is passed over, never taken.
  const uint64_t now = ram_->ever_pinned() ? lease_now_ns() : 0;
  auto victim = ram_->claim_victim(now, arena, &next_victim);
  if (!victim) return std::nullopt;  // every block is leased or pinned
  // The next eviction's index lookup is a cache miss on a cold record:
  // start it now, so it overlaps this eviction's work.
  if (next_victim) index_->prefetch(*next_victim);
  evict_slot(*victim);
  ram_->recycle(*victim);
  return victim;
}

PutResult Store::put_to_disk(uint16_t ns, const Key128& key, ByteView data, uint32_t crc) {
  PutResult res;
  if (!disk_) {
    res.outcome = PutResult::Outcome::kRefused;
    res.refuse = RefuseReason::kNoSpace;
    return res;
  }
  if (!admission_->admit(data.size(), now_ns())) {
    res.outcome = PutResult::Outcome::kRefused;
    res.refuse = RefuseReason::kAdmission;
    return res;
  }
  auto page = disk_->append(key, ns, data, crc);
  if (!page.ok()) {
    res.outcome = PutResult::Outcome::kRefused;
    res.refuse = RefuseReason::kDiskError;
    return res;
  }
  const IndexRecord rec =
      IndexRecord::at_disk_page(key, ns, static_cast<uint32_t>(data.size()), *page);
  IndexRecord existing;
  const auto ins = insert_making_room(rec, &existing);
  if (ins == Index::InsertResult::kExists && existing.ns != ns) {
    // Raced with a put of this key under another namespace: refuse, as
    // put() does when it sees that before writing.
    res.outcome = PutResult::Outcome::kRefused;
    res.refuse = RefuseReason::kNoSpace;
    return res;
  }
  switch (ins) {
    case Index::InsertResult::kInserted:
      res.tier = Tier::kDisk;
      m_->disk_direct_puts.add();
      break;
    case Index::InsertResult::kExists:
      res.outcome = PutResult::Outcome::kDeduplicated;
      break;
    case Index::InsertResult::kFull:
      res.outcome = PutResult::Outcome::kRefused;
      res.refuse = RefuseReason::kIndexFull;
      break;
  }
  return res;
}

Result<PutResult> Store::put(uint16_t ns, const Key128& key, ByteView data) {
  KVTIER_RETURN_IF_ERROR(check_open());
  // Held until the block is in the index: the handle cannot be reused for
  // another namespace between the check and the insert.
  const auto use = namespaces_.use();
  KVTIER_RETURN_IF_ERROR(check_ns(ns));
  KVTIER_RETURN_IF_ERROR(check_key(key));
  if (data.empty() || data.size() > opts_.max_object_bytes) {
    return Status::invalid_argument(
        fmt::format("object of {} bytes outside (0, {}]", data.size(), opts_.max_object_bytes));
  }
  const uint64_t t0 = now_ns();
  PutResult res;
  if (auto existing = index_->find(key)) {
    // Dedup only within the namespace: a key held by another namespace is
    // not this block (and must not be replaced or claimed).
    if (existing->ns != ns) return foreign_key_error(key);
    res.outcome = PutResult::Outcome::kDeduplicated;
    m_->dedups.add();
    return res;
  }
  const uint32_t crc = crc32c(data);
  if (auto slot = obtain_slot(ns)) {
    copy_block(ram_->data(*slot), data.data(), data.size());
    ram_->publish(*slot, key, ns, static_cast<uint32_t>(data.size()), crc, /*hold_lease=*/true);
    const IndexRecord rec =
        IndexRecord::in_ram_slot(key, ns, static_cast<uint32_t>(data.size()), *slot);
    IndexRecord existing;
    auto ins = insert_making_room(rec, &existing);
    if (ins == Index::InsertResult::kExists && existing.ns != ns) {
      ram_->abandon(*slot);
      return foreign_key_error(key);
    }
    if (ins == Index::InsertResult::kInserted) {
      ram_->release(*slot);
      res.tier = Tier::kRam;
    } else {
      // Lost a race with another put of the same key, or the index is full:
      // give the slot back without ever letting go of our lease, so CLOCK
      // cannot hand it to someone else first.
      ram_->abandon(*slot);
      res.outcome = ins == Index::InsertResult::kExists ? PutResult::Outcome::kDeduplicated
                                                        : PutResult::Outcome::kRefused;
      if (ins == Index::InsertResult::kFull) res.refuse = RefuseReason::kIndexFull;
    }
  } else if (opts_.time_lease_ms > 0 && ram_->partition_slots(ns_arena_[ns].load()) > 0) {
    // Mooncake's rule: a RAM tier whose blocks are all leased refuses.
    res.outcome = PutResult::Outcome::kRefused;
    res.refuse = RefuseReason::kNoSpace;
  } else {
    res = put_to_disk(ns, key, data, crc);
  }
  switch (res.outcome) {
    case PutResult::Outcome::kStored:
      m_->puts.add();
      m_->put_bytes.add(data.size());
      break;
    case PutResult::Outcome::kDeduplicated:
      m_->dedups.add();
      break;
    case PutResult::Outcome::kRefused:
      count_refusal(res.refuse);
      break;
  }
  m_->put_latency.record(now_ns() - t0);
  return res;
}

Status Store::foreign_key_error(const Key128& key) const {
  return Status::already_exists(
      fmt::format("key {} is stored under another namespace; keys are per namespace (derive them "
                  "from the namespace digest)",
                  key.to_hex()));
}

Index::InsertResult Store::insert_making_room(const IndexRecord& rec, IndexRecord* existing) {
  // The index has a fixed capacity sized for blocks of max_object_bytes; a
  // load of smaller blocks can fill it while the volume still has room.
  // Then the oldest disk region is reclaimed (its blocks are the coldest)
  // to free records, instead of refusing puts for as long as the load lasts.
  for (int attempt = 0;; ++attempt) {
    auto ins = index_->insert(rec, existing);
    if (ins != Index::InsertResult::kFull || !disk_ || attempt >= 4) return ins;
    if (!disk_->reclaim_oldest()) return ins;
    m_->index_reclaims.add();
  }
}

Result<std::vector<PutResult>> Store::batch_put(uint16_t ns, std::span<const Key128> keys,
                                                std::span<const ByteView> data) {
  if (keys.size() != data.size()) {
    return Status::invalid_argument(
        fmt::format("batch_put: {} keys but {} objects", keys.size(), data.size()));
  }
  KVTIER_RETURN_IF_ERROR(check_ns(ns));
  // Validate everything first so a bad item changes nothing.
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i + Index::kPrefetchAhead < keys.size()) index_->prefetch(keys[i + Index::kPrefetchAhead]);
    KVTIER_RETURN_IF_ERROR(check_key(keys[i]));
    if (auto existing = index_->find(keys[i]); existing && existing->ns != ns) {
      return foreign_key_error(keys[i]);
    }
    if (data[i].empty() || data[i].size() > opts_.max_object_bytes) {
      return Status::invalid_argument(
          fmt::format("batch_put: object {} has {} bytes, outside (0, {}]", i, data[i].size(),
                      opts_.max_object_bytes));
    }
  }
  std::vector<PutResult> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto r = put(ns, keys[i], data[i]);
    if (!r.ok()) return r.status();
    out.push_back(*r);
  }
  return out;
}

Result<MatchResult> Store::match_prefix(uint16_t ns, std::span<const Key128> keys) {
  KVTIER_RETURN_IF_ERROR(check_open());
  KVTIER_RETURN_IF_ERROR(check_ns(ns));
  await_promotions(keys);
  const uint64_t t0 = now_ns();
  thread_local std::vector<IndexRecord> recs;
  if (recs.size() < keys.size()) recs.resize(keys.size());
  MatchResult m;
  size_t n = index_->match_prefix(keys, recs.data());
  m.tiers.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (recs[i].ns != ns) break;
    Tier t = recs[i].in_ram() ? Tier::kRam : Tier::kDisk;
    (t == Tier::kRam ? m.ram_blocks : m.disk_blocks)++;
    m.tiers.push_back(t);
    // Mooncake's ExistKey leases what it finds.
    if (opts_.time_lease_ms > 0 && t == Tier::kRam &&
        ram_->try_lease(recs[i].ram_slot, recs[i].key, ns)) {
      grant_time_lease(recs[i].ram_slot);
      ram_->release(recs[i].ram_slot);
    }
  }
  m.blocks = m.tiers.size();
  m_->match_latency.record(now_ns() - t0);
  return m;
}

Result<bool> Store::remove(uint16_t ns, const Key128& key) {
  KVTIER_RETURN_IF_ERROR(check_open());
  KVTIER_RETURN_IF_ERROR(check_ns(ns));
  KVTIER_RETURN_IF_ERROR(check_key(key));
  auto rec = index_->find(key);
  if (!rec || rec->ns != ns) return false;
  if (rec->in_ram() && ram_->try_lease(rec->ram_slot, key, ns)) {
    ram_->unpin(rec->ram_slot);  // let CLOCK take the orphaned slot soon
    ram_->release(rec->ram_slot);
  }
  bool removed = false;
  index_->update(key, [&](IndexRecord& r) {
    removed = r.ns == ns;  // never drop another namespace's block
    return !removed;
  });
  // Durable removal: a tombstone in the log, so a crash scan (which replays
  // the regions oldest first) does not bring back an older copy. A clean
  // restart needs none (the checkpoint lists only what the index holds).
  if (removed && disk_) {
    Status st = disk_->append_tombstone(key, ns);
    if (!st.ok())
      spdlog::warn("store: tombstone for a removed block not written: {}", st.to_string());
  }
  return removed;
}

Result<size_t> Store::pin(uint16_t ns, std::span<const Key128> keys, uint64_t ttl_ms) {
  KVTIER_RETURN_IF_ERROR(check_open());
  KVTIER_RETURN_IF_ERROR(check_ns(ns));
  await_promotions(keys);
  constexpr uint64_t kMaxTtlMs = 365ull * 24 * 3600 * 1000;  // a year: no overflow below
  if (ttl_ms > kMaxTtlMs) return Status::invalid_argument("pin TTL longer than a year");
  const uint64_t until = lease_now_ns() + ttl_ms * 1000000ull;
  size_t n = 0;
  for (const Key128& key : keys) {
    auto rec = index_->find(key);
    if (!rec || rec->ns != ns || !rec->in_ram()) continue;
    if (!ram_->try_lease(rec->ram_slot, key, ns)) continue;
    ram_->pin(rec->ram_slot, until);
    ram_->release(rec->ram_slot);
    ++n;
  }
  return n;
}

Result<size_t> Store::unpin(uint16_t ns, std::span<const Key128> keys) {
  KVTIER_RETURN_IF_ERROR(check_ns(ns));
  await_promotions(keys);
  size_t n = 0;
  for (const Key128& key : keys) {
    auto rec = index_->find(key);
    if (!rec || rec->ns != ns || !rec->in_ram()) continue;
    if (!ram_->try_lease(rec->ram_slot, key, ns)) continue;
    ram_->unpin(rec->ram_slot);
    ram_->release(rec->ram_slot);
    ++n;
  }
  return n;
}

Status Store::flush() {
  if (!disk_) return Status::ok_status();
  await_all_promotions();
  // Write down every block that lives only in RAM; it stays in RAM too.
  std::vector<IndexRecord> ram_only;
  index_->for_each([&](const IndexRecord& r) {
    if (r.in_ram() && !r.on_disk()) ram_only.push_back(r);
  });
  for (const IndexRecord& r : ram_only) {
    if (!ram_->try_lease(r.ram_slot, r.key, r.ns)) continue;  // being demoted: waited for below
    auto page = disk_->append(r.key, ram_->ns(r.ram_slot),
                              ByteView(ram_->data(r.ram_slot), ram_->length(r.ram_slot)),
                              ram_->crc(r.ram_slot));
    ram_->release(r.ram_slot);
    if (!page.ok()) return page.status();
    index_->update(r.key, [&](IndexRecord& cur) {
      if (!cur.on_disk()) cur.disk_page = *page;
      return true;
    });
  }
  // Blocks we could not lease were being demoted: their appends must land
  // in the region buffers before the disk tier's flush snapshots them.
  while (demotions_in_flight_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  return disk_->flush();
}

Status Store::close() {
  if (closed_.exchange(true)) return Status::ok_status();
  stop_promoter();
  if (!disk_) return Status::ok_status();
  KVTIER_RETURN_IF_ERROR(flush());
  return disk_->close();
}

StoreStats Store::local_stats() const {
  await_all_promotions();  // the counters include the promotions of reads so far
  StoreStats s;
  s.puts = m_->puts.value();
  s.dedups = m_->dedups.value();
  s.put_bytes = m_->put_bytes.value();
  s.hits_ram = m_->hits_ram.value();
  s.hits_disk = m_->hits_disk.value();
  s.get_bytes = m_->get_bytes.value();
  for (size_t i = 1; i < s.misses.size(); ++i) s.misses[i] = m_->misses[i]->value();
  for (size_t i = 1; i < s.refusals.size(); ++i) s.refusals[i] = m_->refusals[i]->value();
  s.evictions = m_->evictions.value();
  s.demotions = m_->demotions.value();
  s.demotion_bytes = m_->demotion_bytes.value();
  s.eviction_drops = m_->eviction_drops.value();
  s.promotions = m_->promotions.value();
  s.disk_direct_puts = m_->disk_direct_puts.value();
  s.demotions_rejected = m_->demotions_rejected.value();
  s.index_full_reclaims = m_->index_reclaims.value();
  s.ram_slots = ram_->slot_count();
  s.ram_used = ram_->used_slots();
  s.ram_leased = ram_->leased_slots();
  s.index_entries = index_->size();
  s.index_capacity = index_->capacity();
  s.index_bytes = index_->memory_bytes();
  if (disk_) {
    s.has_disk = true;
    s.disk = disk_->stats();
  }
  return s;
}

}  // namespace kvtier::kv
