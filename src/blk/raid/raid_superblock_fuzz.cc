// libFuzzer target over the RAID member superblock and write-intent bitmap
// parsers (blk/raid/raid_superblock.h): what kvtier reads from a member at
// assembly, i.e. bytes a damaged or foreign disk controls. Built and run by
// scripts/fuzz-raid.sh (clang, ASan, UBSan).
//
// Input: byte 0 = flags, bytes 1..8 = a bit count (little-endian), then the
// superblock page (zero-padded to 4096 bytes) and the bitmap area. The flags
// let the fuzzer get past the magic and the checksums, which random bytes
// almost never match, so that it explores the field checks behind them:
//   bit 0: stamp the superblock magic
//   bit 1: fix the superblock CRC
//   bit 2: stamp the bitmap magic and bit count, fix its CRC
//   bit 3: take the bit count from the decoded superblock's geometry
// Properties: nothing crashes or reads out of bounds; a superblock that
// decodes re-encodes to one that decodes to the same fields; a bitmap that
// decodes has exactly ceil(bits / 8) bytes and re-encodes to the same area.
// Findings so far: an empty bitmap memcpy'd from a null pointer (UBSan), and
// bit counts and geometry sums that could wrap; all fixed, inputs kept in
// the corpus as regress-*.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "blk/raid/raid_superblock.h"
#include "common/buffer.h"
#include "common/crc32c.h"

namespace {

using kvtier::AlignedBuffer;
using kvtier::ByteView;
using namespace kvtier::blk;

void store_u32(std::byte* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}

bool same(const RaidSuperblock& a, const RaidSuperblock& b) {
  return a.uuid == b.uuid && a.event == b.event && a.level == b.level &&
         a.member_count == b.member_count && a.member_index == b.member_index &&
         a.block_size == b.block_size && a.copies == b.copies && a.clean == b.clean &&
         a.strip_bytes == b.strip_bytes && a.data_offset == b.data_offset && a.rows == b.rows &&
         a.bitmap_offset == b.bitmap_offset && a.bitmap_area_bytes == b.bitmap_area_bytes &&
         a.rows_per_bit == b.rows_per_bit && a.recovery_row == b.recovery_row &&
         a.states == b.states && a.name == b.name;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 9) return 0;
  const uint8_t flags = data[0];
  uint64_t nbits = 0;
  for (int i = 0; i < 8; ++i) nbits |= uint64_t{data[1 + i]} << (8 * i);
  data += 9;
  size -= 9;

  // The raw bytes as they are, whatever their length.
  (void)RaidSuperblock::decode(ByteView(reinterpret_cast<const std::byte*>(data), size));

  AlignedBuffer page(kRaidSuperblockBytes);
  std::memset(page.data(), 0, page.size());
  std::memcpy(page.data(), data, std::min<size_t>(size, kRaidSuperblockBytes));
  if (flags & 1) std::memcpy(page.data(), "KVTRAID1", 8);
  if (flags & 2) {
    store_u32(page.data() + kRaidSuperblockBytes - 4,
              kvtier::crc32c(page.data(), kRaidSuperblockBytes - 4));
  }
  auto sb = RaidSuperblock::decode(page.view());
  if (sb.ok()) {
    AlignedBuffer again(kRaidSuperblockBytes);
    sb->encode(again.view());
    auto back = RaidSuperblock::decode(again.view());
    if (!back.ok() || !same(*sb, *back)) std::abort();
    if (flags & 8) nbits = sb->rows / sb->rows_per_bit + (sb->rows % sb->rows_per_bit != 0);
  }

  // The bitmap area: whatever follows the page.
  const size_t rest = size > kRaidSuperblockBytes ? size - kRaidSuperblockBytes : 0;
  std::vector<std::byte> area(rest);
  if (rest > 0) std::memcpy(area.data(), data + kRaidSuperblockBytes, rest);
  if ((flags & 4) && rest >= kBitmapHeaderBytes) {
    store_u32(area.data() + 4, 0x50414d42);  // "BMAP"
    for (int i = 0; i < 8; ++i) area[8 + i] = static_cast<std::byte>(nbits >> (8 * i));
    const uint64_t nbytes = nbits / 8 + (nbits % 8 != 0);
    const size_t covered = static_cast<size_t>(
        std::min<uint64_t>(rest - kBitmapHeaderBytes, nbytes) + kBitmapHeaderBytes - 4);
    store_u32(area.data(), kvtier::crc32c(area.data() + 4, covered));
  }
  auto bits = decode_bitmap(ByteView(area.data(), area.size()), nbits);
  if (bits.ok()) {
    const uint64_t nbytes = nbits / 8 + (nbits % 8 != 0);
    if (bits->size() != nbytes) std::abort();
    std::vector<std::byte> re(kBitmapHeaderBytes + nbytes);
    encode_bitmap(*bits, nbits, kvtier::MutableByteView(re.data(), re.size()));
    if (std::memcmp(re.data(), area.data(), re.size()) != 0) std::abort();
  }
  return 0;
}
