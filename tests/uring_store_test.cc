// A Store on a real file through UringDevice with O_DIRECT: the same paths as
// the unit tests on MemDevice, but with completions on the device's thread,
// real alignment rules and a real restart from the on-volume checkpoint.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <linux/magic.h>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "blk/dev/uring_device.h"
#include "common/testing/temp_dir.h"
#include "kv/store.h"
#include "kv/test_payload.h"

namespace kvtier::kv {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kObj = 64 << 10;
constexpr uint64_t kVolumeBytes = 64 << 20;
constexpr uint64_t kRamSlots = 16;

// Lengths vary so that entries of every size in (0, kObj] reach the volume.
uint32_t length_of(uint64_t i) {
  if (i % 3 == 0) return kObj;
  return static_cast<uint32_t>(1 + (i * 7919) % kObj);
}

Namespace uring_namespace() { return test_namespace("uring-store-test"); }

class UringStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    dir_ = kvtier::testing::make_direct_io_dir("kvtier_uring_store", &why);
    if (dir_.empty()) GTEST_SKIP() << "no filesystem with O_DIRECT support found: " << why;
    path_ = dir_ + "/volume.img";
  }
  void TearDown() override {
    store_.reset();
    if (!dir_.empty()) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    }
  }

  StoreOptions options(uint64_t region_bytes = 1 << 20) {
    blk::UringOptions uo;
    uo.path = path_;
    uo.create_size = kVolumeBytes;
    uo.direct = true;
    auto dev = blk::UringDevice::open(uo);
    EXPECT_TRUE(dev.ok()) << dev.status().to_string();
    StoreOptions o;
    o.ram_bytes = kRamSlots * kObj;
    o.max_object_bytes = kObj;
    if (dev.ok()) o.volume = std::shared_ptr<blk::BlockDevice>(std::move(dev).value());
    o.disk.region_bytes = region_bytes;
    o.disk.flush_chunk_bytes = 256 << 10;
    o.disk.read_depth = 8;
    o.io_timeout_ms = 5000;
    return o;
  }

  void open_store(const StoreOptions& o) {
    store_.reset();  // closes the previous store before the volume is reopened
    auto s = Store::open(o);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    store_ = std::move(s).value();
    auto ns = store_->register_namespace(uring_namespace());
    ASSERT_TRUE(ns.ok()) << ns.status().to_string();
    ns_ = *ns;
  }

  void put(uint64_t i) {
    const uint32_t len = length_of(i);
    fill_payload(test_key(i), buf_.subview(0, len));
    auto r = store_->put(ns_, test_key(i), ByteView(buf_.data(), len));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_TRUE(r->stored()) << i << " refused: " << refuse_reason_name(r->refuse);
  }

  // Gets block i; a hit must carry exactly its bytes.
  GetResult get(uint64_t i) {
    AlignedBuffer out(kObj);
    auto r = store_->get(ns_, test_key(i), out.view());
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return {};
    if (r->hit) {
      EXPECT_EQ(r->length, length_of(i)) << "block " << i;
      EXPECT_TRUE(payload_matches(test_key(i), ByteView(out.data(), r->length)))
          << "block " << i << " served with wrong bytes";
    }
    return *r;
  }

  uint64_t misses(MissReason r) const {
    return store_->local_stats().misses[static_cast<size_t>(r)];
  }

  std::string dir_, path_;
  std::unique_ptr<Store> store_;
  uint16_t ns_ = 0;
  AlignedBuffer buf_{kObj};
};

TEST_F(UringStoreTest, DemotionBatchGetAndWarmRestart) {
  constexpr uint64_t n = 400;  // 25x the RAM tier; ~2 MiB-regions' worth many times over
  ASSERT_NO_FATAL_FAILURE(open_store(options()));
  for (uint64_t i = 0; i < n; ++i) ASSERT_NO_FATAL_FAILURE(put(i));
  StoreStats st = store_->local_stats();
  EXPECT_GE(st.demotions, n - kRamSlots);
  EXPECT_GT(st.disk.region_writes, 0u);
  EXPECT_EQ(st.ram_used, kRamSlots);

  // One batch of blocks that were demoted long ago: all reads in flight on
  // the device together. Some are missing keys, some still in RAM.
  {
    std::vector<AlignedBuffer> outs;
    std::vector<BatchGetItem> items;
    std::vector<uint64_t> ids;
    for (uint64_t i = 0; i < 48; ++i) ids.push_back(i);
    ids.push_back(n - 1);    // in RAM
    ids.push_back(1000000);  // never stored
    for (uint64_t i = 100; i < 116; ++i) ids.push_back(i);
    for (uint64_t id : ids) {
      outs.emplace_back(kObj);
      items.push_back({test_key(id), outs.back().view()});
    }
    const uint64_t device_reads_before = store_->local_stats().disk.reads;
    auto r = store_->batch_get(ns_, items);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_EQ(r->size(), ids.size());
    for (size_t k = 0; k < ids.size(); ++k) {
      const GetResult& g = (*r)[k];
      if (ids[k] == 1000000) {
        EXPECT_FALSE(g.hit);
        EXPECT_EQ(g.miss, MissReason::kNotFound);
        continue;
      }
      ASSERT_TRUE(g.hit) << "block " << ids[k] << " missed: " << miss_reason_name(g.miss);
      EXPECT_EQ(g.tier, ids[k] == n - 1 ? Tier::kRam : Tier::kDisk) << ids[k];
      EXPECT_EQ(g.length, length_of(ids[k])) << ids[k];
      EXPECT_TRUE(payload_matches(test_key(ids[k]), ByteView(outs[k].data(), g.length)))
          << "block " << ids[k] << " served with wrong bytes";
    }
    // Old blocks come from the device, not from a region buffer.
    EXPECT_GE(store_->local_stats().disk.reads - device_reads_before, 48u + 16u);
  }
  for (uint64_t i = 0; i < n; ++i) {
    GetResult g = get(i);
    ASSERT_TRUE(g.hit) << "block " << i << " missed: " << miss_reason_name(g.miss);
  }
  st = store_->local_stats();
  EXPECT_GT(st.hits_disk, 0u);
  EXPECT_EQ(st.disk.read_corrupt, 0u);
  EXPECT_EQ(st.disk.read_io_errors, 0u);
  EXPECT_EQ(misses(MissReason::kCorrupt), 0u);
  EXPECT_EQ(misses(MissReason::kTimeout), 0u);

  // Clean close, then a new process-like open of the same file: everything
  // comes back from the checkpoint, with the right bytes.
  ASSERT_TRUE(store_->close().ok());
  ASSERT_NO_FATAL_FAILURE(open_store(options()));
  st = store_->local_stats();
  EXPECT_TRUE(st.disk.recovered_from_checkpoint);
  EXPECT_EQ(st.disk.recovered_entries, n);
  EXPECT_EQ(st.disk.recovery_dropped, 0u);
  EXPECT_EQ(st.ram_used, 0u);
  for (uint64_t i = 0; i < n; ++i) {
    GetResult g = get(i);
    ASSERT_TRUE(g.hit) << "block " << i
                       << " lost over a clean restart: " << miss_reason_name(g.miss);
  }
  // More writes after the warm restart, then a second clean restart: old and
  // new blocks are all there (the second checkpoint covers both lives).
  for (uint64_t i = n; i < n + 100; ++i) ASSERT_NO_FATAL_FAILURE(put(i));
  store_.reset();  // the destructor closes
  ASSERT_NO_FATAL_FAILURE(open_store(options()));
  st = store_->local_stats();
  EXPECT_TRUE(st.disk.recovered_from_checkpoint);
  EXPECT_EQ(st.disk.recovered_entries, n + 100);
  for (uint64_t i = 0; i < n + 100; ++i) {
    GetResult g = get(i);
    ASSERT_TRUE(g.hit) << "block " << i
                       << " lost over the second restart: " << miss_reason_name(g.miss);
  }
  EXPECT_EQ(misses(MissReason::kCorrupt), 0u);
}

// The checkpoint is good once: a store opened from it and then "crashed"
// must not find the checkpoint again. In-process we cannot crash, but we can
// look at the superblock the open left behind.
TEST_F(UringStoreTest, CheckpointIsInvalidatedOnOpen) {
  ASSERT_NO_FATAL_FAILURE(open_store(options()));
  for (uint64_t i = 0; i < 50; ++i) ASSERT_NO_FATAL_FAILURE(put(i));
  ASSERT_TRUE(store_->close().ok());
  auto read_state = [&] {
    int fd = ::open(path_.c_str(), O_RDONLY);
    EXPECT_GE(fd, 0);
    disk::Superblock sb{};
    EXPECT_EQ(::pread(fd, &sb, sizeof(sb), 0), static_cast<ssize_t>(sizeof(sb)));
    ::close(fd);
    EXPECT_EQ(sb.magic, disk::kSuperMagic);
    return sb.checkpoint_state;
  };
  EXPECT_EQ(read_state(), disk::kCheckpointValid);
  ASSERT_NO_FATAL_FAILURE(open_store(options()));
  EXPECT_TRUE(store_->local_stats().disk.recovered_from_checkpoint);
  EXPECT_EQ(read_state(), disk::kNoCheckpoint);  // while the store is open
}

// A volume of another geometry is reformatted: none of its old blocks may be
// served, and the new store works.
TEST_F(UringStoreTest, GeometryChangeReformatsAndServesNothingOld) {
  ASSERT_NO_FATAL_FAILURE(open_store(options(1 << 20)));
  for (uint64_t i = 0; i < 100; ++i) ASSERT_NO_FATAL_FAILURE(put(i));
  ASSERT_TRUE(store_->close().ok());
  ASSERT_NO_FATAL_FAILURE(open_store(options(2 << 20)));
  EXPECT_EQ(store_->local_stats().disk.recovered_entries, 0u);
  EXPECT_EQ(store_->local_stats().index_entries, 0u);
  for (uint64_t i = 0; i < 100; ++i) EXPECT_FALSE(get(i).hit) << i;
  for (uint64_t i = 200; i < 300; ++i) ASSERT_NO_FATAL_FAILURE(put(i));
  for (uint64_t i = 200; i < 300; ++i) EXPECT_TRUE(get(i).hit) << i;
}

// Writers fill the RAM tier far past capacity while readers read random
// blocks: completions arrive on the device thread, demotions and promotions
// race with reads. Every hit must have the right bytes.
TEST_F(UringStoreTest, ConcurrentPutsAndGetsAlwaysGetRightBytes) {
  ASSERT_NO_FATAL_FAILURE(open_store(options()));
  constexpr uint64_t kBlocks = 700;  // ~30 MiB, within the 64 MiB volume
  std::atomic<uint64_t> next{0}, bad{0}, hits{0}, failures{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&] {
      AlignedBuffer b(kObj);
      for (;;) {
        const uint64_t i = next.fetch_add(1);
        if (i >= kBlocks) break;
        fill_payload(test_key(i), b.subview(0, length_of(i)));
        auto r = store_->put(ns_, test_key(i), ByteView(b.data(), length_of(i)));
        if (!r.ok() || !r->stored()) failures.fetch_add(1);
      }
    });
  }
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      AlignedBuffer b(kObj);
      uint64_t x = r + 1;
      while (next.load() < kBlocks) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const uint64_t hi = std::min(next.load(), kBlocks);
        if (hi == 0) continue;
        const uint64_t i = (x >> 33) % hi;
        auto g = store_->get(ns_, test_key(i), b.view());
        if (!g.ok()) {
          failures.fetch_add(1);
          continue;
        }
        if (g->hit) {
          hits.fetch_add(1);
          if (g->length != length_of(i) ||
              !payload_matches(test_key(i), ByteView(b.data(), g->length))) {
            bad.fetch_add(1);
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_GT(hits.load(), 0u);
  EXPECT_EQ(bad.load(), 0u);
  const auto st = store_->local_stats();
  for (uint64_t i = 0; i < kBlocks; ++i) {
    GetResult g = get(i);
    EXPECT_TRUE(g.hit) << "block " << i << ": " << miss_reason_name(g.miss)
                       << " (regions reclaimed " << st.disk.regions_reclaimed
                       << ", entries evicted " << st.disk.entries_evicted << ", write timeouts "
                       << st.disk.write_timeouts << ", index-full reclaims "
                       << st.index_full_reclaims << ", eviction drops " << st.eviction_drops
                       << ", demotions rejected " << st.demotions_rejected << ", demotions "
                       << st.demotions << ")";
  }
  EXPECT_EQ(misses(MissReason::kCorrupt), 0u);
}

}  // namespace
}  // namespace kvtier::kv
