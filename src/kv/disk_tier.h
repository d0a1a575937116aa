// DiskTier: the store's disk tier, log-structured regions on any BlockDevice
// (no filesystem). Appends fill an in-memory region buffer and go out as large
// aligned writes; eviction reclaims whole regions in FIFO order, optionally
// reinserting blocks that were read from disk often. Every entry carries a
// checksummed, versioned header (key, namespace digest, length, payload CRC,
// region generation, volume id), and a read is served only when all of them
// verify, so a block overwritten, torn or corrupted under a reader is a miss,
// never wrong bytes. See docs/disk-format.md.
//
// Restart: a clean close() writes a checkpoint of index and region metadata;
// open() loads it and invalidates it at once, so a later crash is followed by
// a scan that keeps exactly the entries whose checksums verify.
//
// Thread-safety: every public method may be called from any thread. mu_
// guards the region table; device I/O is never submitted while holding it
// (MemDevice completes inline and completions take mu_).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "blk/block_device.h"
#include "common/buffer.h"
#include "common/mutex.h"
#include "common/status.h"
#include "kv/disk_format.h"
#include "kv/index.h"
#include "kv/namespace_table.h"
#include "kv/read_target.h"
#include "kvtier/store_types.h"

namespace kvtier::kv {

class StagePool;

struct DiskTierOptions {
  uint64_t region_bytes = 64ull << 20;
  // In-memory region buffers: one is filled while the others flush.
  unsigned write_buffers = 3;
  // A sealed region goes out as writes of this size, all in flight at once.
  uint32_t flush_chunk_bytes = 4u << 20;
  // Largest payload accepted (sets the staging-buffer size).
  uint32_t max_payload_bytes = 2u << 20;
  // Disk reads in flight at most (staging buffers).
  unsigned read_depth = 32;
  // read_batch_async() sends the staged reads of entries that lie back to
  // back on the volume as one vectored device request (on devices that
  // offer vectored reads), of at most this many bytes; 0: one request each.
  uint32_t coalesce_max_bytes = 1u << 20;
  bool reinsert_hot = true;
  uint16_t reinsert_min_hits = 2;
  double reinsert_max_fraction = 0.25;  // of a region, per reclaim
  // Sizing of the checkpoint area: room for one entry per this many bytes.
  uint64_t checkpoint_min_entry_bytes = 64u << 10;
  // Reformat a volume whose superblock is missing, corrupt, of another
  // geometry or of another format version (it is a cache). When false, such
  // a volume is an error that says why.
  bool format_if_invalid = true;
  // Cold reads straight into the caller's buffer (O_DIRECT DMA, no staging
  // copy) when that buffer is 4 KiB-aligned and the payload is at least a
  // page. kAuto uses them only on a device whose capabilities() offer direct
  // reads and registered buffers (io_uring, and stacks of it), and only when
  // the caller's pages can be registered for the read: such a
  // read is given up at its deadline like a staged one (kv/read_target.h);
  // otherwise the read is staged. kNever always stages; kAlways (tests)
  // also reads directly on other devices, where a read past its deadline
  // then waits for the device.
  enum class DirectReads : uint8_t { kAuto, kNever, kAlways };
  // How long an append (or flush) may wait for earlier writes to complete
  // (every write buffer still flushing, e.g. a hung device) before it is
  // refused with kTimeout (the store counts a kDiskError refusal).
  uint64_t write_timeout_ms = 2000;
  DirectReads direct_reads = DirectReads::kAuto;
};

class DiskTier {
 public:
  // Opens (or formats) the tier on `device`, filling `index` with the
  // entries found there. `index` and `namespaces` must outlive the tier.
  static Result<std::unique_ptr<DiskTier>> open(std::shared_ptr<blk::BlockDevice> device,
                                                const DiskTierOptions& options, Index* index,
                                                NamespaceTable* namespaces);
  ~DiskTier();

  // Appends one entry and returns its first page. The index is not touched:
  // the caller points its record at the page. Blocks only when every write
  // buffer is still flushing (back-pressure).
  Result<uint32_t> append(const Key128& key, uint16_t ns, ByteView payload, uint32_t payload_crc);

  // Reads the entry of `rec` and delivers its payload to `target` after
  // verifying header and checksum (mismatch: kCorruption). Never blocks: a
  // registered staging buffer is used when one is free, a temporary one
  // otherwise. The device thread verifies; the waiter copies the payload out
  // in ReadTarget::wait_until (`deadline_ns` is the caller's, kept for
  // devices that could honour it).
  void read_async(const IndexRecord& rec, std::shared_ptr<ReadTarget> target, uint64_t deadline_ns);
  // read_async() of each record into its target, where the staged reads of
  // entries adjacent on the volume go to the device as one vectored request
  // (DiskTierOptions::coalesce_max_bytes), each into its own staging buffer:
  // one NVMe/TCP command, one io_uring readv, instead of one per block.
  void read_batch_async(std::span<const IndexRecord> recs,
                        std::span<const std::shared_ptr<ReadTarget>> targets, uint64_t deadline_ns);
  // Whether read_batch_async() ever sends several entries as one request.
  bool coalesces() const { return coalesce_max_bytes_ > 0 && coalesce_max_entries_ > 1; }

  // Drops the oldest sealed region's entries from the index and frees the
  // region (no reinsertion). For an index that filled before the volume did;
  // false when there is no sealed region to take now.
  bool reclaim_oldest();

  // Appends a tombstone for `key`: after a crash, the scan forgets every
  // copy of the key older than it. Durable, like an append, after flush().
  Status append_tombstone(const Key128& key, uint16_t ns);

  // Makes every appended entry durable (partial region write + device flush).
  Status flush();
  // flush(), then writes the checkpoint. The tier must be idle.
  Status close();

  DiskTierStats stats() const;
  uint64_t region_bytes() const { return opts_.region_bytes; }
  uint32_t region_count() const { return region_count_; }
  // True when `page` lies in the data area (for sanity checks).
  bool valid_page(uint32_t page) const;

 private:
  struct Region;
  struct WriteChunk {
    uint64_t offset;
    ByteView data;
    uint32_t region;
  };

  DiskTier(std::shared_ptr<blk::BlockDevice> device, const DiskTierOptions& options, Index* index,
           NamespaceTable* namespaces);
  Status init();
  Status check_options();
  Status plan_layout(uint64_t* data_offset, uint64_t* ckpt_cap);
  bool read_superblock(uint64_t data_offset, uint64_t ckpt_cap, std::string* why)
      KVTIER_REQUIRES(mu_);
  Status format(uint64_t data_offset, uint64_t ckpt_cap, const std::string& why)
      KVTIER_REQUIRES(mu_);
  Status recover() KVTIER_REQUIRES(mu_);
  Status write_superblock();
  Status load_checkpoint() KVTIER_REQUIRES(mu_);
  Status scan_regions() KVTIER_REQUIRES(mu_);
  // scan_regions' steps: the regions whose first header is of this volume,
  // oldest generation first; one entry of a region's log into the index.
  bool is_current_header(const disk::EntryHeader& h) const;
  // The index record of a recovered entry; none (counted as dropped) when
  // the namespace table is full.
  std::optional<IndexRecord> recovered_record(const Key128& ns_digest, const Key128& key,
                                              uint32_t page, uint32_t length);
  std::vector<std::pair<uint64_t, uint32_t>> regions_by_generation() KVTIER_REQUIRES(mu_);
  void replay_entry(uint32_t region, uint64_t offset, const disk::EntryHeader& h,
                    const std::byte* entry, bool tombstone) KVTIER_REQUIRES(mu_);
  void rebuild_fifo() KVTIER_REQUIRES(mu_);

  uint32_t region_of_page(uint32_t page) const;
  uint32_t first_page_of(uint32_t region) const;
  uint64_t region_offset(uint32_t region) const;

  // All *_locked methods require mu_ held through `lock`.
  Status make_room_locked(uint64_t need, uint64_t deadline_ns) KVTIER_REQUIRES(mu_);
  // One bounded wait on cv_; false (and a counted write timeout) once the
  // deadline has passed.
  bool wait_locked(uint64_t deadline_ns) KVTIER_REQUIRES(mu_);
  uint64_t write_deadline() const;
  std::vector<WriteChunk> seal_open_locked() KVTIER_REQUIRES(mu_);
  std::vector<WriteChunk> chunks_locked(uint32_t region, uint32_t from, uint32_t to)
      KVTIER_REQUIRES(mu_);
  Status open_region_locked(uint64_t deadline_ns) KVTIER_REQUIRES(mu_);
  // open_region_locked's steps. An entry of a reclaimed region that was read
  // often enough to be written again (reinsert_hot), with its bytes read back.
  struct HotEntry {
    IndexRecord rec;
    AlignedBuffer data;
    bool ok = false;
  };
  // A free region, or else the oldest one to reclaim (`*reclaim`); waits for
  // its writes, not past the deadline.
  Result<uint32_t> take_region_locked(uint64_t deadline_ns, bool* reclaim) KVTIER_REQUIRES(mu_);
  // Takes a reclaimed region's entries off the disk (an entry also in RAM
  // stays indexed there), except the hot ones it returns, read back
  // (without holding mu_ while reading).
  std::vector<HotEntry> reclaim_region_locked(uint32_t region) KVTIER_REQUIRES(mu_);
  // Writes the hot entries into the region just opened.
  void reinsert_locked(std::vector<HotEntry>& hot) KVTIER_REQUIRES(mu_);
  uint32_t append_locked(const Key128& key, const Key128& ns_digest, ByteView payload, uint32_t crc)
      KVTIER_REQUIRES(mu_);
  // Space for one entry in the open region, taken under mu_ and filled after.
  struct Reservation {
    uint32_t region = 0;
    uint32_t offset = 0;  // in the region
    uint32_t page = 0;
    std::byte* dst = nullptr;
    disk::EntryHeader header{};
  };
  Reservation reserve_locked(const Key128& key, const Key128& ns_digest, size_t payload_bytes,
                             uint32_t crc, uint32_t flags = 0) KVTIER_REQUIRES(mu_);
  static void write_entry(std::byte* dst, const disk::EntryHeader& h, ByteView payload);
  // Marks a reserved entry copied; returns the open region's whole chunks
  // that are now ready to be written.
  std::vector<WriteChunk> copy_done_locked(uint32_t region, uint32_t offset) KVTIER_REQUIRES(mu_);
  uint32_t copied_upto_locked(const Region& r) const KVTIER_REQUIRES(mu_);
  void submit_writes(std::vector<WriteChunk> chunks);
  void on_write_done(uint32_t region, Status st);
  void forget_region_locked(uint32_t region) KVTIER_REQUIRES(mu_);
  void register_buffers();

  Status verify_entry(const std::byte* entry, const IndexRecord& rec, const Key128& ns_digest,
                      uint64_t expect_seq_or_zero) const;
  void drop_if_points_here(const IndexRecord& rec);
  // A read that goes through a staging buffer; see disk_tier_reader.cc.
  struct StagedRead;
  // Serves `rec` from a region buffer, fails it, or starts its direct read;
  // otherwise returns it with its staging buffer, for issue_staged().
  std::optional<StagedRead> start_read(const IndexRecord& rec, std::shared_ptr<ReadTarget> target);
  // One device request for `run` (entries back to back on the volume, in
  // order); each is verified and delivered to its own target.
  void issue_staged(std::span<StagedRead> run);
  // Starts the direct read of `rec` into target->out(); see read_async.
  // `pin`: the device's pin of the payload's whole pages in out() (the read
  // is then revocable), or -1.
  void read_direct(const IndexRecord& rec, const Key128& ns_digest,
                   std::shared_ptr<ReadTarget> target, int pin);
  // Raises the superblock's generation floor above next_seq_ (mu_ held).
  Status reserve_seq_locked() KVTIER_REQUIRES(mu_);

  std::shared_ptr<blk::BlockDevice> dev_;
  DiskTierOptions opts_;
  Index* index_;
  NamespaceTable* namespaces_;
  disk::Superblock sb_{};
  uint32_t region_count_ = 0;
  uint32_t pages_per_region_ = 0;
  uint32_t data_first_page_ = 0;
  uint64_t max_entry_bytes_ = 0;

  mutable Mutex mu_;
  std::condition_variable cv_;
  std::vector<Region> regions_ KVTIER_GUARDED_BY(mu_);
  std::deque<uint32_t> fifo_ KVTIER_GUARDED_BY(mu_);  // sealed/flushing regions, oldest first
  std::vector<uint32_t> free_regions_ KVTIER_GUARDED_BY(mu_);
  std::vector<AlignedBuffer> write_bufs_;  // fixed after init
  std::vector<int> free_write_bufs_ KVTIER_GUARDED_BY(mu_);
  int64_t open_ KVTIER_GUARDED_BY(mu_) = -1;     // open region
  bool opening_ KVTIER_GUARDED_BY(mu_) = false;  // a thread is opening a region
  uint64_t next_seq_ KVTIER_GUARDED_BY(mu_) = 1;
  uint64_t writes_in_flight_ KVTIER_GUARDED_BY(mu_) = 0;

  // Staging buffers for device reads and the counters; shared with in-flight
  // read completions, which may outlive a tier shut down under a hung device.
  std::shared_ptr<StagePool> stage_;
  std::vector<int> registered_;      // buffers registered with the device
  bool direct_ok_ = false;           // direct reads allowed on this device (fixed after init)
  uint64_t coalesce_max_bytes_ = 0;  // 0: no coalescing (fixed after init)
  size_t coalesce_max_entries_ = 1;  // entries in one request at most (fixed after init)
  // Direct reads past their deadline whose device has not answered yet;
  // while > 0, new reads are staged (they can be abandoned).
  std::shared_ptr<std::atomic<int64_t>> overdue_direct_ = std::make_shared<std::atomic<int64_t>>(0);
  struct Counters;
  std::shared_ptr<Counters> c_;
};

}  // namespace kvtier::kv
