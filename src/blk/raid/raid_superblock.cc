#include "blk/raid/raid_superblock.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/crc32c.h"
#include "common/enum_name.h"

namespace kvtier::blk {

namespace {

constexpr char kMagic[8] = {'K', 'V', 'T', 'R', 'A', 'I', 'D', '1'};
constexpr uint32_t kBitmapMagic = 0x50414d42;  // "BMAP"
constexpr size_t kCrcOffset = kRaidSuperblockBytes - 4;

// Explicit little-endian field writer/reader (no packed structs).
class Writer {
 public:
  explicit Writer(std::byte* p) : p_(p) {}
  void u8(uint8_t v) { p_[pos_++] = static_cast<std::byte>(v); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) u8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) u8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void bytes(const void* src, size_t n) {
    if (n == 0) return;  // an empty vector's data() may be null
    std::memcpy(p_ + pos_, src, n);
    pos_ += n;
  }

 private:
  std::byte* p_;
  size_t pos_ = 0;
};

class Reader {
 public:
  explicit Reader(const std::byte* p) : p_(p) {}
  uint8_t u8() { return static_cast<uint8_t>(p_[pos_++]); }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(u8()) << (8 * i);
    return v;
  }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(u8()) << (8 * i);
    return v;
  }
  void bytes(void* dst, size_t n) {
    std::memcpy(dst, p_ + pos_, n);
    pos_ += n;
  }

 private:
  const std::byte* p_;
  size_t pos_ = 0;
};

uint32_t load_u32(const std::byte* p) {
  Reader r(p);
  return r.u32();
}

}  // namespace

const char* member_state_name(MemberState s) {
  static constexpr const char* kNames[] = {"active", "failed", "rebuilding"};
  return enum_name<MemberState::kRebuilding>(s, kNames, "unknown");
}

void RaidSuperblock::encode(MutableByteView out) const {
  std::memset(out.data(), 0, kRaidSuperblockBytes);
  Writer w(out.data());
  w.bytes(kMagic, sizeof(kMagic));
  w.u32(kRaidSuperblockVersion);
  w.u32(kRaidSuperblockBytes);
  w.bytes(uuid.data(), uuid.size());
  w.u64(event);
  w.u32(level);
  w.u32(member_count);
  w.u32(member_index);
  w.u32(block_size);
  w.u32(copies);
  w.u32(clean);
  w.u64(strip_bytes);
  w.u64(data_offset);
  w.u64(rows);
  w.u64(bitmap_offset);
  w.u64(bitmap_area_bytes);
  w.u64(rows_per_bit);
  w.u64(recovery_row);
  for (MemberState s : states) w.u8(static_cast<uint8_t>(s));
  char nm[kRaidNameBytes] = {};
  std::memcpy(nm, name.data(), std::min(name.size(), kRaidNameBytes - 1));
  w.bytes(nm, sizeof(nm));
  Writer(out.data() + kCrcOffset).u32(crc32c(out.data(), kCrcOffset));
}

Result<RaidSuperblock> RaidSuperblock::decode(ByteView in) {
  if (in.size() < kRaidSuperblockBytes) return Status::corruption("raid superblock: short read");
  if (std::memcmp(in.data(), kMagic, sizeof(kMagic)) != 0) {
    return Status::not_found("no kvtier raid superblock (bad magic)");
  }
  if (load_u32(in.data() + kCrcOffset) != crc32c(in.data(), kCrcOffset)) {
    return Status::corruption("raid superblock: checksum mismatch");
  }
  Reader r(in.data() + sizeof(kMagic));
  const uint32_t version = r.u32();
  if (version != kRaidSuperblockVersion) {
    return Status::corruption(fmt::format("raid superblock: unsupported version {}", version));
  }
  if (r.u32() != kRaidSuperblockBytes) return Status::corruption("raid superblock: bad size");
  RaidSuperblock sb;
  r.bytes(sb.uuid.data(), sb.uuid.size());
  sb.event = r.u64();
  sb.level = r.u32();
  sb.member_count = r.u32();
  sb.member_index = r.u32();
  sb.block_size = r.u32();
  sb.copies = r.u32();
  sb.clean = r.u32();
  sb.strip_bytes = r.u64();
  sb.data_offset = r.u64();
  sb.rows = r.u64();
  sb.bitmap_offset = r.u64();
  sb.bitmap_area_bytes = r.u64();
  sb.rows_per_bit = r.u64();
  sb.recovery_row = r.u64();
  for (auto& s : sb.states) {
    const uint8_t v = r.u8();
    if (v > static_cast<uint8_t>(MemberState::kRebuilding)) {
      return Status::corruption(fmt::format("raid superblock: bad member state {}", v));
    }
    s = static_cast<MemberState>(v);
  }
  char nm[kRaidNameBytes];
  r.bytes(nm, sizeof(nm));
  nm[kRaidNameBytes - 1] = '\0';
  sb.name = nm;
  // Geometry sanity: never trust a length read from a device.
  if (sb.member_count == 0 || sb.member_count > kRaidMaxMembers ||
      sb.member_index >= sb.member_count || sb.block_size == 0 || sb.strip_bytes == 0 ||
      sb.strip_bytes % sb.block_size != 0 || sb.rows_per_bit == 0 || sb.rows == 0 ||
      sb.bitmap_offset < kRaidSuperblockBytes || sb.recovery_row > sb.rows) {
    return Status::corruption("raid superblock: inconsistent geometry");
  }
  // Sums and products below are checked so that no field can wrap them.
  const uint64_t bits = sb.rows / sb.rows_per_bit + (sb.rows % sb.rows_per_bit != 0 ? 1 : 0);
  const uint64_t bitmap_bytes = bits / 8 + (bits % 8 != 0 ? 1 : 0);
  if (sb.bitmap_area_bytes < kBitmapHeaderBytes ||
      sb.bitmap_area_bytes - kBitmapHeaderBytes < bitmap_bytes ||
      sb.bitmap_area_bytes > UINT64_MAX - sb.bitmap_offset ||
      sb.data_offset < sb.bitmap_offset + sb.bitmap_area_bytes ||
      sb.rows > (UINT64_MAX - sb.data_offset) / sb.strip_bytes) {
    return Status::corruption("raid superblock: inconsistent geometry");
  }
  if (sb.level != 1 && sb.level != 5 && sb.level != 6 && sb.level != 10) {
    return Status::corruption(fmt::format("raid superblock: unknown level {}", sb.level));
  }
  const bool pow2 = (sb.block_size & (sb.block_size - 1)) == 0;
  if (!pow2 || sb.block_size < kRaidMinBlockBytes || sb.block_size > kRaidMaxBlockBytes ||
      sb.strip_bytes > kRaidMaxStripBytes || bits > kRaidMaxBitmapBits ||
      sb.bitmap_area_bytes > kRaidMaxBitmapAreaBytes || sb.rows > kRaidMaxRows ||
      sb.data_offset % sb.block_size != 0) {
    return Status::corruption(fmt::format(
        "raid superblock: geometry beyond kvtier's caps (block {}, strip {}, {} bitmap bits, "
        "bitmap area {}, {} rows)",
        sb.block_size, sb.strip_bytes, bits, sb.bitmap_area_bytes, sb.rows));
  }
  // Members per level, as create() requires them.
  const uint32_t n = sb.member_count;
  const bool members_ok =
      (sb.level == 1 && n >= 2 && sb.copies == n) || (sb.level == 5 && n >= 3) ||
      (sb.level == 6 && n >= 4) ||
      (sb.level == 10 && sb.copies >= 2 && n % sb.copies == 0 && n >= 2 * sb.copies);
  if (!members_ok) {
    return Status::corruption(
        fmt::format("raid superblock: {} members ({} copies) for raid{}", n, sb.copies, sb.level));
  }
  return sb;
}

void encode_bitmap(const std::vector<uint8_t>& bits, uint64_t nbits, MutableByteView out) {
  std::memset(out.data(), 0, out.size());
  Writer w(out.data() + 4);
  w.u32(kBitmapMagic);
  w.u64(nbits);
  w.bytes(bits.data(), bits.size());
  Writer(out.data()).u32(crc32c(out.data() + 4, kBitmapHeaderBytes - 4 + bits.size()));
}

Result<std::vector<uint8_t>> decode_bitmap(ByteView in, uint64_t nbits) {
  // Written so that no bit count overflows (found by the fuzzer).
  const uint64_t nbytes = nbits / 8 + (nbits % 8 != 0 ? 1 : 0);
  if (in.size() < kBitmapHeaderBytes || in.size() - kBitmapHeaderBytes < nbytes) {
    return Status::corruption("bitmap: short area");
  }
  if (load_u32(in.data() + 4) != kBitmapMagic) return Status::corruption("bitmap: bad magic");
  Reader r(in.data() + 8);
  if (r.u64() != nbits) return Status::corruption("bitmap: bit count mismatch");
  if (load_u32(in.data()) != crc32c(in.data() + 4, kBitmapHeaderBytes - 4 + nbytes)) {
    return Status::corruption("bitmap: checksum mismatch");
  }
  std::vector<uint8_t> bits(nbytes);
  if (nbytes > 0) std::memcpy(bits.data(), in.data() + kBitmapHeaderBytes, nbytes);
  return bits;
}

}  // namespace kvtier::blk
