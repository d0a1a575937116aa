#include "blk/raid/raid0.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "blk/dev/mem_device.h"
#include "blk/stack/faulty_device.h"
#include "blk/testing/test_util.h"

namespace kvtier::blk {
namespace {

using testing::Completions;
using testing::fill_pattern;

std::vector<std::shared_ptr<MemDevice>> mems(std::vector<uint64_t> caps, uint32_t bs = 512,
                                             uint32_t align = 1) {
  std::vector<std::shared_ptr<MemDevice>> out;
  for (uint64_t c : caps) out.push_back(std::make_shared<MemDevice>(c, bs, align));
  return out;
}

std::vector<std::shared_ptr<BlockDevice>> as_members(
    const std::vector<std::shared_ptr<MemDevice>>& m) {
  return {m.begin(), m.end()};
}

TEST(Raid0Test, CreateErrors) {
  EXPECT_EQ(Raid0::create({}, 4096).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Raid0::create({nullptr}, 4096).status().code(), StatusCode::kInvalidArgument);
  auto m = mems({1 << 20, 1 << 20});
  EXPECT_EQ(Raid0::create(as_members(m), 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Raid0::create(as_members(m), 1000).status().code(), StatusCode::kInvalidArgument);
  // Strip larger than a member: no whole strip fits, capacity would be 0.
  EXPECT_EQ(Raid0::create(as_members(m), 2 << 20).status().code(), StatusCode::kInvalidArgument);
  std::vector<std::shared_ptr<BlockDevice>> mixed = {std::make_shared<MemDevice>(1 << 20, 512),
                                                     std::make_shared<MemDevice>(1 << 20, 4096)};
  EXPECT_EQ(Raid0::create(mixed, 8192).status().code(), StatusCode::kInvalidArgument);
}

TEST(Raid0Test, Geometry) {
  // Smallest member holds 2 whole 12 KiB strips (24 KiB of its 30 KiB).
  auto m = mems({64 << 10, 30 << 10, 40 << 10});
  auto r = Raid0::create(as_members(m), 12 << 10);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->capacity(), 3u * 2 * (12 << 10));
  EXPECT_EQ((*r)->block_size(), 512u);
  EXPECT_EQ((*r)->buffer_alignment(), 1u);
  EXPECT_EQ((*r)->member_count(), 3u);
  EXPECT_EQ((*r)->name(), "raid0[mem,mem,mem]");
  EXPECT_EQ((*r)->locate(0).member, 0u);
  EXPECT_EQ((*r)->locate(12 << 10).member, 1u);
  EXPECT_EQ((*r)->locate((36 << 10) + 512).member, 0u);
  EXPECT_EQ((*r)->locate((36 << 10) + 512).offset, (12u << 10) + 512);

  // With a member alignment above the sector size, the array's block size is
  // raised so split pieces stay aligned.
  auto aligned = mems({1 << 20, 1 << 20}, 512, 4096);
  auto ra = Raid0::create(as_members(aligned), 8192);
  ASSERT_TRUE(ra.ok());
  EXPECT_EQ((*ra)->block_size(), 4096u);
  EXPECT_EQ((*ra)->buffer_alignment(), 4096u);
  EXPECT_FALSE(Raid0::create(as_members(aligned), 2048).ok());
}

// Random reads, writes and trims against a byte-array model; afterwards the
// members' raw bytes must match the strip layout exactly.
void run_reference_model(size_t n_members, uint64_t strip, uint64_t seed) {
  std::vector<uint64_t> caps;
  for (size_t i = 0; i < n_members; ++i) caps.push_back((256 << 10) + i * 4096);
  auto m = mems(caps, 512);
  auto r = Raid0::create(as_members(m), strip);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  Raid0& raid = **r;
  const uint64_t cap = raid.capacity();
  std::vector<std::byte> model(cap, std::byte{0});
  std::mt19937_64 rng(seed);
  AlignedBuffer buf(cap);
  for (int iter = 0; iter < 300; ++iter) {
    const uint64_t blocks = cap / 512;
    const uint64_t off = (rng() % blocks) * 512;
    const uint64_t max_len = std::min<uint64_t>(cap - off, 5 * strip);
    const uint64_t len = (rng() % (max_len / 512) + 1) * 512;
    switch (rng() % 4) {
      case 0:
      case 1: {
        fill_pattern(buf.subview(0, len), rng());
        ASSERT_TRUE(raid.write_sync(off, buf.subview(0, len)).ok());
        std::memcpy(model.data() + off, buf.data(), len);
        break;
      }
      case 2: {
        ASSERT_TRUE(raid.read_sync(off, buf.subview(0, len)).ok());
        ASSERT_EQ(std::memcmp(buf.data(), model.data() + off, len), 0)
            << "read [" << off << ", +" << len << ") differs at iteration " << iter;
        break;
      }
      case 3: {
        // MemDevice trims to zeros, so the model can follow exactly.
        ASSERT_TRUE(raid.trim_sync(off, len).ok());
        std::fill(model.begin() + off, model.begin() + off + len, std::byte{0});
        break;
      }
    }
  }
  ASSERT_TRUE(raid.read_sync(0, buf.subview(0, cap)).ok());
  ASSERT_EQ(std::memcmp(buf.data(), model.data(), cap), 0);
  // Layout: logical strip k is on member k % n at (k / n) * strip.
  for (uint64_t k = 0; k < cap / strip; ++k) {
    const MemDevice& member = *m[k % n_members];
    const uint64_t member_off = (k / n_members) * strip;
    ASSERT_EQ(std::memcmp(const_cast<MemDevice&>(member).raw().data() + member_off,
                          model.data() + k * strip, strip),
              0)
        << "strip " << k;
  }
  // Bytes past the array's capacity on each member are never touched.
  const uint64_t used = cap / n_members;
  for (auto& mem : m) {
    auto tail = mem->raw().subspan(used);
    EXPECT_TRUE(
        std::all_of(tail.begin(), tail.end(), [](std::byte b) { return b == std::byte{0}; }));
  }
  EXPECT_EQ(raid.stats().errors, 0u);
}

TEST(Raid0Test, ReferenceModelThreeMembers) { run_reference_model(3, 8192, 1); }
TEST(Raid0Test, ReferenceModelOneMember) { run_reference_model(1, 4096, 2); }
TEST(Raid0Test, ReferenceModelFourMembersSmallStrip) { run_reference_model(4, 512, 3); }

TEST(Raid0Test, FlushFansOut) {
  auto m = mems({1 << 20, 1 << 20, 1 << 20});
  auto r = Raid0::create(as_members(m), 4096);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*r)->flush_sync().ok());
  for (auto& mem : m) EXPECT_EQ(mem->stats().flushes, 1u);
  EXPECT_EQ((*r)->stats().flushes, 1u);
}

TEST(Raid0Test, TrimSendsOneRangePerMember) {
  auto m = mems({1 << 20, 1 << 20, 1 << 20});
  auto r = Raid0::create(as_members(m), 4096);
  ASSERT_TRUE(r.ok());
  // 10 strips starting mid-strip: each member still gets a single trim.
  ASSERT_TRUE((*r)->trim_sync(2048, 10 * 4096).ok());
  for (auto& mem : m) EXPECT_EQ(mem->stats().trims, 1u);
  // A range inside one strip only reaches that member.
  ASSERT_TRUE((*r)->trim_sync(4096 + 512, 1024).ok());
  EXPECT_EQ(m[0]->stats().trims, 1u);
  EXPECT_EQ(m[1]->stats().trims, 2u);
  EXPECT_EQ(m[2]->stats().trims, 1u);
}

TEST(Raid0Test, FirstErrorWinsAndParentCompletesOnce) {
  auto mem0 = std::make_shared<MemDevice>(1 << 20, 512);
  auto mem1 = std::make_shared<MemDevice>(1 << 20, 512);
  auto faulty = std::make_shared<FaultyDevice>(mem1);
  auto r = Raid0::create({mem0, faulty}, 4096);
  ASSERT_TRUE(r.ok());
  faulty->add_fault_range(0, 4096);  // member 1's first strip = logical [4096, 8192)
  AlignedBuffer buf(16384);
  Completions c;
  (*r)->read(0, buf.view(), [&](Status st) { c.done(st); });
  ASSERT_TRUE(c.wait_for(1));
  EXPECT_EQ(c.count(), 1u);
  EXPECT_EQ(c.failed(), 1u);
  EXPECT_EQ(c.last_error().code(), StatusCode::kIoError);
  // Reads that avoid the faulty strip succeed.
  EXPECT_TRUE((*r)->read_sync(8192, buf.subview(0, 8192)).ok());
  EXPECT_EQ((*r)->stats().errors, 1u);
  EXPECT_EQ((*r)->stats().reads, 1u);
  EXPECT_EQ((*r)->write_sync(4096, buf.subview(0, 4096)).code(), StatusCode::kIoError);
  faulty->set_fail_all(true);
  EXPECT_EQ((*r)->flush_sync().code(), StatusCode::kIoError);
}

// Members completing asynchronously on another thread (FaultyDevice latency)
// still give one completion per parent, with the right data.
TEST(Raid0Test, AsynchronousMembers) {
  std::vector<std::shared_ptr<MemDevice>> mem = mems({1 << 20, 1 << 20}, 512);
  std::vector<std::shared_ptr<FaultyDevice>> slow;
  std::vector<std::shared_ptr<BlockDevice>> members;
  for (auto& x : mem) {
    slow.push_back(std::make_shared<FaultyDevice>(x));
    slow.back()->set_latency(std::chrono::milliseconds(1));
    members.push_back(slow.back());
  }
  auto r = Raid0::create(members, 4096);
  ASSERT_TRUE(r.ok());
  AlignedBuffer w(64 << 10), rd(64 << 10);
  fill_pattern(w.view(), 9);
  Completions c;
  for (int i = 0; i < 16; ++i) {
    (*r)->write(i * 4096ull, w.subview(i * 4096, 4096), [&](Status st) { c.done(st); });
  }
  ASSERT_TRUE(c.wait_for(16));
  (*r)->read(0, rd.view(), [&](Status st) { c.done(st); });
  ASSERT_TRUE(c.wait_for(17));
  EXPECT_EQ(c.failed(), 0u);
  EXPECT_EQ(std::memcmp(w.data(), rd.data(), w.size()), 0);
  EXPECT_EQ(c.count(), 17u);
}

TEST(Raid0Test, ArgumentErrors) {
  auto m = mems({1 << 20, 1 << 20}, 512);
  auto r = Raid0::create(as_members(m), 4096);
  ASSERT_TRUE(r.ok());
  AlignedBuffer buf(4096);
  EXPECT_EQ((*r)->write_sync(100, buf.subview(0, 512)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*r)->write_sync((*r)->capacity(), buf.subview(0, 512)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*r)->read_sync(0, buf.subview(0, 0)).code(), StatusCode::kInvalidArgument);
  for (auto& mem : m) EXPECT_EQ(mem->stats().writes + mem->stats().reads, 0u);
}

}  // namespace
}  // namespace kvtier::blk
