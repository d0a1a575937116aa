#include "blk/dev/uring_device.h"
#include "common/enum_name.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/fs.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

namespace kvtier::blk {

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;
constexpr uint32_t kNoSlot = UINT32_MAX;
// user_data of the NOP that tells the completion thread to exit.
constexpr uint64_t kStopTag = UINT64_MAX;
// The SQE length field is 32 bits and the kernel caps one read/write near
// 2 GiB; longer requests go down in chunks through the short-I/O path.
constexpr uint64_t kMaxChunk = 1ull << 30;
// -EAGAIN/-EINTR retries per sub-request before giving up with kIoError, so a
// persistently refusing kernel cannot make a request loop forever.
constexpr uint32_t kMaxRetries = 64;
constexpr unsigned kMaxQueueDepth = 32768;

std::string errno_text(int err) { return std::strerror(err); }

// A read or write of `len` bytes at `offset`, through registered buffer
// `buf_index` (READ_FIXED / WRITE_FIXED) when it is >= 0.
void prep_read_or_write(io_uring_sqe* sqe, bool write, int fd, std::byte* buf, unsigned len,
                        uint64_t offset, int buf_index) {
  if (buf_index >= 0 && write) {
    io_uring_prep_write_fixed(sqe, fd, buf, len, offset, buf_index);
  } else if (buf_index >= 0) {
    io_uring_prep_read_fixed(sqe, fd, buf, len, offset, buf_index);
  } else if (write) {
    io_uring_prep_write(sqe, fd, buf, len, offset);
  } else {
    io_uring_prep_read(sqe, fd, buf, len, offset);
  }
}

}  // namespace

Result<std::unique_ptr<UringDevice>> UringDevice::open(const UringOptions& options) {
  std::unique_ptr<UringDevice> dev(new UringDevice());
  Status st = dev->init(options);
  if (!st.ok() && options.adopt_fd >= 0 && dev->fd_ != options.adopt_fd) ::close(options.adopt_fd);
  if (!st.ok()) return st;
  return dev;
}

Status UringDevice::open_path(const UringOptions& o) {
  int flags = O_RDWR | O_CLOEXEC;
  if (o.direct) flags |= O_DIRECT;
  if (o.create_size > 0) flags |= O_CREAT;
  // Volumes hold other people's KV data: created readable by the owner only.
  if (fd_ < 0) fd_ = ::open(o.path.c_str(), flags, 0600);
  if (fd_ >= 0) return Status::ok_status();
  const int err = errno;
  if (err == EINVAL && o.direct) {
    return Status::failed_precondition(
        fmt::format("uring:{}: O_DIRECT not supported here: {}", path_, errno_text(err)));
  }
  if (err == ENOENT) {
    return Status::not_found(fmt::format("uring:{}: no such file or device", path_));
  }
  return Status::io_error(fmt::format("uring:{}: open failed: {}", path_, errno_text(err)));
}

Result<uint64_t> UringDevice::size_device(const UringOptions& o) {
  struct stat sb {};
  if (::fstat(fd_, &sb) != 0) {
    return Status::io_error(fmt::format("uring:{}: fstat failed: {}", path_, errno_text(errno)));
  }
  uint64_t size = 0;
  if (S_ISBLK(sb.st_mode)) {
    is_block_device_ = true;
    int lbs = 0;
    if (::ioctl(fd_, BLKSSZGET, &lbs) != 0 || lbs <= 0) {
      return Status::io_error(
          fmt::format("uring:{}: BLKSSZGET failed: {}", path_, errno_text(errno)));
    }
    block_size_ = static_cast<uint32_t>(lbs);
    if (::ioctl(fd_, BLKGETSIZE64, &size) != 0) {
      return Status::io_error(
          fmt::format("uring:{}: BLKGETSIZE64 failed: {}", path_, errno_text(errno)));
    }
    return size;
  }
  if (!S_ISREG(sb.st_mode)) {
    return Status::invalid_argument(
        fmt::format("uring:{}: not a regular file or block device", path_));
  }
  block_size_ = 4096;
  size = static_cast<uint64_t>(sb.st_size);
  if (o.create_size <= size) return size;
  // Preallocate so that first writes do not pay for block allocation
  // (ext4/xfs make unwritten extents, which is fast); fall back to a sparse
  // file where the filesystem cannot preallocate.
  if (::fallocate(fd_, 0, 0, static_cast<off_t>(o.create_size)) != 0) {
    const int err = errno;
    if (err == ENOSPC) {
      return Status::out_of_space(fmt::format("uring:{}: cannot extend to {} bytes: {}", path_,
                                              o.create_size, errno_text(err)));
    }
    if (::ftruncate(fd_, static_cast<off_t>(o.create_size)) != 0) {
      return Status::io_error(fmt::format("uring:{}: cannot extend to {} bytes: {}", path_,
                                          o.create_size, errno_text(errno)));
    }
  }
  return o.create_size;
}

Status UringDevice::setup_ring(const UringOptions& o) {
  io_uring_params params{};
  // SUBMIT_ALL: one bad SQE must not stop the ones behind it from being
  // submitted (each then completes with its own error).
  params.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_CLAMP;
  int ret = io_uring_queue_init_params(queue_depth_, &ring_, &params);
  if (ret == -EINVAL) {
    params = io_uring_params{};
    ret = io_uring_queue_init_params(queue_depth_, &ring_, &params);
  }
  if (ret < 0) {
    return Status::io_error(
        fmt::format("uring:{}: io_uring_queue_init failed: {}", path_, errno_text(-ret)));
  }
  ring_ready_ = true;
  if (ring_.sq.ring_entries < queue_depth_) queue_depth_ = ring_.sq.ring_entries;

  if (o.register_file) {
    ret = io_uring_register_files(&ring_, &fd_, 1);
    fixed_file_ = ret == 0;
    if (!fixed_file_) {
      spdlog::debug("uring:{}: io_uring_register_files failed ({}), using plain fd", path_,
                    errno_text(-ret));
    }
  }
  // An empty table now, filled by register_buffer(); needs Linux 5.19+.
  buffers_sparse_ = io_uring_register_buffers_sparse(&ring_, kMaxRegisteredBuffers) == 0;
  registered_.resize(kMaxRegisteredBuffers);
  return Status::ok_status();
}

Status UringDevice::init(const UringOptions& o) {
  if (o.path.empty()) return Status::invalid_argument("uring: empty path");
  if (o.adopt_fd >= 0) fd_ = o.adopt_fd;  // owned from here: the destructor closes it
  if (o.queue_depth == 0 || o.queue_depth > kMaxQueueDepth) {
    return Status::invalid_argument(fmt::format("uring:{}: queue_depth {} not in [1, {}]", o.path,
                                                o.queue_depth, kMaxQueueDepth));
  }
  path_ = o.path;
  queue_depth_ = o.queue_depth;
  KVTIER_RETURN_IF_ERROR(open_path(o));
  auto size = size_device(o);
  if (!size.ok()) return size.status();
  capacity_ = align_down(*size, block_size_);
  if (capacity_ == 0) {
    return Status::invalid_argument(
        fmt::format("uring:{}: too small ({} bytes; need at least one {}-byte block)", path_, *size,
                    block_size_));
  }
  buffer_alignment_ = o.direct ? std::max<uint32_t>(kDirectIoAlignment, block_size_) : 1;
  KVTIER_RETURN_IF_ERROR(setup_ring(o));

  slots_.resize(queue_depth_);
  for (uint32_t i = 0; i < queue_depth_; ++i) slots_[i].next_free = i + 1;
  slots_.back().next_free = kNoSlot;
  free_head_ = 0;

  completer_ = std::thread([this] { completion_loop(); });
  return Status::ok_status();
}

UringDevice::~UringDevice() {
  if (completer_.joinable()) {
    {
      std::unique_lock lk(idle_mu_);
      idle_cv_.wait(lk, [this] { return outstanding_.load(std::memory_order_acquire) == 0; });
    }
    {
      std::lock_guard lk(mu_);
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      // The ring is idle, so the SQ has room.
      io_uring_prep_nop(sqe);
      io_uring_sqe_set_data64(sqe, kStopTag);
      submit_locked();
    }
    completer_.join();
  }
  // queue_exit also drops the file and buffer registrations.
  if (ring_ready_) io_uring_queue_exit(&ring_);
  if (fd_ >= 0) ::close(fd_);
}

const char* UringDevice::op_name(Op op) {
  static constexpr const char* kNames[] = {"read", "write", "fsync", "punch-hole", "readv"};
  return enum_name<Op::kReadv>(op, kNames, "?");
}

void UringDevice::read(uint64_t offset, MutableByteView dst, IoCallback cb) {
  Status st = check_io(offset, dst.size(), dst.data());
  if (!st.ok()) return io_.fail(cb, std::move(st));
  enqueue(Request{Op::kRead, dst.data(), offset, dst.size(), std::move(cb)});
}

void UringDevice::readv(uint64_t offset, std::span<const MutableByteView> parts, IoCallback cb) {
  if (parts.empty()) return io_.fail(cb, Status::invalid_argument(name() + ": readv of nothing"));
  uint64_t total = 0;
  for (const auto& p : parts) total += p.size();
  if (parts.size() > kMaxIov || total > kMaxChunk) {
    return BlockDevice::readv(offset, parts, std::move(cb));
  }
  Request r{Op::kReadv, nullptr, offset, total, std::move(cb)};
  uint64_t pos = offset;
  for (const auto& p : parts) {
    Status st = check_io(pos, p.size(), p.data());
    if (!st.ok()) return io_.fail(r.cb, std::move(st));
    r.iov[r.iov_count++] = iovec{p.data(), p.size()};
    pos += p.size();
  }
  enqueue(std::move(r));
}

void UringDevice::write(uint64_t offset, ByteView src, IoCallback cb) {
  Status st = check_io(offset, src.size(), src.data());
  if (!st.ok()) return io_.fail(cb, std::move(st));
  // The kernel only reads from the buffer; the cast lets one Request type
  // carry both directions.
  enqueue(
      Request{Op::kWrite, const_cast<std::byte*>(src.data()), offset, src.size(), std::move(cb)});
}

void UringDevice::flush(IoCallback cb) {
  enqueue(Request{Op::kFsync, nullptr, 0, 0, std::move(cb)});
}

void UringDevice::trim(uint64_t offset, uint64_t length, IoCallback cb) {
  Status st = check_io(offset, length, nullptr);
  if (!st.ok()) return io_.fail(cb, std::move(st));
  if (!is_block_device_) {
    enqueue(Request{Op::kPunchHole, nullptr, offset, length, std::move(cb)});
    return;
  }
  uint64_t range[2] = {offset, length};
  if (::ioctl(fd_, BLKDISCARD, range) != 0) {
    return io_.fail(cb, Status::io_error(fmt::format("{}: BLKDISCARD [{}, +{}) failed: {}", name(),
                                                     offset, length, errno_text(errno))));
  }
  io_.trims.fetch_add(1, kRelaxed);
  cb(Status::ok_status());
}

void UringDevice::enqueue(Request req) {
  outstanding_.fetch_add(1, kRelaxed);
  std::lock_guard lk(mu_);
  // FIFO: while anything waits in the backlog, newcomers queue behind it.
  if (free_head_ == kNoSlot || !backlog_.empty()) {
    backlog_.push_back(std::move(req));
    backlogged_.fetch_add(1, kRelaxed);
    return;
  }
  const uint32_t idx = free_head_;
  free_head_ = slots_[idx].next_free;
  start_slot_locked(idx, std::move(req));
  submit_locked();
}

void UringDevice::start_slot_locked(uint32_t idx, Request&& req) {
  Slot& s = slots_[idx];
  s.req = std::move(req);
  s.total = s.req.remaining;
  s.retries = 0;
  s.buf_index = -1;
  if (any_registered_ && (s.req.op == Op::kRead || s.req.op == Op::kWrite)) {
    const std::byte* b = s.req.buf;
    const std::byte* e = b + s.req.remaining;
    for (size_t i = 0; i < registered_.size(); ++i) {
      const Registered& r = registered_[i];
      if (r.begin != r.end && r.begin <= b && e <= r.end) {
        s.buf_index = static_cast<int>(i);
        fixed_ios_.fetch_add(1, kRelaxed);
        break;
      }
    }
  }
  prep_locked(idx);
}

void UringDevice::prep_locked(uint32_t idx) {
  Slot& s = slots_[idx];
  Request& r = s.req;
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  while (sqe == nullptr) {
    // Each slot owns at most one SQE and the SQ has >= queue_depth entries, so
    // this only happens if an earlier submit left SQEs behind; push them out.
    submit_locked();
    sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) std::this_thread::yield();
  }
  const int fd = fixed_file_ ? 0 : fd_;
  if (s.buf_index >= 0) {
    // A resubmission after unregister_buffer() must not name a dead index.
    const Registered& reg = registered_[s.buf_index];
    if (!(reg.begin <= r.buf && r.buf + r.remaining <= reg.end)) s.buf_index = -1;
  }
  const auto len = static_cast<unsigned>(std::min(r.remaining, kMaxChunk));
  switch (r.op) {
    case Op::kRead:
    case Op::kWrite:
      prep_read_or_write(sqe, r.op == Op::kWrite, fd, r.buf, len, r.offset, s.buf_index);
      break;
    case Op::kReadv:
      // The iovecs live in the slot until the completion.
      io_uring_prep_readv(sqe, fd, &r.iov[r.iov_first], r.iov_count - r.iov_first, r.offset);
      break;
    case Op::kFsync:
      io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
      break;
    case Op::kPunchHole:
      io_uring_prep_fallocate(sqe, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                              static_cast<off_t>(r.offset), static_cast<off_t>(r.remaining));
      break;
  }
  if (fixed_file_) sqe->flags |= IOSQE_FIXED_FILE;
  io_uring_sqe_set_data64(sqe, idx);
}

void UringDevice::submit_locked() {
  for (int attempt = 0;; ++attempt) {
    const int ret = io_uring_submit(&ring_);
    if (ret >= 0) return;
    if ((ret == -EAGAIN || ret == -EINTR || ret == -EBUSY) && attempt < 1000) {
      if (attempt > 10) std::this_thread::yield();
      continue;
    }
    // Unsubmitted SQEs stay in the SQ and go out with the next submit.
    spdlog::error("{}: io_uring_submit failed: {}", name(), errno_text(-ret));
    return;
  }
}

void UringDevice::handle_cqe_locked(uint64_t user_data, int res, std::vector<Completed>& done) {
  if (user_data >= slots_.size()) {
    spdlog::error("{}: CQE with unknown user_data {}", name(), user_data);
    return;
  }
  const auto idx = static_cast<uint32_t>(user_data);
  Slot& s = slots_[idx];
  Request& r = s.req;
  if ((res == -EAGAIN || res == -EINTR) && s.retries < kMaxRetries) {
    ++s.retries;
    resubmits_.fetch_add(1, kRelaxed);
    prep_locked(idx);
    return;
  }
  if (res < 0) {
    finish_slot_locked(
        idx,
        Status::io_error(fmt::format("{}: {} at offset {} (+{} bytes) failed: {}", name(),
                                     op_name(r.op), r.offset, r.remaining, errno_text(-res))),
        done);
    return;
  }
  if (r.op == Op::kRead || r.op == Op::kWrite || r.op == Op::kReadv) {
    const auto n = std::min<uint64_t>(static_cast<uint64_t>(res), r.remaining);
    if (n == 0) {
      // Within capacity a zero-byte transfer means the file shrank or the
      // device went away; retrying would spin.
      finish_slot_locked(
          idx,
          Status::io_error(fmt::format("{}: {} at offset {} made no progress "
                                       "({} of {} bytes left)",
                                       name(), op_name(r.op), r.offset, r.remaining, s.total)),
          done);
      return;
    }
    if (r.op == Op::kReadv) {
      // Skip the buffers filled and trim the one partly filled.
      uint64_t left = n;
      while (left > 0 && r.iov_first < r.iov_count) {
        iovec& v = r.iov[r.iov_first];
        if (left >= v.iov_len) {
          left -= v.iov_len;
          ++r.iov_first;
        } else {
          v.iov_base = static_cast<std::byte*>(v.iov_base) + left;
          v.iov_len -= left;
          left = 0;
        }
      }
    } else {
      r.buf += n;
    }
    r.offset += n;
    r.remaining -= n;
    if (r.remaining > 0) {
      // Short transfer (or a chunk of a > 1 GiB request): continue with the rest.
      s.retries = 0;
      resubmits_.fetch_add(1, kRelaxed);
      prep_locked(idx);
      return;
    }
  }
  finish_slot_locked(idx, Status::ok_status(), done);
}

void UringDevice::finish_slot_locked(uint32_t idx, Status st, std::vector<Completed>& done) {
  Slot& s = slots_[idx];
  if (!st.ok()) {
    io_.errors.fetch_add(1, kRelaxed);
  } else {
    switch (s.req.op) {
      case Op::kRead:
      case Op::kReadv:
        io_.reads.fetch_add(1, kRelaxed);
        io_.bytes_read.fetch_add(s.total, kRelaxed);
        break;
      case Op::kWrite:
        io_.writes.fetch_add(1, kRelaxed);
        io_.bytes_written.fetch_add(s.total, kRelaxed);
        break;
      case Op::kFsync:
        io_.flushes.fetch_add(1, kRelaxed);
        break;
      case Op::kPunchHole:
        io_.trims.fetch_add(1, kRelaxed);
        break;
    }
  }
  done.push_back(Completed{std::move(s.req.cb), std::move(st)});
  s.req.cb = nullptr;
  if (!backlog_.empty()) {
    Request next = std::move(backlog_.front());
    backlog_.pop_front();
    start_slot_locked(idx, std::move(next));
  } else {
    s.next_free = free_head_;
    free_head_ = idx;
  }
}

void UringDevice::completion_loop() {
  std::vector<Completed> done;
  // At most one completion per slot per batch: refilled slots are only
  // submitted after the batch.
  done.reserve(queue_depth_ + 1);
  for (;;) {
    io_uring_cqe* cqe = nullptr;
    const int ret = io_uring_wait_cqe(&ring_, &cqe);
    if (ret < 0) {
      if (ret != -EINTR && ret != -EAGAIN) {
        spdlog::error("{}: io_uring_wait_cqe failed: {}", name(), errno_text(-ret));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      continue;
    }
    bool stop = false;
    {
      std::lock_guard lk(mu_);
      unsigned head = 0;
      unsigned n = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++n;
        const uint64_t ud = io_uring_cqe_get_data64(cqe);
        if (ud == kStopTag) {
          stop = true;
        } else {
          handle_cqe_locked(ud, cqe->res, done);
        }
      }
      io_uring_cq_advance(&ring_, n);
      // Resubmissions and backlog refills prepared above go out in one call.
      if (io_uring_sq_ready(&ring_) > 0) submit_locked();
    }
    // Callbacks run without the lock so that they can submit more I/O.
    for (Completed& c : done) c.cb(std::move(c.status));
    const size_t n = done.size();
    done.clear();  // destroys captured state before the destructor may proceed
    if (n > 0) callback_done(n);
    if (stop) return;
  }
}

void UringDevice::callback_done(size_t n) {
  if (outstanding_.fetch_sub(n, std::memory_order_acq_rel) == n) {
    std::lock_guard lk(idle_mu_);
    idle_cv_.notify_all();
  }
}

Result<int> UringDevice::register_buffer(MutableByteView buf) {
  if (buf.empty()) return Status::invalid_argument(name() + ": register_buffer of empty buffer");
  if (!buffers_sparse_) {
    return Status::failed_precondition(name() + ": kernel lacks sparse registered-buffer tables");
  }
  std::lock_guard lk(mu_);
  size_t idx = registered_.size();
  for (size_t i = 0; i < registered_.size(); ++i) {
    if (registered_[i].begin == registered_[i].end) {
      idx = i;
      break;
    }
  }
  if (idx == registered_.size()) {
    return Status::out_of_space(
        fmt::format("{}: all {} registered-buffer slots in use", name(), registered_.size()));
  }
  iovec iov{buf.data(), buf.size()};
  __u64 tag = 0;
  const int ret =
      io_uring_register_buffers_update_tag(&ring_, static_cast<unsigned>(idx), &iov, &tag, 1);
  if (ret < 0) {
    return Status::io_error(fmt::format("{}: registering {} bytes failed: {}{}", name(), buf.size(),
                                        errno_text(-ret),
                                        ret == -ENOMEM ? " (RLIMIT_MEMLOCK?)" : ""));
  }
  registered_[idx] = Registered{buf.data(), buf.data() + buf.size()};
  any_registered_ = true;
  return static_cast<int>(idx);
}

Status UringDevice::unregister_buffer(int index) {
  std::lock_guard lk(mu_);
  if (index < 0 || static_cast<size_t>(index) >= registered_.size() ||
      registered_[index].begin == registered_[index].end) {
    return Status::invalid_argument(fmt::format("{}: no registered buffer {}", name(), index));
  }
  iovec iov{nullptr, 0};
  __u64 tag = 0;
  const int ret =
      io_uring_register_buffers_update_tag(&ring_, static_cast<unsigned>(index), &iov, &tag, 1);
  if (ret < 0) {
    return Status::io_error(
        fmt::format("{}: unregistering buffer {} failed: {}", name(), index, errno_text(-ret)));
  }
  registered_[index] = Registered{};
  any_registered_ = std::any_of(registered_.begin(), registered_.end(),
                                [](const Registered& r) { return r.begin != r.end; });
  return Status::ok_status();
}

DeviceStats UringDevice::stats() const { return io_.snapshot(); }

DeviceCapabilities UringDevice::capabilities() const {
  DeviceCapabilities c;
  c.registered_buffers = buffers_sparse_;  // register_buffer() needs a sparse table
  c.vectored_reads = true;                 // up to kMaxIov parts
  c.max_vectored_parts = kMaxIov;
  c.direct_reads = true;  // the kernel reads into the caller's pages
  c.alignment = buffer_alignment_;
  return c;
}

}  // namespace kvtier::blk
