#include "kv/disk_tier.h"

#include <gtest/gtest.h>

#include "blk/dev/mem_device.h"
#include "common/crc32c.h"
#include "kv/test_payload.h"
#include "kv/testing/disk_tier_fixture.h"

namespace kvtier::kv {
namespace {

constexpr uint32_t kPayload = testing::kFixturePayload;
using TierFixture = testing::DiskTierFixture;

TEST(DiskTier, ReadsFromBufferAndFromDeviceVerify) {
  TierFixture f;
  IndexRecord r0 = f.append(0);
  AlignedBuffer out(kPayload);
  ASSERT_TRUE(f.read(r0, out).ok());  // still in the open region buffer
  EXPECT_TRUE(payload_matches(test_key(0), out.view()));
  EXPECT_EQ(f.tier->stats().buffer_reads, 1u);
  ASSERT_TRUE(f.tier->flush().ok());
  for (int i = 1; i < 40; ++i) f.append(i);  // seal region 0
  ASSERT_TRUE(f.tier->flush().ok());
  ASSERT_TRUE(f.read(r0, out).ok());
  EXPECT_TRUE(payload_matches(test_key(0), out.view()));
  EXPECT_GE(f.tier->stats().reads, 1u);
}

// A reader holding a record whose region was reclaimed and rewritten gets
// "replaced" (the store counts it as evicted), never the new occupant's bytes.
TEST(DiskTier, BlockEvictedDuringLookupIsAMiss) {
  TierFixture f;
  IndexRecord old = f.append(0);
  const uint32_t regions = f.tier->region_count();
  const int per_region = (1 << 20) / (kPayload + 4096);
  for (int i = 1; i < per_region * static_cast<int>(regions + 1); ++i) f.append(i);
  ASSERT_TRUE(f.tier->flush().ok());
  EXPECT_GT(f.tier->stats().regions_reclaimed, 0u);
  EXPECT_FALSE(f.index.find(test_key(0)));  // the index forgot it
  AlignedBuffer out(kPayload);
  std::memset(out.data(), 0xEE, out.size());
  Status st = f.read(old, out);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.to_string();
  EXPECT_EQ(static_cast<uint8_t>(out.data()[0]), 0xEE);  // caller's buffer untouched
}

TEST(DiskTier, AppendRejectsBadPayloads) {
  TierFixture f;
  AlignedBuffer b(kPayload + 1);
  EXPECT_EQ(f.tier->append(test_key(1), f.ns, b.view(), 0).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(f.tier->append(test_key(1), f.ns, ByteView(), 0).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(f.tier->stats().appends, 0u);
}

}  // namespace
}  // namespace kvtier::kv
