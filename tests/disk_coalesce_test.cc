// A batch get from a disk tier on a remote volume (the study's case E: the
// store on kvtier's NVMe/TCP host, kvtier's target serving a RAM namespace):
// blocks that lie back to back on the volume are read with one Read command
// per run, their data scattered over one staging buffer each, and every
// block is still verified and delivered on its own.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "blk/dev/mem_device.h"
#include "kv/store.h"
#include "kv/test_payload.h"
#include "kv/testing/raw_volume.h"
#include "kv/testing/small_store.h"
#include "nvmf/host_device.h"
#include "nvmf/target.h"
#include "nvmf/testing/one_namespace.h"

namespace kvtier {
namespace {

constexpr const char* kNqn = "nqn.2024-01.io.kvtier:coalesce";
constexpr const char* kHost = "nqn.2024-01.io.kvtier:coalesce-host";
constexpr uint32_t kObj = 16 << 10;  // one entry: a header page and four payload pages
constexpr uint64_t kBlocks = 12;

struct RemoteStore {
  std::shared_ptr<blk::MemDevice> mem = std::make_shared<blk::MemDevice>(32 << 20, 4096, 1);
  std::unique_ptr<nvmf::NvmfTarget> target;
  std::shared_ptr<nvmf::NvmeTcpDevice> volume;
  std::unique_ptr<kv::Store> store;
  uint16_t ns = 0;

  explicit RemoteStore(uint32_t coalesce_max_bytes = kv::DiskTierOptions{}.coalesce_max_bytes) {
    auto t = nvmf::NvmfTarget::start(nvmf::testing::one_namespace_target(mem, kNqn, kHost));
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    if (!t.ok()) return;
    target = std::move(*t);
    auto h =
        nvmf::NvmeTcpDevice::connect(nvmf::testing::host_options_for(target->port(), kNqn, kHost));
    EXPECT_TRUE(h.ok()) << h.status().to_string();
    if (!h.ok()) return;
    volume = std::move(*h);
    // No RAM tier: every put goes straight to the volume, in order, and
    // every get is a disk read.
    kv::StoreOptions o = kv::testing::small_store_options(volume, 0, kObj);
    o.disk.coalesce_max_bytes = coalesce_max_bytes;
    o.io_timeout_ms = 10000;
    store = kv::testing::open_store(o);
    if (!store) return;
    ns = *store->register_namespace(kv::test_namespace("coalesce-model"));
    AlignedBuffer b(kObj);
    for (uint64_t i = 0; i < kBlocks; ++i) {
      kv::fill_payload(kv::test_key(i), b.view());
      auto r = store->put(ns, kv::test_key(i), b.view());
      EXPECT_TRUE(r.ok() && r->stored()) << i;
    }
    // Fill the open region so the blocks above are on the volume, not only
    // in a region buffer.
    for (uint64_t i = 0; i < 100; ++i) {
      kv::fill_payload(kv::test_key(1000 + i), b.view());
      (void)store->put(ns, kv::test_key(1000 + i), b.view());
    }
    EXPECT_TRUE(store->flush().ok());
  }
  ~RemoteStore() {
    store.reset();
    volume.reset();
  }
  bool ready() const { return store != nullptr; }

  // Gets `ids` in one batch: hits per block, and the target's device reads
  // and the tier's coalesced reads it took.
  struct Batch {
    std::vector<kv::GetResult> results;
    std::vector<bool> intact;
    uint64_t device_reads = 0, coalesced = 0;
  };
  Batch get(const std::vector<uint64_t>& ids) {
    std::vector<AlignedBuffer> bufs;
    std::vector<kv::BatchGetItem> items;
    for (uint64_t id : ids) bufs.emplace_back(kObj);
    for (size_t k = 0; k < ids.size(); ++k) items.push_back({kv::test_key(ids[k]), bufs[k].view()});
    Batch b;
    const uint64_t reads_before = mem->stats().reads;
    const uint64_t coalesced_before = store->local_stats().disk.coalesced_reads;
    auto r = store->batch_get(ns, items);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return b;
    b.results = *r;
    for (size_t k = 0; k < ids.size(); ++k) {
      b.intact.push_back(kv::payload_matches(kv::test_key(ids[k]), bufs[k].view()));
    }
    b.device_reads = mem->stats().reads - reads_before;
    b.coalesced = store->local_stats().disk.coalesced_reads - coalesced_before;
    return b;
  }
};

std::vector<uint64_t> first_blocks(bool reversed) {
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < kBlocks; ++i) ids.push_back(reversed ? kBlocks - 1 - i : i);
  return ids;
}

TEST(DiskCoalesce, AdjacentBlocksOfABatchAreOneCommandPerRun) {
  RemoteStore s;
  ASSERT_TRUE(s.ready());
  ASSERT_TRUE(s.volume->capabilities().vectored_reads);
  // The window is 8 reads (read_depth): 8 go out together, then 4 once half
  // have been collected: two runs, two Read commands, 10 reads that rode
  // with the one before. In reverse order too (the tier sorts by page), and
  // each block still lands in its own caller's buffer.
  for (bool reversed : {false, true}) {
    auto b = s.get(first_blocks(reversed));
    ASSERT_EQ(b.results.size(), kBlocks);
    for (size_t k = 0; k < kBlocks; ++k) {
      EXPECT_TRUE(b.results[k].hit && b.results[k].tier == kv::Tier::kDisk) << k;
      EXPECT_TRUE(b.intact[k]) << "block " << k << (reversed ? " (reversed)" : "");
    }
    EXPECT_EQ(b.device_reads, 2u) << (reversed ? "reversed" : "in order");
    EXPECT_EQ(b.coalesced, 10u);
  }
  // Every other block: nothing is adjacent, one command each.
  auto sparse = s.get({0, 2, 4, 6, 8, 10});
  EXPECT_EQ(sparse.device_reads, 6u);
  EXPECT_EQ(sparse.coalesced, 0u);
  for (size_t k = 0; k < 6; ++k) EXPECT_TRUE(sparse.intact[k]) << k;
}

TEST(DiskCoalesce, OneDamagedBlockInARunFailsAloneAndTheRestArrive) {
  RemoteStore s;
  ASSERT_TRUE(s.ready());
  const auto at = kv::testing::entry_offsets(s.mem->raw(), kv::test_key(3));
  ASSERT_EQ(at.size(), 1u);
  s.mem->raw()[at[0] + 4096 + 100] ^= std::byte{0x40};  // a payload byte
  auto b = s.get(first_blocks(false));
  ASSERT_EQ(b.results.size(), kBlocks);
  EXPECT_EQ(b.device_reads, 2u);
  for (size_t k = 0; k < kBlocks; ++k) {
    if (k == 3) {
      EXPECT_FALSE(b.results[k].hit);
      EXPECT_EQ(b.results[k].miss, kv::MissReason::kCorrupt);
    } else {
      EXPECT_TRUE(b.results[k].hit) << k;
      EXPECT_TRUE(b.intact[k]) << k;
    }
  }
}

TEST(DiskCoalesce, OffSendsOneCommandPerBlock) {
  RemoteStore s(/*coalesce_max_bytes=*/0);
  ASSERT_TRUE(s.ready());
  auto b = s.get(first_blocks(false));
  EXPECT_EQ(b.device_reads, kBlocks);
  EXPECT_EQ(b.coalesced, 0u);
  for (size_t k = 0; k < kBlocks; ++k) EXPECT_TRUE(b.intact[k]) << k;
}

}  // namespace
}  // namespace kvtier
