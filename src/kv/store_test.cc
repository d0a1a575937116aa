#include "kv/store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "blk/dev/mem_device.h"
#include "blk/stack/faulty_device.h"
#include "kv/test_payload.h"
#include "kv/testing/raw_volume.h"
#include "kv/testing/small_store.h"

namespace kvtier::kv {
namespace {

constexpr uint32_t kObj = 64 << 10;  // small objects keep the tests fast

StoreOptions small_options(std::shared_ptr<blk::BlockDevice> volume, uint64_t ram_slots = 16) {
  return testing::small_store_options(std::move(volume), ram_slots, kObj);
}

struct Fixture {
  std::unique_ptr<Store> store;
  uint16_t ns = 0;
  AlignedBuffer buf{kObj};

  explicit Fixture(const StoreOptions& o) : store(testing::open_store(o)) {
    ns = *store->register_namespace(test_namespace());
  }
  PutResult put(uint64_t i, uint32_t len = kObj) {
    fill_payload(test_key(i), buf.subview(0, len));
    auto r = store->put(ns, test_key(i), ByteView(buf.data(), len));
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return *r;
  }
  // Gets block i and checks its bytes.
  GetResult get(uint64_t i) {
    AlignedBuffer out(kObj);
    auto r = store->get(ns, test_key(i), out.view());
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (r->hit) {
      EXPECT_TRUE(payload_matches(test_key(i), ByteView(out.data(), r->length))) << i;
    }
    return *r;
  }
  uint64_t misses(MissReason r) const {
    return store->local_stats().misses[static_cast<size_t>(r)];
  }
};

TEST(Store, PutGetRoundTripAndDedup) {
  Fixture f(small_options(std::make_shared<blk::MemDevice>(32 << 20)));
  EXPECT_EQ(f.put(1).tier, Tier::kRam);
  EXPECT_EQ(f.put(1).outcome, PutResult::Outcome::kDeduplicated);
  GetResult g = f.get(1);
  EXPECT_TRUE(g.hit);
  EXPECT_EQ(g.tier, Tier::kRam);
  EXPECT_EQ(g.length, kObj);
  EXPECT_FALSE(f.get(2).hit);
  EXPECT_EQ(f.misses(MissReason::kNotFound), 1u);
  EXPECT_EQ(f.store->local_stats().dedups, 1u);
  // Smaller objects than the slot are fine.
  f.put(3, 1000);
  EXPECT_EQ(f.get(3).length, 1000u);
}

TEST(Store, BadInputIsRejectedAndChangesNothing) {
  Fixture f(small_options(std::make_shared<blk::MemDevice>(32 << 20)));
  f.put(1);
  const auto before = f.store->local_stats();
  AlignedBuffer big(kObj + 1);
  auto r1 = f.store->put(f.ns, test_key(9), ByteView(big.data(), 0));
  EXPECT_EQ(r1.status().code(), StatusCode::kInvalidArgument);
  auto r2 = f.store->put(f.ns, test_key(9), big.view());
  EXPECT_EQ(r2.status().code(), StatusCode::kInvalidArgument);
  auto r3 = f.store->put(777, test_key(9), ByteView(big.data(), 10));
  EXPECT_EQ(r3.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r3.status().message().find("namespace"), std::string::npos);
  auto r4 = f.store->put(f.ns, Key128{}, ByteView(big.data(), 10));
  EXPECT_EQ(r4.status().code(), StatusCode::kInvalidArgument);
  AlignedBuffer small(100);
  auto r5 = f.store->get(f.ns, test_key(1), small.view());
  EXPECT_EQ(r5.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r5.status().message().find("too small"), std::string::npos);
  auto r6 = f.store->get(f.ns, test_key(1), MutableByteView());
  EXPECT_EQ(r6.status().code(), StatusCode::kInvalidArgument);
  // A batch with one bad object stores none of them.
  std::vector<Key128> keys{test_key(20), test_key(21)};
  std::vector<ByteView> data{ByteView(big.data(), 10), ByteView(big.data(), 0)};
  EXPECT_FALSE(f.store->batch_put(f.ns, keys, data).ok());
  auto bad_ns = test_namespace();
  bad_ns.tokens_per_block = 0;
  EXPECT_FALSE(f.store->register_namespace(bad_ns).ok());

  const auto after = f.store->local_stats();
  EXPECT_EQ(after.index_entries, before.index_entries);
  EXPECT_EQ(after.puts, before.puts);
  EXPECT_EQ(after.ram_used, before.ram_used);
  EXPECT_TRUE(f.get(1).hit);
}

TEST(Store, OpenRejectsBadVolumes) {
  // Block size that does not divide the 4 KiB page.
  auto odd = std::make_shared<blk::MemDevice>(32 << 20, 8192);
  auto s1 = Store::open(small_options(odd));
  EXPECT_EQ(s1.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s1.status().message().find("block size"), std::string::npos);
  // Too small for one region plus metadata.
  auto tiny = std::make_shared<blk::MemDevice>(1 << 20);
  auto s2 = Store::open(small_options(tiny));
  EXPECT_EQ(s2.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s2.status().message().find("too small"), std::string::npos);
  // Region smaller than one object.
  auto o = small_options(std::make_shared<blk::MemDevice>(32 << 20));
  o.disk.region_bytes = 32 << 10;
  EXPECT_EQ(Store::open(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(Store, FullRamDemotesInsteadOfRefusing) {
  Fixture f(small_options(std::make_shared<blk::MemDevice>(64 << 20), 16));
  const int n = 400;  // 25x the RAM tier, well within the volume
  for (int i = 0; i < n; ++i) ASSERT_TRUE(f.put(i).stored()) << i;
  auto st = f.store->local_stats();
  uint64_t refusals = 0;
  for (auto r : st.refusals) refusals += r;
  EXPECT_EQ(refusals, 0u);
  EXPECT_GE(st.demotions, static_cast<uint64_t>(n - 16));
  EXPECT_EQ(st.ram_used, 16u);
  int ram = 0, disk = 0;
  for (int i = 0; i < n; ++i) {
    GetResult g = f.get(i);
    ASSERT_TRUE(g.hit) << i;
    (g.tier == Tier::kRam ? ram : disk)++;
  }
  EXPECT_GT(disk, 0);
}

TEST(Store, WithoutDiskTierFullRamEvictsOldBlocks) {
  StoreOptions o = small_options(nullptr, 8);
  Fixture f(o);
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(f.put(i).stored());
  auto st = f.store->local_stats();
  EXPECT_EQ(st.eviction_drops, 32u);
  EXPECT_TRUE(f.get(39).hit);
  EXPECT_FALSE(f.get(0).hit);
}

TEST(Store, LeasedAndPinnedBlocksAreNotEvicted) {
  Fixture f(small_options(std::make_shared<blk::MemDevice>(64 << 20), 8));
  std::vector<Key128> pinned;
  for (int i = 0; i < 4; ++i) {
    f.put(i);
    pinned.push_back(test_key(i));
  }
  EXPECT_EQ(*f.store->pin(f.ns, pinned, 60000), 4u);
  for (int i = 100; i < 200; ++i) f.put(i);
  auto m = f.store->match_prefix(f.ns, pinned);
  ASSERT_EQ(m->blocks, 4u);
  EXPECT_EQ(m->ram_blocks, 4u);
  // After unpin they may go.
  EXPECT_EQ(*f.store->unpin(f.ns, pinned), 4u);
  for (int i = 200; i < 300; ++i) f.put(i);
  m = f.store->match_prefix(f.ns, pinned);
  EXPECT_EQ(m->blocks, 4u);  // still found, now on disk
  EXPECT_EQ(m->disk_blocks, 4u);
}

TEST(Store, RamTierLeaseBlocksVictimClaim) {
  RamTier ram(4 * kObj, kObj);
  std::vector<uint32_t> slots;
  for (int i = 0; i < 4; ++i) {
    auto s = ram.allocate();
    ASSERT_TRUE(s);
    ram.publish(*s, test_key(i), 0, 10, 0, false);
    slots.push_back(*s);
  }
  EXPECT_FALSE(ram.allocate());
  for (uint32_t s : slots) ASSERT_TRUE(ram.try_lease(s, ram.key(s), 0));
  EXPECT_FALSE(ram.claim_victim(0));  // all leased
  ram.release(slots[2]);
  auto v = ram.claim_victim(0);
  ASSERT_TRUE(v);
  EXPECT_EQ(*v, slots[2]);
  // A lease asked for while the slot is being evicted, or for the wrong key, fails.
  EXPECT_FALSE(ram.try_lease(slots[2], test_key(2), 0));
  EXPECT_FALSE(ram.try_lease(slots[0], test_key(99), 0));
  EXPECT_FALSE(ram.try_lease(slots[0], test_key(0), 7));  // right key, other namespace
  ram.release_slot(*v);
  EXPECT_TRUE(ram.allocate());
}

// Many threads read while others fill the RAM tier far past capacity: every
// hit has the right bytes (a read in flight is never broken by eviction).
TEST(Store, ConcurrentReadsDuringEvictionAlwaysGetRightBytes) {
  auto o = small_options(std::make_shared<blk::MemDevice>(128 << 20), 8);
  auto s = Store::open(o);
  ASSERT_TRUE(s.ok());
  auto store = std::move(s).value();
  uint16_t ns = *store->register_namespace(test_namespace());
  std::atomic<uint64_t> next{0}, bad{0}, hits{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&] {
      AlignedBuffer b(kObj);
      while (!stop) {
        uint64_t i = next.fetch_add(1);
        if (i >= 1200) break;
        fill_payload(test_key(i), b.view());
        ASSERT_TRUE(store->put(ns, test_key(i), b.view()).ok());
      }
    });
  }
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      AlignedBuffer b(kObj);
      uint64_t x = r + 1;
      while (next.load() < 1200) {
        x = x * 6364136223846793005ull + 1;
        uint64_t hi = next.load();
        if (hi == 0) continue;
        uint64_t i = (x >> 33) % hi;
        auto g = store->get(ns, test_key(i), b.view());
        ASSERT_TRUE(g.ok());
        if (g->hit) {
          hits.fetch_add(1);
          if (!payload_matches(test_key(i), ByteView(b.data(), g->length))) bad.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GT(hits.load(), 0u);
  EXPECT_EQ(bad.load(), 0u);
}

TEST(Store, CorruptByteOnVolumeIsAMissAndTheEntryIsDropped) {
  auto mem = std::make_shared<blk::MemDevice>(64 << 20);
  auto o = small_options(mem, 1);
  o.promote_on_disk_hit = false;
  Fixture f(o);
  for (int i = 0; i < 40; ++i) f.put(i);
  ASSERT_TRUE(f.store->flush().ok());
  // Find block 5's entry on the raw volume by its key and flip one payload byte.
  const Key128 k = test_key(5);
  auto raw = mem->raw();
  const auto entries = testing::entry_offsets(raw, k);
  ASSERT_FALSE(entries.empty());
  raw[entries.back() + disk::kPayloadOffset + 1234] ^= std::byte{0x01};
  GetResult g = f.get(5);
  EXPECT_FALSE(g.hit);
  EXPECT_EQ(g.miss, MissReason::kCorrupt);
  EXPECT_EQ(f.misses(MissReason::kCorrupt), 1u);
  EXPECT_EQ(f.store->local_stats().disk.read_corrupt, 1u);
  // The bad entry is gone from the index: the next get is a plain miss.
  EXPECT_EQ(f.get(5).miss, MissReason::kNotFound);
  EXPECT_TRUE(f.get(6).hit);
}

TEST(Store, DeviceErrorsAndHangsBecomeMissesNotErrors) {
  auto mem = std::make_shared<blk::MemDevice>(64 << 20);
  auto faulty = std::make_shared<blk::FaultyDevice>(mem, 3);
  auto o = small_options(faulty, 1);
  o.promote_on_disk_hit = false;
  o.io_timeout_ms = 200;
  Fixture f(o);
  for (int i = 0; i < 30; ++i) f.put(i);
  ASSERT_TRUE(f.store->flush().ok());
  faulty->set_read_error_rate(1.0);
  GetResult g = f.get(3);
  EXPECT_FALSE(g.hit);
  EXPECT_EQ(g.miss, MissReason::kIoError);
  faulty->clear_faults();
  EXPECT_TRUE(f.get(3).hit);  // an I/O error does not drop the entry

  // Held for an hour: only the get's own deadline can end its wait.
  faulty->set_hang(true);
  g = f.get(4);
  EXPECT_FALSE(g.hit);
  EXPECT_EQ(g.miss, MissReason::kTimeout);
  faulty->set_hang(false);
  faulty->release_hung();
  EXPECT_TRUE(f.get(4).hit);
  // Writes failing: demotions fail, puts still answer (refused or stored).
  faulty->set_fail_all(true);
  for (int i = 100; i < 140; ++i) f.put(i);
  faulty->set_fail_all(false);
  ASSERT_TRUE(f.store->flush().ok());
  EXPECT_TRUE(f.get(139).hit);
  // Blocks whose region write failed were forgotten: plain misses, never
  // "corrupt" reads of what the failed write left behind.
  for (int i = 100; i < 139; ++i) f.get(i);
  EXPECT_EQ(f.misses(MissReason::kCorrupt), 0u);
  EXPECT_GT(f.store->local_stats().disk.write_errors, 0u);
}

TEST(Store, WarmRestartFromCheckpointFindsEverything) {
  auto mem = std::make_shared<blk::MemDevice>(64 << 20);
  {
    Fixture f(small_options(mem, 4));
    for (int i = 0; i < 100; ++i) f.put(i);
    ASSERT_TRUE(f.store->close().ok());
  }
  Fixture f(small_options(mem, 4));
  auto st = f.store->local_stats();
  EXPECT_TRUE(st.disk.recovered_from_checkpoint);
  EXPECT_EQ(st.disk.recovered_entries, 100u);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(f.get(i).hit) << i;
}

TEST(Store, CrashRecoveryScanKeepsOnlyVerifiedEntries) {
  auto mem = std::make_shared<blk::MemDevice>(64 << 20);
  auto image = std::make_shared<blk::MemDevice>(64 << 20);
  {
    Fixture f(small_options(mem, 4));
    for (int i = 0; i < 60; ++i) f.put(i);
    ASSERT_TRUE(f.store->flush().ok());
    // "Crash": take the volume as it is now, without a checkpoint.
    std::memcpy(image->raw().data(), mem->raw().data(), mem->raw().size());
  }
  // Tear one entry: corrupt a byte of block 7's payload in the image.
  const Key128 k = test_key(7);
  auto raw = image->raw();
  for (size_t off = 0; off + sizeof(disk::EntryHeader) <= raw.size(); off += disk::kPageBytes) {
    disk::EntryHeader h;
    std::memcpy(&h, raw.data() + off, sizeof(h));
    if (h.magic == disk::kEntryMagic && h.key_hi == k.hi && h.key_lo == k.lo) {
      raw[off + disk::kPayloadOffset + 99] ^= std::byte{0x80};
    }
  }
  Fixture f(small_options(image, 4));
  auto st = f.store->local_stats();
  EXPECT_FALSE(st.disk.recovered_from_checkpoint);
  EXPECT_GE(st.disk.recovery_dropped, 1u);
  for (int i = 0; i < 60; ++i) {
    GetResult g = f.get(i);  // checks bytes of every hit
    if (i == 7) {
      EXPECT_FALSE(g.hit);
    } else {
      EXPECT_TRUE(g.hit) << i;
    }
  }
}

TEST(Store, DiskHitIsPromotedToRam) {
  for (bool background : {true, false}) {
    SCOPED_TRACE(background ? "in the background" : "before batch_get returns");
    auto o = small_options(std::make_shared<blk::MemDevice>(64 << 20), 4);
    o.promote_in_background = background;
    Fixture f(o);
    for (int i = 0; i < 20; ++i) f.put(i);
    GetResult g = f.get(0);
    ASSERT_TRUE(g.hit);
    EXPECT_EQ(g.tier, Tier::kDisk);
    // The next read of the key sees the promotion, queued or not.
    g = f.get(0);
    EXPECT_EQ(g.tier, Tier::kRam);
    EXPECT_EQ(f.store->local_stats().promotions, 1u);
  }
}

// Background promotion copies from the staging buffer the bytes were
// verified in, so a caller that reuses its buffer at once (as an engine
// does) still gets every block promoted, byte for byte. A batch larger than
// the promotion queue promotes the rest before returning.
TEST(Store, BackgroundPromotionIsFromVerifiedBytesNotTheCallersBuffer) {
  constexpr int kBlocks = 48;
  auto o = small_options(std::make_shared<blk::MemDevice>(64 << 20), 64);
  Fixture f(o);
  for (int i = 0; i < kBlocks; ++i) f.put(i);
  ASSERT_TRUE(f.store->flush().ok());
  // Push every block out of RAM onto the disk tier with other blocks.
  for (int i = 1000; i < 1000 + 64; ++i) f.put(i);
  const uint64_t promotions_before = f.store->local_stats().promotions;
  std::vector<AlignedBuffer> outs;
  std::vector<BatchGetItem> items;
  for (int i = 0; i < kBlocks; ++i) outs.emplace_back(kObj);
  for (int i = 0; i < kBlocks; ++i) items.push_back({test_key(i), outs[i].view()});
  auto r = f.store->batch_get(f.ns, items);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  for (int i = 0; i < kBlocks; ++i) {
    ASSERT_TRUE((*r)[i].hit) << i;
    EXPECT_EQ((*r)[i].tier, Tier::kDisk) << i;
    std::memset(outs[i].data(), 0xEE, kObj);  // the caller reuses its buffers
  }
  for (int i = 0; i < kBlocks; ++i) {
    const GetResult g = f.get(i);  // checks the bytes
    EXPECT_EQ(g.tier, Tier::kRam) << i;
  }
  EXPECT_EQ(f.store->local_stats().promotions - promotions_before, uint64_t(kBlocks));
}

TEST(Store, DirectToVolumeWithoutRamTier) {
  auto o = small_options(std::make_shared<blk::MemDevice>(64 << 20), 0);
  o.ram_bytes = 0;
  Fixture f(o);
  EXPECT_EQ(f.put(1).tier, Tier::kDisk);
  GetResult g = f.get(1);
  EXPECT_TRUE(g.hit);
  EXPECT_EQ(g.tier, Tier::kDisk);
}

TEST(Store, MatchPrefixAndForeignNamespace) {
  Fixture f(small_options(std::make_shared<blk::MemDevice>(64 << 20), 64));
  std::vector<Key128> chain;
  for (int i = 0; i < 10; ++i) {
    chain.push_back(test_key(i));
    if (i != 7) f.put(i);
  }
  auto m = f.store->match_prefix(f.ns, chain);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->blocks, 7u);
  EXPECT_EQ(m->ram_blocks, 7u);
  uint16_t other = *f.store->register_namespace(test_namespace("other-model"));
  EXPECT_NE(other, f.ns);
  EXPECT_EQ(f.store->match_prefix(other, chain)->blocks, 0u);
  AlignedBuffer out(kObj);
  auto g = f.store->get(other, test_key(1), out.view());
  EXPECT_EQ(g->miss, MissReason::kForeignNamespace);
  EXPECT_EQ(f.misses(MissReason::kForeignNamespace), 1u);
}

TEST(Store, RemoveDropsFromEveryTier) {
  Fixture f(small_options(std::make_shared<blk::MemDevice>(64 << 20), 4));
  for (int i = 0; i < 10; ++i) f.put(i);
  EXPECT_TRUE(*f.store->remove(f.ns, test_key(0)));  // on disk by now
  EXPECT_TRUE(*f.store->remove(f.ns, test_key(9)));  // in RAM
  EXPECT_FALSE(*f.store->remove(f.ns, test_key(9)));
  EXPECT_FALSE(f.get(0).hit);
  EXPECT_FALSE(f.get(9).hit);
  EXPECT_TRUE(f.get(5).hit);
  for (int i = 100; i < 120; ++i) f.put(i);  // orphaned slots get reused
  EXPECT_LE(f.store->local_stats().ram_used, 4u);
}

TEST(Store, RegionReclaimEvictsOldestAndReinsertsHotBlocks) {
  auto o = small_options(std::make_shared<blk::MemDevice>(8 << 20), 1);
  o.promote_on_disk_hit = false;
  o.disk.reinsert_min_hits = 2;
  Fixture f(o);
  const uint32_t regions = f.store->local_stats().disk.region_count;
  ASSERT_GE(regions, 2u);
  // Block 0 is read twice from disk: hot.
  f.put(0);
  f.put(1);
  f.put(2);
  ASSERT_EQ(f.get(0).tier, Tier::kDisk);
  ASSERT_EQ(f.get(0).tier, Tier::kDisk);
  // Write enough to wrap the volume several times.
  const int per_region = (1 << 20) / (kObj + 4096);
  for (int i = 10; i < 10 + per_region * static_cast<int>(regions) * 3; ++i) f.put(i);
  auto st = f.store->local_stats();
  EXPECT_GT(st.disk.regions_reclaimed, 0u);
  EXPECT_GT(st.disk.entries_evicted, 0u);
  EXPECT_GT(st.disk.entries_reinserted, 0u);
  EXPECT_FALSE(f.get(1).hit);  // cold: gone with its region
  EXPECT_EQ(f.misses(MissReason::kNotFound), 1u);
}

}  // namespace
}  // namespace kvtier::kv

namespace kvtier::kv {
namespace {

TEST(Store, AdmissionBudgetRefusesDirectPutsAndDropsDemotions) {
  auto o = small_options(std::make_shared<blk::MemDevice>(64 << 20), 0);
  o.ram_bytes = 0;
  o.disk_write_budget_bytes_per_sec = 1;  // effectively closed after the burst
  o.disk_write_burst_bytes = 2 * kObj;
  Fixture f(o);
  EXPECT_TRUE(f.put(1).stored());
  EXPECT_TRUE(f.put(2).stored());
  PutResult r = f.put(3);
  EXPECT_EQ(r.outcome, PutResult::Outcome::kRefused);
  EXPECT_EQ(r.refuse, RefuseReason::kAdmission);
  EXPECT_EQ(f.store->local_stats().refusals[static_cast<size_t>(RefuseReason::kAdmission)], 1u);
  EXPECT_TRUE(f.get(1).hit);
  EXPECT_FALSE(f.get(3).hit);

  auto o2 = small_options(std::make_shared<blk::MemDevice>(64 << 20), 2);
  o2.disk_write_budget_bytes_per_sec = 1;
  o2.disk_write_burst_bytes = kObj;
  Fixture g(o2);
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(g.put(i).stored());
  auto st = g.store->local_stats();
  EXPECT_EQ(st.demotions, 1u);
  EXPECT_EQ(st.demotions_rejected, 3u);
  EXPECT_EQ(st.eviction_drops, 3u);
}

}  // namespace
}  // namespace kvtier::kv

namespace kvtier::kv {
namespace {

TEST(Store, BatchGetRejectsOverlappingOrSmallBuffersBeforeAnyIo) {
  auto mem = std::make_shared<blk::MemDevice>(64 << 20);
  auto faulty = std::make_shared<blk::FaultyDevice>(mem, 5);
  auto o = small_options(faulty, 1);
  Fixture f(o);
  for (int i = 0; i < 6; ++i) f.put(i);
  ASSERT_TRUE(f.store->flush().ok());
  faulty->set_latency(std::chrono::milliseconds(100));
  AlignedBuffer a(kObj), small(100);
  std::memset(a.data(), 0x11, a.size());
  std::vector<BatchGetItem> items{{test_key(0), a.view()}, {test_key(1), small.view()}};
  EXPECT_EQ(f.store->batch_get(f.ns, items).status().code(), StatusCode::kInvalidArgument);
  std::vector<BatchGetItem> overlap{{test_key(0), a.subview(0, kObj)},
                                    {test_key(1), a.subview(100, kObj - 100)}};
  EXPECT_EQ(f.store->batch_get(f.ns, overlap).status().code(), StatusCode::kInvalidArgument);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(static_cast<uint8_t>(a.data()[0]), 0x11);  // no late completion wrote it
  faulty->set_latency(std::chrono::nanoseconds(0));
}

// Many threads racing puts of the same few keys through a tiny RAM tier:
// every key that was stored must stay readable with its own bytes (a put
// that loses a race must not give away a slot someone else now uses).
TEST(Store, RacingPutsOfTheSameKeysNeverLoseOrMixBlocks) {
  auto o = small_options(std::make_shared<blk::MemDevice>(128 << 20), 4);
  Fixture f(o);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      AlignedBuffer b(kObj);
      for (int round = 0; round < 200; ++round) {
        uint64_t i = (round * 7 + t) % 24;
        fill_payload(test_key(i), b.view());
        ASSERT_TRUE(f.store->put(f.ns, test_key(i), b.view()).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  auto st = f.store->local_stats();
  EXPECT_LE(st.ram_used, 4u);
  EXPECT_EQ(st.index_entries, 24u);
  for (int i = 0; i < 24; ++i) EXPECT_TRUE(f.get(i).hit) << i;  // get() checks the bytes
}

TEST(Store, CallsAfterCloseAreRejected) {
  Fixture f(small_options(std::make_shared<blk::MemDevice>(32 << 20)));
  f.put(1);
  ASSERT_TRUE(f.store->close().ok());
  AlignedBuffer b(kObj);
  EXPECT_EQ(f.store->put(f.ns, test_key(2), b.view()).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.store->get(f.ns, test_key(1), b.view()).status().code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kvtier::kv
