#include "engine/kv_connector.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "blk/dev/mem_device.h"
#include "kv/block_key.h"
#include "kv/store.h"
#include "kv/testing/small_store.h"

namespace kvtier::engine {
namespace {

constexpr uint32_t kBlock = 8192;

struct ConnectorFixture {
  std::unique_ptr<kv::Store> store;
  std::unique_ptr<KvConnector> connector;
  std::vector<kv::Key128> keys;

  explicit ConnectorFixture(uint64_t ram_slots, size_t blocks) {
    kv::StoreOptions o = kv::testing::small_store_options(
        std::make_shared<blk::MemDevice>(64 << 20), ram_slots, kBlock);
    o.disk.max_payload_bytes = kBlock;
    o.disk.read_depth = kv::DiskTierOptions{}.read_depth;  // the defaults, as a real engine
    o.io_timeout_ms = kv::StoreOptions{}.io_timeout_ms;    // would run with
    o.promote_on_disk_hit = false;  // keep the tiers where the saves left them
    store = kv::testing::open_store(o);
    const auto ns = kv::Namespace::of_model("connector-test", "1", "test", 16, "bf16", "test");
    auto id = store->register_namespace(ns);
    EXPECT_TRUE(id.ok()) << id.status().message();
    connector = std::make_unique<KvConnector>(store.get(), *id, kBlock);
    std::vector<uint64_t> ids(blocks);
    for (size_t i = 0; i < blocks; ++i) ids[i] = 1000 + i;
    keys = kv::chain_block_keys_from_ids(ns.scheme, ns.digest(), ids);
  }
};

// Blocks saved first are demoted to disk once RAM is full; a load reads the
// RAM part and the disk part in separate batches and accounts the disk part's
// bytes and time apart, while every block is still verified.
TEST(KvConnector, LoadTimesDiskBlocksApartAndVerifiesAll) {
  ConnectorFixture f(/*ram_slots=*/8, /*blocks=*/24);
  auto saved = f.connector->save(f.keys);
  ASSERT_TRUE(saved.ok());
  EXPECT_EQ(saved->stored, 24u);
  ASSERT_TRUE(f.store->flush().ok());

  auto m = f.connector->lookup(f.keys);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->blocks, 24u);
  ASSERT_GT(m->disk_blocks, 0u);
  ASSERT_GT(m->ram_blocks, 0u);

  auto load = f.connector->load_prefix(f.keys, 2);
  ASSERT_TRUE(load.ok()) << load.status().message();
  EXPECT_EQ(load->verify_failures, 0u);
  EXPECT_EQ(load->loaded, 22u);
  EXPECT_EQ(load->from_ram + load->from_disk, 22u);
  EXPECT_GT(load->from_disk, 0u);
  EXPECT_EQ(load->bytes, 22ull * kBlock);
  // Disk bytes are those of the blocks the match placed on disk (after `from`).
  size_t disk_after_from = 0;
  for (size_t i = 2; i < m->tiers.size(); ++i) disk_after_from += m->tiers[i] == kv::Tier::kDisk;
  EXPECT_EQ(load->disk_bytes, disk_after_from * kBlock);
  EXPECT_GT(load->disk_wall_s, 0.0);
  EXPECT_LE(load->disk_wall_s, load->wall_s);
}

TEST(KvConnector, RamOnlyLoadHasNoDiskTime) {
  ConnectorFixture f(/*ram_slots=*/32, /*blocks=*/6);
  ASSERT_TRUE(f.connector->save(f.keys).ok());
  auto load = f.connector->load_prefix(f.keys, 0);
  ASSERT_TRUE(load.ok());
  EXPECT_EQ(load->loaded, 6u);
  EXPECT_EQ(load->from_ram, 6u);
  EXPECT_EQ(load->disk_bytes, 0u);
  EXPECT_EQ(load->disk_wall_s, 0.0);
}

// A chooser moves the start of the load: the blocks before it are neither
// read nor counted, those after it are loaded and verified as usual, and a
// start outside [from, match] is clamped into it.
TEST(KvConnector, ChosenStartLoadsOnlyTheBackOfThePrefix) {
  ConnectorFixture f(/*ram_slots=*/32, /*blocks=*/10);
  ASSERT_TRUE(f.connector->save(f.keys).ok());
  size_t seen_match = 0;
  auto load = f.connector->load_prefix(f.keys, 2, [&](const kv::MatchResult& m) {
    seen_match = m.blocks;
    return size_t{7};
  });
  ASSERT_TRUE(load.ok()) << load.status().message();
  EXPECT_EQ(seen_match, 10u);
  EXPECT_EQ(load->store_matched, 10u);
  EXPECT_EQ(load->load_from, 7u);
  EXPECT_EQ(load->loaded, 3u);
  EXPECT_EQ(load->bytes, 3ull * kBlock);
  EXPECT_GT(load->ram_wall_s, 0.0);

  auto past_end = f.connector->load_prefix(f.keys, 2, [](const kv::MatchResult&) { return 99; });
  ASSERT_TRUE(past_end.ok());
  EXPECT_EQ(past_end->load_from, 10u);
  EXPECT_EQ(past_end->loaded, 0u);
  auto before_from = f.connector->load_prefix(f.keys, 4, [](const kv::MatchResult&) { return 0; });
  ASSERT_TRUE(before_from.ok());
  EXPECT_EQ(before_from->load_from, 4u);
  EXPECT_EQ(before_from->loaded, 6u);
}

}  // namespace
}  // namespace kvtier::engine
