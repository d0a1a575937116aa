#include "kv/disk_tier.h"

#include <gtest/gtest.h>

#include "blk/mem_device.h"
#include "common/crc32c.h"
#include "kv/test_payload.h"

namespace kvtier::kv {
namespace {

constexpr uint32_t kPayload = 60 << 10;

struct TierFixture {
  std::shared_ptr<blk::MemDevice> dev = std::make_shared<blk::MemDevice>(8 << 20);
  Index index{10000};
  NamespaceTable namespaces;
  std::unique_ptr<DiskTier> tier;
  uint16_t ns = 0;

  TierFixture() {
    DiskTierOptions o;
    o.region_bytes = 1 << 20;
    o.flush_chunk_bytes = 256 << 10;
    o.max_payload_bytes = kPayload;
    o.read_depth = 4;
    o.reinsert_hot = false;
    auto t = DiskTier::open(dev, o, &index, &namespaces);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    tier = std::move(t).value();
    ns = *namespaces.intern(Key128{1, 2}, true);
  }
  IndexRecord append(uint64_t i) {
    AlignedBuffer b(kPayload);
    fill_payload(test_key(i), b.view());
    auto page = tier->append(test_key(i), ns, b.view(), crc32c(b.view()));
    EXPECT_TRUE(page.ok());
    IndexRecord rec;
    rec.key = test_key(i);
    rec.disk_page = *page;
    rec.length = kPayload;
    rec.ns = ns;
    index.insert(rec);
    return rec;
  }
  Status read(const IndexRecord& rec, AlignedBuffer& out) {
    auto target = std::make_shared<ReadTarget>(out.view());
    uint64_t deadline = now_ns() + 1000000000ull;
    tier->read_async(rec, target, deadline);
    return target->wait_until(deadline);
  }
};

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
