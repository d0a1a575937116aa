// The store under pressure and across restarts: an index that fills before the volume
// does makes room instead of refusing, dedup is per namespace, and remove()
// survives a restart. (The scan keeping the newest copy of a key is tested
// in disk_write_path_test.cc.)
#include <gtest/gtest.h>

#include <atomic>

#include "blk/dev/mem_device.h"
#include "blk/stack/faulty_device.h"
#include "common/clock.h"
#include "kv/store.h"
#include "kv/test_payload.h"
#include "kv/testing/small_store.h"

namespace kvtier::kv {
namespace {

constexpr uint32_t kObj = 64 << 10;

StoreOptions review_options(std::shared_ptr<blk::BlockDevice> volume, uint64_t ram_slots) {
  StoreOptions o = testing::small_store_options(std::move(volume), ram_slots, kObj);
  o.disk.read_depth = 4;
  o.io_timeout_ms = 1000;
  return o;
}

struct Opened {
  std::unique_ptr<Store> store;
  uint16_t ns = 0;
  explicit Opened(const StoreOptions& o) : store(testing::open_store(o)) {
    ns = *store->register_namespace(test_namespace("review-model"));
  }
  // Block i with `len` bytes; `variant` changes the content for the same key.
  Result<PutResult> put(uint64_t i, uint32_t len = kObj, uint64_t variant = 0, int ns_h = -1) {
    AlignedBuffer b(len);
    fill_payload(test_key(i + variant * 7777777), b.view());
    return store->put(ns_h < 0 ? ns : static_cast<uint16_t>(ns_h), test_key(i), b.view());
  }
  // Whether block i is found with the bytes of `variant`.
  bool has(uint64_t i, uint64_t variant = 0) {
    AlignedBuffer out(kObj);
    auto g = store->get(ns, test_key(i), out.view());
    EXPECT_TRUE(g.ok());
    if (!g->hit) return false;
    EXPECT_TRUE(payload_matches(test_key(i + variant * 7777777), ByteView(out.data(), g->length)))
        << "block " << i << " served with the bytes of another version";
    return true;
  }
  uint64_t refusals(RefuseReason r) const {
    return store->local_stats().refusals[static_cast<size_t>(r)];
  }
};

std::shared_ptr<blk::MemDevice> copy_of(blk::MemDevice& mem) {
  auto c = std::make_shared<blk::MemDevice>(mem.capacity());
  std::memcpy(c->raw().data(), mem.raw().data(), mem.capacity());
  return c;
}

// Small blocks on a store whose index was sized for big ones: the index
// fills long before the volume; puts must go on being accepted.
TEST(StoreSpaceAndDurability, FullIndexReclaimsTheOldestRegionInsteadOfRefusing) {
  auto o = review_options(std::make_shared<blk::MemDevice>(64 << 20), 2);
  o.index_capacity = 300;  // about two regions of 4 KiB blocks (128 per region)
  o.index_shards = 1;
  Opened s(o);
  for (uint64_t i = 1; i <= 2000; ++i) {
    auto r = s.put(i, 4096);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(r->stored()) << "put " << i << " refused: " << refuse_reason_name(r->refuse);
  }
  EXPECT_EQ(s.refusals(RefuseReason::kIndexFull), 0u);
  EXPECT_GT(s.store->local_stats().index_full_reclaims, 0u);
  for (uint64_t i = 1990; i <= 2000; ++i) EXPECT_TRUE(s.has(i)) << i;  // the newest are kept
}

TEST(StoreSpaceAndDurability, PutOfAKeyHeldByAnotherNamespaceIsNotADedup) {
  Opened s(review_options(std::make_shared<blk::MemDevice>(32 << 20), 8));
  const uint16_t other = *s.store->register_namespace(test_namespace("other-model"));
  ASSERT_TRUE(s.put(1)->stored());
  auto r = s.put(1, kObj, 0, other);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(s.store->local_stats().dedups, 0u);
  // batch_put checks before changing anything.
  AlignedBuffer b(kObj);
  const Key128 keys[] = {test_key(2), test_key(1)};
  const ByteView data[] = {b.view(), b.view()};
  EXPECT_FALSE(s.store->batch_put(other, keys, data).ok());
  EXPECT_FALSE(s.store->match_prefix(other, std::span<const Key128>(keys, 1))->blocks);
  EXPECT_TRUE(s.has(1));
  // Within the namespace it is still a dedup.
  EXPECT_EQ(s.put(1)->outcome, PutResult::Outcome::kDeduplicated);
}

// remove() is durable once flushed: neither a clean restart (checkpoint) nor
// a crash (scan) brings the block back.
TEST(StoreSpaceAndDurability, RemoveSurvivesACrashAndACleanRestart) {
  auto mem = std::make_shared<blk::MemDevice>(16 << 20);
  auto o = review_options(mem, 0);
  std::shared_ptr<blk::MemDevice> crashed;
  {
    Opened s(o);
    for (uint64_t i = 1; i <= 20; ++i) ASSERT_TRUE(s.put(i)->stored());
    ASSERT_TRUE(s.store->flush().ok());
    ASSERT_TRUE(*s.store->remove(s.ns, test_key(3)));
    ASSERT_TRUE(*s.store->remove(s.ns, test_key(17)));
    ASSERT_TRUE(s.store->flush().ok());
    crashed = copy_of(*mem);
    ASSERT_TRUE(s.store->close().ok());
  }
  for (auto dev : {mem, crashed}) {
    Opened r(review_options(dev, 0));
    EXPECT_FALSE(r.has(3));
    EXPECT_FALSE(r.has(17));
    EXPECT_TRUE(r.has(4));
    EXPECT_TRUE(r.has(20));
  }
}

// A device that stops completing writes: appends wait for a free write
// buffer only until the write deadline, then the put is refused (counted),
// never blocked for as long as the device hangs.
TEST(StoreSpaceAndDurability, HungDeviceWritesAreRefusedAtTheDeadline) {
  auto faulty = std::make_shared<blk::FaultyDevice>(std::make_shared<blk::MemDevice>(32 << 20));
  auto o = review_options(faulty, 0);
  o.disk.write_buffers = 2;
  o.disk.write_timeout_ms = 150;
  Opened s(o);
  ASSERT_TRUE(s.put(1)->stored());
  faulty->set_hang(true, std::chrono::seconds(30));
  const uint64_t t0 = now_ns();
  uint64_t refused = 0;
  for (uint64_t i = 2; i < 80; ++i) {  // 5 MiB: more than both 1 MiB buffers
    auto r = s.put(i);
    ASSERT_TRUE(r.ok());
    if (!r->stored()) {
      EXPECT_EQ(r->refuse, RefuseReason::kDiskError);
      ++refused;
    }
    if (refused == 3) break;
  }
  const uint64_t ms = (now_ns() - t0) / 1000000;
  EXPECT_EQ(refused, 3u);
  EXPECT_LT(ms, 20000u);  // three refusals of ~150 ms each, not the 30 s hang
  EXPECT_GE(s.store->local_stats().disk.write_timeouts, 3u);
  EXPECT_EQ(s.refusals(RefuseReason::kDiskError), 3u);
  const Status fl = s.store->flush();  // bounded too
  EXPECT_EQ(fl.code(), StatusCode::kTimeout);
  // The device recovers: writes are accepted again.
  faulty->set_hang(false);
  faulty->release_hung();
  for (uint64_t i = 200; i < 210; ++i) EXPECT_TRUE(s.put(i)->stored()) << i;
  EXPECT_TRUE(s.store->flush().ok());
  EXPECT_TRUE(s.has(205));
}

// Mooncake's lease semantics (StoreOptions::time_lease_ms) on a virtual
// clock: lookups and reads lease a RAM block for the lease time, a RAM tier
// whose blocks are all leased refuses puts (they do not go to the disk
// tier), and expired blocks are demoted as usual.
TEST(StoreSpaceAndDurability, TimeLeasesRefuseWritesWhileEveryRamBlockIsLeased) {
  std::atomic<uint64_t> clock_ns{1};
  auto o = review_options(std::make_shared<blk::MemDevice>(32 << 20), 4);
  o.time_lease_ms = 300'000;
  o.lease_clock_ns = [&] { return clock_ns.load(); };
  Opened s(o);
  for (uint64_t i = 1; i <= 4; ++i) ASSERT_EQ(s.put(i)->tier, Tier::kRam) << i;
  const std::vector<Key128> looked_up = {test_key(1), test_key(2), test_key(3), test_key(4)};
  ASSERT_EQ(s.store->match_prefix(s.ns, looked_up)->ram_blocks, 4u);  // leases all four
  auto refused = s.put(5);
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->outcome, PutResult::Outcome::kRefused);
  EXPECT_EQ(refused->refuse, RefuseReason::kNoSpace);
  EXPECT_FALSE(s.has(5));  // not sent to the disk tier either

  clock_ns = 301'000'000'000ull;  // the four leases have expired
  EXPECT_TRUE(s.has(2));          // a read leases block 2 again until 601 s
  for (uint64_t i = 5; i <= 7; ++i) ASSERT_EQ(s.put(i)->tier, Tier::kRam) << i;
  const std::vector<Key128> new_ones = {test_key(5), test_key(6), test_key(7)};
  ASSERT_EQ(s.store->match_prefix(s.ns, new_ones)->ram_blocks, 3u);
  EXPECT_EQ(s.put(8)->outcome, PutResult::Outcome::kRefused);  // 2, 5, 6, 7 leased
  EXPECT_EQ(s.refusals(RefuseReason::kNoSpace), 2u);
  EXPECT_EQ(s.store->local_stats().demotions, 3u);  // 1, 3 and 4 went to disk
  for (uint64_t i : {1, 3, 4}) EXPECT_TRUE(s.has(i)) << i;

  // kvtier's own policy on the same sequence refuses nothing: it demotes.
  o.time_lease_ms = 0;
  Opened own(o);
  for (uint64_t i = 1; i <= 8; ++i) EXPECT_TRUE(own.put(i)->stored()) << i;
  EXPECT_EQ(own.refusals(RefuseReason::kNoSpace), 0u);
}

}  // namespace
}  // namespace kvtier::kv
