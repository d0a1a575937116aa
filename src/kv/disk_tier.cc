#include "kv/disk_tier.h"

#include "common/fresh_pages.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>

#include "blk/uring_device.h"
#include "common/clock.h"
#include "common/crc32c.h"

namespace kvtier::kv {

using namespace disk;  // NOLINT: the format's names are this file's vocabulary

// Staging buffers for device reads, shared with in-flight completions so a
// completion arriving after the tier is gone still has somewhere to land.
class StagePool {
 public:
  StagePool(unsigned n, size_t bytes) {
    for (unsigned i = 0; i < n; ++i) {
      // Zeroed now: first-touch page faults belong to start-up, not to reads.
      bufs_.emplace_back(bytes, kDirectIoAlignment, /*zero=*/true);
      free_.push_back(static_cast<int>(i));
    }
  }
  int acquire(uint64_t deadline_ns) {
    std::unique_lock lock(mu_);
    while (free_.empty()) {
      uint64_t now = now_ns();
      if (now >= deadline_ns) return -1;
      cv_.wait_for(lock, std::chrono::nanoseconds(deadline_ns - now));
    }
    int i = free_.back();
    free_.pop_back();
    return i;
  }
  void release(int i) {
    std::lock_guard lock(mu_);
    free_.push_back(i);
    cv_.notify_one();
  }
  AlignedBuffer& buf(int i) { return bufs_[i]; }
  size_t size() const { return bufs_.size(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<AlignedBuffer> bufs_;
  std::vector<int> free_;
};

struct DiskTier::Region {
  enum State { kFree, kOpen, kFlushing, kSealed, kReclaiming };
  State state = kFree;
  uint64_t seq = 0;
  uint32_t fill = 0;          // bytes appended
  uint32_t flushed = 0;       // bytes already submitted for writing
  int buf = -1;               // attached write buffer while open or flushing
  uint32_t pending = 0;       // writes in flight
  bool write_failed = false;  // some write of this generation failed
  std::vector<Key128> keys;   // entries appended (the index decides if still live)
  // Offsets of entries reserved but still being copied in outside mu_; the
  // region is not sealed, and nothing past the lowest is written or read,
  // until they are done.
  std::vector<uint32_t> copying;
};

struct DiskTier::Counters {
  std::atomic<uint64_t> appends{0}, bytes_appended{0}, tombstones{0};
  std::atomic<uint64_t> region_writes{0}, bytes_written{0}, write_errors{0}, write_timeouts{0};
  std::atomic<uint64_t> reads{0}, bytes_read{0}, buffer_reads{0}, direct_reads{0};
  std::atomic<uint64_t> direct_revoked{0}, direct_unpinned{0};
  std::atomic<uint64_t> read_corrupt{0}, read_io_errors{0};
  std::atomic<uint64_t> regions_reclaimed{0}, entries_evicted{0}, entries_reinserted{0};
  std::atomic<uint64_t> recovered_entries{0}, recovery_dropped{0}, recovered_tombstones{0};
  bool recovered_from_checkpoint = false;
};

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

uint32_t header_crc_of(EntryHeader h) {
  h.header_crc = 0;
  return crc32c(&h, sizeof(h));
}

uint32_t superblock_crc_of(Superblock s) {
  s.header_crc = 0;
  return crc32c(&s, sizeof(s));
}

// Checks an entry header against what the index expects. kNotFound: a
// different, intact entry is there (the region was reused); kCorruption: the
// bytes do not verify.
Status check_header(const EntryHeader& h, uint64_t volume_id, const Key128& key,
                    const Key128& ns_digest, uint32_t length) {
  if (h.magic != kEntryMagic || h.version != kFormatVersion || h.header_bytes != sizeof(h) ||
      header_crc_of(h) != h.header_crc) {
    return Status::corruption("entry header does not verify");
  }
  if (h.volume_id != volume_id || h.key_hi != key.hi || h.key_lo != key.lo) {
    return Status::not_found("entry was replaced");
  }
  if (h.ns_hi != ns_digest.hi || h.ns_lo != ns_digest.lo) {
    return Status::not_found("entry belongs to another namespace");
  }
  if (h.payload_bytes != length) return Status::corruption("entry length mismatch");
  return Status::ok_status();
}

// The same for a whole entry image (header page, then the payload).
Status check_entry(const std::byte* entry, uint64_t volume_id, const Key128& key,
                   const Key128& ns_digest, uint32_t length) {
  EntryHeader h;
  std::memcpy(&h, entry, sizeof(h));
  KVTIER_RETURN_IF_ERROR(check_header(h, volume_id, key, ns_digest, length));
  if (crc32c(entry + kPayloadOffset, length) != h.payload_crc) {
    return Status::corruption("payload checksum mismatch");
  }
  return Status::ok_status();
}

uint32_t payload_crc_of(const std::byte* entry) {
  EntryHeader h;
  std::memcpy(&h, entry, sizeof(h));
  return h.payload_crc;
}

uint64_t random_volume_id() {
  std::random_device rd;
  uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ now_ns();
  return v == 0 ? 1 : v;
}

}  // namespace

DiskTier::DiskTier(std::shared_ptr<blk::BlockDevice> device, const DiskTierOptions& options,
                   Index* index, NamespaceTable* namespaces)
    : dev_(std::move(device)),
      opts_(options),
      index_(index),
      namespaces_(namespaces),
      c_(std::make_shared<Counters>()) {}

DiskTier::~DiskTier() {
  {
    std::unique_lock lock(mu_);
    // Write completions call back into this object: wait for them.
    cv_.wait(lock, [&] { return writes_in_flight_ == 0; });
  }
  if (auto* uring = dynamic_cast<blk::UringDevice*>(dev_.get())) {
    for (int idx : registered_) (void)uring->unregister_buffer(idx);
  }
}

void DiskTier::register_buffers() {
  // io_uring reads and writes into registered buffers skip pinning pages on
  // every request. Registration is an optimisation: failure is not an error.
  auto* uring = dynamic_cast<blk::UringDevice*>(dev_.get());
  if (uring == nullptr) return;
  auto reg = [&](AlignedBuffer& b) {
    auto idx = uring->register_buffer(b.view());
    if (idx.ok()) registered_.push_back(*idx);
  };
  for (auto& b : write_bufs_) reg(b);
  for (size_t i = 0; i < stage_->size(); ++i) reg(stage_->buf(static_cast<int>(i)));
}

namespace {
// Generations are reserved on the volume in steps of this many, so the
// superblock is rewritten once per this many region openings.
constexpr uint64_t kSeqReserveStep = 1024;
}  // namespace

Status DiskTier::reserve_seq_locked() {
  if (next_seq_ < sb_.seq_floor) return Status::ok_status();
  // Synchronous under mu_: rare, and the superblock write's completion does
  // not need mu_.
  sb_.seq_floor = next_seq_ + kSeqReserveStep;
  return write_superblock();
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

Status DiskTier::init() {
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

  const uint64_t cap = dev_->capacity();
  const uint64_t max_regions = cap / opts_.region_bytes + 1;
  const uint64_t ckpt_cap =
      align_up(sizeof(CheckpointHeader) + max_regions * sizeof(CheckpointRegion) +
                   (cap / opts_.checkpoint_min_entry_bytes + 1) * sizeof(CheckpointEntry),
               kPageBytes);
  const uint64_t data_offset = align_up(kPageBytes + ckpt_cap, 1u << 20);
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

  regions_.resize(region_count_);
  for (unsigned i = 0; i < opts_.write_buffers; ++i) {
    write_bufs_.emplace_back(opts_.region_bytes, kDirectIoAlignment, /*zero=*/true);
    free_write_bufs_.push_back(static_cast<int>(i));
  }
  stage_ = std::make_shared<StagePool>(opts_.read_depth, max_entry_bytes_);
  register_buffers();
  direct_ok_ = opts_.direct_reads == DiskTierOptions::DirectReads::kAlways ||
               (opts_.direct_reads == DiskTierOptions::DirectReads::kAuto &&
                dynamic_cast<blk::UringDevice*>(dev_.get()) != nullptr);

  // Superblock.
  AlignedBuffer page(kPageBytes, kDirectIoAlignment, true);
  Status rs = dev_->read_sync(0, page.view());
  bool valid = false;
  std::string why = "no valid kvtier superblock";
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
  if (!valid) {
    if (!opts_.format_if_invalid) {
      return Status::failed_precondition(
          fmt::format("volume {} has {}; reformat it (it is a cache) or open it with "
                      "format_if_invalid",
                      dev_->name(), why));
    }
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
    KVTIER_RETURN_IF_ERROR(write_superblock());
  } else {
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
  std::sort(sealed.begin(), sealed.end(),
            [&](uint32_t a, uint32_t b) { return regions_[a].seq < regions_[b].seq; });
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
    auto ns = namespaces_->intern(Key128{e.ns_hi, e.ns_lo}, false);
    if (!ns.ok()) {  // namespace table full: this block cannot be indexed
      c_->recovery_dropped.fetch_add(1, kRelaxed);
      continue;
    }
    IndexRecord rec;
    rec.key = Key128{e.key_hi, e.key_lo};
    rec.disk_page = e.page;
    rec.length = e.payload_bytes;
    rec.ns = *ns;
    rec.disk_hits = e.disk_hits;
    if (index_->insert(rec) == Index::InsertResult::kInserted) {
      regions_[r].keys.push_back(rec.key);
      c_->recovered_entries.fetch_add(1, kRelaxed);
    } else {
      c_->recovery_dropped.fetch_add(1, kRelaxed);
    }
  }
  next_seq_ = h.next_region_seq;
  return Status::ok_status();
}

Status DiskTier::scan_regions() {
  // Pass 1: each region's generation, from its first header, so that pass 2
  // can replay the logs oldest first: a later copy of a key then replaces an
  // earlier one, and a tombstone removes what came before it.
  AlignedBuffer page(kPageBytes, kDirectIoAlignment);
  std::vector<std::pair<uint64_t, uint32_t>> order;  // (generation, region)
  for (uint32_t r = 0; r < region_count_; ++r) {
    regions_[r] = Region{};
    if (!dev_->read_sync(region_offset(r), page.view()).ok()) continue;  // pass 2 warns
    EntryHeader h;
    std::memcpy(&h, page.data(), sizeof(h));
    if (h.magic == kEntryMagic && h.version == kFormatVersion && h.header_bytes == sizeof(h) &&
        header_crc_of(h) == h.header_crc && h.volume_id == sb_.volume_id) {
      order.emplace_back(h.region_seq, r);
    }
  }
  std::sort(order.begin(), order.end());
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
      if (h.magic != kEntryMagic || h.version != kFormatVersion || h.header_bytes != sizeof(h) ||
          header_crc_of(h) != h.header_crc || h.volume_id != sb_.volume_id) {
        break;  // end of this generation's log (or a torn header)
      }
      if (seq == 0) seq = h.region_seq;
      if (h.region_seq != seq) break;  // an older generation's leftovers
      const uint64_t eb = entry_bytes(h.payload_bytes);
      const bool tombstone = h.flags == kEntryTombstone && h.payload_bytes == 0;
      if ((h.flags != 0 && !tombstone) || (h.payload_bytes == 0 && !tombstone) ||
          h.payload_bytes > opts_.max_payload_bytes || off + eb > opts_.region_bytes) {
        break;
      }
      const Key128 key{h.key_hi, h.key_lo};
      if (tombstone) {
        // Everything replayed so far is older: the key was removed after it.
        if (index_->erase(key)) c_->recovered_entries.fetch_sub(1, kRelaxed);
        c_->recovered_tombstones.fetch_add(1, kRelaxed);
      } else if (crc32c(rb.data() + off + kPayloadOffset, h.payload_bytes) == h.payload_crc) {
        auto ns = namespaces_->intern(Key128{h.ns_hi, h.ns_lo}, false);
        if (!ns.ok()) {  // namespace table full: this block cannot be indexed
          c_->recovery_dropped.fetch_add(1, kRelaxed);
          off += eb;
          continue;
        }
        IndexRecord rec;
        rec.key = key;
        rec.disk_page = first_page_of(r) + static_cast<uint32_t>(off / kPageBytes);
        rec.length = h.payload_bytes;
        rec.ns = *ns;
        switch (index_->insert(rec)) {
          case Index::InsertResult::kInserted:
            c_->recovered_entries.fetch_add(1, kRelaxed);
            break;
          case Index::InsertResult::kExists:
            // Replayed oldest first: this copy is the newest so far.
            index_->update(key, [&](IndexRecord& cur) {
              cur = rec;
              return true;
            });
            break;
          case Index::InsertResult::kFull:
            c_->recovery_dropped.fetch_add(1, kRelaxed);
            break;
        }
        reg.keys.push_back(key);
      } else {
        c_->recovery_dropped.fetch_add(1, kRelaxed);
      }
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

bool DiskTier::wait_locked(std::unique_lock<std::mutex>& lock, uint64_t deadline_ns) {
  const uint64_t now = now_ns();
  if (now >= deadline_ns) {
    c_->write_timeouts.fetch_add(1, kRelaxed);
    return false;
  }
  cv_.wait_for(lock, std::chrono::nanoseconds(deadline_ns - now));
  return true;
}

uint64_t DiskTier::write_deadline() const { return now_ns() + opts_.write_timeout_ms * 1000000ull; }

bool DiskTier::reclaim_oldest() {
  std::lock_guard lock(mu_);
  if (fifo_.empty()) return false;
  const uint32_t id = fifo_.front();
  Region& victim = regions_[id];
  if (victim.state != Region::kSealed) return false;  // still flushing: not now
  fifo_.pop_front();
  const uint32_t first = first_page_of(id), end = first + pages_per_region_;
  for (const Key128& key : victim.keys) {
    index_->update(key, [&](IndexRecord& rec) {
      if (rec.disk_page < first || rec.disk_page >= end) return true;
      rec.disk_page = kNoDiskPage;
      c_->entries_evicted.fetch_add(1, kRelaxed);
      return rec.in_ram();
    });
  }
  victim.keys.clear();
  victim.state = Region::kFree;
  victim.fill = victim.flushed = 0;
  free_regions_.push_back(id);
  c_->regions_reclaimed.fetch_add(1, kRelaxed);
  return true;
}

Status DiskTier::append_tombstone(const Key128& key, uint16_t ns) {
  const Key128 ns_digest = namespaces_->digest(ns);
  std::unique_lock lock(mu_);
  KVTIER_RETURN_IF_ERROR(make_room_locked(lock, entry_bytes(0), write_deadline()));
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
  std::unique_lock lock(mu_);
  KVTIER_RETURN_IF_ERROR(make_room_locked(lock, entry_bytes(payload.size()), write_deadline()));
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

Status DiskTier::make_room_locked(std::unique_lock<std::mutex>& lock, uint64_t need,
                                  uint64_t deadline_ns) {
  const Status too_slow = Status::timeout(
      "disk tier: the device has not finished earlier writes in time; write refused");
  for (;;) {
    if (open_ >= 0 && regions_[open_].fill + need <= opts_.region_bytes) return Status::ok_status();
    if (opening_) {
      if (!wait_locked(lock, deadline_ns)) return too_slow;
      continue;
    }
    if (open_ >= 0) {
      if (!regions_[open_].copying.empty()) {  // its last appends are still copying in
        if (!wait_locked(lock, deadline_ns)) return too_slow;
        continue;
      }
      auto chunks = seal_open_locked();
      lock.unlock();
      submit_writes(std::move(chunks));
      lock.lock();
      continue;
    }
    opening_ = true;
    Status st = open_region_locked(lock, deadline_ns);
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
  std::lock_guard lock(mu_);
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

Status DiskTier::open_region_locked(std::unique_lock<std::mutex>& lock, uint64_t deadline_ns) {
  // Every write buffer still flushing (a slow or hung device): wait, but not
  // past the caller's deadline.
  const Status too_slow = Status::timeout(
      "disk tier: no write buffer came free in time (device writes pending); write refused");
  while (free_write_bufs_.empty()) {
    if (!wait_locked(lock, deadline_ns)) return too_slow;
  }

  struct Hot {
    IndexRecord rec;
    AlignedBuffer data;
    bool ok = false;
  };
  std::vector<Hot> hot;
  uint32_t id;
  bool reclaim = false;
  for (;;) {
    if (!free_regions_.empty()) {
      id = free_regions_.back();
      free_regions_.pop_back();
      break;
    }
    if (fifo_.empty()) return Status::internal("disk tier has no region to reclaim");
    id = fifo_.front();
    // Wait for the oldest region's writes; look again afterwards, since
    // reclaim_oldest() may have taken it meanwhile.
    if (regions_[id].state == Region::kFlushing) {
      if (!wait_locked(lock, deadline_ns)) return too_slow;
      continue;
    }
    fifo_.pop_front();
    reclaim = true;
    break;
  }
  if (reclaim) {
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
    if (!hot.empty()) {
      // Read the hot entries back without holding mu_ (completions need it).
      lock.unlock();
      for (Hot& h : hot) {
        h.data = AlignedBuffer(entry_bytes(h.rec.length), kDirectIoAlignment);
        uint64_t off = static_cast<uint64_t>(h.rec.disk_page) * kPageBytes;
        h.ok = dev_->read_sync(off, h.data.view()).ok() &&
               check_entry(h.data.data(), sb_.volume_id, h.rec.key, namespaces_->digest(h.rec.ns),
                           h.rec.length)
                   .ok();
      }
      lock.lock();
    }
  }
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
  for (Hot& h : hot) {
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

void DiskTier::read_async(const IndexRecord& rec, std::shared_ptr<ReadTarget> target,
                          uint64_t deadline_ns) {
  if (!valid_page(rec.disk_page) || rec.length == 0 || rec.length > opts_.max_payload_bytes) {
    target->complete(Status::corruption("index record out of range"), {});
    return;
  }
  const Key128 ns_digest = namespaces_->digest(rec.ns);
  const uint32_t region = region_of_page(rec.disk_page);
  const uint64_t off_in_region = uint64_t{rec.disk_page - first_page_of(region)} * kPageBytes;
  const uint64_t eb = entry_bytes(rec.length);
  const uint64_t volume_id = sb_.volume_id;
  {
    std::lock_guard lock(mu_);
    const Region& r = regions_[region];
    const bool in_buffer = r.buf >= 0 && off_in_region + eb <= r.fill;
    const bool own_copy_done =
        std::find(r.copying.begin(), r.copying.end(), off_in_region) == r.copying.end();
    if (in_buffer && !own_copy_done) {
      // Still being copied in (a reinsertion racing with this read): the
      // volume does not hold it yet, so reading there would find an older
      // entry and drop a good block. A transient miss keeps the record.
      target->complete(Status::unavailable("entry still being copied into its region"), {});
      return;
    }
    if (in_buffer) {
      // Still in a region buffer (open or flushing) and this entry's bytes
      // are complete: serve from memory. (Not only up to the lowest copy in
      // progress: an entry behind it may not be on the volume yet either.)
      const std::byte* entry = write_bufs_[r.buf].data() + off_in_region;
      Status st = check_entry(entry, volume_id, rec.key, ns_digest, rec.length);
      c_->buffer_reads.fetch_add(1, kRelaxed);
      if (st.code() == StatusCode::kCorruption) c_->read_corrupt.fetch_add(1, kRelaxed);
      target->complete(st, ByteView(entry + kPayloadOffset, rec.length), payload_crc_of(entry));
      return;
    }
  }
  if (direct_ok_ && target->allow_direct() && rec.length >= kPageBytes &&
      target->out().size() >= rec.length && is_aligned_ptr(target->out().data(), kPageBytes) &&
      overdue_direct_->load(std::memory_order_acquire) == 0) {
    // Pinned pages make the read revocable at its deadline; without them
    // only kAlways reads directly (and then waits for the device).
    auto pin = dev_->pin_buffer(target->out().subspan(0, align_down(rec.length, kPageBytes)));
    if (pin.ok() || opts_.direct_reads == DiskTierOptions::DirectReads::kAlways) {
      read_direct(rec, ns_digest, std::move(target), pin.ok() ? *pin : -1);
      return;
    }
    c_->direct_unpinned.fetch_add(1, kRelaxed);
  }
  // A pooled (registered) staging buffer if one is free; otherwise a
  // temporary one. Never wait here: several callers each holding part of
  // the pool while waiting for more would block one another.
  std::shared_ptr<StagePool> pool = stage_;
  const int slot = pool->acquire(0);
  std::shared_ptr<AlignedBuffer> temp;
  if (slot < 0) temp = std::make_shared<AlignedBuffer>(eb, kDirectIoAlignment);
  std::byte* base = slot >= 0 ? pool->buf(slot).data() : temp->data();
  c_->reads.fetch_add(1, kRelaxed);
  std::shared_ptr<Counters> counters = c_;
  dev_->read(uint64_t{rec.disk_page} * kPageBytes, MutableByteView(base, eb),
             [pool, slot, temp, base, target, counters, rec, ns_digest, volume_id](Status st) {
               const std::byte* entry = base;
               if (st.ok()) {
                 counters->bytes_read.fetch_add(entry_bytes(rec.length), kRelaxed);
                 st = check_entry(entry, volume_id, rec.key, ns_digest, rec.length);
                 if (st.code() == StatusCode::kCorruption) {
                   counters->read_corrupt.fetch_add(1, kRelaxed);
                 }
               } else {
                 counters->read_io_errors.fetch_add(1, kRelaxed);
               }
               target->complete_deferred(st, ByteView(entry + kPayloadOffset, rec.length),
                                         payload_crc_of(entry), [pool, slot, temp] {
                                           if (slot >= 0) pool->release(slot);
                                         });
             });
}

void DiskTier::read_direct(const IndexRecord& rec, const Key128& ns_digest,
                           std::shared_ptr<ReadTarget> target, int pin) {
  // The header page and the payload's partial last page go into a small
  // buffer of our own, the payload's whole pages straight into the caller's
  // buffer (which must not be written past rec.length). Unpinned: one
  // vectored device request (devices without a vectored read split it).
  // Pinned: the whole pages are a request of their own into the pinned
  // pages (a fixed-buffer read), so the caller can take them back.
  const uint32_t body = align_down(rec.length, kPageBytes);
  const uint32_t tail = rec.length - body;
  struct Direct {
    AlignedBuffer meta{2 * kPageBytes, kDirectIoAlignment};
    std::atomic<int> left{0};
    std::mutex mu;
    Status error;  // first failure, guarded by mu
  };
  auto d = std::make_shared<Direct>();
  const bool pinned = pin >= 0;
  d->left.store(pinned ? (tail > 0 ? 3 : 2) : 1, kRelaxed);
  std::shared_ptr<blk::BlockDevice> dev = dev_;
  std::function<bool()> revoke;
  if (pinned) {
    std::byte* pages = target->out().data();
    revoke = [pages, body] { return replace_with_fresh_pages(pages, body); };
  }
  target->begin_direct(overdue_direct_, std::move(revoke));
  c_->reads.fetch_add(1, kRelaxed);
  c_->direct_reads.fetch_add(1, kRelaxed);
  const uint64_t entry_off = uint64_t{rec.disk_page} * kPageBytes;
  const uint64_t volume_id = sb_.volume_id;
  std::shared_ptr<Counters> counters = c_;
  auto part_done = [d, dev, pin, target, counters, rec, ns_digest, volume_id, body,
                    tail](Status st) {
    if (!st.ok()) {
      std::lock_guard lock(d->mu);
      if (d->error.ok()) d->error = std::move(st);
    }
    if (d->left.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    // Last part: every read has landed (or failed).
    if (pin >= 0) dev->unpin_buffer(pin);
    if (!target->claim_direct()) {
      // The caller took its pages back at the deadline: nothing to verify.
      counters->direct_revoked.fetch_add(1, kRelaxed);
      target->device_done();
      return;
    }
    Status result = d->error;
    uint32_t crc = 0;
    if (!result.ok()) {
      counters->read_io_errors.fetch_add(1, kRelaxed);
    } else {
      counters->bytes_read.fetch_add(entry_bytes(rec.length), kRelaxed);
      EntryHeader h;
      std::memcpy(&h, d->meta.data(), sizeof(h));
      result = check_header(h, volume_id, rec.key, ns_digest, rec.length);
      if (result.ok()) {
        std::byte* out = target->out().data();
        if (tail > 0) std::memcpy(out + body, d->meta.data() + kPageBytes, tail);
        crc = h.payload_crc;
        if (crc32c(out, rec.length) != h.payload_crc) {
          result = Status::corruption("payload checksum mismatch");
        }
      }
      if (result.code() == StatusCode::kCorruption) {
        counters->read_corrupt.fetch_add(1, kRelaxed);
      }
    }
    target->complete_direct(std::move(result), crc);
  };
  static_assert(kPayloadOffset == kPageBytes, "the payload follows the header page");
  const MutableByteView header = d->meta.subview(0, kPageBytes);
  const MutableByteView pages = target->out().subspan(0, body);
  const MutableByteView last = d->meta.subview(kPageBytes, kPageBytes);
  if (!pinned) {
    const MutableByteView parts[3] = {header, pages, last};
    dev_->readv(entry_off, std::span<const MutableByteView>(parts, tail > 0 ? 3 : 2), part_done);
    return;
  }
  dev_->read(entry_off, header, part_done);
  dev_->read(entry_off + kPageBytes, pages, part_done);
  if (tail > 0) dev_->read(entry_off + kPageBytes + body, last, part_done);
}

Status DiskTier::flush() {
  std::unique_lock lock(mu_);
  // Appends that returned before this flush have finished their copies; wait
  // for those still copying into the open region so its write covers them.
  const uint64_t deadline = write_deadline();
  const Status too_slow =
      Status::timeout("disk tier: flush did not complete in time (device writes pending)");
  while (open_ >= 0 && !regions_[open_].copying.empty()) {
    if (!wait_locked(lock, deadline)) return too_slow;
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
  auto done = [&] {
    for (auto [i, seq] : busy) {
      if (regions_[i].seq == seq && regions_[i].pending > 0) return false;
    }
    return true;
  };
  while (!done()) {
    if (!wait_locked(lock, deadline)) return too_slow;
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
  std::unique_lock lock(mu_);
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
  s.direct_revoked = c_->direct_revoked.load(kRelaxed);
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
  std::lock_guard lock(mu_);
  for (const auto& r : regions_) s.regions_in_use += r.state != Region::kFree;
  return s;
}

}  // namespace kvtier::kv
