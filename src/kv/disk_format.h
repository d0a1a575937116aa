// On-volume format of the disk tier (documented in docs/disk-format.md).
// All integers are little-endian; the structs are laid out without padding
// and pinned by static_assert, and this code only builds on little-endian
// hosts (checked below), so a struct is its own byte encoding.
//
//   page 0            Superblock (one 4 KiB page)
//   page 1 ..         checkpoint area (written at clean shutdown)
//   data_offset ..    region_count equal regions of log-structured entries
//
// An entry (format version 2) is one header page holding the EntryHeader
// (zero-padded to 4 KiB) followed by the payload, which therefore starts on a
// page boundary and is itself padded to whole pages. Entries are appended to
// a region from its start, so every entry starts on a page boundary, and a
// cold read can put the payload straight into a page-aligned caller buffer
// with O_DIRECT. Version 1 (payload right after the 128-byte header) is not
// read any more: such a volume is reformatted (or refused, see DiskTierOptions).
#pragma once

#include <bit>
#include <cstdint>

#include "common/buffer.h"

namespace kvtier::kv::disk {

static_assert(std::endian::native == std::endian::little, "kvtier's formats are little-endian");

constexpr uint32_t kPageBytes = 4096;
constexpr uint16_t kFormatVersion = 2;
constexpr uint32_t kSuperMagic = 0x5354564B;       // "KVTS"
constexpr uint32_t kEntryMagic = 0x4554564B;       // "KVTE"
constexpr uint32_t kCheckpointMagic = 0x4354564B;  // "KVTC"

// EntryHeader::flags: a tombstone (payload_bytes 0, no payload pages) says
// the key was removed; the crash scan drops every older copy of it.
constexpr uint32_t kEntryTombstone = 1;

enum CheckpointState : uint32_t { kNoCheckpoint = 0, kCheckpointValid = 1 };

struct Superblock {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved0;
  uint32_t header_crc;  // CRC32C of this struct with header_crc = 0
  uint32_t page_bytes;
  uint64_t volume_id;  // random at format; every entry carries it
  uint64_t region_bytes;
  uint64_t data_offset;
  uint64_t checkpoint_offset;
  uint64_t checkpoint_capacity;
  uint32_t region_count;
  uint32_t checkpoint_state;
  uint64_t checkpoint_bytes;
  uint32_t checkpoint_crc;
  uint32_t reserved1;
  // Every region generation (EntryHeader::region_seq) in use is below this
  // floor; it is raised on the volume before a generation at or above it is
  // handed out, so a crash can never lead to a generation number being reused
  // (a reused number would let an old region's leftovers pass as new entries).
  uint64_t seq_floor;
};
static_assert(sizeof(Superblock) == 88);

struct EntryHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t header_bytes;  // sizeof(EntryHeader)
  uint64_t region_seq;    // generation of the region when this entry was written
  uint64_t volume_id;
  uint64_t key_hi;
  uint64_t key_lo;
  uint64_t ns_hi;
  uint64_t ns_lo;
  uint32_t payload_bytes;
  uint32_t payload_crc;  // CRC32C of the payload
  uint32_t header_crc;   // CRC32C of this struct with header_crc = 0
  uint32_t flags;        // 0, or kEntryTombstone
  uint32_t reserved[14];
};
static_assert(sizeof(EntryHeader) == 128);

struct CheckpointHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved0;
  uint64_t volume_id;
  uint64_t next_region_seq;
  uint32_t region_count;
  uint32_t reserved1;
  uint64_t entry_count;
};
static_assert(sizeof(CheckpointHeader) == 40);

enum RegionStateOnDisk : uint32_t { kRegionFree = 0, kRegionSealed = 1 };

struct CheckpointRegion {
  uint64_t seq;
  uint32_t fill_bytes;
  uint32_t state;
};
static_assert(sizeof(CheckpointRegion) == 16);

struct CheckpointEntry {
  uint64_t key_hi;
  uint64_t key_lo;
  uint64_t ns_hi;
  uint64_t ns_lo;
  uint32_t page;
  uint32_t payload_bytes;
  uint16_t disk_hits;
  uint16_t reserved0;
  uint32_t reserved1;
};
static_assert(sizeof(CheckpointEntry) == 48);

// Where the payload starts, counted from the start of its entry.
constexpr uint64_t kPayloadOffset = kPageBytes;

inline uint64_t entry_bytes(uint64_t payload_bytes) {
  return kPayloadOffset + align_up(payload_bytes, kPageBytes);
}

// The metadata at the front of a volume of `capacity` bytes: the superblock
// page, then a checkpoint area with a record per region and room for one
// entry per `checkpoint_entry_bytes` of the volume; the data area (whole
// regions) starts at the next MiB.
struct VolumeLayout {
  uint64_t checkpoint_bytes = 0;
  uint64_t data_offset = 0;
};
inline VolumeLayout volume_layout(uint64_t capacity, uint64_t region_bytes,
                                  uint64_t checkpoint_entry_bytes) {
  const uint64_t max_regions = capacity / region_bytes + 1;
  VolumeLayout l;
  l.checkpoint_bytes =
      align_up(sizeof(CheckpointHeader) + max_regions * sizeof(CheckpointRegion) +
                   (capacity / checkpoint_entry_bytes + 1) * sizeof(CheckpointEntry),
               kPageBytes);
  l.data_offset = align_up(kPageBytes + l.checkpoint_bytes, 1u << 20);
  return l;
}

}  // namespace kvtier::kv::disk
