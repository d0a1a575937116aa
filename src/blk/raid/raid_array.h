// RaidArray: redundant RAID over any BlockDevices (files, block devices,
// remote NVMe/TCP namespaces): RAID1 (n-way mirror), RAID10 (stripes over
// mirror groups), RAID5 (one rotating parity) and RAID6 (P and Q), beside the
// plain striping of Raid0. It takes writes of any aligned size: a write that
// covers whole rows of a stripe computes parity without reading; a partial
// one reads only the untouched data of the rows it changes (reconstruct-write)
// and rewrites parity. A failed member is served around (degraded reads
// rebuild its bytes from the others), a replacement is rebuilt in the
// background while I/O continues, every member carries a superblock so that
// assemble() recognises the array at start, and a write-intent bitmap makes
// assembly after a crash recompute the redundancy of every row that may have
// been mid-write.
//
// Geometry: each member holds `rows` rows of `strip_bytes` after
// `data_offset` (superblock and bitmap come first). RAID5/6 row r holds k =
// n - m data shards and m parity shards; shard s of row r lives on member
// (r + s) % n, so parity rotates. RAID1/10 row r holds g = n / copies strips,
// strip j mirrored on members j*copies .. j*copies + copies - 1.
//
// Threads: requests are queued to a small pool of worker threads; a worker
// locks the rows a request touches, issues every member I/O of the request at
// once and waits for them (callbacks run on the worker). Member state
// (active, failed, rebuilding) is guarded by an internal mutex and read as a
// snapshot per request. Rebuild runs on its own thread, row by row under the
// same row locks. trim() is accepted and not passed to members: discarding
// bytes under a parity row would make its parity wrong.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "blk/block_device.h"
#include "blk/raid/parity_codec.h"
#include "blk/raid/raid_superblock.h"

namespace kvtier::blk {

enum class RaidLevel : uint32_t { kRaid1 = 1, kRaid5 = 5, kRaid6 = 6, kRaid10 = 10 };
// "raid1", "1", "raid10", ... (RAID0 is Raid0, which has no superblock).
Result<RaidLevel> parse_raid_level(std::string_view text);
std::string raid_level_name(RaidLevel level);

struct RaidOptions {
  RaidLevel level = RaidLevel::kRaid5;
  uint64_t strip_bytes = 64 << 10;
  // RAID10: members per mirror group (RAID1 mirrors over all members).
  uint32_t copies = 2;
  std::string name;  // stored in the superblocks (at most 63 bytes)
};

struct RaidRuntimeOptions {
  size_t workers = 4;
  // Read errors a member may return before it is taken out of the array. A
  // write error takes it out at once (its copy would be stale).
  uint32_t read_error_budget = 3;
  // Recompute the redundancy of rows marked in the write-intent bitmap at
  // assembly (off only for tests that want to see the damage).
  bool resync = true;
  // A parity array that comes back degraded with dirty rows (a crash during
  // writes, then a member lost: the write hole) has rows whose parity cannot
  // be recomputed. Refused unless forced; forced, those rows stay dirty.
  bool force_dirty_degraded = false;
};

enum class ArrayState { kOnline, kDegraded, kFailed };
const char* array_state_name(ArrayState s);

struct RaidMemberInfo {
  std::string device;
  MemberState state = MemberState::kActive;
  uint64_t read_errors = 0;
  uint64_t write_errors = 0;
};

struct RaidStatus {
  ArrayState state = ArrayState::kOnline;
  std::vector<RaidMemberInfo> members;
  uint64_t rows = 0;
  bool rebuilding = false;
  uint64_t rebuild_rows_done = 0;  // of the current or last rebuild
  uint64_t resynced_rows = 0;      // rows recomputed at the last assembly
  uint64_t dirty_bits = 0;         // write-intent bits set now
  uint64_t parity_cpu_ns = 0;      // CPU time spent in parity encode/decode
  uint64_t parity_bytes = 0;       // bytes of data run through the codec
};

class RaidArray : public FixedGeometryDevice {
 public:
  // Formats `members` (all with the same block size) as a new array: writes
  // superblocks and an empty bitmap. Bytes never written read back as whatever
  // the members held (zeros on new files).
  static Result<std::unique_ptr<RaidArray>> create(
      std::vector<std::shared_ptr<BlockDevice>> members, const RaidOptions& options,
      const RaidRuntimeOptions& runtime = {});
  // Assembles an array from devices carrying its superblocks, in any order.
  // Slots with no device are failed. Rows marked dirty are resynced before
  // this returns.
  static Result<std::unique_ptr<RaidArray>> assemble(
      std::vector<std::shared_ptr<BlockDevice>> devices, const RaidRuntimeOptions& runtime = {});
  // Reads a device's superblock (to find which array it belongs to).
  static Result<RaidSuperblock> read_superblock(BlockDevice& dev);

  // Drains requests, stops a rebuild, flushes, clears the bitmap and marks
  // the superblocks clean.
  ~RaidArray() override;

  std::string name() const override { return name_; }

  void read(uint64_t offset, MutableByteView dst, IoCallback cb) override;
  void write(uint64_t offset, ByteView src, IoCallback cb) override;
  void flush(IoCallback cb) override;
  void trim(uint64_t offset, uint64_t length, IoCallback cb) override;
  DeviceStats stats() const override;

  RaidLevel level() const { return level_; }
  size_t member_count() const { return n_; }
  uint64_t strip_bytes() const { return strip_; }
  const std::array<uint8_t, 16>& uuid() const { return uuid_; }
  std::string uuid_string() const;
  RaidStatus status() const;
  std::vector<std::shared_ptr<BlockDevice>> member_devices() const;

  // Takes a member out (as if its error budget were spent).
  Status fail_member(size_t index);
  // Puts `device` in the slot of a failed member and rebuilds it in the
  // background while I/O continues. One rebuild at a time.
  Status replace_member(size_t index, std::shared_ptr<BlockDevice> device);
  // Waits for the running rebuild; false on timeout.
  bool wait_rebuild(std::chrono::milliseconds timeout);
  // Scrub: compares every row's redundancy with its data (all members must be
  // usable). Returns the number of inconsistent rows.
  Result<uint64_t> count_inconsistent_rows();

 private:
  struct Member {
    std::shared_ptr<BlockDevice> dev;
    MemberState state = MemberState::kActive;
    std::atomic<uint64_t> read_errors{0};
    std::atomic<uint64_t> write_errors{0};
  };
  // Snapshot of member state for one request attempt.
  struct View {
    std::vector<std::shared_ptr<BlockDevice>> dev;
    std::vector<MemberState> state;
    uint64_t recovery_row = 0;
    uint64_t excluded = 0;  // members that failed an I/O of this request
    bool usable(size_t m, uint64_t row) const;
  };
  struct MemberIo {
    size_t member = 0;
    bool write = false;
    uint64_t offset = 0;  // member byte offset, data_offset excluded
    std::byte* buf = nullptr;
    uint64_t len = 0;
    Status status;
  };
  struct Geometry {
    RaidLevel level;
    size_t n = 0;
    uint32_t copies = 0;
    uint64_t strip = 0;
    uint64_t rows = 0;
    uint64_t data_offset = 0;
    uint64_t bitmap_offset = 0;
    uint64_t bitmap_area = 0;
    uint64_t rows_per_bit = 0;
    uint32_t block_size = 0;
    uint32_t alignment = 0;
  };
  // Strips of data in a row: k of n for parity, one per mirror group.
  static size_t data_strips_per_row(const Geometry& g);

  RaidArray(const Geometry& g, std::array<uint8_t, 16> uuid, std::string label, uint64_t event,
            std::vector<std::shared_ptr<BlockDevice>> devs, std::vector<MemberState> states,
            const RaidRuntimeOptions& runtime);
  static Result<Geometry> plan_geometry(const std::vector<std::shared_ptr<BlockDevice>>& members,
                                        const RaidOptions& options);
  // assemble()'s steps: the geometry the newest superblock records, the
  // union of the members' write-intent bitmaps, and the resync of its rows.
  static Result<Geometry> recorded_geometry(
      const RaidSuperblock& ref, const std::vector<std::shared_ptr<BlockDevice>>& devices);
  std::vector<uint8_t> read_dirty_bits(uint64_t nbits) const;
  Status resync_dirty_rows(const std::vector<uint8_t>& dirty, uint64_t nbits);

  bool is_parity() const { return m_ > 0; }
  size_t member_of(uint64_t row, size_t shard) const { return (row + shard) % n_; }
  uint64_t row_bytes() const { return data_per_row_ * strip_; }

  void enqueue(std::function<void()> job);
  // Checks a read or write, then runs `io` on a worker and completes `cb`
  // with its status (counted as `op`).
  void submit(uint64_t offset, uint64_t length, const void* buf, int op, std::function<Status()> io,
              IoCallback cb);
  void worker_loop();
  void lock_rows(uint64_t r0, uint64_t r1);
  void unlock_rows(uint64_t r0, uint64_t r1);
  View snapshot() const;
  // Issues every I/O at once and waits; then charges errors to members.
  // Returns false if any failed (their members are added to view.excluded).
  bool run_batch(View& view, std::vector<MemberIo>& ios);
  void note_error(size_t member, bool write);
  ArrayState state_locked() const;

  Status do_read(uint64_t offset, MutableByteView dst);
  Status do_write(uint64_t offset, ByteView src);
  Status read_parity(View& v, uint64_t offset, MutableByteView dst, bool& retry);
  Status write_parity(View& v, uint64_t offset, ByteView src, bool& retry);
  // The two halves of write_parity for one row: what to read first, then
  // the shards to write once the reads are in (raid_array_io.cc).
  struct ParityRowPlan;
  std::byte* parity_src_at(ByteView src, uint64_t offset, const ParityRowPlan& p, size_t d,
                           uint64_t within) const;
  Status plan_parity_row(const View& v, ByteView src, uint64_t offset, std::byte*& next_scratch,
                         ParityRowPlan& p, std::vector<MemberIo>& reads) const;
  Status fill_parity_row(const View& v, ByteView src, uint64_t offset, ParityRowPlan& p,
                         std::vector<MemberIo>& writes);
  Status read_mirror(View& v, uint64_t offset, MutableByteView dst, bool& retry);
  Status write_mirror(View& v, uint64_t offset, ByteView src);
  // Recomputes the redundancy of rows [r0, r1) (parity from data, mirrors from
  // the first usable copy). Caller holds the row locks.
  // Recomputes the redundancy of rows [r0, r1); `complete` is false when a
  // row had nothing trustworthy to recompute from (its bit must stay set).
  // A write error is returned, never ignored.
  Status resync_rows(uint64_t r0, uint64_t r1, bool* complete);
  // Writes member `target`'s bytes of rows [r0, r1) from the others.
  Status rebuild_rows(size_t target, uint64_t r0, uint64_t r1);
  void rebuild_loop(size_t target);

  // Write-intent bitmap.
  void mark_rows(uint64_t r0, uint64_t r1);
  void unmark_rows(uint64_t r0, uint64_t r1);
  void persist_bitmap_until(uint64_t gen);
  Status write_bitmap_now();
  void clear_idle_bits_after(const std::function<void()>& flush_members);
  Status write_superblocks(bool clean);
  Status flush_members();

  void encode_parity(size_t len, std::byte* const* shards);
  Status reconstruct(size_t len, std::byte* const* shards, const std::vector<int>& missing);
  void finish(bool ok, int op, uint64_t bytes);

  const Geometry geo_;
  const RaidLevel level_;
  const size_t n_;
  const size_t m_;             // parity shards per row (0 for mirrors)
  const size_t data_per_row_;  // k for parity, groups for mirrors
  const uint64_t strip_;
  const std::array<uint8_t, 16> uuid_;
  const std::string label_;
  const std::string name_;
  const RaidRuntimeOptions runtime_;
  std::optional<ParityCodec> codec_;

  mutable std::mutex state_mu_;  // guards members_' dev/state, recovery_row_, event_
  std::vector<std::unique_ptr<Member>> members_;
  uint64_t recovery_row_ = 0;
  uint64_t event_ = 0;
  std::mutex sb_mu_;  // serialises superblock writes

  std::mutex rows_mu_;  // guards locked_
  std::condition_variable rows_cv_;
  std::vector<std::pair<uint64_t, uint64_t>> locked_;  // inclusive row ranges

  std::mutex bitmap_mu_;  // guards bits_, inflight_, touched_, bit_gen_, gen_
  std::vector<uint8_t> bits_;
  std::vector<uint32_t> inflight_;
  std::vector<uint8_t> touched_;
  std::vector<uint64_t> bit_gen_;
  uint64_t gen_ = 0;
  std::mutex persist_mu_;  // serialises bitmap writes; guards durable_gen_
  uint64_t durable_gen_ = 0;

  std::mutex queue_mu_;  // guards queue_, stop_
  std::condition_variable queue_cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;

  std::thread rebuild_thread_;
  std::atomic<bool> rebuild_stop_{false};
  std::atomic<bool> rebuilding_{false};
  std::atomic<uint64_t> rebuild_rows_done_{0};
  std::mutex rebuild_mu_;
  std::condition_variable rebuild_cv_;
  uint64_t resynced_rows_ = 0;
  bool keep_dirty_ = false;  // assembled without resync: never mark clean

  std::atomic<uint64_t> parity_cpu_ns_{0};
  std::atomic<uint64_t> parity_bytes_{0};
  DeviceCounters io_;  // what stats() reports
};

}  // namespace kvtier::blk
