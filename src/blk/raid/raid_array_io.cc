// RaidArray: requests (a worker pool with row locks), parity (RAID5/6) and
// mirror (RAID1/10) reads and writes, degraded reads by reconstruction.
#include "blk/raid/raid_array.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "blk/raid/raid_internal.h"

namespace kvtier::blk {

using namespace raid_internal;  // NOLINT: this module's own internals

// ---------------------------------------------------------------- requests

void RaidArray::enqueue(std::function<void()> job) {
  {
    std::lock_guard lk(queue_mu_);
    queue_.push_back(std::move(job));
  }
  queue_cv_.notify_one();
}

void RaidArray::worker_loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lk(queue_mu_);
      queue_cv_.wait(lk, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();
  }
}

void RaidArray::lock_rows(uint64_t r0, uint64_t r1) {
  std::unique_lock lk(rows_mu_);
  rows_cv_.wait(lk, [&] {
    for (const auto& [a, b] : locked_) {
      if (a <= r1 && r0 <= b) return false;
    }
    return true;
  });
  locked_.emplace_back(r0, r1);
}

void RaidArray::unlock_rows(uint64_t r0, uint64_t r1) {
  {
    std::lock_guard lk(rows_mu_);
    auto it = std::find(locked_.begin(), locked_.end(), std::make_pair(r0, r1));
    if (it != locked_.end()) locked_.erase(it);
  }
  rows_cv_.notify_all();
}

bool RaidArray::run_batch(View& view, std::vector<MemberIo>& ios) {
  if (ios.empty()) return true;
  std::mutex mu;
  std::condition_variable cv;
  size_t left = ios.size();
  for (auto& io : ios) {
    auto done = [&mu, &cv, &left, &io](Status st) {
      std::lock_guard lk(mu);
      io.status = std::move(st);
      if (--left == 0) cv.notify_all();
    };
    const uint64_t off = geo_.data_offset + io.offset;
    if (io.write) {
      view.dev[io.member]->write(off, ByteView(io.buf, io.len), done);
    } else {
      view.dev[io.member]->read(off, MutableByteView(io.buf, io.len), done);
    }
  }
  {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return left == 0; });
  }
  bool all_ok = true;
  for (auto& io : ios) {
    if (io.status.ok()) continue;
    all_ok = false;
    view.excluded |= 1ull << io.member;
    note_error(io.member, io.write);
  }
  return all_ok;
}

void RaidArray::finish(bool ok, int op, uint64_t bytes) {
  if (!ok) {
    io_.errors.fetch_add(1, kRelaxed);
    return;
  }
  switch (op) {
    case kOpRead:
      io_.reads.fetch_add(1, kRelaxed);
      io_.bytes_read.fetch_add(bytes, kRelaxed);
      break;
    case kOpWrite:
      io_.writes.fetch_add(1, kRelaxed);
      io_.bytes_written.fetch_add(bytes, kRelaxed);
      break;
    case kOpFlush:
      io_.flushes.fetch_add(1, kRelaxed);
      break;
    default:
      io_.trims.fetch_add(1, kRelaxed);
  }
}

void RaidArray::submit(uint64_t offset, uint64_t length, const void* buf, int op,
                       std::function<Status()> io, IoCallback cb) {
  Status st = check_io(offset, length, buf);
  if (!st.ok()) {
    io_.errors.fetch_add(1, kRelaxed);
    return cb(std::move(st));
  }
  enqueue([this, op, length, io = std::move(io), cb = std::move(cb)]() mutable {
    Status s = io();
    finish(s.ok(), op, length);
    cb(std::move(s));
  });
}

void RaidArray::read(uint64_t offset, MutableByteView dst, IoCallback cb) {
  submit(
      offset, dst.size(), dst.data(), kOpRead, [this, offset, dst] { return do_read(offset, dst); },
      std::move(cb));
}

void RaidArray::write(uint64_t offset, ByteView src, IoCallback cb) {
  submit(
      offset, src.size(), src.data(), kOpWrite,
      [this, offset, src] { return do_write(offset, src); }, std::move(cb));
}

void RaidArray::flush(IoCallback cb) {
  enqueue([this, cb = std::move(cb)]() mutable {
    Status s;
    clear_idle_bits_after([&] { s = flush_members(); });
    if (s.ok() && snapshot().state.size() > 0) {
      std::lock_guard lk(state_mu_);
      if (state_locked() == ArrayState::kFailed) s = Status::io_error(name_ + ": array failed");
    }
    finish(s.ok(), kOpFlush, 0);
    cb(std::move(s));
  });
}

void RaidArray::trim(uint64_t offset, uint64_t length, IoCallback cb) {
  Status st = check_io(offset, length, nullptr);
  finish(st.ok(), kOpTrim, length);
  cb(std::move(st));
}

DeviceStats RaidArray::stats() const { return io_.snapshot(); }

Status RaidArray::do_read(uint64_t offset, MutableByteView dst) {
  const uint64_t r0 = offset / row_bytes();
  const uint64_t r1 = (offset + dst.size() - 1) / row_bytes();
  lock_rows(r0, r1);
  View v = snapshot();
  Status st;
  for (size_t attempt = 0; attempt <= n_; ++attempt) {
    bool retry = false;
    st = is_parity() ? read_parity(v, offset, dst, retry) : read_mirror(v, offset, dst, retry);
    if (!retry) break;
    // Members that failed this attempt stay excluded; pick up state changes.
    const uint64_t excluded = v.excluded;
    v = snapshot();
    v.excluded = excluded;
  }
  unlock_rows(r0, r1);
  return st;
}

Status RaidArray::do_write(uint64_t offset, ByteView src) {
  const uint64_t r0 = offset / row_bytes();
  const uint64_t r1 = (offset + src.size() - 1) / row_bytes();
  lock_rows(r0, r1);
  mark_rows(r0, r1);
  View v = snapshot();
  Status st;
  if (is_parity()) {
    for (size_t attempt = 0; attempt <= n_; ++attempt) {
      bool retry = false;
      st = write_parity(v, offset, src, retry);
      if (!retry) break;
      const uint64_t excluded = v.excluded;
      v = snapshot();
      v.excluded = excluded;
    }
  } else {
    st = write_mirror(v, offset, src);
  }
  unmark_rows(r0, r1);
  unlock_rows(r0, r1);
  return st;
}

void RaidArray::encode_parity(size_t len, std::byte* const* shards) {
  const uint64_t t0 = thread_cpu_ns();
  const size_t k = n_ - m_;
  codec_->encode(len, shards, shards + k);
  parity_cpu_ns_.fetch_add(thread_cpu_ns() - t0, kRelaxed);
  parity_bytes_.fetch_add(len * k, kRelaxed);
}

Status RaidArray::reconstruct(size_t len, std::byte* const* shards,
                              const std::vector<int>& missing) {
  const uint64_t t0 = thread_cpu_ns();
  Status st = codec_->reconstruct(len, shards, missing);
  parity_cpu_ns_.fetch_add(thread_cpu_ns() - t0, kRelaxed);
  parity_bytes_.fetch_add(len * (n_ - m_), kRelaxed);
  return st;
}

// One row's share of a parity request: which bytes of which data shards it
// touches ([lo, hi) within the strip, lo == hi when untouched) and the row
// range [rmin, rmax) spanned by them.
namespace {
struct RowSpan {
  uint64_t row = 0;
  uint64_t rmin = 0, rmax = 0;
  uint64_t logical_base = 0;  // logical offset of (row, shard 0, byte 0)
  std::vector<uint64_t> lo, hi;
};

std::vector<RowSpan> split_rows(uint64_t offset, uint64_t len, uint64_t strip, size_t k) {
  std::vector<RowSpan> rows;
  const uint64_t rb = strip * k;
  const uint64_t end = offset + len;
  for (uint64_t r = offset / rb; r * rb < end; ++r) {
    RowSpan s;
    s.row = r;
    s.logical_base = r * rb;
    s.lo.assign(k, 0);
    s.hi.assign(k, 0);
    s.rmin = strip;
    s.rmax = 0;
    for (size_t d = 0; d < k; ++d) {
      const uint64_t a = std::max(offset, s.logical_base + d * strip);
      const uint64_t b = std::min(end, s.logical_base + (d + 1) * strip);
      if (a >= b) continue;
      s.lo[d] = a - s.logical_base - d * strip;
      s.hi[d] = b - s.logical_base - d * strip;
      s.rmin = std::min(s.rmin, s.lo[d]);
      s.rmax = std::max(s.rmax, s.hi[d]);
    }
    rows.push_back(std::move(s));
  }
  return rows;
}
}  // namespace

Status RaidArray::read_parity(View& v, uint64_t offset, MutableByteView dst, bool& retry) {
  const size_t k = n_ - m_;
  auto rows = split_rows(offset, dst.size(), strip_, k);
  struct Degraded {
    const RowSpan* span;
    std::vector<std::byte*> shard;
    std::vector<int> missing;
  };
  std::vector<Degraded> degraded;
  std::vector<MemberIo> ios;
  uint64_t scratch_bytes = 0;
  for (const auto& s : rows) scratch_bytes += (s.rmax - s.rmin) * n_;
  std::byte* next_scratch = scratch(scratch_bytes);
  for (const auto& s : rows) {
    bool healthy = true;
    for (size_t d = 0; d < k; ++d) {
      if (s.lo[d] < s.hi[d] && !v.usable(member_of(s.row, d), s.row)) healthy = false;
    }
    if (healthy) {
      for (size_t d = 0; d < k; ++d) {
        if (s.lo[d] >= s.hi[d]) continue;
        std::byte* p = dst.data() + (s.logical_base + d * strip_ + s.lo[d] - offset);
        ios.push_back(
            {member_of(s.row, d), false, s.row * strip_ + s.lo[d], p, s.hi[d] - s.lo[d], {}});
      }
      continue;
    }
    Degraded dg;
    dg.span = &s;
    const uint64_t len = s.rmax - s.rmin;
    for (size_t sh = 0; sh < n_; ++sh) {
      dg.shard.push_back(next_scratch);
      next_scratch += len;
      if (v.usable(member_of(s.row, sh), s.row)) {
        ios.push_back(
            {member_of(s.row, sh), false, s.row * strip_ + s.rmin, dg.shard.back(), len, {}});
      } else {
        dg.missing.push_back(static_cast<int>(sh));
      }
    }
    if (dg.missing.size() > m_) {
      return Status::io_error(fmt::format("{}: row {} has {} members down, data lost", name_, s.row,
                                          dg.missing.size()));
    }
    degraded.push_back(std::move(dg));
  }
  if (!run_batch(v, ios)) {
    retry = true;
    return Status::io_error(name_ + ": member read failed");
  }
  for (auto& dg : degraded) {
    const RowSpan& s = *dg.span;
    const uint64_t len = s.rmax - s.rmin;
    KVTIER_RETURN_IF_ERROR(reconstruct(len, dg.shard.data(), dg.missing));
    for (size_t d = 0; d < k; ++d) {
      if (s.lo[d] >= s.hi[d]) continue;
      std::memcpy(dst.data() + (s.logical_base + d * strip_ + s.lo[d] - offset),
                  dg.shard[d] + (s.lo[d] - s.rmin), s.hi[d] - s.lo[d]);
    }
  }
  return Status::ok_status();
}

// One row of a parity write: a buffer per shard (scratch, or the caller's
// bytes for a data shard the write covers whole) and the shards to
// reconstruct before the new data is laid over the old.
struct RaidArray::ParityRowPlan {
  const RowSpan* span = nullptr;
  std::vector<std::byte*> shard;
  std::vector<int> missing;
};

std::byte* RaidArray::parity_src_at(ByteView src, uint64_t offset, const ParityRowPlan& p, size_t d,
                                    uint64_t within) const {
  const RowSpan& s = *p.span;
  return const_cast<std::byte*>(src.data()) + (s.logical_base + d * strip_ + within - offset);
}

Status RaidArray::plan_parity_row(const View& v, ByteView src, uint64_t offset,
                                  std::byte*& next_scratch, ParityRowPlan& p,
                                  std::vector<MemberIo>& reads) const {
  const RowSpan& s = *p.span;
  const size_t k = n_ - m_;
  const uint64_t len = s.rmax - s.rmin;
  p.shard.resize(n_);
  for (size_t sh = 0; sh < n_; ++sh) {
    p.shard[sh] = next_scratch;
    next_scratch += len;
  }
  // Data shards the write does not cover over [rmin, rmax) must be read.
  bool need_reconstruct = false;
  for (size_t d = 0; d < k; ++d) {
    const bool covered = s.lo[d] == s.rmin && s.hi[d] == s.rmax;
    if (!covered && !v.usable(member_of(s.row, d), s.row)) need_reconstruct = true;
  }
  for (size_t sh = 0; sh < n_; ++sh) {
    const size_t mem = member_of(s.row, sh);
    const bool usable = v.usable(mem, s.row);
    if (need_reconstruct) {
      // Degraded: old contents of every shard, to rebuild the missing ones.
      if (usable) {
        reads.push_back({mem, false, s.row * strip_ + s.rmin, p.shard[sh], len, {}});
      } else {
        p.missing.push_back(static_cast<int>(sh));
      }
    } else if (sh < k) {
      const bool covered = s.lo[sh] == s.rmin && s.hi[sh] == s.rmax;
      if (covered) {
        // Zero-copy: parity straight from the caller's bytes.
        p.shard[sh] = parity_src_at(src, offset, p, sh, s.rmin);
      } else {
        reads.push_back({mem, false, s.row * strip_ + s.rmin, p.shard[sh], len, {}});
      }
    }
  }
  if (p.missing.size() > m_) {
    return Status::io_error(fmt::format("{}: row {} has {} members down, cannot write", name_,
                                        s.row, p.missing.size()));
  }
  return Status::ok_status();
}

Status RaidArray::fill_parity_row(const View& v, ByteView src, uint64_t offset, ParityRowPlan& p,
                                  std::vector<MemberIo>& writes) {
  const RowSpan& s = *p.span;
  const size_t k = n_ - m_;
  const uint64_t len = s.rmax - s.rmin;
  if (!p.missing.empty()) KVTIER_RETURN_IF_ERROR(reconstruct(len, p.shard.data(), p.missing));
  for (size_t d = 0; d < k; ++d) {
    if (s.lo[d] >= s.hi[d]) continue;
    std::byte* from = parity_src_at(src, offset, p, d, s.lo[d]);
    std::byte* to = p.shard[d] + (s.lo[d] - s.rmin);
    if (from != to) std::memcpy(to, from, s.hi[d] - s.lo[d]);
  }
  encode_parity(len, p.shard.data());
  for (size_t sh = 0; sh < n_; ++sh) {
    const size_t mem = member_of(s.row, sh);
    if (!v.usable(mem, s.row)) continue;
    if (sh >= k) {
      writes.push_back({mem, true, s.row * strip_ + s.rmin, p.shard[sh], len, {}});
    } else if (s.lo[sh] < s.hi[sh]) {
      writes.push_back({mem,
                        true,
                        s.row * strip_ + s.lo[sh],
                        p.shard[sh] + (s.lo[sh] - s.rmin),
                        s.hi[sh] - s.lo[sh],
                        {}});
    }
  }
  return Status::ok_status();
}

Status RaidArray::write_parity(View& v, uint64_t offset, ByteView src, bool& retry) {
  auto rows = split_rows(offset, src.size(), strip_, n_ - m_);
  uint64_t scratch_bytes = 0;
  for (const auto& s : rows) scratch_bytes += (s.rmax - s.rmin) * n_;
  std::byte* next_scratch = scratch(scratch_bytes);
  std::vector<ParityRowPlan> plans(rows.size());
  std::vector<MemberIo> reads;
  for (size_t i = 0; i < rows.size(); ++i) {
    plans[i].span = &rows[i];
    KVTIER_RETURN_IF_ERROR(plan_parity_row(v, src, offset, next_scratch, plans[i], reads));
  }
  if (!run_batch(v, reads)) {
    retry = true;  // nothing written yet: plan again around the failed member
    return Status::io_error(name_ + ": member read failed");
  }
  std::vector<MemberIo> writes;
  for (auto& p : plans) KVTIER_RETURN_IF_ERROR(fill_parity_row(v, src, offset, p, writes));
  // A member that fails a write is taken out; the parity already accounts
  // for its bytes, so the array stays consistent unless too many are gone.
  run_batch(v, writes);
  std::lock_guard lk(state_mu_);
  if (state_locked() == ArrayState::kFailed) return Status::io_error(name_ + ": array failed");
  return Status::ok_status();
}

namespace {

// A piece of a mirrored request that lies in one strip: the row, which data
// strip of the row (its copies are members group * copies + t), the offset
// on each copy's member and the length.
struct MirrorPiece {
  uint64_t pos = 0;  // array offset of the piece
  uint64_t row = 0;
  uint64_t group = 0;
  uint64_t member_offset = 0;
  uint64_t len = 0;
};

std::vector<MirrorPiece> mirror_pieces(uint64_t strip, uint64_t data_per_row, uint64_t offset,
                                       uint64_t end) {
  std::vector<MirrorPiece> out;
  for (uint64_t pos = offset; pos < end;) {
    const uint64_t strip_idx = pos / strip;
    const uint64_t within = pos % strip;
    const uint64_t len = std::min(strip - within, end - pos);
    const uint64_t row = strip_idx / data_per_row;
    out.push_back({pos, row, strip_idx % data_per_row, row * strip + within, len});
    pos += len;
  }
  return out;
}

}  // namespace

Status RaidArray::read_mirror(View& v, uint64_t offset, MutableByteView dst, bool& retry) {
  const uint64_t c = geo_.copies;
  std::vector<MemberIo> ios;
  for (const MirrorPiece& p : mirror_pieces(strip_, data_per_row_, offset, offset + dst.size())) {
    // Spread reads over the copies by row.
    size_t chosen = n_;
    for (uint64_t t = 0; t < c; ++t) {
      const size_t mem = p.group * c + (p.row + t) % c;
      if (v.usable(mem, p.row)) {
        chosen = mem;
        break;
      }
    }
    if (chosen == n_) {
      return Status::io_error(
          fmt::format("{}: every copy of row {} group {} is down", name_, p.row, p.group));
    }
    ios.push_back({chosen, false, p.member_offset, dst.data() + (p.pos - offset), p.len, {}});
  }
  if (!run_batch(v, ios)) {
    retry = true;
    return Status::io_error(name_ + ": member read failed");
  }
  return Status::ok_status();
}

Status RaidArray::write_mirror(View& v, uint64_t offset, ByteView src) {
  const uint64_t c = geo_.copies;
  std::vector<MemberIo> ios;
  for (const MirrorPiece& p : mirror_pieces(strip_, data_per_row_, offset, offset + src.size())) {
    for (uint64_t t = 0; t < c; ++t) {
      const size_t mem = p.group * c + t;
      if (!v.usable(mem, p.row)) continue;
      ios.push_back({mem,
                     true,
                     p.member_offset,
                     const_cast<std::byte*>(src.data()) + (p.pos - offset),
                     p.len,
                     {}});
    }
  }
  run_batch(v, ios);
  std::lock_guard lk(state_mu_);
  if (state_locked() == ArrayState::kFailed) return Status::io_error(name_ + ": array failed");
  return Status::ok_status();
}

}  // namespace kvtier::blk
