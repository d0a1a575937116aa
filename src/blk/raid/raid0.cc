#include "blk/raid/raid0.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <utility>

namespace kvtier::blk {

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

std::string make_name(const std::vector<std::shared_ptr<BlockDevice>>& members) {
  std::string n = "raid0[";
  for (size_t i = 0; i < members.size(); ++i) {
    if (i > 0) n += ',';
    n += members[i]->name();
  }
  n += ']';
  return n;
}

}  // namespace

// Join state of one parent request. `pending` starts at 1, a guard that the
// submitting thread drops after issuing every piece, so pieces that complete
// inline cannot finish the parent early.
struct Raid0::Parent {
  Raid0* raid = nullptr;
  Op op = Op::kRead;
  uint64_t bytes = 0;
  std::atomic<uint32_t> pending{1};
  std::atomic<bool> failed{false};
  Status first_error;  // written only by the piece that set `failed`
  IoCallback cb;
};

Result<std::unique_ptr<Raid0>> Raid0::create(std::vector<std::shared_ptr<BlockDevice>> members,
                                             uint64_t strip_bytes) {
  if (members.empty()) return Status::invalid_argument("raid0: no members");
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == nullptr) {
      return Status::invalid_argument(fmt::format("raid0: member {} is null", i));
    }
  }
  const uint32_t member_bs = members[0]->block_size();
  uint32_t alignment = 1;
  uint64_t min_cap = std::numeric_limits<uint64_t>::max();
  for (const auto& m : members) {
    if (m->block_size() != member_bs) {
      return Status::invalid_argument(
          fmt::format("raid0: members have different block sizes ({} has {}, {} has {})",
                      members[0]->name(), member_bs, m->name(), m->block_size()));
    }
    alignment = std::max(alignment, m->buffer_alignment());
    min_cap = std::min(min_cap, m->capacity());
  }
  const uint32_t bs = std::max(member_bs, alignment);
  if (bs % member_bs != 0 || bs % alignment != 0) {
    return Status::invalid_argument(fmt::format(
        "raid0: block size {} and buffer alignment {} are not compatible", member_bs, alignment));
  }
  if (strip_bytes == 0 || strip_bytes % bs != 0) {
    return Status::invalid_argument(
        fmt::format("raid0: strip {} is not a non-zero multiple of {}", strip_bytes, bs));
  }
  const uint64_t strips_per_member = min_cap / strip_bytes;
  const uint64_t capacity = strips_per_member * strip_bytes * members.size();
  if (capacity == 0) {
    return Status::invalid_argument(fmt::format(
        "raid0: smallest member ({} bytes) holds no whole strip of {}", min_cap, strip_bytes));
  }
  return std::unique_ptr<Raid0>(
      new Raid0(std::move(members), strip_bytes, bs, alignment, capacity));
}

Raid0::Raid0(std::vector<std::shared_ptr<BlockDevice>> members, uint64_t strip, uint32_t block_size,
             uint32_t buffer_alignment, uint64_t capacity)
    : FixedGeometryDevice(block_size, buffer_alignment, capacity),
      members_(std::move(members)),
      strip_(strip),
      name_(make_name(members_)) {}

Raid0::~Raid0() {
  std::unique_lock lk(idle_mu_);
  idle_cv_.wait(lk, [this] { return outstanding_.load(std::memory_order_acquire) == 0; });
}

void Raid0::release_parent() {
  std::lock_guard lk(idle_mu_);
  if (outstanding_.fetch_sub(1, std::memory_order_acq_rel) == 1) idle_cv_.notify_all();
}

Raid0::Location Raid0::locate(uint64_t offset) const {
  const uint64_t n = members_.size();
  const uint64_t stripe = offset / strip_;
  return Location{static_cast<size_t>(stripe % n), (stripe / n) * strip_ + offset % strip_};
}

Raid0::Parent* Raid0::new_parent(Op op, uint64_t bytes, IoCallback cb) {
  outstanding_.fetch_add(1, kRelaxed);
  auto* p = new Parent();
  p->raid = this;
  p->op = op;
  p->bytes = bytes;
  p->cb = std::move(cb);
  return p;
}

void Raid0::piece_done(Parent* p, Status st) {
  if (!st.ok() && !p->failed.exchange(true, std::memory_order_acq_rel)) {
    p->first_error = std::move(st);
  }
  // acq_rel orders the winner's write of first_error before the last
  // decrement, which reads it.
  if (p->pending.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  const bool ok = !p->failed.load(std::memory_order_acquire);
  Raid0* raid = p->raid;
  raid->finish(p->op, p->bytes, ok);
  IoCallback cb = std::move(p->cb);
  Status result = ok ? Status::ok_status() : std::move(p->first_error);
  delete p;
  // Released before the callback, which may destroy the array.
  raid->release_parent();
  cb(std::move(result));
}

void Raid0::finish(Op op, uint64_t bytes, bool ok) {
  if (!ok) {
    io_.errors.fetch_add(1, kRelaxed);
    return;
  }
  switch (op) {
    case Op::kRead:
      io_.reads.fetch_add(1, kRelaxed);
      io_.bytes_read.fetch_add(bytes, kRelaxed);
      break;
    case Op::kWrite:
      io_.writes.fetch_add(1, kRelaxed);
      io_.bytes_written.fetch_add(bytes, kRelaxed);
      break;
    case Op::kFlush:
      io_.flushes.fetch_add(1, kRelaxed);
      break;
    case Op::kTrim:
      io_.trims.fetch_add(1, kRelaxed);
      break;
  }
}

void Raid0::read(uint64_t offset, MutableByteView dst, IoCallback cb) {
  Status st = check_io(offset, dst.size(), dst.data());
  if (!st.ok()) return io_.fail(cb, std::move(st));
  submit_rw(Op::kRead, offset, dst.data(), dst.size(), std::move(cb));
}

void Raid0::write(uint64_t offset, ByteView src, IoCallback cb) {
  Status st = check_io(offset, src.size(), src.data());
  if (!st.ok()) return io_.fail(cb, std::move(st));
  // Members only read from the buffer; one code path serves both directions.
  submit_rw(Op::kWrite, offset, const_cast<std::byte*>(src.data()), src.size(), std::move(cb));
}

void Raid0::submit_rw(Op op, uint64_t offset, std::byte* buf, uint64_t len, IoCallback cb) {
  Parent* p = new_parent(op, len, std::move(cb));
  const uint64_t end = offset + len;
  uint64_t pos = offset;
  while (pos < end) {
    const uint64_t within = pos % strip_;
    const uint64_t n = std::min(strip_ - within, end - pos);
    const Location loc = locate(pos);
    std::byte* piece = buf + (pos - offset);
    pos += n;
    p->pending.fetch_add(1, kRelaxed);
    auto done = [p](Status s) { piece_done(p, std::move(s)); };
    if (op == Op::kRead) {
      members_[loc.member]->read(loc.offset, MutableByteView(piece, n), done);
    } else {
      members_[loc.member]->write(loc.offset, ByteView(piece, n), done);
    }
  }
  piece_done(p, Status::ok_status());  // drop the guard
}

void Raid0::flush(IoCallback cb) {
  Parent* p = new_parent(Op::kFlush, 0, std::move(cb));
  for (const auto& m : members_) {
    p->pending.fetch_add(1, kRelaxed);
    m->flush([p](Status s) { piece_done(p, std::move(s)); });
  }
  piece_done(p, Status::ok_status());
}

void Raid0::trim(uint64_t offset, uint64_t length, IoCallback cb) {
  Status st = check_io(offset, length, nullptr);
  if (!st.ok()) return io_.fail(cb, std::move(st));
  // Each member's share of a contiguous logical range is itself contiguous: a
  // tail of one strip, whole strips, then a head of a strip.
  const uint64_t n = members_.size();
  const uint64_t first_stripe = offset / strip_;
  const uint64_t last_byte = offset + length - 1;
  const uint64_t last_stripe = last_byte / strip_;
  Parent* p = new_parent(Op::kTrim, length, std::move(cb));
  for (uint64_t m = 0; m < n; ++m) {
    uint64_t lo = 0;
    if (first_stripe % n == m) {
      lo = (first_stripe / n) * strip_ + offset % strip_;
    } else {
      const uint64_t s = first_stripe + (m + n - first_stripe % n) % n;
      if (s > last_stripe) continue;  // the range never reaches this member
      lo = (s / n) * strip_;
    }
    uint64_t hi = 0;
    if (last_stripe % n == m) {
      hi = (last_stripe / n) * strip_ + last_byte % strip_ + 1;
    } else {
      const uint64_t s = last_stripe - (last_stripe % n + n - m) % n;
      hi = (s / n) * strip_ + strip_;
    }
    p->pending.fetch_add(1, kRelaxed);
    members_[m]->trim(lo, hi - lo, [p](Status s) { piece_done(p, std::move(s)); });
  }
  piece_done(p, Status::ok_status());
}

DeviceStats Raid0::stats() const { return io_.snapshot(); }

DeviceCapabilities Raid0::capabilities() const {
  DeviceCapabilities c;
  c.registered_buffers = true;
  for (const auto& m : members_) {
    c.registered_buffers = c.registered_buffers && m->capabilities().registered_buffers;
  }
  // Not offered: a caller reads straight into its buffer only where that
  // buffer can be registered for the read (so the read can be given up at
  // its deadline), and here that is one registration per member per read.
  // In the study (bench_study_disk_ratio) that made case F slower than
  // staging into buffers registered once. The remote-tier issue revisits it.
  c.direct_reads = false;
  c.alignment = buffer_alignment_;
  return c;
}

Result<int> Raid0::register_buffer(MutableByteView buf) {
  std::vector<int> handles;
  for (const auto& m : members_) {
    auto h = m->register_buffer(buf);
    if (!h.ok()) {
      for (size_t i = 0; i < handles.size(); ++i) (void)members_[i]->unregister_buffer(handles[i]);
      return h.status();
    }
    handles.push_back(*h);
  }
  std::lock_guard lock(registered_mu_);
  for (size_t i = 0; i < registered_.size(); ++i) {
    if (registered_[i].empty()) {
      registered_[i] = std::move(handles);
      return static_cast<int>(i);
    }
  }
  registered_.push_back(std::move(handles));
  return static_cast<int>(registered_.size() - 1);
}

Status Raid0::unregister_buffer(int handle) {
  std::vector<int> handles;
  {
    std::lock_guard lock(registered_mu_);
    if (handle < 0 || static_cast<size_t>(handle) >= registered_.size() ||
        registered_[handle].empty()) {
      return Status::invalid_argument(name_ + ": no registered buffer " + std::to_string(handle));
    }
    handles.swap(registered_[handle]);
  }
  Status first;
  for (size_t i = 0; i < handles.size(); ++i) {
    Status st = members_[i]->unregister_buffer(handles[i]);
    if (first.ok() && !st.ok()) first = st;
  }
  return first;
}

}  // namespace kvtier::blk
