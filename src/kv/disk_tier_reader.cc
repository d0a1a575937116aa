// DiskTier: reads, staged (into the tier's buffers, verified, then copied)
// or direct (into the caller's pinned pages, revocable at the deadline).
#include "kv/disk_tier.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/crc32c.h"
#include "common/fresh_pages.h"
#include "kv/disk_tier_internal.h"

namespace kvtier::kv {

using namespace disk_internal;  // NOLINT: this tier's own internals

// A staged read: the entry, the target it is delivered to, and the staging
// buffer (pooled slot, or a temporary one) the device reads it into.
struct DiskTier::StagedRead {
  IndexRecord rec;
  Key128 ns_digest;
  std::shared_ptr<ReadTarget> target;
  int slot = -1;  // in stage_, or -1 with `temp`
  std::shared_ptr<AlignedBuffer> temp;
  std::byte* base = nullptr;
};

void DiskTier::read_async(const IndexRecord& rec, std::shared_ptr<ReadTarget> target,
                          uint64_t /*deadline_ns*/) {
  std::optional<StagedRead> staged = start_read(rec, std::move(target));
  if (staged) issue_staged(std::span<StagedRead>(&*staged, 1));
}

void DiskTier::read_batch_async(std::span<const IndexRecord> recs,
                                std::span<const std::shared_ptr<ReadTarget>> targets,
                                uint64_t /*deadline_ns*/) {
  std::vector<StagedRead> staged;
  staged.reserve(recs.size());
  for (size_t i = 0; i < recs.size() && i < targets.size(); ++i) {
    if (auto s = start_read(recs[i], targets[i])) staged.push_back(std::move(*s));
  }
  if (coalesce_max_bytes_ == 0) {
    for (StagedRead& s : staged) issue_staged(std::span<StagedRead>(&s, 1));
    return;
  }
  // Runs of entries that follow one another on the volume, in volume order.
  std::sort(staged.begin(), staged.end(), [](const StagedRead& a, const StagedRead& b) {
    return a.rec.disk_page < b.rec.disk_page;
  });
  for (size_t first = 0; first < staged.size();) {
    uint64_t bytes = entry_bytes(staged[first].rec.length);
    size_t end = first + 1;
    for (; end < staged.size() && end - first < coalesce_max_entries_; ++end) {
      const IndexRecord& prev = staged[end - 1].rec;
      const uint64_t next_page = prev.disk_page + entry_bytes(prev.length) / kPageBytes;
      const uint64_t eb = entry_bytes(staged[end].rec.length);
      if (staged[end].rec.disk_page != next_page || bytes + eb > coalesce_max_bytes_) break;
      bytes += eb;
    }
    issue_staged(std::span<StagedRead>(staged.data() + first, end - first));
    first = end;
  }
}

std::optional<DiskTier::StagedRead> DiskTier::start_read(const IndexRecord& rec,
                                                         std::shared_ptr<ReadTarget> target) {
  if (!valid_page(rec.disk_page) || rec.length == 0 || rec.length > opts_.max_payload_bytes) {
    target->complete(Status::corruption("index record out of range"), {});
    return std::nullopt;
  }
  const Key128 ns_digest = namespaces_->digest(rec.ns);
  const uint32_t region = region_of_page(rec.disk_page);
  const uint64_t off_in_region = uint64_t{rec.disk_page - first_page_of(region)} * kPageBytes;
  const uint64_t eb = entry_bytes(rec.length);
  const uint64_t volume_id = sb_.volume_id;
  {
    MutexLock lock(mu_);
    const Region& r = regions_[region];
    const bool in_buffer = r.buf >= 0 && off_in_region + eb <= r.fill;
    const bool own_copy_done =
        std::find(r.copying.begin(), r.copying.end(), off_in_region) == r.copying.end();
    if (in_buffer && !own_copy_done) {
      // Still being copied in (a reinsertion racing with this read): the
      // volume does not hold it yet, so reading there would find an older
      // entry and drop a good block. A transient miss keeps the record.
      target->complete(Status::unavailable("entry still being copied into its region"), {});
      return std::nullopt;
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
      return std::nullopt;
    }
  }
  if (direct_ok_ && target->allow_direct() && rec.length >= kPageBytes &&
      target->out().size() >= rec.length && is_aligned_ptr(target->out().data(), kPageBytes) &&
      overdue_direct_->load(std::memory_order_acquire) == 0) {
    // Pinned pages make the read revocable at its deadline; without them
    // only kAlways reads directly (and then waits for the device).
    auto pin = dev_->register_buffer(target->out().subspan(0, align_down(rec.length, kPageBytes)));
    if (pin.ok() || opts_.direct_reads == DiskTierOptions::DirectReads::kAlways) {
      read_direct(rec, ns_digest, std::move(target), pin.ok() ? *pin : -1);
      return std::nullopt;
    }
    c_->direct_unpinned.fetch_add(1, kRelaxed);
  }
  // A pooled (registered) staging buffer if one is free; otherwise a
  // temporary one. Never wait here: several callers each holding part of
  // the pool while waiting for more would block one another.
  StagedRead r{rec, ns_digest, std::move(target)};
  r.slot = stage_->acquire(0);
  if (r.slot < 0) r.temp = std::make_shared<AlignedBuffer>(eb, kDirectIoAlignment);
  r.base = r.slot >= 0 ? stage_->buf(r.slot).data() : r.temp->data();
  return r;
}

void DiskTier::issue_staged(std::span<StagedRead> run) {
  auto reads = std::make_shared<std::vector<StagedRead>>(std::make_move_iterator(run.begin()),
                                                         std::make_move_iterator(run.end()));
  c_->reads.fetch_add(reads->size(), kRelaxed);
  c_->coalesced_reads.fetch_add(reads->size() - 1, kRelaxed);
  std::shared_ptr<StagePool> pool = stage_;
  std::shared_ptr<Counters> counters = c_;
  const uint64_t volume_id = sb_.volume_id;
  auto done = [pool, reads, counters, volume_id](Status st) {
    for (StagedRead& r : *reads) {
      const std::byte* entry = r.base;
      Status entry_st = st;
      if (st.ok()) {
        counters->bytes_read.fetch_add(entry_bytes(r.rec.length), kRelaxed);
        entry_st = check_entry(entry, volume_id, r.rec.key, r.ns_digest, r.rec.length);
        if (entry_st.code() == StatusCode::kCorruption) {
          counters->read_corrupt.fetch_add(1, kRelaxed);
        }
      } else {
        counters->read_io_errors.fetch_add(1, kRelaxed);
      }
      r.target->complete_deferred(std::move(entry_st),
                                  ByteView(entry + kPayloadOffset, r.rec.length),
                                  payload_crc_of(entry), [pool, slot = r.slot, temp = r.temp] {
                                    if (slot >= 0) pool->release(slot);
                                  });
    }
  };
  const uint64_t offset = uint64_t{reads->front().rec.disk_page} * kPageBytes;
  if (reads->size() == 1) {  // the common case: no parts list to build
    const StagedRead& r = reads->front();
    dev_->read(offset, MutableByteView(r.base, entry_bytes(r.rec.length)), std::move(done));
    return;
  }
  std::vector<MutableByteView> parts;
  parts.reserve(reads->size());
  for (const StagedRead& r : *reads) parts.emplace_back(r.base, entry_bytes(r.rec.length));
  dev_->readv(offset, parts, std::move(done));
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
    if (pin >= 0) (void)dev->unregister_buffer(pin);
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

}  // namespace kvtier::kv
