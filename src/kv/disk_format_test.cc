// Pins the on-volume format of the disk tier (docs/disk-format.md): golden
// bytes of the structs, built by hand and as the store writes them, and what
// an open does with a superblock, checkpoint or entry that does not verify.
#include "kv/disk_format.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>

#include "blk/dev/mem_device.h"
#include "common/crc32c.h"
#include "kv/namespace.h"
#include "kv/store.h"

namespace kvtier::kv {
namespace {

using disk::CheckpointEntry;
using disk::CheckpointHeader;
using disk::CheckpointRegion;
using disk::EntryHeader;
using disk::Superblock;

// The documented example (docs/disk-format.md, "Golden bytes"): block key 0
// of namespace N1 of docs/block-keys.md holding the 13 bytes "hello, kvtier",
// on an 8 MiB volume with 1 MiB regions, volume id 0x0123456789abcdef.
constexpr uint64_t kVolumeId = 0x0123456789ABCDEFull;
constexpr Key128 kKey{0x128f96c6c3911c8eull, 0xa33dfc521e4f25a6ull};
constexpr Key128 kNsDigest{0x5ca6fbe112807d0aull, 0x8e68402437311ff4ull};
constexpr char kPayload[] = "hello, kvtier";
constexpr uint32_t kPayloadLen = sizeof(kPayload) - 1;
constexpr uint64_t kVolumeBytes = 8ull << 20;
constexpr uint64_t kDataOffset = 1ull << 20;

constexpr uint32_t kPayloadCrc = 0x0029b39d;
constexpr uint32_t kEntryHeaderCrc = 0xb5add3a7;
constexpr uint32_t kSuperblockCrc = 0xc11cbaf6;  // freshly formatted
constexpr uint32_t kCheckpointCrc = 0xdfe4c668;
constexpr uint32_t kClosedSuperblockCrc = 0x15985285;  // after close()

const char* const kEntryHex =
    "4b565445020080000100000000000000"   // magic "KVTE", version 2, header_bytes 128, region_seq 1
    "efcdab89674523018e1c91c3c6968f12"   // volume_id, key_hi
    "a6254f1e52fc3da30a7d8012e1fba65c"   // key_lo, ns_hi
    "f41f31372440688e0d0000009db32900"   // ns_lo, payload_bytes 13, payload_crc
    "a7d3adb5000000000000000000000000"   // header_crc, reserved[0..2]
    "00000000000000000000000000000000"   // reserved
    "00000000000000000000000000000000"   // reserved
    "00000000000000000000000000000000";  // reserved[11..14]

const char* const kSuperblockHex =
    "4b56545302000000f6ba1cc100100000"  // "KVTS", version 2, reserved0, header_crc, page_bytes
    "efcdab89674523010000100000000000"  // volume_id, region_bytes 1 MiB
    "00001000000000000010000000000000"  // data_offset 1 MiB, checkpoint_offset 4096
    "00200000000000000700000000000000"  // checkpoint_capacity 8192, region_count 7, state 0
    "00000000000000000000000000000000"  // checkpoint_bytes 0, checkpoint_crc 0, reserved1
    "0100000000000000";                 // seq_floor 1

const char* const kClosedSuperblockHex =
    "4b565453020000008552981500100000"
    "efcdab89674523010000100000000000"
    "00001000000000000010000000000000"
    "00200000000000000700000001000000"  // ... checkpoint_state 1 (valid)
    "c80000000000000068c6e4df00000000"  // checkpoint_bytes 200, checkpoint_crc
    "0104000000000000";                 // seq_floor 1025

const char* const kCheckpointHex =
    "4b56544302000000efcdab8967452301"  // magic "KVTC", version 2, reserved0, volume_id
    "02000000000000000700000000000000"  // next_region_seq 2, region_count 7, reserved1
    "0100000000000000"                  // entry_count 1
    "01000000000000000020000001000000"  // region 0: seq 1, fill 8192, sealed
    "00000000000000000000000000000000"  // regions 1..6: free
    "00000000000000000000000000000000"
    "00000000000000000000000000000000"
    "00000000000000000000000000000000"
    "00000000000000000000000000000000"
    "00000000000000000000000000000000"
    "8e1c91c3c6968f12a6254f1e52fc3da3"   // entry: key_hi, key_lo
    "0a7d8012e1fba65cf41f31372440688e"   // ns_hi, ns_lo
    "000100000d0000000000000000000000";  // page 256, payload_bytes 13, disk_hits 0, reserved

std::string hex(const void* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) {
    s += digits[b[i] >> 4];
    s += digits[b[i] & 15];
  }
  return s;
}

template <typename T>
std::string hex(const T& v) {
  return hex(&v, sizeof(v));
}

bool all_zero(const std::byte* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != std::byte{0}) return false;
  }
  return true;
}

template <typename T>
uint32_t crc_with_zeroed_field(T v) {
  v.header_crc = 0;
  return crc32c(&v, sizeof(v));
}

EntryHeader golden_entry() {
  EntryHeader h{};
  h.magic = disk::kEntryMagic;
  h.version = disk::kFormatVersion;
  h.header_bytes = sizeof(EntryHeader);
  h.region_seq = 1;
  h.volume_id = kVolumeId;
  h.key_hi = kKey.hi;
  h.key_lo = kKey.lo;
  h.ns_hi = kNsDigest.hi;
  h.ns_lo = kNsDigest.lo;
  h.payload_bytes = kPayloadLen;
  h.payload_crc = crc32c(kPayload, kPayloadLen);
  h.header_crc = crc_with_zeroed_field(h);
  return h;
}

Superblock golden_superblock() {
  Superblock s{};
  s.magic = disk::kSuperMagic;
  s.version = disk::kFormatVersion;
  s.page_bytes = disk::kPageBytes;
  s.volume_id = kVolumeId;
  s.region_bytes = 1ull << 20;
  s.data_offset = kDataOffset;
  s.checkpoint_offset = disk::kPageBytes;
  s.checkpoint_capacity = 8192;
  s.region_count = 7;
  s.checkpoint_state = disk::kNoCheckpoint;
  s.seq_floor = 1;
  s.header_crc = crc_with_zeroed_field(s);
  return s;
}

Namespace n1() {  // N1 of docs/block-keys.md
  return Namespace::of_model("llama-3-8b", "r1", "llama3-tok", 4);
}

StoreOptions options(std::shared_ptr<blk::BlockDevice> volume) {
  StoreOptions o;
  o.ram_bytes = 0;  // every put goes straight to the volume
  o.max_object_bytes = 64u << 10;
  o.volume = std::move(volume);
  o.disk.region_bytes = 1ull << 20;
  o.disk.flush_chunk_bytes = 256u << 10;
  o.disk.read_depth = 4;
  o.io_timeout_ms = 1000;
  return o;
}

Superblock superblock_of(blk::MemDevice& mem) {
  Superblock s;
  std::memcpy(&s, mem.raw().data(), sizeof(s));
  return s;
}

void put_superblock(blk::MemDevice& mem, const Superblock& s) {
  std::memcpy(mem.raw().data(), &s, sizeof(s));
}

// A volume holding the documented block, closed cleanly (valid checkpoint).
std::shared_ptr<blk::MemDevice> closed_volume() {
  auto mem = std::make_shared<blk::MemDevice>(kVolumeBytes);
  auto store = Store::open(options(mem));
  EXPECT_TRUE(store.ok()) << store.status().to_string();
  auto ns = (*store)->register_namespace(n1());
  EXPECT_TRUE(ns.ok());
  auto put =
      (*store)->put(*ns, kKey, ByteView(reinterpret_cast<const std::byte*>(kPayload), kPayloadLen));
  EXPECT_TRUE(put.ok() && put->stored());
  EXPECT_TRUE((*store)->close().ok());
  return mem;
}

std::shared_ptr<blk::MemDevice> copy_of(blk::MemDevice& mem) {
  auto copy = std::make_shared<blk::MemDevice>(mem.capacity());
  std::memcpy(copy->raw().data(), mem.raw().data(), mem.capacity());
  return copy;
}

struct Opened {
  std::unique_ptr<Store> store;
  uint16_t ns = 0;
  StoreStats stats;
  // Whether the documented block is found, with its bytes.
  bool finds_block() {
    std::byte out[64];
    auto r = store->get(ns, kKey, MutableByteView(out, sizeof(out)));
    EXPECT_TRUE(r.ok());
    if (!r->hit) return false;
    EXPECT_EQ(r->length, kPayloadLen);
    EXPECT_EQ(std::memcmp(out, kPayload, kPayloadLen), 0);
    return true;
  }
};

Opened open_store(std::shared_ptr<blk::MemDevice> mem) {
  Opened o;
  auto s = Store::open(options(std::move(mem)));
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  o.store = std::move(s).value();
  o.ns = *o.store->register_namespace(n1());
  o.stats = o.store->local_stats();
  return o;
}

TEST(DiskFormat, Crc32cCheckValue) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c(kPayload, kPayloadLen), kPayloadCrc);
}

TEST(DiskFormat, StructSizesAndFieldOffsets) {
  EXPECT_EQ(sizeof(Superblock), 88u);
  EXPECT_EQ(offsetof(Superblock, seq_floor), 80u);
  EXPECT_EQ(offsetof(Superblock, header_crc), 8u);
  EXPECT_EQ(offsetof(Superblock, volume_id), 16u);
  EXPECT_EQ(offsetof(Superblock, region_count), 56u);
  EXPECT_EQ(offsetof(Superblock, checkpoint_state), 60u);
  EXPECT_EQ(offsetof(Superblock, checkpoint_bytes), 64u);
  EXPECT_EQ(offsetof(Superblock, checkpoint_crc), 72u);
  EXPECT_EQ(sizeof(EntryHeader), 128u);
  EXPECT_EQ(offsetof(EntryHeader, region_seq), 8u);
  EXPECT_EQ(offsetof(EntryHeader, payload_bytes), 56u);
  EXPECT_EQ(offsetof(EntryHeader, header_crc), 64u);
  EXPECT_EQ(offsetof(EntryHeader, flags), 68u);
  EXPECT_EQ(offsetof(EntryHeader, reserved), 72u);
  EXPECT_EQ(sizeof(CheckpointHeader), 40u);
  EXPECT_EQ(offsetof(CheckpointHeader, entry_count), 32u);
  EXPECT_EQ(sizeof(CheckpointRegion), 16u);
  EXPECT_EQ(sizeof(CheckpointEntry), 48u);
  EXPECT_EQ(offsetof(CheckpointEntry, page), 32u);
  EXPECT_EQ(offsetof(CheckpointEntry, disk_hits), 40u);
  // Version 2: a header page, then the payload from a page boundary.
  EXPECT_EQ(disk::kPayloadOffset, 4096u);
  EXPECT_EQ(disk::entry_bytes(1), 8192u);
  EXPECT_EQ(disk::entry_bytes(4096), 8192u);
  EXPECT_EQ(disk::entry_bytes(4097), 12288u);
  EXPECT_EQ(disk::entry_bytes(1536u << 10), (1536u << 10) + 4096u);
}

TEST(DiskFormat, EntryHeaderGoldenBytes) {
  const EntryHeader h = golden_entry();
  EXPECT_EQ(h.payload_crc, kPayloadCrc);
  EXPECT_EQ(h.header_crc, kEntryHeaderCrc);
  EXPECT_EQ(hex(h), kEntryHex);
}

TEST(DiskFormat, SuperblockGoldenBytes) {
  const Superblock s = golden_superblock();
  EXPECT_EQ(s.header_crc, kSuperblockCrc);
  EXPECT_EQ(hex(s), kSuperblockHex);
}

TEST(DiskFormat, NamespaceOfTheExampleIsN1) {
  const Key128 d = n1().digest();
  EXPECT_EQ(d, kNsDigest) << d.to_hex();
}

// The store writes exactly the documented bytes, up to the random volume id:
// substitute the documented one, recompute the CRCs as docs/disk-format.md
// defines them, and the golden bytes come out.
TEST(DiskFormat, StoreWritesTheGoldenImage) {
  auto mem = std::make_shared<blk::MemDevice>(kVolumeBytes);
  {
    auto store = Store::open(options(mem));
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    Superblock s = superblock_of(*mem);
    EXPECT_NE(s.volume_id, 0u);
    EXPECT_EQ(crc_with_zeroed_field(s), s.header_crc);
    s.volume_id = kVolumeId;
    s.header_crc = crc_with_zeroed_field(s);
    EXPECT_EQ(hex(s), kSuperblockHex);
    EXPECT_TRUE(all_zero(mem->raw().data() + sizeof(s), disk::kPageBytes - sizeof(s)));

    auto ns = (*store)->register_namespace(n1());
    ASSERT_TRUE(ns.ok());
    auto put = (*store)->put(*ns, kKey,
                             ByteView(reinterpret_cast<const std::byte*>(kPayload), kPayloadLen));
    ASSERT_TRUE(put.ok() && put->stored());
    ASSERT_TRUE((*store)->close().ok());
  }
  const Superblock real = superblock_of(*mem);
  const std::byte* raw = mem->raw().data();

  // The entry: first page of region 0, at data_offset.
  EntryHeader e;
  std::memcpy(&e, raw + kDataOffset, sizeof(e));
  EXPECT_EQ(e.volume_id, real.volume_id);
  EXPECT_EQ(crc_with_zeroed_field(e), e.header_crc);
  // The header page is zero after the header; the payload starts on the next
  // page and its page is zero after it.
  EXPECT_TRUE(all_zero(raw + kDataOffset + sizeof(e), disk::kPageBytes - sizeof(e)));
  const std::byte* payload = raw + kDataOffset + disk::kPayloadOffset;
  EXPECT_EQ(std::memcmp(payload, kPayload, kPayloadLen), 0);
  EXPECT_TRUE(all_zero(payload + kPayloadLen, disk::kPageBytes - kPayloadLen));
  e.volume_id = kVolumeId;
  e.header_crc = crc_with_zeroed_field(e);
  EXPECT_EQ(hex(e), kEntryHex);

  // The checkpoint: at checkpoint_offset, checkpoint_bytes long, its CRC in
  // the superblock; the rest of its last page is zero.
  ASSERT_EQ(real.checkpoint_state, disk::kCheckpointValid);
  ASSERT_EQ(real.checkpoint_bytes, 200u);
  EXPECT_EQ(crc32c(raw + real.checkpoint_offset, real.checkpoint_bytes), real.checkpoint_crc);
  EXPECT_TRUE(all_zero(raw + real.checkpoint_offset + 200, disk::kPageBytes - 200));
  std::byte ckpt[200];
  std::memcpy(ckpt, raw + real.checkpoint_offset, sizeof(ckpt));
  CheckpointHeader ch;
  std::memcpy(&ch, ckpt, sizeof(ch));
  EXPECT_EQ(ch.volume_id, real.volume_id);
  ch.volume_id = kVolumeId;
  std::memcpy(ckpt, &ch, sizeof(ch));
  EXPECT_EQ(crc32c(ckpt, sizeof(ckpt)), kCheckpointCrc);
  EXPECT_EQ(hex(ckpt, sizeof(ckpt)), kCheckpointHex);

  Superblock s = real;
  EXPECT_EQ(crc_with_zeroed_field(s), s.header_crc);
  // Opening region 0 (generation 1) reserved generations up to 1025.
  EXPECT_EQ(s.seq_floor, 1025u);
  s.volume_id = kVolumeId;
  s.checkpoint_crc = crc32c(ckpt, sizeof(ckpt));
  s.header_crc = crc_with_zeroed_field(s);
  EXPECT_EQ(s.header_crc, kClosedSuperblockCrc);
  EXPECT_EQ(hex(s), kClosedSuperblockHex);
}

TEST(DiskFormat, CleanRestartLoadsTheCheckpointAndInvalidatesIt) {
  auto mem = closed_volume();
  Opened o = open_store(mem);
  EXPECT_TRUE(o.stats.disk.recovered_from_checkpoint);
  EXPECT_EQ(o.stats.disk.recovered_entries, 1u);
  EXPECT_TRUE(o.finds_block());
  // Invalidated before the first write: a crash from here on scans.
  const Superblock s = superblock_of(*mem);
  EXPECT_EQ(s.checkpoint_state, disk::kNoCheckpoint);
  EXPECT_EQ(crc_with_zeroed_field(s), s.header_crc);
  auto crashed = copy_of(*mem);
  Opened c = open_store(crashed);
  EXPECT_FALSE(c.stats.disk.recovered_from_checkpoint);
  EXPECT_EQ(c.stats.disk.recovered_entries, 1u);
  EXPECT_TRUE(c.finds_block());
}

TEST(DiskFormat, CheckpointThatDoesNotVerifyFallsBackToTheScan) {
  auto mem = closed_volume();
  const Superblock s = superblock_of(*mem);
  mem->raw()[s.checkpoint_offset + 100] ^= std::byte{0x01};  // checkpoint_crc no longer matches
  Opened o = open_store(mem);
  EXPECT_FALSE(o.stats.disk.recovered_from_checkpoint);
  EXPECT_EQ(o.stats.disk.recovered_entries, 1u);
  EXPECT_TRUE(o.finds_block());
}

void expect_reformatted(const std::shared_ptr<blk::MemDevice>& mem, uint64_t old_volume_id) {
  Opened o = open_store(mem);
  EXPECT_FALSE(o.stats.disk.recovered_from_checkpoint);
  EXPECT_EQ(o.stats.disk.recovered_entries, 0u);
  EXPECT_FALSE(o.finds_block());
  const Superblock s = superblock_of(*mem);
  EXPECT_EQ(s.magic, disk::kSuperMagic);
  EXPECT_EQ(s.version, disk::kFormatVersion);
  EXPECT_EQ(crc_with_zeroed_field(s), s.header_crc);
  EXPECT_NE(s.volume_id, old_volume_id);
  EXPECT_EQ(s.checkpoint_state, disk::kNoCheckpoint);
  // The old entry is still on the volume, but belongs to the old volume id:
  // a crash now, and the scan that follows, must not bring it back.
  EntryHeader e;
  std::memcpy(&e, mem->raw().data() + kDataOffset, sizeof(e));
  EXPECT_EQ(e.volume_id, old_volume_id);
  auto crashed = copy_of(*mem);
  Opened c = open_store(crashed);
  EXPECT_EQ(c.stats.disk.recovered_entries, 0u);
  EXPECT_FALSE(c.finds_block());
}

TEST(DiskFormat, SuperblockOfAnotherVersionIsReformatted) {
  auto mem = closed_volume();
  Superblock s = superblock_of(*mem);
  s.version = disk::kFormatVersion + 1;
  s.header_crc = crc_with_zeroed_field(s);  // well-formed, just another version
  put_superblock(*mem, s);
  expect_reformatted(mem, s.volume_id);
}

// A volume of format version 1 (80-byte superblock, payload right after the
// 128-byte entry header) is not read: it is reformatted, or refused with an
// error naming the version when reformatting is off.
TEST(DiskFormat, Version1VolumeIsReformattedOrRefused) {
  auto mem = closed_volume();
  Superblock s = superblock_of(*mem);
  const uint64_t old_id = s.volume_id;
  s.version = 1;
  s.seq_floor = 0;
  s.header_crc = 0;
  s.header_crc = crc32c(&s, 80);  // version 1 covered 80 bytes
  put_superblock(*mem, s);
  {
    StoreOptions o = options(mem);
    o.disk.format_if_invalid = false;
    auto st = Store::open(o);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(st.status().to_string().find("format version 1"), std::string::npos)
        << st.status().to_string();
    EXPECT_EQ(superblock_of(*mem).version, 1u);  // refused: nothing written
  }
  expect_reformatted(mem, old_id);
}

TEST(DiskFormat, SuperblockWithBadCrcIsReformatted) {
  auto mem = closed_volume();
  Superblock s = superblock_of(*mem);
  s.header_crc ^= 0x00000100;
  put_superblock(*mem, s);
  expect_reformatted(mem, s.volume_id);
}

TEST(DiskFormat, SuperblockOfAnotherGeometryIsReformatted) {
  auto mem = closed_volume();
  Superblock s = superblock_of(*mem);
  s.region_count = 6;
  s.header_crc = crc_with_zeroed_field(s);
  put_superblock(*mem, s);
  expect_reformatted(mem, s.volume_id);
}

TEST(DiskFormat, EntryOfAnotherVersionIsNotRecovered) {
  // Crash image: flushed, no checkpoint, so the open scans.
  auto mem = std::make_shared<blk::MemDevice>(kVolumeBytes);
  Opened w = open_store(mem);
  ASSERT_TRUE(
      w.store->put(w.ns, kKey, ByteView(reinterpret_cast<const std::byte*>(kPayload), kPayloadLen))
          .ok());
  ASSERT_TRUE(w.store->flush().ok());
  auto crashed = copy_of(*mem);
  EXPECT_EQ(open_store(copy_of(*crashed)).stats.disk.recovered_entries, 1u);
  EntryHeader e;
  std::memcpy(&e, crashed->raw().data() + kDataOffset, sizeof(e));
  e.version = disk::kFormatVersion + 1;
  e.header_crc = crc_with_zeroed_field(e);
  std::memcpy(crashed->raw().data() + kDataOffset, &e, sizeof(e));
  Opened c = open_store(crashed);
  EXPECT_EQ(c.stats.disk.recovered_entries, 0u);
  EXPECT_FALSE(c.finds_block());
}

}  // namespace
}  // namespace kvtier::kv
