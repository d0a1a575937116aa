// RaidArray: array state, superblock writes and the write-intent bitmap.
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

// ---------------------------------------------------------------- state

RaidArray::View RaidArray::snapshot() const {
  std::lock_guard lk(state_mu_);
  View v;
  for (const auto& m : members_) {
    v.dev.push_back(m->dev);
    v.state.push_back(m->state);
  }
  v.recovery_row = recovery_row_;
  return v;
}

ArrayState RaidArray::state_locked() const {
  // Callers hold state_mu_ or own the array exclusively.
  size_t down = 0;
  bool group_lost = false;
  for (size_t i = 0; i < n_; ++i) {
    if (members_[i]->state != MemberState::kActive) ++down;
  }
  if (m_ == 0) {
    for (size_t g = 0; g < n_ / geo_.copies; ++g) {
      bool any = false;
      for (size_t c = 0; c < geo_.copies; ++c) {
        any |= members_[g * geo_.copies + c]->state == MemberState::kActive;
      }
      group_lost |= !any;
    }
    if (group_lost) return ArrayState::kFailed;
  } else if (down > m_) {
    return ArrayState::kFailed;
  }
  return down == 0 ? ArrayState::kOnline : ArrayState::kDegraded;
}

RaidStatus RaidArray::status() const {
  RaidStatus s;
  {
    std::lock_guard lk(state_mu_);
    s.state = state_locked();
    for (const auto& m : members_) {
      RaidMemberInfo info;
      info.device = m->dev ? m->dev->name() : "(missing)";
      info.state = m->state;
      info.read_errors = m->read_errors.load(kRelaxed);
      info.write_errors = m->write_errors.load(kRelaxed);
      s.members.push_back(std::move(info));
    }
  }
  s.rows = geo_.rows;
  s.rebuilding = rebuilding_.load();
  s.rebuild_rows_done = rebuild_rows_done_.load();
  s.resynced_rows = resynced_rows_;
  {
    std::lock_guard lk(const_cast<std::mutex&>(bitmap_mu_));
    for (uint8_t b : bits_) s.dirty_bits += static_cast<uint64_t>(__builtin_popcount(b));
  }
  s.parity_cpu_ns = parity_cpu_ns_.load(kRelaxed);
  s.parity_bytes = parity_bytes_.load(kRelaxed);
  return s;
}

std::vector<std::shared_ptr<BlockDevice>> RaidArray::member_devices() const {
  return snapshot().dev;
}

void RaidArray::note_error(size_t member, bool write) {
  bool fail = false;
  {
    std::lock_guard lk(state_mu_);
    Member& m = *members_[member];
    if (write) {
      m.write_errors.fetch_add(1, kRelaxed);
      fail = m.state != MemberState::kFailed;
    } else {
      const uint64_t e = m.read_errors.fetch_add(1, kRelaxed) + 1;
      fail = m.state != MemberState::kFailed && e > runtime_.read_error_budget;
    }
    if (fail) {
      m.state = MemberState::kFailed;
      ++event_;
    }
  }
  if (fail) (void)write_superblocks(false);
}

Status RaidArray::fail_member(size_t index) {
  {
    std::lock_guard lk(state_mu_);
    if (index >= n_) return Status::invalid_argument(fmt::format("no member {}", index));
    if (members_[index]->state == MemberState::kFailed) return Status::ok_status();
    members_[index]->state = MemberState::kFailed;
    ++event_;
  }
  return write_superblocks(false);
}

Status RaidArray::write_superblocks(bool clean) {
  std::lock_guard sl(sb_mu_);
  RaidSuperblock sb;
  sb.uuid = uuid_;
  sb.level = static_cast<uint32_t>(level_);
  sb.member_count = static_cast<uint32_t>(n_);
  sb.block_size = block_size_;
  sb.copies = geo_.copies;
  sb.clean = clean ? 1 : 0;
  sb.strip_bytes = strip_;
  sb.data_offset = geo_.data_offset;
  sb.rows = geo_.rows;
  sb.bitmap_offset = geo_.bitmap_offset;
  sb.bitmap_area_bytes = geo_.bitmap_area;
  sb.rows_per_bit = geo_.rows_per_bit;
  sb.name = label_;
  std::vector<std::shared_ptr<BlockDevice>> targets;
  {
    std::lock_guard lk(state_mu_);
    sb.event = event_;
    sb.recovery_row = recovery_row_;
    for (size_t i = 0; i < n_; ++i) {
      sb.states[i] = members_[i]->state;
      targets.push_back(members_[i]->state == MemberState::kFailed ? nullptr : members_[i]->dev);
    }
  }
  AlignedBuffer buf(kRaidSuperblockBytes, std::max<uint32_t>(buffer_alignment_, 4096));
  Status first;
  size_t written = 0;
  for (size_t i = 0; i < n_; ++i) {
    if (!targets[i]) continue;
    sb.member_index = static_cast<uint32_t>(i);
    sb.encode(buf.view());
    Status st = targets[i]->write_sync(0, buf.view());
    if (st.ok()) st = targets[i]->flush_sync();
    if (st.ok()) {
      ++written;
    } else if (first.ok()) {
      first = st;
    }
  }
  return written > 0 ? Status::ok_status() : first;
}

Status RaidArray::flush_members() {
  const View v = snapshot();
  Status first;
  for (size_t i = 0; i < n_; ++i) {
    if (v.state[i] == MemberState::kFailed || !v.dev[i]) continue;
    Status st = v.dev[i]->flush_sync();
    if (!st.ok()) {
      note_error(i, true);
      if (first.ok()) first = st;
    }
  }
  return first;
}

// ---------------------------------------------------------------- bitmap

Status RaidArray::write_bitmap_now() {
  const uint64_t nbits = inflight_.size();
  std::vector<uint8_t> bits;
  {
    std::lock_guard lk(bitmap_mu_);
    bits = bits_;
  }
  AlignedBuffer buf(geo_.bitmap_area, std::max<uint32_t>(buffer_alignment_, 4096));
  encode_bitmap(bits, nbits, buf.view());
  // Only the blocks that hold bits need writing.
  const uint64_t used = align_up(kBitmapHeaderBytes + bits.size(), block_size_);
  const View v = snapshot();
  size_t ok = 0;
  Status first;
  for (size_t i = 0; i < n_; ++i) {
    if (v.state[i] == MemberState::kFailed || !v.dev[i]) continue;
    Status st = v.dev[i]->write_sync(geo_.bitmap_offset, buf.subview(0, used));
    if (st.ok()) st = v.dev[i]->flush_sync();
    if (st.ok()) {
      ++ok;
    } else if (first.ok()) {
      first = st;
    }
  }
  return ok > 0 ? Status::ok_status() : first;
}

void RaidArray::persist_bitmap_until(uint64_t gen) {
  std::lock_guard pl(persist_mu_);
  if (durable_gen_ >= gen) return;
  uint64_t snap_gen = 0;
  {
    std::lock_guard lk(bitmap_mu_);
    snap_gen = gen_;
  }
  (void)write_bitmap_now();  // a failure shows up as member errors on data I/O
  durable_gen_ = std::max(durable_gen_, snap_gen);
}

void RaidArray::mark_rows(uint64_t r0, uint64_t r1) {
  uint64_t need = 0;
  {
    std::lock_guard lk(bitmap_mu_);
    for (uint64_t b = r0 / geo_.rows_per_bit; b <= r1 / geo_.rows_per_bit; ++b) {
      ++inflight_[b];
      touched_[b] = 1;
      if (!((bits_[b / 8] >> (b % 8)) & 1)) {
        bits_[b / 8] |= static_cast<uint8_t>(1u << (b % 8));
        bit_gen_[b] = ++gen_;
      }
      need = std::max(need, bit_gen_[b]);
    }
  }
  bool durable = false;
  {
    std::lock_guard pl(persist_mu_);
    durable = durable_gen_ >= need;
  }
  if (!durable) persist_bitmap_until(need);
}

void RaidArray::unmark_rows(uint64_t r0, uint64_t r1) {
  std::lock_guard lk(bitmap_mu_);
  for (uint64_t b = r0 / geo_.rows_per_bit; b <= r1 / geo_.rows_per_bit; ++b) --inflight_[b];
}

void RaidArray::clear_idle_bits_after(const std::function<void()>& flush_members_fn) {
  if (keep_dirty_) return flush_members_fn();
  {
    std::lock_guard lk(bitmap_mu_);
    std::fill(touched_.begin(), touched_.end(), 0);
  }
  flush_members_fn();
  bool changed = false;
  {
    std::lock_guard lk(bitmap_mu_);
    for (uint64_t b = 0; b < inflight_.size(); ++b) {
      const bool set = (bits_[b / 8] >> (b % 8)) & 1;
      // Bits written to after the flush began may cover unflushed bytes.
      if (set && inflight_[b] == 0 && !touched_[b]) {
        bits_[b / 8] &= static_cast<uint8_t>(~(1u << (b % 8)));
        changed = true;
      }
    }
    if (changed) ++gen_;
  }
  if (changed) {
    std::lock_guard pl(persist_mu_);
    (void)write_bitmap_now();
  }
}

}  // namespace kvtier::blk
