// Raid0: stripes one logical volume across several member BlockDevices so
// that the disk tier gets the summed bandwidth of all its drives. Logical
// strip k lives on member k % n at member offset (k / n) * strip_bytes.
//
// A read or write is split into one sub-request per strip piece (members'
// buffers are not contiguous across strips, and BlockDevice has no
// scatter-gather); the parent completes once, after its last piece, with the
// first error any piece reported. Flush goes to every member; trim sends each
// member one contiguous range.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "blk/block_device.h"
#include "common/status.h"

namespace kvtier::blk {

class Raid0 : public FixedGeometryDevice {
 public:
  // Requirements: at least one member, all with the same block size, and
  // `strip_bytes` a non-zero multiple of block_size() (see below). Capacity is
  // n * floor(min member capacity / strip) * strip; it must be non-zero.
  static Result<std::unique_ptr<Raid0>> create(std::vector<std::shared_ptr<BlockDevice>> members,
                                               uint64_t strip_bytes);

  // Waits until every parent request has completed (members may still be
  // finishing sub-requests on their own threads).
  ~Raid0() override;

  std::string name() const override { return name_; }
  // The members' block size, raised to the largest member buffer_alignment()
  // when that is bigger (a 512-byte-sector O_DIRECT disk): a request is split
  // at strip boundaries, and only offsets that are multiples of the members'
  // buffer alignment keep every piece's sub-buffer aligned.
  // The largest member buffer_alignment().

  void read(uint64_t offset, MutableByteView dst, IoCallback cb) override;
  void write(uint64_t offset, ByteView src, IoCallback cb) override;
  void flush(IoCallback cb) override;
  void trim(uint64_t offset, uint64_t length, IoCallback cb) override;

  // Counts parent requests (one per call), not member sub-requests.
  DeviceStats stats() const override;

  // Registered buffers when every member has them (a piece of a request
  // reaches one member unchanged); no direct reads (raid0.cc says why);
  // readv is split into reads (vectored_reads false).
  DeviceCapabilities capabilities() const override;
  // Registers `buf` with every member (pieces of a read land in sub-ranges
  // of it); fails, registering nothing, if any member refuses.
  Result<int> register_buffer(MutableByteView buf) override;
  Status unregister_buffer(int handle) override;

  size_t member_count() const { return members_.size(); }
  uint64_t strip_bytes() const { return strip_; }
  const std::vector<std::shared_ptr<BlockDevice>>& members() const { return members_; }

  // Where a logical byte offset lives.
  struct Location {
    size_t member = 0;
    uint64_t offset = 0;  // byte offset on that member
  };
  Location locate(uint64_t offset) const;

 private:
  enum class Op : uint8_t { kRead, kWrite, kFlush, kTrim };
  struct Parent;

  Raid0(std::vector<std::shared_ptr<BlockDevice>> members, uint64_t strip, uint32_t block_size,
        uint32_t buffer_alignment, uint64_t capacity);

  // Splits [offset, offset + len) at strip boundaries and issues each piece;
  // `buf` is the read or write buffer.
  void submit_rw(Op op, uint64_t offset, std::byte* buf, uint64_t len, IoCallback cb);
  Parent* new_parent(Op op, uint64_t bytes, IoCallback cb);
  static void piece_done(Parent* p, Status st);
  void finish(Op op, uint64_t bytes, bool ok);
  void release_parent();

  const std::vector<std::shared_ptr<BlockDevice>> members_;
  const uint64_t strip_;
  const std::string name_;

  // Parent requests not yet completed. Decremented under idle_mu_ so that the
  // destructor cannot return while a completing thread still touches it.
  std::atomic<uint64_t> outstanding_{0};
  std::mutex idle_mu_;
  std::condition_variable idle_cv_;

  DeviceCounters io_;  // what stats() reports

  // register_buffer() handles: each member's own handle for the buffer.
  std::mutex registered_mu_;
  std::vector<std::vector<int>> registered_;  // [handle][member]; empty when free
};

}  // namespace kvtier::blk
