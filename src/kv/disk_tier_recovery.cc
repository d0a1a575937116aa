// DiskTier: opening a volume: superblock, checkpoint, and the scan of the
// regions written after it (docs/disk-format.md, "Recovery").
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

Status DiskTier::reserve_seq_locked() {
  if (next_seq_ < sb_.seq_floor) return Status::ok_status();
  // Synchronous under mu_: rare, and the superblock write's completion does
  // not need mu_.
  sb_.seq_floor = next_seq_ + kSeqReserveStep;
  return write_superblock();
}

// The options and the device's block size and alignment, before any I/O.
Status DiskTier::check_options() {
  const uint32_t bs = dev_->block_size();
  if (bs == 0 || kPageBytes % bs != 0) {
    return Status::invalid_argument(
        fmt::format("device {} has block size {}, which does not divide the tier's 4096-byte page",
                    dev_->name(), bs));
  }
  if (dev_->buffer_alignment() > kPageBytes) {
    return Status::invalid_argument(
        fmt::format("device {} needs {}-byte buffer alignment (max 4096)", dev_->name(),
                    dev_->buffer_alignment()));
  }
  if (opts_.max_payload_bytes == 0) return Status::invalid_argument("max_payload_bytes is 0");
  max_entry_bytes_ = entry_bytes(opts_.max_payload_bytes);
  if (opts_.region_bytes % kPageBytes != 0 || opts_.region_bytes < max_entry_bytes_ ||
      opts_.region_bytes > (1ull << 31)) {
    return Status::invalid_argument(fmt::format(
        "region size {} must be a multiple of 4096, at most 2 GiB, and hold one entry of {} bytes",
        opts_.region_bytes, max_entry_bytes_));
  }
  if (opts_.flush_chunk_bytes == 0 || opts_.flush_chunk_bytes % kPageBytes != 0) {
    return Status::invalid_argument("flush_chunk_bytes must be a non-zero multiple of 4096");
  }
  if (opts_.write_buffers < 2) return Status::invalid_argument("write_buffers must be >= 2");
  if (opts_.read_depth < 1) return Status::invalid_argument("read_depth must be >= 1");
  if (opts_.checkpoint_min_entry_bytes < kPageBytes) opts_.checkpoint_min_entry_bytes = kPageBytes;
  return Status::ok_status();
}

// Places the checkpoint area and the regions on the volume.
Status DiskTier::plan_layout(uint64_t* data_offset_out, uint64_t* ckpt_cap_out) {
  const uint64_t cap = dev_->capacity();
  const VolumeLayout layout =
      volume_layout(cap, opts_.region_bytes, opts_.checkpoint_min_entry_bytes);
  const uint64_t ckpt_cap = layout.checkpoint_bytes;
  const uint64_t data_offset = layout.data_offset;
  if (cap < data_offset + opts_.region_bytes) {
    return Status::invalid_argument(fmt::format(
        "volume {} of {} bytes is too small for one region of {} bytes plus {} bytes of metadata",
        dev_->name(), cap, opts_.region_bytes, data_offset));
  }
  uint64_t regions = (cap - data_offset) / opts_.region_bytes;
  // Pages are 32-bit in the index: stop the data area at 16 TiB.
  const uint64_t max_pages = 0xFFFFFFF0ull;
  pages_per_region_ = static_cast<uint32_t>(opts_.region_bytes / kPageBytes);
  data_first_page_ = static_cast<uint32_t>(data_offset / kPageBytes);
  regions = std::min<uint64_t>(regions, (max_pages - data_first_page_) / pages_per_region_);
  region_count_ = static_cast<uint32_t>(regions);
  *data_offset_out = data_offset;
  *ckpt_cap_out = ckpt_cap;
  return Status::ok_status();
}

// Reads the superblock; true when it describes this layout, else `why` says
// what was found.
bool DiskTier::read_superblock(uint64_t data_offset, uint64_t ckpt_cap, std::string* why_out) {
  AlignedBuffer page(kPageBytes, kDirectIoAlignment, true);
  Status rs = dev_->read_sync(0, page.view());
  bool valid = false;
  std::string& why = *why_out;
  why = "no valid kvtier superblock";
  if (rs.ok()) {
    std::memcpy(&sb_, page.data(), sizeof(sb_));
    // Version 1 superblocks were 80 bytes: their CRC covers less, so tell
    // such a volume apart by magic and version alone.
    if (sb_.magic == kSuperMagic && sb_.version != kFormatVersion) {
      why = fmt::format(
          "format version {} (this build reads only version {}: the payload layout changed)",
          sb_.version, kFormatVersion);
    } else if (sb_.magic == kSuperMagic) {
      why = "a kvtier superblock of another geometry or failing its checksum";
    }
    valid = sb_.magic == kSuperMagic && sb_.version == kFormatVersion &&
            superblock_crc_of(sb_) == sb_.header_crc && sb_.page_bytes == kPageBytes &&
            sb_.region_bytes == opts_.region_bytes && sb_.data_offset == data_offset &&
            sb_.region_count == region_count_ && sb_.checkpoint_capacity == ckpt_cap &&
            sb_.checkpoint_offset == kPageBytes;
  }
  return valid;
}

// A fresh superblock for this layout, written to the volume.
Status DiskTier::format(uint64_t data_offset, uint64_t ckpt_cap, const std::string& why) {
  spdlog::info("disk tier: {} has {}", dev_->name(), why);
  sb_ = Superblock{};
  sb_.magic = kSuperMagic;
  sb_.version = kFormatVersion;
  sb_.page_bytes = kPageBytes;
  sb_.volume_id = random_volume_id();
  sb_.region_bytes = opts_.region_bytes;
  sb_.data_offset = data_offset;
  sb_.checkpoint_offset = kPageBytes;
  sb_.checkpoint_capacity = ckpt_cap;
  sb_.region_count = region_count_;
  sb_.checkpoint_state = kNoCheckpoint;
  sb_.seq_floor = 1;
  spdlog::info("disk tier: formatting {} ({} regions of {} bytes)", dev_->name(), region_count_,
               opts_.region_bytes);
  return write_superblock();
}

// The volume's blocks back into the index: from the checkpoint when it is
// valid, else by scanning every region.
Status DiskTier::recover() {
  Status loaded = Status::not_found("no checkpoint");
  if (sb_.checkpoint_state == kCheckpointValid) {
    loaded = load_checkpoint();
    if (!loaded.ok())
      spdlog::warn("disk tier: checkpoint unusable ({}), scanning", loaded.to_string());
  }
  if (loaded.ok()) c_->recovered_from_checkpoint = true;
  // A checkpoint is good once, and a bad one is never good: invalidate it
  // before accepting writes, so a crash from here on is followed by a scan.
  if (sb_.checkpoint_state != kNoCheckpoint) {
    sb_.checkpoint_state = kNoCheckpoint;
    KVTIER_RETURN_IF_ERROR(write_superblock());
  }
  if (!loaded.ok()) KVTIER_RETURN_IF_ERROR(scan_regions());
  return Status::ok_status();
}

Status DiskTier::init() {
  KVTIER_RETURN_IF_ERROR(check_options());
  uint64_t data_offset = 0, ckpt_cap = 0;
  KVTIER_RETURN_IF_ERROR(plan_layout(&data_offset, &ckpt_cap));
  // Nothing else sees the tier yet; holding mu_ from here on lets the
  // thread-safety check see every region access as guarded.
  MutexLock lock(mu_);
  regions_.resize(region_count_);
  for (unsigned i = 0; i < opts_.write_buffers; ++i) {
    write_bufs_.emplace_back(opts_.region_bytes, kDirectIoAlignment, /*zero=*/true);
    free_write_bufs_.push_back(static_cast<int>(i));
  }
  stage_ = std::make_shared<StagePool>(opts_.read_depth, max_entry_bytes_);
  register_buffers();
  const blk::DeviceCapabilities caps = dev_->capabilities();
  direct_ok_ = opts_.direct_reads == DiskTierOptions::DirectReads::kAlways ||
               (opts_.direct_reads == DiskTierOptions::DirectReads::kAuto && caps.direct_reads &&
                caps.registered_buffers);
  // Without vectored reads a coalesced request would be split back into one
  // read per part by BlockDevice::readv: nothing to gain.
  coalesce_max_bytes_ = caps.vectored_reads ? opts_.coalesce_max_bytes : 0;
  if (caps.max_transfer_bytes > 0) {
    coalesce_max_bytes_ = std::min<uint64_t>(coalesce_max_bytes_, caps.max_transfer_bytes);
  }
  coalesce_max_entries_ = caps.max_vectored_parts > 0
                              ? std::min<size_t>(caps.max_vectored_parts, kMaxCoalescedEntries)
                              : kMaxCoalescedEntries;

  std::string why;
  if (read_superblock(data_offset, ckpt_cap, &why)) {
    KVTIER_RETURN_IF_ERROR(recover());
  } else {
    if (!opts_.format_if_invalid) {
      return Status::failed_precondition(
          fmt::format("volume {} has {}; reformat it (it is a cache) or open it with "
                      "format_if_invalid",
                      dev_->name(), why));
    }
    KVTIER_RETURN_IF_ERROR(format(data_offset, ckpt_cap, why));
  }
  rebuild_fifo();
  // Never hand out a generation that a crashed run may have used.
  next_seq_ = std::max(next_seq_, sb_.seq_floor);
  return Status::ok_status();
}

Status DiskTier::write_superblock() {
  sb_.header_crc = superblock_crc_of(sb_);
  AlignedBuffer page(kPageBytes, kDirectIoAlignment, true);
  std::memcpy(page.data(), &sb_, sizeof(sb_));
  KVTIER_RETURN_IF_ERROR(dev_->write_sync(0, page.view()));
  return dev_->flush_sync();
}

void DiskTier::rebuild_fifo() {
  std::vector<uint32_t> sealed;
  free_regions_.clear();
  for (uint32_t r = 0; r < region_count_; ++r) {
    if (regions_[r].state == Region::kSealed) {
      sealed.push_back(r);
      next_seq_ = std::max(next_seq_, regions_[r].seq + 1);
    } else {
      free_regions_.push_back(r);
    }
  }
  std::sort(sealed.begin(), sealed.end(), [&](uint32_t a, uint32_t b) KVTIER_REQUIRES(mu_) {
    return regions_[a].seq < regions_[b].seq;
  });
  fifo_.assign(sealed.begin(), sealed.end());
  std::reverse(free_regions_.begin(), free_regions_.end());  // hand out low regions first
}

Status DiskTier::load_checkpoint() {
  if (sb_.checkpoint_bytes < sizeof(CheckpointHeader) ||
      sb_.checkpoint_bytes > sb_.checkpoint_capacity) {
    return Status::corruption("checkpoint size out of range");
  }
  AlignedBuffer buf(align_up(sb_.checkpoint_bytes, kPageBytes), kDirectIoAlignment);
  KVTIER_RETURN_IF_ERROR(dev_->read_sync(sb_.checkpoint_offset, buf.view()));
  if (crc32c(buf.data(), sb_.checkpoint_bytes) != sb_.checkpoint_crc) {
    return Status::corruption("checkpoint checksum mismatch");
  }
  CheckpointHeader h;
  std::memcpy(&h, buf.data(), sizeof(h));
  if (h.magic != kCheckpointMagic || h.version != kFormatVersion || h.volume_id != sb_.volume_id ||
      h.region_count != region_count_) {
    return Status::corruption("checkpoint header mismatch");
  }
  // Check the count against the bytes actually there before multiplying: a
  // hostile count must not wrap the length computation.
  const uint64_t fixed = sizeof(h) + uint64_t{h.region_count} * sizeof(CheckpointRegion);
  if (fixed > sb_.checkpoint_bytes ||
      h.entry_count != (sb_.checkpoint_bytes - fixed) / sizeof(CheckpointEntry) ||
      (sb_.checkpoint_bytes - fixed) % sizeof(CheckpointEntry) != 0) {
    return Status::corruption("checkpoint length mismatch");
  }
  // From here on nothing fails: bad entries are dropped one by one, so a
  // failed load never leaves half a checkpoint in the index.
  const std::byte* p = buf.data() + sizeof(h);
  for (uint32_t r = 0; r < region_count_; ++r, p += sizeof(CheckpointRegion)) {
    CheckpointRegion cr;
    std::memcpy(&cr, p, sizeof(cr));
    if (cr.state == kRegionSealed && cr.fill_bytes <= opts_.region_bytes) {
      regions_[r].state = Region::kSealed;
      regions_[r].seq = cr.seq;
      regions_[r].fill = regions_[r].flushed = cr.fill_bytes;
    }
  }
  for (uint64_t i = 0; i < h.entry_count; ++i, p += sizeof(CheckpointEntry)) {
    CheckpointEntry e;
    std::memcpy(&e, p, sizeof(e));
    if (!valid_page(e.page) || e.payload_bytes == 0 || e.payload_bytes > opts_.max_payload_bytes) {
      c_->recovery_dropped.fetch_add(1, kRelaxed);
      continue;
    }
    uint32_t r = region_of_page(e.page);
    if (regions_[r].state != Region::kSealed) {
      c_->recovery_dropped.fetch_add(1, kRelaxed);
      continue;
    }
    auto rec = recovered_record(Key128{e.ns_hi, e.ns_lo}, Key128{e.key_hi, e.key_lo}, e.page,
                                e.payload_bytes);
    if (!rec) continue;
    rec->disk_hits = e.disk_hits;
    if (index_->insert(*rec) == Index::InsertResult::kInserted) {
      regions_[r].keys.push_back(rec->key);
      c_->recovered_entries.fetch_add(1, kRelaxed);
    } else {
      c_->recovery_dropped.fetch_add(1, kRelaxed);
    }
  }
  next_seq_ = h.next_region_seq;
  return Status::ok_status();
}

std::optional<IndexRecord> DiskTier::recovered_record(const Key128& ns_digest, const Key128& key,
                                                      uint32_t page, uint32_t length) {
  auto ns = namespaces_->intern(ns_digest, false);
  if (!ns.ok()) {  // namespace table full: this block cannot be indexed
    c_->recovery_dropped.fetch_add(1, kRelaxed);
    return std::nullopt;
  }
  return IndexRecord::at_disk_page(key, *ns, length, page);
}

bool DiskTier::is_current_header(const EntryHeader& h) const {
  return h.magic == kEntryMagic && h.version == kFormatVersion && h.header_bytes == sizeof(h) &&
         header_crc_of(h) == h.header_crc && h.volume_id == sb_.volume_id;
}

std::vector<std::pair<uint64_t, uint32_t>> DiskTier::regions_by_generation() {
  AlignedBuffer page(kPageBytes, kDirectIoAlignment);
  std::vector<std::pair<uint64_t, uint32_t>> order;  // (generation, region)
  for (uint32_t r = 0; r < region_count_; ++r) {
    regions_[r] = Region{};
    if (!dev_->read_sync(region_offset(r), page.view()).ok()) continue;  // the replay warns
    EntryHeader h;
    std::memcpy(&h, page.data(), sizeof(h));
    if (is_current_header(h)) order.emplace_back(h.region_seq, r);
  }
  std::sort(order.begin(), order.end());
  return order;
}

void DiskTier::replay_entry(uint32_t r, uint64_t off, const EntryHeader& h, const std::byte* entry,
                            bool tombstone) {
  const Key128 key{h.key_hi, h.key_lo};
  if (tombstone) {
    // Everything replayed so far is older: the key was removed after it.
    if (index_->erase(key)) c_->recovered_entries.fetch_sub(1, kRelaxed);
    c_->recovered_tombstones.fetch_add(1, kRelaxed);
    return;
  }
  if (crc32c(entry + kPayloadOffset, h.payload_bytes) != h.payload_crc) {
    c_->recovery_dropped.fetch_add(1, kRelaxed);
    return;
  }
  auto rec =
      recovered_record(Key128{h.ns_hi, h.ns_lo}, key,
                       first_page_of(r) + static_cast<uint32_t>(off / kPageBytes), h.payload_bytes);
  if (!rec) return;
  switch (index_->insert(*rec)) {
    case Index::InsertResult::kInserted:
      c_->recovered_entries.fetch_add(1, kRelaxed);
      break;
    case Index::InsertResult::kExists:
      // Replayed oldest first: this copy is the newest so far.
      index_->update(key, [&](IndexRecord& cur) {
        cur = *rec;
        return true;
      });
      break;
    case Index::InsertResult::kFull:
      c_->recovery_dropped.fetch_add(1, kRelaxed);
      break;
  }
  regions_[r].keys.push_back(key);
}

Status DiskTier::scan_regions() {
  // Pass 1: each region's generation, from its first header, so that pass 2
  // can replay the logs oldest first: a later copy of a key then replaces an
  // earlier one, and a tombstone removes what came before it.
  const auto order = regions_by_generation();
  AlignedBuffer rb(opts_.region_bytes, kDirectIoAlignment);
  for (auto [first_seq, r] : order) {
    Region& reg = regions_[r];
    Status st = dev_->read_sync(region_offset(r), rb.view());
    if (!st.ok()) {
      spdlog::warn("disk tier: region {} unreadable during scan: {}", r, st.to_string());
      continue;
    }
    uint64_t off = 0, seq = 0;
    while (off + sizeof(EntryHeader) <= opts_.region_bytes) {
      EntryHeader h;
      std::memcpy(&h, rb.data() + off, sizeof(h));
      if (!is_current_header(h)) break;  // end of this generation's log (or a torn header)
      if (seq == 0) seq = h.region_seq;
      if (h.region_seq != seq) break;  // an older generation's leftovers
      const uint64_t eb = entry_bytes(h.payload_bytes);
      const bool tombstone = h.flags == kEntryTombstone && h.payload_bytes == 0;
      if ((h.flags != 0 && !tombstone) || (h.payload_bytes == 0 && !tombstone) ||
          h.payload_bytes > opts_.max_payload_bytes || off + eb > opts_.region_bytes) {
        break;
      }
      replay_entry(r, off, h, rb.data() + off, tombstone);
      off += eb;
    }
    if (seq != 0) {
      reg.state = Region::kSealed;
      reg.seq = seq;
      reg.fill = reg.flushed = static_cast<uint32_t>(off);
    }
  }
  return Status::ok_status();
}

}  // namespace kvtier::kv
