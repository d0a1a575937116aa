// RAID assembly from members someone else may have written: crafted
// superblocks are refused before anything is sized from them, and a parity
// array that comes back dirty and degraded (the write hole) is refused
// unless forced, keeping its dirty marks either way.
#include <gtest/gtest.h>

#include <cstring>

#include "blk/dev/mem_device.h"
#include "blk/raid/raid_array.h"
#include "blk/testing/test_util.h"

namespace kvtier::blk {
namespace {

constexpr uint64_t kMemberBytes = 3ull << 20;
constexpr uint32_t kBlock = 512;

using testing::as_devices;

std::vector<std::shared_ptr<MemDevice>> make_raid5(const std::string& name) {
  auto mems = testing::mem_members(3, kMemberBytes, kBlock);
  RaidOptions o;
  o.level = RaidLevel::kRaid5;
  o.strip_bytes = 8 << 10;
  o.name = name;
  auto a = RaidArray::create(as_devices(mems), o);
  EXPECT_TRUE(a.ok()) << a.status().to_string();
  if (a.ok()) {
    AlignedBuffer buf((*a)->capacity(), 4096);
    testing::fill_pattern(buf.view(), 5);
    EXPECT_TRUE((*a)->write_sync(0, buf.view()).ok());
  }
  return mems;  // closed cleanly
}

void rewrite_superblock(MemDevice& m, const std::function<void(RaidSuperblock&)>& edit) {
  auto sb = RaidArray::read_superblock(m);
  ASSERT_TRUE(sb.ok());
  edit(*sb);
  AlignedBuffer buf(kRaidSuperblockBytes, 4096);
  sb->encode(buf.view());  // a valid checksum: only the geometry is hostile
  std::memcpy(m.raw().data(), buf.data(), kRaidSuperblockBytes);
}

TEST(RaidHostileTest, CraftedGeometryIsRefusedBeforeAnythingIsSized) {
  const std::vector<std::pair<std::string, std::function<void(RaidSuperblock&)>>> crafted = {
      {"strip of one byte", [](RaidSuperblock& s) { s.block_size = 1, s.strip_bytes = 1; }},
      {"block not a power of two", [](RaidSuperblock& s) { s.block_size = 3000; }},
      {"huge strip", [](RaidSuperblock& s) { s.strip_bytes = 1ull << 40; }},
      {"bitmap of 2^30 bits",
       [](RaidSuperblock& s) {
         s.rows = 1ull << 30;
         s.rows_per_bit = 1;
         s.bitmap_area_bytes = 16 + (1ull << 27);
         s.data_offset = s.bitmap_offset + s.bitmap_area_bytes;
       }},
      {"raid5 of two members", [](RaidSuperblock& s) { s.member_count = 2; }},
  };
  for (const auto& [what, edit] : crafted) {
    auto mems = make_raid5("crafted");
    for (auto& m : mems) rewrite_superblock(*m, edit);
    auto sb = RaidArray::read_superblock(*mems[0]);
    EXPECT_EQ(sb.status().code(), StatusCode::kCorruption) << what;
    auto a = RaidArray::assemble(as_devices(mems));
    EXPECT_FALSE(a.ok()) << what << " was assembled";
  }
}

TEST(RaidHostileTest, MembersThatDisagreeOnAnyGeometryFieldAreRefused) {
  auto mems = make_raid5("disagree");
  rewrite_superblock(*mems[1], [](RaidSuperblock& s) { s.rows_per_bit *= 2; });
  auto a = RaidArray::assemble(as_devices(mems));
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("disagrees"), std::string::npos) << a.status().to_string();
}

// Bits in the write-intent bitmap of the array `sb` describes.
uint64_t bitmap_bits(const RaidSuperblock& sb) {
  return (sb.rows + sb.rows_per_bit - 1) / sb.rows_per_bit;
}

// Writes `bits` as every member's write-intent bitmap, as a crash would
// leave it.
void write_bitmap(const std::vector<std::shared_ptr<MemDevice>>& mems, const RaidSuperblock& sb,
                  const std::vector<uint8_t>& bits) {
  AlignedBuffer bm(sb.bitmap_area_bytes, 4096);
  encode_bitmap(bits, bitmap_bits(sb), bm.view());
  for (auto& m : mems) std::memcpy(m->raw().data() + sb.bitmap_offset, bm.data(), bm.size());
}

TEST(RaidHostileTest, DirtyAndDegradedParityArrayIsRefusedUnlessForcedAndKeepsItsMarks) {
  auto mems = make_raid5("hole");
  auto sb = RaidArray::read_superblock(*mems[0]);
  ASSERT_TRUE(sb.ok());
  const uint64_t nbits = bitmap_bits(*sb);
  // A crash mid-write: every member's bitmap says some rows were in flight.
  std::vector<uint8_t> bits((nbits + 7) / 8, 0);
  bits[0] = 0x01;
  write_bitmap(mems, *sb, bits);
  const size_t bitmap_bytes = sb->bitmap_area_bytes;

  // ... and then a member is lost.
  std::vector<std::shared_ptr<BlockDevice>> two{mems[0], mems[1]};
  auto refused = RaidArray::assemble(two);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("write hole"), std::string::npos);
  // The refusal left the marks on the members.
  auto still =
      decode_bitmap(ByteView(mems[0]->raw().data() + sb->bitmap_offset, bitmap_bytes), nbits);
  ASSERT_TRUE(still.ok());
  EXPECT_EQ((*still)[0] & 1, 1);

  RaidRuntimeOptions force;
  force.force_dirty_degraded = true;
  {
    auto a = RaidArray::assemble(two, force);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    EXPECT_EQ((*a)->status().state, ArrayState::kDegraded);
    // The row could not be resynced: its bit stays set, not counted as done.
    EXPECT_GE((*a)->status().dirty_bits, 1u);
  }
  // Closed again: still dirty on the members, for whoever comes next.
  still = decode_bitmap(ByteView(mems[0]->raw().data() + sb->bitmap_offset, bitmap_bytes), nbits);
  ASSERT_TRUE(still.ok());
  EXPECT_EQ((*still)[0] & 1, 1);
}

TEST(RaidHostileTest, DirtyButWholeArrayIsResyncedAndCleared) {
  auto mems = make_raid5("whole");
  auto sb = RaidArray::read_superblock(*mems[0]);
  ASSERT_TRUE(sb.ok());
  // Every row marked in flight.
  write_bitmap(mems, *sb, std::vector<uint8_t>((bitmap_bits(*sb) + 7) / 8, 0xff));
  auto a = RaidArray::assemble(as_devices(mems));
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ((*a)->status().dirty_bits, 0u);
  auto bad = (*a)->count_inconsistent_rows();
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(*bad, 0u);
}

}  // namespace
}  // namespace kvtier::blk
