// DiskTier: lifecycle, geometry, flush, close and stats.
#include "kv/disk_tier.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "common/clock.h"
#include "common/crc32c.h"
#include "common/fresh_pages.h"
#include "kv/disk_tier_internal.h"

namespace kvtier::kv {

using namespace disk_internal;  // NOLINT: this tier's own internals

DiskTier::DiskTier(std::shared_ptr<blk::BlockDevice> device, const DiskTierOptions& options,
                   Index* index, NamespaceTable* namespaces)
    : dev_(std::move(device)),
      opts_(options),
      index_(index),
      namespaces_(namespaces),
      c_(std::make_shared<Counters>()) {}

DiskTier::~DiskTier() {
  {
    MutexLock lock(mu_);
    // Write completions call back into this object: wait for them.
    lock.wait(cv_, [&]() KVTIER_REQUIRES(mu_) { return writes_in_flight_ == 0; });
  }
  for (int idx : registered_) (void)dev_->unregister_buffer(idx);
}

void DiskTier::register_buffers() {
  // io_uring reads and writes into registered buffers skip pinning pages on
  // every request. Registration is an optimisation: failure is not an error.
  if (!dev_->capabilities().registered_buffers) return;
  auto reg = [&](AlignedBuffer& b) {
    auto idx = dev_->register_buffer(b.view());
    if (idx.ok()) registered_.push_back(*idx);
  };
  for (auto& b : write_bufs_) reg(b);
  for (size_t i = 0; i < stage_->size(); ++i) reg(stage_->buf(static_cast<int>(i)));
}

Result<std::unique_ptr<DiskTier>> DiskTier::open(std::shared_ptr<blk::BlockDevice> device,
                                                 const DiskTierOptions& options, Index* index,
                                                 NamespaceTable* namespaces) {
  if (!device) return Status::invalid_argument("disk tier needs a device");
  std::unique_ptr<DiskTier> tier(new DiskTier(std::move(device), options, index, namespaces));
  KVTIER_RETURN_IF_ERROR(tier->init());
  return tier;
}

uint32_t DiskTier::region_of_page(uint32_t page) const {
  return (page - data_first_page_) / pages_per_region_;
}
uint32_t DiskTier::first_page_of(uint32_t region) const {
  return data_first_page_ + region * pages_per_region_;
}
uint64_t DiskTier::region_offset(uint32_t region) const {
  return static_cast<uint64_t>(first_page_of(region)) * kPageBytes;
}
bool DiskTier::valid_page(uint32_t page) const {
  return page >= data_first_page_ &&
         page < data_first_page_ + static_cast<uint64_t>(region_count_) * pages_per_region_;
}

Status DiskTier::flush() {
  MutexLock lock(mu_);
  // Appends that returned before this flush have finished their copies; wait
  // for those still copying into the open region so its write covers them.
  const uint64_t deadline = write_deadline();
  const Status too_slow =
      Status::timeout("disk tier: flush did not complete in time (device writes pending)");
  while (open_ >= 0 && !regions_[open_].copying.empty()) {
    if (!wait_locked(deadline)) return too_slow;
  }
  std::vector<WriteChunk> chunks;
  if (open_ >= 0) {
    Region& r = regions_[open_];
    chunks = chunks_locked(static_cast<uint32_t>(open_), r.flushed, r.fill);
    r.flushed = r.fill;
  }
  // Wait only for the writes submitted so far (regions busy now, by their
  // generation), not for a global quiet moment a steady put load never has.
  std::vector<std::pair<uint32_t, uint64_t>> busy;
  for (uint32_t i = 0; i < region_count_; ++i) {
    if (regions_[i].pending > 0) busy.emplace_back(i, regions_[i].seq);
  }
  const uint64_t errors_before = c_->write_errors.load(kRelaxed);
  lock.unlock();
  submit_writes(std::move(chunks));
  lock.lock();
  auto done = [&]() KVTIER_REQUIRES(mu_) {
    for (auto [i, seq] : busy) {
      if (regions_[i].seq == seq && regions_[i].pending > 0) return false;
    }
    return true;
  };
  while (!done()) {
    if (!wait_locked(deadline)) return too_slow;
  }
  lock.unlock();
  KVTIER_RETURN_IF_ERROR(dev_->flush_sync());
  if (c_->write_errors.load(kRelaxed) != errors_before) {
    return Status::io_error("disk tier: a write failed during flush; affected blocks were dropped");
  }
  return Status::ok_status();
}

Status DiskTier::close() {
  KVTIER_RETURN_IF_ERROR(flush());
  MutexLock lock(mu_);
  // The open region is fully written now: record it as sealed.
  std::vector<CheckpointEntry> entries;
  index_->for_each([&](const IndexRecord& rec) {
    if (!rec.on_disk()) return;
    Key128 nsd = namespaces_->digest(rec.ns);
    entries.push_back(CheckpointEntry{rec.key.hi, rec.key.lo, nsd.hi, nsd.lo, rec.disk_page,
                                      rec.length, rec.disk_hits, 0, 0});
  });
  const uint64_t bytes = sizeof(CheckpointHeader) +
                         uint64_t{region_count_} * sizeof(CheckpointRegion) +
                         entries.size() * sizeof(CheckpointEntry);
  if (bytes > sb_.checkpoint_capacity) {
    spdlog::warn("disk tier: {} entries do not fit the checkpoint area; next start will scan",
                 entries.size());
    return Status::ok_status();
  }
  AlignedBuffer buf(align_up(bytes, kPageBytes), kDirectIoAlignment, true);
  CheckpointHeader h{};
  h.magic = kCheckpointMagic;
  h.version = kFormatVersion;
  h.volume_id = sb_.volume_id;
  h.next_region_seq = next_seq_;
  h.region_count = region_count_;
  h.entry_count = entries.size();
  std::byte* p = buf.data();
  std::memcpy(p, &h, sizeof(h));
  p += sizeof(h);
  for (uint32_t r = 0; r < region_count_; ++r, p += sizeof(CheckpointRegion)) {
    const Region& reg = regions_[r];
    bool has_data = reg.state != Region::kFree && reg.fill > 0;
    CheckpointRegion cr{reg.seq, reg.fill,
                        has_data ? uint32_t{kRegionSealed} : uint32_t{kRegionFree}};
    std::memcpy(p, &cr, sizeof(cr));
  }
  if (!entries.empty()) std::memcpy(p, entries.data(), entries.size() * sizeof(CheckpointEntry));
  lock.unlock();
  KVTIER_RETURN_IF_ERROR(dev_->write_sync(sb_.checkpoint_offset, buf.view()));
  KVTIER_RETURN_IF_ERROR(dev_->flush_sync());
  sb_.checkpoint_state = kCheckpointValid;
  sb_.checkpoint_bytes = bytes;
  sb_.checkpoint_crc = crc32c(buf.data(), bytes);
  return write_superblock();
}

DiskTierStats DiskTier::stats() const {
  DiskTierStats s;
  s.appends = c_->appends.load(kRelaxed);
  s.bytes_appended = c_->bytes_appended.load(kRelaxed);
  s.region_writes = c_->region_writes.load(kRelaxed);
  s.bytes_written = c_->bytes_written.load(kRelaxed);
  s.write_errors = c_->write_errors.load(kRelaxed);
  s.write_timeouts = c_->write_timeouts.load(kRelaxed);
  s.reads = c_->reads.load(kRelaxed);
  s.bytes_read = c_->bytes_read.load(kRelaxed);
  s.buffer_reads = c_->buffer_reads.load(kRelaxed);
  s.direct_reads = c_->direct_reads.load(kRelaxed);
  s.coalesced_reads = c_->coalesced_reads.load(kRelaxed);
  s.direct_revoked = c_->direct_revoked.load(kRelaxed);
  s.direct_overdue_now =
      static_cast<uint64_t>(std::max<int64_t>(0, overdue_direct_->load(std::memory_order_acquire)));
  s.direct_unpinned = c_->direct_unpinned.load(kRelaxed);
  s.read_corrupt = c_->read_corrupt.load(kRelaxed);
  s.read_io_errors = c_->read_io_errors.load(kRelaxed);
  s.regions_reclaimed = c_->regions_reclaimed.load(kRelaxed);
  s.entries_evicted = c_->entries_evicted.load(kRelaxed);
  s.entries_reinserted = c_->entries_reinserted.load(kRelaxed);
  s.recovered_entries = c_->recovered_entries.load(kRelaxed);
  s.recovery_dropped = c_->recovery_dropped.load(kRelaxed);
  s.recovered_tombstones = c_->recovered_tombstones.load(kRelaxed);
  s.tombstones = c_->tombstones.load(kRelaxed);
  s.recovered_from_checkpoint = c_->recovered_from_checkpoint;
  s.region_count = region_count_;
  MutexLock lock(mu_);
  for (const auto& r : regions_) s.regions_in_use += r.state != Region::kFree;
  return s;
}

}  // namespace kvtier::kv
