// RaidArray: resync of dirty rows, rebuild onto a replaced member, scrub.
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

// ---------------------------------------------------------------- resync, rebuild, scrub

Status RaidArray::resync_rows(uint64_t r0, uint64_t r1, bool* complete) {
  View v = snapshot();
  const uint64_t len = strip_;
  for (uint64_t row = r0; row < r1; ++row) {
    if (is_parity()) {
      const size_t k = n_ - m_;
      bool data_ok = true;
      for (size_t d = 0; d < k; ++d) data_ok &= v.usable(member_of(row, d), row);
      // Degraded and dirty: the write hole; nothing trustworthy to recompute from.
      if (!data_ok) {
        *complete = false;
        continue;
      }
      AlignedBuffer buf(len * n_, std::max<uint32_t>(buffer_alignment_, 64));
      std::vector<std::byte*> shard(n_);
      std::vector<MemberIo> reads;
      for (size_t sh = 0; sh < n_; ++sh) {
        shard[sh] = buf.data() + sh * len;
        if (sh < k) reads.push_back({member_of(row, sh), false, row * strip_, shard[sh], len, {}});
      }
      if (!run_batch(v, reads)) return Status::io_error(name_ + ": resync read failed");
      encode_parity(len, shard.data());
      std::vector<MemberIo> writes;
      for (size_t sh = k; sh < n_; ++sh) {
        if (v.usable(member_of(row, sh), row)) {
          writes.push_back({member_of(row, sh), true, row * strip_, shard[sh], len, {}});
        }
      }
      if (!run_batch(v, writes)) {
        // The member that failed the write is out of the array now; the
        // row keeps its bit, so the next assembly tries again.
        spdlog::warn("{}: resync write of row {} failed; the row stays marked dirty", name_, row);
        *complete = false;
      }
    } else {
      const uint64_t c = geo_.copies;
      AlignedBuffer buf(len, std::max<uint32_t>(buffer_alignment_, 64));
      for (size_t g = 0; g < data_per_row_; ++g) {
        size_t src = n_;
        for (uint64_t t = 0; t < c && src == n_; ++t) {
          if (v.usable(g * c + t, row)) src = g * c + t;
        }
        if (src == n_) {
          *complete = false;
          continue;
        }
        std::vector<MemberIo> rd{{src, false, row * strip_, buf.data(), len, {}}};
        if (!run_batch(v, rd)) return Status::io_error(name_ + ": resync read failed");
        std::vector<MemberIo> writes;
        for (uint64_t t = 0; t < c; ++t) {
          const size_t mem = g * c + t;
          if (mem != src && v.usable(mem, row)) {
            writes.push_back({mem, true, row * strip_, buf.data(), len, {}});
          }
        }
        if (!run_batch(v, writes)) {
          // The member that failed the write is out of the array now; the
          // row keeps its bit, so the next assembly tries again.
          spdlog::warn("{}: resync write of row {} failed; the row stays marked dirty", name_, row);
          *complete = false;
        }
      }
    }
  }
  return Status::ok_status();
}

Status RaidArray::rebuild_rows(size_t target, uint64_t r0, uint64_t r1) {
  View v = snapshot();
  v.excluded |= 1ull << target;  // not a source
  const uint64_t len = strip_;
  const uint64_t nrows = r1 - r0;
  if (is_parity()) {
    AlignedBuffer buf(len * n_ * nrows, std::max<uint32_t>(buffer_alignment_, 64));
    std::vector<std::vector<std::byte*>> shards(nrows, std::vector<std::byte*>(n_));
    std::vector<std::vector<int>> missing(nrows);
    std::vector<MemberIo> reads;
    for (uint64_t i = 0; i < nrows; ++i) {
      const uint64_t row = r0 + i;
      for (size_t sh = 0; sh < n_; ++sh) {
        shards[i][sh] = buf.data() + (i * n_ + sh) * len;
        const size_t mem = member_of(row, sh);
        if (v.usable(mem, row)) {
          reads.push_back({mem, false, row * strip_, shards[i][sh], len, {}});
        } else {
          missing[i].push_back(static_cast<int>(sh));
        }
      }
      if (missing[i].size() > m_)
        return Status::io_error(name_ + ": too many members down to rebuild");
    }
    if (!run_batch(v, reads)) return Status::unavailable(name_ + ": rebuild source read failed");
    std::vector<MemberIo> writes;
    for (uint64_t i = 0; i < nrows; ++i) {
      const uint64_t row = r0 + i;
      KVTIER_RETURN_IF_ERROR(reconstruct(len, shards[i].data(), missing[i]));
      const size_t sh = (target + n_ - row % n_) % n_;
      writes.push_back({target, true, row * strip_, shards[i][sh], len, {}});
    }
    if (!run_batch(v, writes)) return Status::io_error(name_ + ": replacement write failed");
  } else {
    const uint64_t c = geo_.copies;
    const size_t g = target / c;
    size_t src = n_;
    for (uint64_t t = 0; t < c && src == n_; ++t) {
      if (g * c + t != target && v.usable(g * c + t, r0)) src = g * c + t;
    }
    if (src == n_) return Status::io_error(name_ + ": no copy left to rebuild from");
    AlignedBuffer buf(len * nrows, std::max<uint32_t>(buffer_alignment_, 64));
    std::vector<MemberIo> rd{{src, false, r0 * strip_, buf.data(), len * nrows, {}}};
    if (!run_batch(v, rd)) return Status::unavailable(name_ + ": rebuild source read failed");
    std::vector<MemberIo> wr{{target, true, r0 * strip_, buf.data(), len * nrows, {}}};
    if (!run_batch(v, wr)) return Status::io_error(name_ + ": replacement write failed");
  }
  return Status::ok_status();
}

Status RaidArray::replace_member(size_t index, std::shared_ptr<BlockDevice> device) {
  if (!device) return Status::invalid_argument("replace: no device");
  if (device->block_size() > block_size_ || block_size_ % device->block_size() != 0 ||
      device->buffer_alignment() > buffer_alignment_) {
    return Status::invalid_argument(
        fmt::format("replace: {} has block size {} / alignment {}, the array uses {}",
                    device->name(), device->block_size(), device->buffer_alignment(), block_size_));
  }
  if (device->capacity() < geo_.data_offset + geo_.rows * strip_) {
    return Status::invalid_argument(fmt::format("replace: {} holds {} bytes, a member needs {}",
                                                device->name(), device->capacity(),
                                                geo_.data_offset + geo_.rows * strip_));
  }
  if (rebuilding_.load()) return Status::failed_precondition("replace: a rebuild is running");
  if (rebuild_thread_.joinable()) rebuild_thread_.join();
  {
    std::lock_guard lk(state_mu_);
    if (index >= n_) return Status::invalid_argument(fmt::format("replace: no member {}", index));
    if (members_[index]->state != MemberState::kFailed) {
      return Status::failed_precondition(
          fmt::format("replace: member {} is {}, only a failed member can be replaced", index,
                      member_state_name(members_[index]->state)));
    }
    members_[index]->dev = device;
    members_[index]->state = MemberState::kRebuilding;
    members_[index]->read_errors = 0;
    members_[index]->write_errors = 0;
    recovery_row_ = 0;
    ++event_;
  }
  KVTIER_RETURN_IF_ERROR(write_bitmap_now());
  KVTIER_RETURN_IF_ERROR(write_superblocks(false));
  rebuilding_ = true;
  rebuild_rows_done_ = 0;
  rebuild_stop_ = false;
  rebuild_thread_ = std::thread([this, index] { rebuild_loop(index); });
  return Status::ok_status();
}

void RaidArray::rebuild_loop(size_t target) {
  const uint64_t step = std::max<uint64_t>(1, (1ull << 20) / strip_);
  bool ok = true;
  for (uint64_t r = 0; r < geo_.rows && !rebuild_stop_.load(); r += step) {
    const uint64_t r1 = std::min(geo_.rows, r + step);
    lock_rows(r, r1 - 1);
    Status st = rebuild_rows(target, r, r1);
    if (st.ok()) {
      std::lock_guard lk(state_mu_);
      recovery_row_ = r1;
    }
    unlock_rows(r, r1 - 1);
    if (!st.ok()) {
      ok = false;
      // A failed replacement write already failed the member; a failed
      // source read leaves it rebuilding only if we stop here, so fail it.
      std::lock_guard lk(state_mu_);
      members_[target]->state = MemberState::kFailed;
      ++event_;
      break;
    }
    rebuild_rows_done_ = r1;
  }
  if (ok && !rebuild_stop_.load()) {
    (void)flush_members();
    std::lock_guard lk(state_mu_);
    if (members_[target]->state == MemberState::kRebuilding) {
      members_[target]->state = MemberState::kActive;
      ++event_;
    }
  } else if (rebuild_stop_.load()) {
    // Closing mid-rebuild: the replacement is not complete; next assembly
    // treats it as failed.
  }
  (void)write_superblocks(false);
  {
    std::lock_guard lk(rebuild_mu_);
    rebuilding_ = false;
  }
  rebuild_cv_.notify_all();
}

bool RaidArray::wait_rebuild(std::chrono::milliseconds timeout) {
  std::unique_lock lk(rebuild_mu_);
  return rebuild_cv_.wait_for(lk, timeout, [this] { return !rebuilding_.load(); });
}

Result<uint64_t> RaidArray::count_inconsistent_rows() {
  uint64_t bad = 0;
  const uint64_t len = strip_;
  AlignedBuffer buf(len * (n_ + (is_parity() ? m_ : 0)), std::max<uint32_t>(buffer_alignment_, 64));
  for (uint64_t row = 0; row < geo_.rows; ++row) {
    lock_rows(row, row);
    View v = snapshot();
    std::vector<MemberIo> reads;
    for (size_t mem = 0; mem < n_; ++mem) {
      if (!v.usable(mem, row)) {
        unlock_rows(row, row);
        return Status::failed_precondition(name_ + ": scrub needs every member");
      }
      const size_t sh = is_parity() ? (mem + n_ - row % n_) % n_ : mem;
      reads.push_back({mem, false, row * strip_, buf.data() + sh * len, len, {}});
    }
    const bool ok = run_batch(v, reads);
    unlock_rows(row, row);
    if (!ok) return Status::io_error(name_ + ": scrub read failed");
    if (is_parity()) {
      const size_t k = n_ - m_;
      std::vector<std::byte*> shard(n_);
      for (size_t sh = 0; sh < k; ++sh) shard[sh] = buf.data() + sh * len;
      for (size_t j = 0; j < m_; ++j) shard[k + j] = buf.data() + (n_ + j) * len;
      encode_parity(len, shard.data());
      if (std::memcmp(buf.data() + k * len, buf.data() + n_ * len, m_ * len) != 0) ++bad;
    } else {
      const uint64_t c = geo_.copies;
      bool same = true;
      for (size_t mem = 0; mem < n_; ++mem) {
        if (mem % c == 0) continue;
        same &= std::memcmp(buf.data() + mem * len, buf.data() + (mem - mem % c) * len, len) == 0;
      }
      if (!same) ++bad;
    }
  }
  return bad;
}

}  // namespace kvtier::blk
