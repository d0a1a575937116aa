// DiskTier: the region log: appends into write buffers, region writes,
// reclaim of the oldest region, and room for new appends.
#include "kv/disk_tier.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "common/clock.h"
#include "common/crc32c.h"
#include "common/fresh_pages.h"
#include "common/mutex_unlock.h"
#include "kv/disk_tier_internal.h"

namespace kvtier::kv {

using namespace disk_internal;  // NOLINT: this tier's own internals

bool DiskTier::wait_locked(uint64_t deadline_ns) {
  const uint64_t now = now_ns();
  if (now >= deadline_ns) {
    c_->write_timeouts.fetch_add(1, kRelaxed);
    return false;
  }
  mu_.wait_for(cv_, std::chrono::nanoseconds(deadline_ns - now));
  return true;
}

uint64_t DiskTier::write_deadline() const { return now_ns() + opts_.write_timeout_ms * 1000000ull; }

bool DiskTier::reclaim_oldest() {
  MutexLock lock(mu_);
  if (fifo_.empty()) return false;
  const uint32_t id = fifo_.front();
  Region& victim = regions_[id];
  if (victim.state != Region::kSealed) return false;  // still flushing: not now
  fifo_.pop_front();
  forget_region_locked(id);
  victim.state = Region::kFree;
  victim.fill = victim.flushed = 0;
  free_regions_.push_back(id);
  c_->regions_reclaimed.fetch_add(1, kRelaxed);
  return true;
}

Status DiskTier::append_tombstone(const Key128& key, uint16_t ns) {
  const Key128 ns_digest = namespaces_->digest(ns);
  MutexLock lock(mu_);
  KVTIER_RETURN_IF_ERROR(make_room_locked(entry_bytes(0), write_deadline()));
  const Reservation res = reserve_locked(key, ns_digest, 0, 0, kEntryTombstone);
  write_entry(res.dst, res.header, ByteView());
  auto chunks = copy_done_locked(res.region, res.offset);
  lock.unlock();
  c_->tombstones.fetch_add(1, kRelaxed);
  submit_writes(std::move(chunks));
  return Status::ok_status();
}

Result<uint32_t> DiskTier::append(const Key128& key, uint16_t ns, ByteView payload,
                                  uint32_t payload_crc) {
  if (payload.empty() || payload.size() > opts_.max_payload_bytes) {
    return Status::invalid_argument(fmt::format("payload of {} bytes outside (0, {}]",
                                                payload.size(), opts_.max_payload_bytes));
  }
  const Key128 ns_digest = namespaces_->digest(ns);
  MutexLock lock(mu_);
  KVTIER_RETURN_IF_ERROR(make_room_locked(entry_bytes(payload.size()), write_deadline()));
  // Reserve the space under mu_, copy outside it (the copy of a 1.5 MiB block
  // is most of an append's time; other appenders and readers go on).
  const Reservation res = reserve_locked(key, ns_digest, payload.size(), payload_crc);
  lock.unlock();
  write_entry(res.dst, res.header, payload);
  lock.lock();
  auto chunks = copy_done_locked(res.region, res.offset);
  lock.unlock();
  submit_writes(std::move(chunks));
  return res.page;
}

DiskTier::Reservation DiskTier::reserve_locked(const Key128& key, const Key128& ns_digest,
                                               size_t payload_bytes, uint32_t crc, uint32_t flags) {
  const uint32_t id = static_cast<uint32_t>(open_);
  Region& r = regions_[id];
  Reservation res;
  res.region = id;
  res.offset = r.fill;
  res.dst = write_bufs_[r.buf].data() + r.fill;
  res.page = first_page_of(id) + r.fill / kPageBytes;
  EntryHeader& h = res.header;
  h = EntryHeader{};
  h.magic = kEntryMagic;
  h.version = kFormatVersion;
  h.header_bytes = sizeof(EntryHeader);
  h.region_seq = r.seq;
  h.volume_id = sb_.volume_id;
  h.key_hi = key.hi;
  h.key_lo = key.lo;
  h.ns_hi = ns_digest.hi;
  h.ns_lo = ns_digest.lo;
  h.payload_bytes = static_cast<uint32_t>(payload_bytes);
  h.payload_crc = crc;
  h.flags = flags;
  h.header_crc = header_crc_of(h);
  r.fill += static_cast<uint32_t>(entry_bytes(payload_bytes));
  r.keys.push_back(key);
  r.copying.push_back(res.offset);
  c_->appends.fetch_add(1, kRelaxed);
  c_->bytes_appended.fetch_add(payload_bytes, kRelaxed);
  return res;
}

void DiskTier::write_entry(std::byte* dst, const EntryHeader& h, ByteView payload) {
  // No stale memory reaches the volume: the header page and the payload's
  // last page are padded with zeros.
  std::memcpy(dst, &h, sizeof(h));
  std::memset(dst + sizeof(h), 0, kPayloadOffset - sizeof(h));
  // A tombstone has no payload (and its view may hold no pointer at all).
  if (!payload.empty()) std::memcpy(dst + kPayloadOffset, payload.data(), payload.size());
  const uint64_t used = kPayloadOffset + payload.size();
  std::memset(dst + used, 0, entry_bytes(payload.size()) - used);
}

uint32_t DiskTier::copied_upto_locked(const Region& r) const {
  uint32_t upto = r.fill;
  for (uint32_t off : r.copying) upto = std::min(upto, off);
  return upto;
}

std::vector<DiskTier::WriteChunk> DiskTier::copy_done_locked(uint32_t region, uint32_t offset) {
  Region& r = regions_[region];
  auto it = std::find(r.copying.begin(), r.copying.end(), offset);
  if (it != r.copying.end()) {
    *it = r.copying.back();
    r.copying.pop_back();
  }
  if (r.copying.empty()) cv_.notify_all();  // a seal or flush may wait for this
  // Stream the open region out while it fills: whole chunks of what is
  // copied, so the device writes continuously instead of only at a seal.
  if (static_cast<int64_t>(region) != open_) return {};
  const uint32_t upto = copied_upto_locked(r);
  const uint32_t chunk = opts_.flush_chunk_bytes;
  if (upto < r.flushed + chunk) return {};
  const uint32_t to = r.flushed + (upto - r.flushed) / chunk * chunk;
  auto chunks = chunks_locked(region, r.flushed, to);
  r.flushed = to;
  return chunks;
}

Status DiskTier::make_room_locked(uint64_t need, uint64_t deadline_ns) {
  const Status too_slow = Status::timeout(
      "disk tier: the device has not finished earlier writes in time; write refused");
  for (;;) {
    if (open_ >= 0 && regions_[open_].fill + need <= opts_.region_bytes) return Status::ok_status();
    if (opening_) {
      if (!wait_locked(deadline_ns)) return too_slow;
      continue;
    }
    if (open_ >= 0) {
      if (!regions_[open_].copying.empty()) {  // its last appends are still copying in
        if (!wait_locked(deadline_ns)) return too_slow;
        continue;
      }
      auto chunks = seal_open_locked();
      {
        MutexUnlock unlocked(mu_);
        submit_writes(std::move(chunks));
      }
      continue;
    }
    opening_ = true;
    Status st = open_region_locked(deadline_ns);
    opening_ = false;
    cv_.notify_all();
    if (!st.ok()) return st;
  }
}

std::vector<DiskTier::WriteChunk> DiskTier::chunks_locked(uint32_t region, uint32_t from,
                                                          uint32_t to) {
  std::vector<WriteChunk> out;
  Region& r = regions_[region];
  for (uint32_t off = from; off < to; off += opts_.flush_chunk_bytes) {
    uint32_t len = std::min<uint32_t>(opts_.flush_chunk_bytes, to - off);
    out.push_back(
        {region_offset(region) + off, ByteView(write_bufs_[r.buf].data() + off, len), region});
  }
  r.pending += static_cast<uint32_t>(out.size());
  writes_in_flight_ += out.size();
  return out;
}

std::vector<DiskTier::WriteChunk> DiskTier::seal_open_locked() {
  const uint32_t id = static_cast<uint32_t>(open_);
  Region& r = regions_[id];
  open_ = -1;
  auto chunks = chunks_locked(id, r.flushed, r.fill);
  r.flushed = r.fill;
  r.state = Region::kFlushing;
  fifo_.push_back(id);
  if (r.pending == 0) {  // nothing left to write
    r.state = Region::kSealed;
    free_write_bufs_.push_back(r.buf);
    r.buf = -1;
    if (r.write_failed) forget_region_locked(id);
    cv_.notify_all();
  }
  return chunks;
}

void DiskTier::submit_writes(std::vector<WriteChunk> chunks) {
  for (const auto& ch : chunks) {
    c_->region_writes.fetch_add(1, kRelaxed);
    uint32_t region = ch.region;
    size_t len = ch.data.size();
    dev_->write(ch.offset, ch.data, [this, region, len](Status st) {
      if (st.ok()) c_->bytes_written.fetch_add(len, kRelaxed);
      on_write_done(region, std::move(st));
    });
  }
}

void DiskTier::on_write_done(uint32_t region, Status st) {
  MutexLock lock(mu_);
  Region& r = regions_[region];
  if (!st.ok()) {
    c_->write_errors.fetch_add(1, kRelaxed);
    if (!r.write_failed)
      spdlog::warn("disk tier: region {} write failed: {}", region, st.to_string());
    r.write_failed = true;
  }
  --r.pending;
  --writes_in_flight_;
  if (r.pending == 0 && r.state == Region::kFlushing) {
    r.state = Region::kSealed;
    free_write_bufs_.push_back(r.buf);
    r.buf = -1;
    if (r.write_failed) forget_region_locked(region);
  }
  cv_.notify_all();
}

void DiskTier::forget_region_locked(uint32_t region) {
  // The volume does not hold what the index would point at: drop the disk
  // locations now rather than failing verification on every later read.
  Region& r = regions_[region];
  const uint32_t first = first_page_of(region), end = first + pages_per_region_;
  for (const Key128& key : r.keys) {
    index_->update(key, [&](IndexRecord& rec) {
      if (rec.disk_page < first || rec.disk_page >= end) return true;
      rec.disk_page = kNoDiskPage;
      c_->entries_evicted.fetch_add(1, kRelaxed);
      return rec.in_ram();
    });
  }
  r.keys.clear();
}

Result<uint32_t> DiskTier::take_region_locked(uint64_t deadline_ns, bool* reclaim) {
  const Status too_slow = Status::timeout(
      "disk tier: no write buffer came free in time (device writes pending); write refused");
  for (;;) {
    if (!free_regions_.empty()) {
      const uint32_t id = free_regions_.back();
      free_regions_.pop_back();
      return id;
    }
    if (fifo_.empty()) return Status::internal("disk tier has no region to reclaim");
    const uint32_t id = fifo_.front();
    // Wait for the oldest region's writes; look again afterwards, since
    // reclaim_oldest() may have taken it meanwhile.
    if (regions_[id].state == Region::kFlushing) {
      if (!wait_locked(deadline_ns)) return too_slow;
      continue;
    }
    fifo_.pop_front();
    *reclaim = true;
    return id;
  }
}

std::vector<DiskTier::HotEntry> DiskTier::reclaim_region_locked(uint32_t id) {
  std::vector<HotEntry> hot;
  Region& victim = regions_[id];
  victim.state = Region::kReclaiming;
  const uint32_t first = first_page_of(id), end = first + pages_per_region_;
  uint64_t budget = opts_.reinsert_hot
                        ? static_cast<uint64_t>(opts_.region_bytes * opts_.reinsert_max_fraction)
                        : 0;
  for (const Key128& key : victim.keys) {
    index_->update(key, [&](IndexRecord& rec) {
      if (rec.disk_page < first || rec.disk_page >= end) return true;  // lives elsewhere now
      uint64_t eb = entry_bytes(rec.length);
      if (!rec.in_ram() && rec.disk_hits >= opts_.reinsert_min_hits && eb <= budget) {
        budget -= eb;
        hot.push_back({rec, AlignedBuffer(), false});
        return true;  // stays readable from the old copy until moved
      }
      c_->entries_evicted.fetch_add(1, kRelaxed);
      rec.disk_page = kNoDiskPage;
      return rec.in_ram();
    });
  }
  victim.keys.clear();
  c_->regions_reclaimed.fetch_add(1, kRelaxed);
  if (hot.empty()) return hot;
  // Read the hot entries back without holding mu_ (completions need it).
  MutexUnlock unlocked(mu_);
  for (HotEntry& h : hot) {
    h.data = AlignedBuffer(entry_bytes(h.rec.length), kDirectIoAlignment);
    uint64_t off = static_cast<uint64_t>(h.rec.disk_page) * kPageBytes;
    h.ok = dev_->read_sync(off, h.data.view()).ok() &&
           check_entry(h.data.data(), sb_.volume_id, h.rec.key, namespaces_->digest(h.rec.ns),
                       h.rec.length)
               .ok();
  }
  return hot;
}

void DiskTier::reinsert_locked(std::vector<HotEntry>& hot) {
  for (HotEntry& h : hot) {
    const uint32_t old_page = h.rec.disk_page;
    uint32_t new_page = kNoDiskPage;
    if (h.ok) {
      EntryHeader eh;
      std::memcpy(&eh, h.data.data(), sizeof(eh));
      new_page =
          append_locked(h.rec.key, namespaces_->digest(h.rec.ns),
                        ByteView(h.data.data() + kPayloadOffset, h.rec.length), eh.payload_crc);
      c_->entries_reinserted.fetch_add(1, kRelaxed);
    } else {
      c_->entries_evicted.fetch_add(1, kRelaxed);
    }
    index_->update(h.rec.key, [&](IndexRecord& rec) {
      if (rec.disk_page != old_page) return true;
      rec.disk_page = new_page;
      rec.disk_hits = 0;
      return rec.on_disk() || rec.in_ram();
    });
  }
}

Status DiskTier::open_region_locked(uint64_t deadline_ns) {
  // Every write buffer still flushing (a slow or hung device): wait, but not
  // past the caller's deadline.
  while (free_write_bufs_.empty()) {
    if (!wait_locked(deadline_ns)) {
      return Status::timeout(
          "disk tier: no write buffer came free in time (device writes pending); write refused");
    }
  }
  bool reclaim = false;
  auto taken = take_region_locked(deadline_ns, &reclaim);
  if (!taken.ok()) return taken.status();
  const uint32_t id = *taken;
  std::vector<HotEntry> hot;
  if (reclaim) hot = reclaim_region_locked(id);
  Status reserved = reserve_seq_locked();
  if (!reserved.ok()) {
    // The region stays usable later; put it back where it came from.
    regions_[id].state = Region::kFree;
    free_regions_.push_back(id);
    return reserved;
  }
  Region& r = regions_[id];
  r.state = Region::kOpen;
  r.seq = next_seq_++;
  r.fill = r.flushed = 0;
  r.pending = 0;
  r.write_failed = false;
  r.keys.clear();
  r.buf = free_write_bufs_.back();
  free_write_bufs_.pop_back();
  open_ = id;
  reinsert_locked(hot);
  return Status::ok_status();
}

uint32_t DiskTier::append_locked(const Key128& key, const Key128& ns_digest, ByteView payload,
                                 uint32_t crc) {
  // Reinsertion while a region is being opened: copied under mu_ (rare).
  const Reservation res = reserve_locked(key, ns_digest, payload.size(), crc);
  write_entry(res.dst, res.header, payload);
  Region& r = regions_[res.region];
  r.copying.erase(std::find(r.copying.begin(), r.copying.end(), res.offset));
  return res.page;
}

}  // namespace kvtier::kv
