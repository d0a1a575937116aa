// UringDevice: the BlockDevice for real storage. It drives a regular file or a
// raw block device (NVMe namespace, partition) through one io_uring, normally
// with O_DIRECT so that the page cache neither doubles memory use nor hides
// device latency. This is the disk tier's data path, so the hot path avoids
// heap allocations: each in-flight request lives in a preallocated slot whose
// index is the SQE's user_data.
//
// Threading: any thread may submit (a mutex guards the submission queue); one
// completion thread per device reaps CQEs and runs the callbacks. At most
// queue_depth requests are in the ring; further requests wait in a FIFO
// backlog and are submitted as completions free slots, so submitters never
// block on a full ring and nothing is dropped.
#pragma once

#include <liburing.h>

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "blk/block_device.h"
#include "common/buffer.h"
#include "common/status.h"

namespace kvtier::blk {

struct UringOptions {
  std::string path;
  // If > 0 and `path` is (or will be created as) a regular file, the file is
  // created if missing and extended to at least this many bytes.
  uint64_t create_size = 0;
  // Maximum requests in the ring at once (the device queue depth).
  unsigned queue_depth = 64;
  // Open with O_DIRECT (buffers must then be 4096-aligned).
  bool direct = true;
  // Register the fd with the ring (IOSQE_FIXED_FILE) to save a file-table
  // lookup per request; falls back to the plain fd if registration fails.
  bool register_file = true;
  // An already open descriptor to use instead of opening `path` (which then
  // only names the device). The device owns it from then on, even on error.
  // Callers that must not follow symbolic links or leave a directory open
  // the file themselves (blockd/volume_paths.h) and hand it over here.
  int adopt_fd = -1;
};

class UringDevice : public FixedGeometryDevice {
 public:
  // How many buffers register_buffer() can hold at once.
  static constexpr unsigned kMaxRegisteredBuffers = 64;

  // Opens the file or block device and starts the completion thread. Errors:
  // kInvalidArgument (bad options, not a file/block device, capacity 0),
  // kNotFound (missing path), kFailedPrecondition (O_DIRECT unsupported on the
  // filesystem), kOutOfSpace (cannot extend the file), kIoError (anything
  // else the kernel refused, io_uring setup included).
  static Result<std::unique_ptr<UringDevice>> open(const UringOptions& options);

  // Waits for every outstanding request (and its callback) to finish, then
  // stops the completion thread. Must not run on the completion thread.
  ~UringDevice() override;

  UringDevice(const UringDevice&) = delete;
  UringDevice& operator=(const UringDevice&) = delete;

  std::string name() const override { return "uring:" + path_; }

  void read(uint64_t offset, MutableByteView dst, IoCallback cb) override;
  void write(uint64_t offset, ByteView src, IoCallback cb) override;
  // One IORING_OP_READV for up to kMaxIov parts (more, or over 1 GiB: the
  // default, one read per part). Registered buffers are not used here: the
  // kernels this runs on have no fixed-buffer readv.
  void readv(uint64_t offset, std::span<const MutableByteView> parts, IoCallback cb) override;
  static constexpr unsigned kMaxIov = 16;
  // fdatasync through IORING_OP_FSYNC.
  void flush(IoCallback cb) override;
  // Regular files: fallocate(PUNCH_HOLE | KEEP_SIZE) through the ring. Block
  // devices: the BLKDISCARD ioctl, run synchronously in the caller's thread
  // (discards are rare and the ring has no portable discard opcode); the
  // callback then runs inline.
  void trim(uint64_t offset, uint64_t length, IoCallback cb) override;

  DeviceStats stats() const override;

  // Registered buffers; reads straight into the caller's buffer (DMA with
  // O_DIRECT, the kernel's copy without); readv as one request.
  DeviceCapabilities capabilities() const override;

  // Registers `buf` with the ring so that reads and writes whose buffer lies
  // entirely inside it use READ_FIXED/WRITE_FIXED (no per-I/O page pinning).
  // Returns the registration index. Fails (e.g. RLIMIT_MEMLOCK exceeded, table
  // full, kernel too old); callers then simply go on without registration.
  // The memory must stay valid until unregister_buffer() or destruction.
  Result<int> register_buffer(MutableByteView buf) override;
  // Drops a registration; requests already in flight keep working.
  Status unregister_buffer(int index) override;

  bool is_block_device() const { return is_block_device_; }
  bool uses_fixed_file() const { return fixed_file_; }
  unsigned queue_depth() const { return queue_depth_; }
  // I/Os that used READ_FIXED/WRITE_FIXED, for tests and benchmarks.
  uint64_t fixed_buffer_ios() const { return fixed_ios_.load(std::memory_order_relaxed); }
  // Requests that had to wait in the backlog because the ring was full.
  uint64_t backlogged_ios() const { return backlogged_.load(std::memory_order_relaxed); }
  // Sub-requests resubmitted after a short read/write or -EAGAIN/-EINTR.
  uint64_t resubmissions() const { return resubmits_.load(std::memory_order_relaxed); }

 private:
  enum class Op : uint8_t { kRead, kWrite, kFsync, kPunchHole, kReadv };

  // One request, either waiting in the backlog or occupying a slot.
  struct Request {
    Op op = Op::kRead;
    std::byte* buf = nullptr;  // next byte to transfer (reads/writes)
    uint64_t offset = 0;       // next device offset
    uint64_t remaining = 0;    // bytes still to transfer, or trim length
    IoCallback cb;
    // kReadv: the buffers still to fill are iov[iov_first, iov_count).
    std::array<iovec, kMaxIov> iov{};
    uint8_t iov_count = 0;
    uint8_t iov_first = 0;
  };
  struct Slot {
    Request req;
    uint64_t total = 0;    // original length, for stats and messages
    int buf_index = -1;    // registered buffer index, -1 for plain I/O
    uint32_t retries = 0;  // -EAGAIN/-EINTR retries so far
    uint32_t next_free = 0;
  };
  struct Registered {
    std::byte* begin = nullptr;
    std::byte* end = nullptr;  // begin == end: unused entry
  };
  struct Completed {
    IoCallback cb;
    Status status;
  };

  // Geometry set by open() from the file or device.
  UringDevice() : FixedGeometryDevice(4096, 1, 0) {}
  Status init(const UringOptions& options);
  // init's steps: open the path (unless adopted), learn its block size and
  // size (extending a file to create_size), set up the ring and its tables.
  Status open_path(const UringOptions& o);
  Result<uint64_t> size_device(const UringOptions& o);
  Status setup_ring(const UringOptions& o);

  void enqueue(Request req);
  // The following run with mu_ held.
  void start_slot_locked(uint32_t idx, Request&& req);
  void prep_locked(uint32_t idx);
  void submit_locked();
  void handle_cqe_locked(uint64_t idx, int res, std::vector<Completed>& done);
  void finish_slot_locked(uint32_t idx, Status st, std::vector<Completed>& done);

  void completion_loop();
  void callback_done(size_t n);
  static const char* op_name(Op op);

  std::string path_;
  int fd_ = -1;
  bool is_block_device_ = false;
  bool fixed_file_ = false;
  bool ring_ready_ = false;
  bool buffers_sparse_ = false;
  unsigned queue_depth_ = 0;

  io_uring ring_{};
  std::thread completer_;

  std::mutex mu_;  // guards the SQ, slots_, free list, backlog_, registered_
  std::vector<Slot> slots_;
  uint32_t free_head_ = 0;  // kNoSlot when every slot is in flight
  std::deque<Request> backlog_;
  std::vector<Registered> registered_;
  bool any_registered_ = false;

  // Requests accepted and whose callback has not returned yet; the destructor
  // waits for zero.
  std::atomic<uint64_t> outstanding_{0};
  std::mutex idle_mu_;
  std::condition_variable idle_cv_;

  std::atomic<uint64_t> fixed_ios_{0};
  std::atomic<uint64_t> backlogged_{0};
  std::atomic<uint64_t> resubmits_{0};
  DeviceCounters io_;  // what stats() reports
};

}  // namespace kvtier::blk
