// BlockDevice: the asynchronous block-volume interface that every storage
// layer of kvtier talks to (a file or block device through io_uring, RAM, a
// RAID array, a fault injector, later a remote NVMe/TCP namespace).
//
// Contract:
//  - Offsets and lengths are in bytes and must be multiples of block_size();
//    buffers for read/write must be aligned to buffer_alignment(). A request
//    that breaks these rules, or reaches past capacity(), completes with
//    kInvalidArgument and touches nothing.
//  - Every submitted request completes exactly once by calling its callback,
//    possibly inline before submit returns (MemDevice) or on a device thread
//    (UringDevice). Callbacks must be quick and must not block; they may
//    submit further requests.
//  - The caller keeps the buffer alive and unmodified until the callback runs.
//  - Thread-safety: submit from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "common/buffer.h"
#include "common/status.h"

namespace kvtier::blk {

using IoCallback = std::function<void(Status)>;

struct DeviceStats {
  uint64_t reads = 0;
  uint64_t writes = 0;
  uint64_t flushes = 0;
  uint64_t trims = 0;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t errors = 0;
};

// The counters behind DeviceStats for a device that counts its own requests.
// Relaxed atomics: bumped from any completion thread, read for reporting.
struct DeviceCounters {
  std::atomic<uint64_t> reads{0}, writes{0}, flushes{0}, trims{0};
  std::atomic<uint64_t> bytes_read{0}, bytes_written{0}, errors{0};

  DeviceStats snapshot() const {
    constexpr auto r = std::memory_order_relaxed;
    return DeviceStats{reads.load(r),      writes.load(r),        flushes.load(r), trims.load(r),
                       bytes_read.load(r), bytes_written.load(r), errors.load(r)};
  }
  // Fails a request inline: one more error, and `cb` gets `st`.
  void fail(IoCallback& cb, Status st) {
    errors.fetch_add(1, std::memory_order_relaxed);
    cb(std::move(st));
  }
};

// The answers of BlockDevice::capabilities().
struct DeviceCapabilities {
  // register_buffer() works (io_uring fixed buffers).
  bool registered_buffers = false;
  // readv() of several parts is one device request, not one per part...
  bool vectored_reads = false;
  // ...when it has at most this many parts (0: no limit).
  uint32_t max_vectored_parts = 0;
  // read() lands straight in the caller's buffer (kernel DMA, O_DIRECT) with
  // no copy by the device, so reading into a caller's buffer rather than a
  // staging one saves a copy.
  bool direct_reads = false;
  // Required buffer alignment (buffer_alignment()).
  uint32_t alignment = 1;
  // The largest single request the device takes whole; 0: no limit (larger
  // requests are split by the device itself).
  uint64_t max_transfer_bytes = 0;
};

class BlockDevice {
 public:
  virtual ~BlockDevice() = default;

  // Human-readable identity, e.g. "uring:/dev/nvme0n1" or "raid0[mem,mem]".
  virtual std::string name() const = 0;
  // Logical block size in bytes (512 or 4096 typically).
  virtual uint32_t block_size() const = 0;
  // Required alignment of data buffers (>= 1; 4096 for O_DIRECT).
  virtual uint32_t buffer_alignment() const { return block_size(); }
  // Usable bytes, a multiple of block_size().
  virtual uint64_t capacity() const = 0;

  virtual void read(uint64_t offset, MutableByteView dst, IoCallback cb) = 0;
  virtual void write(uint64_t offset, ByteView src, IoCallback cb) = 0;
  // Vectored read: the contiguous range [offset, offset + total size) lands
  // in `parts` in order (a header page into one buffer and a payload into the
  // caller's, in one device request where the device can). Each part follows
  // read()'s rules (block-multiple size, aligned buffer). `parts` itself only
  // needs to live for the call; the buffers until the callback. The default
  // issues one read() per part and completes once, with the first error.
  virtual void readv(uint64_t offset, std::span<const MutableByteView> parts, IoCallback cb);
  virtual void flush(IoCallback cb) = 0;
  // Discards a range; reading it back afterwards returns unspecified data.
  virtual void trim(uint64_t offset, uint64_t length, IoCallback cb) = 0;

  virtual DeviceStats stats() const = 0;

  // What this device can do beyond the contract above. Upper layers choose
  // their path by asking, never by the device's concrete class; a stacking
  // device (partition, QoS, health, fault injector, RAID0) answers for what
  // lies beneath it.
  virtual DeviceCapabilities capabilities() const;

  // With capabilities().registered_buffers: registers `buf` so that reads and
  // writes lying inside it skip per-request page pinning, and a read into it
  // lands in the pages pinned now, whatever happens to the mapping later. So
  // a caller that gives up on such a read may map fresh pages over its range
  // (common/fresh_pages.h) and return. Returns a handle for
  // unregister_buffer(); the memory stays valid until then, and no read into
  // `buf` may be in flight when it is called. Without the capability (devices
  // that move data through the caller's addresses themselves), or when the
  // kernel refuses (RLIMIT_MEMLOCK, table full), fails: callers go on
  // without registration.
  virtual Result<int> register_buffer(MutableByteView buf);
  virtual Status unregister_buffer(int handle);

  // Blocking helpers built on the asynchronous calls (for tools and tests;
  // never call them from a completion callback). A device whose commands
  // block a thread anyway may run a blocking read or write on the caller's.
  virtual Status read_sync(uint64_t offset, MutableByteView dst);
  Status readv_sync(uint64_t offset, std::span<const MutableByteView> parts);
  virtual Status write_sync(uint64_t offset, ByteView src);
  Status flush_sync();
  Status trim_sync(uint64_t offset, uint64_t length);

 protected:
  // Shared argument check for implementations: alignment, bounds, non-empty.
  Status check_io(uint64_t offset, uint64_t length, const void* buf) const;
  // check_io(), and on a refusal the request fails inline, counted in `io`.
  bool refused(uint64_t offset, uint64_t length, const void* buf, IoCallback& cb,
               DeviceCounters& io) const {
    Status st = check_io(offset, length, buf);
    if (st.ok()) return false;
    io.fail(cb, std::move(st));
    return true;
  }
};

// A device that owns its storage and knows its geometry when it is built:
// block size, buffer alignment and capacity, kept here once rather than in
// each such device (the stacking devices ask their inner one instead).
class FixedGeometryDevice : public BlockDevice {
 public:
  uint32_t block_size() const final { return block_size_; }
  uint32_t buffer_alignment() const final { return buffer_alignment_; }
  uint64_t capacity() const final { return capacity_; }

 protected:
  FixedGeometryDevice(uint32_t block_size, uint32_t buffer_alignment, uint64_t capacity)
      : block_size_(block_size), buffer_alignment_(buffer_alignment), capacity_(capacity) {}

  // Set by the constructor, or (a device that must open something first to
  // learn them) before the device is handed to anyone.
  uint32_t block_size_;
  uint32_t buffer_alignment_;
  uint64_t capacity_;
};

}  // namespace kvtier::blk
