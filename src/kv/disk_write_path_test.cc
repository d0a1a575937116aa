// The disk tier's write path: entries are copied into the region buffer
// outside the tier's lock, the open region streams out in whole chunks while
// it fills, and region generations are never reused after a crash.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "blk/dev/mem_device.h"
#include "common/crc32c.h"
#include "kv/disk_tier.h"
#include "kv/test_payload.h"
#include "kv/testing/disk_tier_fixture.h"

namespace kvtier::kv {
namespace {

constexpr uint32_t kPayload = testing::kFixturePayload;  // entry: 64 KiB with its header page

// Reads always go through the tier's staging path here (what is tested is
// where the bytes come from, not how they reach the caller).
struct Tier : testing::DiskTierFixture {
  explicit Tier(std::shared_ptr<blk::MemDevice> d)
      : DiskTierFixture(std::move(d), [] {
          DiskTierOptions o = testing::fixture_tier_options();
          o.direct_reads = DiskTierOptions::DirectReads::kNever;
          return o;
        }()) {}
};

TEST(DiskWritePath, OpenRegionStreamsOutInWholeChunksWhileItFills) {
  Tier t(std::make_shared<blk::MemDevice>(8 << 20));
  for (int i = 0; i < 3; ++i) t.append(i);  // 192 KiB: under one chunk
  EXPECT_EQ(t.tier->stats().region_writes, 0u);
  t.append(3);  // 256 KiB copied: the first chunk goes out, the region still open
  EXPECT_EQ(t.tier->stats().region_writes, 1u);
  EXPECT_EQ(t.tier->stats().bytes_written, 256u << 10);  // MemDevice completes inline
  for (int i = 4; i < 8; ++i) t.append(i);
  EXPECT_EQ(t.tier->stats().region_writes, 2u);
  // The streamed bytes are on the device: a crash now keeps those entries.
  auto image = std::make_shared<blk::MemDevice>(8 << 20);
  std::memcpy(image->raw().data(), t.dev->raw().data(), t.dev->raw().size());
  Tier reopened(image);
  EXPECT_EQ(reopened.tier->stats().recovered_entries, 8u);
}

TEST(DiskWritePath, ConcurrentAppendsAllLandIntact) {
  Tier t(std::make_shared<blk::MemDevice>(32 << 20));
  constexpr int kThreads = 4, kPerThread = 60;  // 15 MiB: wraps through several regions
  std::vector<std::vector<IndexRecord>> recs(kThreads);
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      for (int i = 0; i < kPerThread; ++i) recs[th].push_back(t.append(th * 1000 + i));
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(t.tier->flush().ok());
  AlignedBuffer out(kPayload);
  for (int th = 0; th < kThreads; ++th) {
    for (const IndexRecord& rec : recs[th]) {
      ASSERT_TRUE(t.read(rec, out).ok()) << rec.key.to_hex();
      ASSERT_TRUE(payload_matches(rec.key, out.view())) << rec.key.to_hex();
    }
  }
  EXPECT_EQ(t.tier->stats().appends, uint64_t{kThreads} * kPerThread);
}

// A crash right after a region was opened, with its first entry torn but
// later ones written: the scan cannot see that generation. Reusing its
// number would let those later entries pass as part of the next log written
// into the same region; the superblock's floor prevents it.
TEST(DiskWritePath, RegionGenerationIsNeverReusedAfterACrash) {
  auto dev = std::make_shared<blk::MemDevice>(8 << 20);
  uint32_t region1_first_page = 0;
  {
    Tier t(dev);
    for (int i = 0; i < 16; ++i) t.append(i);  // fills region 0 (16 x 64 KiB)
    for (int i = 16; i < 20; ++i) {
      IndexRecord r = t.append(i);  // region 1, generation 2
      if (i == 16) region1_first_page = r.disk_page;
    }
    ASSERT_TRUE(t.tier->flush().ok());
  }
  // Tear region 1's first entry header.
  dev->raw()[uint64_t{region1_first_page} * disk::kPageBytes + 20] ^= std::byte{0xFF};
  {
    Tier t(dev);  // scan: region 0 only; region 1's log is not found
    EXPECT_EQ(t.tier->stats().recovered_entries, 16u);
    // The new block lands at the start of region 1, with the same entry size
    // as the torn one, so the old entries 17..19 follow it on the volume.
    IndexRecord r = t.append(100);
    EXPECT_EQ(r.disk_page, region1_first_page);
    ASSERT_TRUE(t.tier->flush().ok());
    disk::EntryHeader h;
    std::memcpy(&h, dev->raw().data() + uint64_t{region1_first_page} * disk::kPageBytes, sizeof(h));
    EXPECT_GT(h.region_seq, 2u);  // not the lost generation's number
  }
  // Crash again: the old entries after the new one must not come back.
  Tier t(dev);
  EXPECT_EQ(t.tier->stats().recovered_entries, 17u);  // region 0 + the new block
  EXPECT_FALSE(t.index.find(test_key(17)).has_value());
  EXPECT_TRUE(t.index.find(test_key(100)).has_value());
}

// The same key twice on the volume, the newer copy in a later region (as
// after a reclaim freed the old copy's index record but not yet its bytes):
// the crash scan replays regions oldest first and keeps the newest copy.
TEST(DiskWritePath, CrashScanKeepsTheNewestCopyOfAKey) {
  auto dev = std::make_shared<blk::MemDevice>(8 << 20);
  const Key128 key = test_key(5);
  AlignedBuffer old_bytes(kPayload), new_bytes(kPayload);
  fill_payload(test_key(1001), old_bytes.view());
  fill_payload(test_key(1002), new_bytes.view());
  uint32_t new_page = 0;
  {
    Tier t(dev);
    ASSERT_TRUE(t.tier->append(key, t.ns, old_bytes.view(), crc32c(old_bytes.view())).ok());
    for (int i = 0; i < 20; ++i) t.append(100 + i);  // on into region 1
    auto page = t.tier->append(key, t.ns, new_bytes.view(), crc32c(new_bytes.view()));
    ASSERT_TRUE(page.ok());
    new_page = *page;
    ASSERT_TRUE(t.tier->flush().ok());
  }
  Tier t(dev);
  auto rec = t.index.find(key);
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->disk_page, new_page);
  AlignedBuffer out(kPayload);
  ASSERT_TRUE(t.read(*rec, out).ok());
  EXPECT_EQ(std::memcmp(out.data(), new_bytes.data(), kPayload), 0);
}

}  // namespace
}  // namespace kvtier::kv
