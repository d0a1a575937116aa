// RaidSuperblock: the record at the start of every RAID member that lets
// kvtier recognise and assemble an array at start (which array, which level
// and geometry, this member's slot, every member's state as last known), and
// the write-intent bitmap stored after it (one bit per group of rows that may
// have a write in flight; rows whose bit is set at assembly get their
// redundancy recomputed, so a crash mid-stripe never leaves parity silently
// wrong).
//
// On-member layout (little-endian, version 1; see docs/storage-engine.md):
//   [0, 4096)                     superblock, CRC32C over its first 4092 bytes
//   [4096, 4096 + bitmap area)    bitmap: u32 crc32c, u32 magic, u64 bits, bits
//   [data_offset, ...)            rows of strip_bytes each
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/status.h"

namespace kvtier::blk {

inline constexpr uint32_t kRaidSuperblockBytes = 4096;
inline constexpr uint32_t kRaidSuperblockVersion = 1;
inline constexpr size_t kRaidMaxMembers = 64;
inline constexpr size_t kRaidNameBytes = 64;
// Geometry caps. Assembly sizes allocations from a superblock read off a
// device, which anyone with write access to a member can craft: every size
// it implies is bounded here, so a hostile member is refused, never a
// gigabyte allocation or a crash at every start.
inline constexpr uint32_t kRaidMinBlockBytes = 512;
inline constexpr uint32_t kRaidMaxBlockBytes = 4096;
inline constexpr uint64_t kRaidMaxStripBytes = 64ull << 20;
inline constexpr uint64_t kRaidMaxBitmapBits = 64 * 1024 * 8;  // a 64 KiB bitmap
inline constexpr uint64_t kRaidMaxBitmapAreaBytes = 128 << 10;
inline constexpr uint64_t kRaidMaxRows = 1ull << 40;

enum class MemberState : uint8_t {
  kActive = 0,      // holds current data
  kFailed = 1,      // out of the array (error budget spent, missing, or never rebuilt)
  kRebuilding = 2,  // a replacement; rows below recovery_row are current
};
const char* member_state_name(MemberState s);

struct RaidSuperblock {
  std::array<uint8_t, 16> uuid{};  // the array's identity
  uint64_t event = 0;              // bumped on every state change; newest wins
  uint32_t level = 0;              // 1, 5, 6 or 10
  uint32_t member_count = 0;
  uint32_t member_index = 0;  // this member's slot
  uint32_t block_size = 0;
  uint32_t copies = 0;  // RAID1/10: members per mirror group
  uint32_t clean = 0;   // 1 after an orderly close
  uint64_t strip_bytes = 0;
  uint64_t data_offset = 0;  // where rows start on each member
  uint64_t rows = 0;         // rows per member
  uint64_t bitmap_offset = 0;
  uint64_t bitmap_area_bytes = 0;  // reserved for the bitmap (header included)
  uint64_t rows_per_bit = 0;
  uint64_t recovery_row = 0;  // for a kRebuilding member
  std::array<MemberState, kRaidMaxMembers> states{};
  std::string name;  // at most kRaidNameBytes - 1 bytes

  // 4096 bytes, checksummed.
  void encode(MutableByteView out) const;
  static Result<RaidSuperblock> decode(ByteView in);
};

// Bitmap area: header + bits. decode fails (kCorruption) on a bad checksum;
// callers then treat every row as dirty.
void encode_bitmap(const std::vector<uint8_t>& bits, uint64_t nbits, MutableByteView out);
Result<std::vector<uint8_t>> decode_bitmap(ByteView in, uint64_t nbits);
inline constexpr uint64_t kBitmapHeaderBytes = 16;

}  // namespace kvtier::blk
