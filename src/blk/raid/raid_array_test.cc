// Property tests of RaidArray against a reference model: random writes of
// random sizes and offsets, then reads compared byte for byte, through the
// healthy, degraded (members failed by FaultyDevice) and rebuilt states of
// every level; plus assembly from superblocks and the parity scrub.
#include "blk/raid/raid_array.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <thread>

#include "blk/dev/mem_device.h"
#include "blk/stack/faulty_device.h"
#include "blk/testing/test_util.h"

namespace kvtier::blk {
namespace {

using testing::fill_pattern;

constexpr uint64_t kMemberBytes = 3ull << 20;  // 1 MiB of metadata + 2 MiB of rows
constexpr uint32_t kBlock = 512;

struct Config {
  RaidLevel level;
  size_t members;
  uint64_t strip;
  uint32_t copies;
  size_t failures;  // members failed at once in the degraded phase
};

std::string config_name(const ::testing::TestParamInfo<Config>& info) {
  const Config& c = info.param;
  return fmt::format("{}_{}m_{}k_f{}", raid_level_name(c.level), c.members, c.strip >> 10,
                     c.failures);
}

class RaidModel {
 public:
  RaidModel(RaidArray& a, uint64_t seed) : a_(a), rng_(seed), model_(a.capacity(), std::byte{0}) {}

  // One random write of 1 block to ~3 rows, at a random aligned offset.
  void random_write() {
    const uint64_t blocks = a_.capacity() / kBlock;
    const uint64_t max_len = std::min<uint64_t>(blocks, 3 * a_.strip_bytes() * 4 / kBlock);
    const uint64_t len = (1 + rng_() % max_len) * kBlock;
    const uint64_t off = (rng_() % (blocks - len / kBlock + 1)) * kBlock;
    AlignedBuffer buf(len, 4096);
    fill_pattern(buf.view(), rng_());
    ASSERT_TRUE(a_.write_sync(off, buf.view()).ok()) << "write " << off << "+" << len;
    std::memcpy(model_.data() + off, buf.data(), len);
  }

  void random_read() {
    const uint64_t blocks = a_.capacity() / kBlock;
    const uint64_t len = (1 + rng_() % std::min<uint64_t>(blocks, 64)) * kBlock;
    const uint64_t off = (rng_() % (blocks - len / kBlock + 1)) * kBlock;
    AlignedBuffer buf(len, 4096);
    ASSERT_TRUE(a_.read_sync(off, buf.view()).ok());
    ASSERT_EQ(std::memcmp(buf.data(), model_.data() + off, len), 0) << "read " << off << "+" << len;
  }

  void verify_all() {
    AlignedBuffer buf(a_.capacity(), 4096);
    ASSERT_TRUE(a_.read_sync(0, buf.view()).ok());
    for (uint64_t off = 0; off < a_.capacity(); off += kBlock) {
      ASSERT_EQ(std::memcmp(buf.data() + off, model_.data() + off, kBlock), 0)
          << "block at " << off;
    }
  }

  void run(int writes, int reads) {
    for (int i = 0; i < writes; ++i) {
      random_write();
      if (::testing::Test::HasFatalFailure()) return;
    }
    for (int i = 0; i < reads; ++i) {
      random_read();
      if (::testing::Test::HasFatalFailure()) return;
    }
  }

 private:
  RaidArray& a_;
  std::mt19937_64 rng_;
  std::vector<std::byte> model_;
};

class RaidPropertyTest : public ::testing::TestWithParam<Config> {
 protected:
  void SetUp() override {
    const Config& c = GetParam();
    for (size_t i = 0; i < c.members; ++i) {
      mems_.push_back(std::make_shared<MemDevice>(kMemberBytes, kBlock));
      faulty_.push_back(std::make_shared<FaultyDevice>(mems_.back(), i + 1));
      members_.push_back(faulty_.back());
    }
    RaidOptions o;
    o.level = c.level;
    o.strip_bytes = c.strip;
    o.copies = c.copies;
    o.name = "prop";
    auto a = RaidArray::create(members_, o);
    ASSERT_TRUE(a.ok()) << a.status().message();
    array_ = std::move(*a);
  }

  std::vector<std::shared_ptr<MemDevice>> mems_;
  std::vector<std::shared_ptr<FaultyDevice>> faulty_;
  std::vector<std::shared_ptr<BlockDevice>> members_;
  std::unique_ptr<RaidArray> array_;
};

TEST_P(RaidPropertyTest, HealthyDegradedRebuilt) {
  const Config& c = GetParam();
  RaidModel model(*array_, 42 + c.members);
  // Healthy.
  model.run(150, 50);
  model.verify_all();
  if (HasFatalFailure()) return;
  auto bad = array_->count_inconsistent_rows();
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(*bad, 0u);

  // Degraded: members fail under I/O (every request to them errors).
  std::vector<size_t> victims;
  for (size_t f = 0; f < c.failures; ++f) victims.push_back((1 + f) % c.members);
  for (size_t v : victims) faulty_[v]->set_fail_all(true);
  model.run(100, 50);
  model.verify_all();
  if (HasFatalFailure()) return;
  auto st = array_->status();
  EXPECT_EQ(st.state, ArrayState::kDegraded);
  for (size_t v : victims) EXPECT_EQ(st.members[v].state, MemberState::kFailed) << v;

  // Rebuilt: replacements rebuilt one at a time while a writer keeps going.
  for (size_t v : victims) {
    auto fresh = std::make_shared<MemDevice>(kMemberBytes, kBlock);
    Status rs = array_->replace_member(v, fresh);
    ASSERT_TRUE(rs.ok()) << rs.message();
    model.run(40, 10);
    ASSERT_TRUE(array_->wait_rebuild(std::chrono::seconds(30)));
    EXPECT_EQ(array_->status().members[v].state, MemberState::kActive);
  }
  EXPECT_EQ(array_->status().state, ArrayState::kOnline);
  model.verify_all();
  if (HasFatalFailure()) return;
  bad = array_->count_inconsistent_rows();
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(*bad, 0u);

  // The rebuilt members really hold the data: fail other members so reads
  // must use them.
  // Mirrors: the rest of each victim's group; parity: as many other members.
  std::vector<size_t> others;
  const bool mirror = c.level == RaidLevel::kRaid1 || c.level == RaidLevel::kRaid10;
  for (size_t i = 0; i < c.members; ++i) {
    if (std::find(victims.begin(), victims.end(), i) != victims.end()) continue;
    if (mirror ? i / c.copies == victims[0] / c.copies : others.size() < c.failures) {
      others.push_back(i);
    }
  }
  ASSERT_FALSE(others.empty());
  for (size_t o : others) ASSERT_TRUE(array_->fail_member(o).ok());
  model.verify_all();
}

INSTANTIATE_TEST_SUITE_P(Levels, RaidPropertyTest,
                         ::testing::Values(Config{RaidLevel::kRaid1, 2, 16 << 10, 2, 1},
                                           Config{RaidLevel::kRaid1, 3, 8 << 10, 3, 2},
                                           Config{RaidLevel::kRaid10, 4, 16 << 10, 2, 1},
                                           Config{RaidLevel::kRaid5, 3, 16 << 10, 0, 1},
                                           Config{RaidLevel::kRaid5, 5, 4 << 10, 0, 1},
                                           Config{RaidLevel::kRaid6, 4, 16 << 10, 0, 2},
                                           Config{RaidLevel::kRaid6, 6, 8 << 10, 0, 2}),
                         config_name);

TEST(RaidArrayTest, AssemblesFromSuperblocksInAnyOrderAndDegraded) {
  std::vector<std::shared_ptr<BlockDevice>> members;
  for (int i = 0; i < 4; ++i) members.push_back(std::make_shared<MemDevice>(kMemberBytes, kBlock));
  RaidOptions o;
  o.level = RaidLevel::kRaid6;
  o.strip_bytes = 8 << 10;
  o.name = "vol7";
  std::vector<std::byte> expect;
  std::array<uint8_t, 16> uuid{};
  {
    auto a = RaidArray::create(members, o);
    ASSERT_TRUE(a.ok());
    uuid = (*a)->uuid();
    AlignedBuffer buf((*a)->capacity(), 4096);
    fill_pattern(buf.view(), 9);
    ASSERT_TRUE((*a)->write_sync(0, buf.view()).ok());
    expect.assign(buf.data(), buf.data() + buf.size());
  }
  auto sb = RaidArray::read_superblock(*members[2]);
  ASSERT_TRUE(sb.ok());
  EXPECT_EQ(sb->member_index, 2u);
  EXPECT_EQ(sb->clean, 1u);
  EXPECT_EQ(sb->name, "vol7");

  std::vector<std::shared_ptr<BlockDevice>> shuffled{members[3], members[1], members[0],
                                                     members[2]};
  {
    auto a = RaidArray::assemble(shuffled);
    ASSERT_TRUE(a.ok()) << a.status().message();
    EXPECT_EQ((*a)->uuid(), uuid);
    EXPECT_EQ((*a)->status().state, ArrayState::kOnline);
    AlignedBuffer buf((*a)->capacity(), 4096);
    ASSERT_TRUE((*a)->read_sync(0, buf.view()).ok());
    EXPECT_EQ(std::memcmp(buf.data(), expect.data(), expect.size()), 0);
  }
  // Two members missing: still readable, and the array says degraded.
  {
    auto a = RaidArray::assemble({members[3], members[0]});
    ASSERT_TRUE(a.ok()) << a.status().message();
    EXPECT_EQ((*a)->status().state, ArrayState::kDegraded);
    AlignedBuffer buf((*a)->capacity(), 4096);
    ASSERT_TRUE((*a)->read_sync(0, buf.view()).ok());
    EXPECT_EQ(std::memcmp(buf.data(), expect.data(), expect.size()), 0);
  }
  // The failure was recorded: the next assembly with every device knows
  // members 1 and 2 are stale and keeps them out.
  {
    auto a = RaidArray::assemble(shuffled);
    ASSERT_TRUE(a.ok());
    auto st = (*a)->status();
    EXPECT_EQ(st.members[1].state, MemberState::kFailed);
    EXPECT_EQ(st.members[2].state, MemberState::kFailed);
  }
}

TEST(RaidArrayTest, RejectsForeignAndBadGeometry) {
  std::vector<std::shared_ptr<BlockDevice>> a_members, b_members;
  for (int i = 0; i < 3; ++i) {
    a_members.push_back(std::make_shared<MemDevice>(kMemberBytes, kBlock));
    b_members.push_back(std::make_shared<MemDevice>(kMemberBytes, kBlock));
  }
  RaidOptions o;
  o.level = RaidLevel::kRaid5;
  { ASSERT_TRUE(RaidArray::create(a_members, o).ok()); }
  { ASSERT_TRUE(RaidArray::create(b_members, o).ok()); }
  auto mixed = RaidArray::assemble({a_members[0], a_members[1], b_members[2]});
  EXPECT_FALSE(mixed.ok());
  EXPECT_FALSE(RaidArray::assemble({std::make_shared<MemDevice>(kMemberBytes, kBlock)}).ok());
  o.strip_bytes = 1000;
  EXPECT_FALSE(RaidArray::create(a_members, o).ok());
  o.strip_bytes = 4096;
  o.level = RaidLevel::kRaid6;
  EXPECT_FALSE(RaidArray::create(a_members, o).ok());  // RAID6 needs 4
  o.level = RaidLevel::kRaid10;
  EXPECT_FALSE(RaidArray::create(a_members, o).ok());  // 3 is not 2 x groups
}

TEST(RaidArrayTest, ScrubFindsCorruptedParityAndFullStripeWritesDoNotRead) {
  const auto mems = testing::mem_members(3, kMemberBytes, kBlock);
  auto member_reads = [&] {
    uint64_t reads = 0;
    for (auto& m : mems) reads += m->stats().reads;
    return reads;
  };
  RaidOptions o;
  o.level = RaidLevel::kRaid5;
  o.strip_bytes = 16 << 10;
  auto a = RaidArray::create(testing::as_devices(mems), o);
  ASSERT_TRUE(a.ok());
  // Two full rows (k = 2): no member reads at all.
  AlignedBuffer buf(2 * 2 * o.strip_bytes, 4096);
  fill_pattern(buf.view(), 3);
  const uint64_t reads_before = member_reads();
  ASSERT_TRUE((*a)->write_sync(0, buf.view()).ok());
  EXPECT_EQ(member_reads(), reads_before);
  // A partial write reads only the untouched shard's bytes.
  ASSERT_TRUE((*a)->write_sync(4096, buf.subview(0, 4096)).ok());
  EXPECT_EQ(member_reads(), reads_before + 1);

  auto bad = (*a)->count_inconsistent_rows();
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(*bad, 0u);
  // Flip a byte of row 1's parity (member (1 + 2) % 3 = 0), behind the array.
  const uint64_t data_offset = 1 << 20;
  mems[0]->raw()[data_offset + o.strip_bytes + 100] ^= std::byte{1};
  bad = (*a)->count_inconsistent_rows();
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(*bad, 1u);
}

TEST(RaidArrayTest, SuperblockRoundTripAndCorruption) {
  RaidSuperblock sb;
  sb.uuid[0] = 7;
  sb.event = 12;
  sb.level = 6;
  sb.member_count = 5;
  sb.member_index = 4;
  sb.block_size = 4096;
  sb.strip_bytes = 65536;
  sb.data_offset = 1 << 20;
  sb.rows = 100;
  sb.bitmap_offset = 4096;
  sb.bitmap_area_bytes = 4096;
  sb.rows_per_bit = 4;
  sb.states[3] = MemberState::kFailed;
  sb.name = "hello";
  AlignedBuffer buf(kRaidSuperblockBytes, 4096);
  sb.encode(buf.view());
  auto back = RaidSuperblock::decode(buf.view());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->event, 12u);
  EXPECT_EQ(back->member_index, 4u);
  EXPECT_EQ(back->states[3], MemberState::kFailed);
  EXPECT_EQ(back->name, "hello");
  buf.data()[100] ^= std::byte{1};
  EXPECT_EQ(RaidSuperblock::decode(buf.view()).status().code(), StatusCode::kCorruption);

  std::vector<uint8_t> bits{0x81, 0x02};
  AlignedBuffer bm(4096, 4096);
  encode_bitmap(bits, 16, bm.view());
  auto bits_back = decode_bitmap(bm.view(), 16);
  ASSERT_TRUE(bits_back.ok());
  EXPECT_EQ(*bits_back, bits);
  bm.data()[17] ^= std::byte{4};
  EXPECT_FALSE(decode_bitmap(bm.view(), 16).ok());
}

}  // namespace
}  // namespace kvtier::blk
