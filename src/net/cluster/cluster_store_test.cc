// ClusterStore over a static node list of three in-process store servers:
// routing by owner, batch split and merge in order, the match_prefix rule,
// and a stopped node giving misses rather than errors.
#include "net/cluster/cluster_store.h"
#include "kv/test_payload.h"

#include <gtest/gtest.h>

#include <map>

#include "net/cluster/placement.h"
#include "net/server/server_config.h"
#include "net/server/store_server.h"
#include "net/testing/store_test_util.h"

namespace kvtier::net {
namespace {

constexpr uint32_t kObj = 8 << 10;

kv::Namespace cluster_namespace() { return kv::test_namespace("cluster-unit"); }

struct ThreeNodes {
  std::vector<std::unique_ptr<StoreServer>> servers;
  std::unique_ptr<ClusterStore> cluster;
  uint16_t ns = 0;

  // Puts blocks ckey(first) .. ckey(first + n - 1); returns their keys.
  std::vector<kv::Key128> put_chain(uint64_t first, size_t n);

  ThreeNodes() {
    ClusterStoreOptions o;
    for (int i = 0; i < 3; ++i) {
      ServerConfig c = testing::test_config();
      c.metrics_enabled = false;
      c.io_threads = 1;
      c.store.max_object_bytes = kObj;
      c.store.ram_bytes = 256 * kObj;
      kv::StoreOptions so;
      so.ram_bytes = 256 * kObj;
      so.max_object_bytes = kObj;
      auto store = kv::Store::open(so);
      EXPECT_TRUE(store.ok());
      auto s = StoreServer::start(c, std::move(*store));
      EXPECT_TRUE(s.ok()) << s.status().to_string();
      o.nodes.push_back(ClusterNode{"node-" + std::to_string(i), "127.0.0.1", (*s)->port()});
      servers.push_back(std::move(*s));
    }
    // Far above a call's time on a busy machine: a live node's answer must
    // never turn into a miss here (the stopped-node test sets its own).
    o.node_options.call_timeout_ms = 5000;
    o.node_options.connect_timeout_ms = 5000;
    auto cs = ClusterStore::open(o);
    EXPECT_TRUE(cs.ok()) << cs.status().to_string();
    cluster = std::move(*cs);
    auto h = cluster->register_namespace(cluster_namespace());
    EXPECT_TRUE(h.ok());
    ns = *h;
  }
};

kv::Key128 ckey(uint64_t i) { return kv::Key128{0xc1u, i * 0x9E3779B97F4A7C15ull + 7}; }

std::vector<std::byte> payload(const kv::Key128& k) {
  std::vector<std::byte> b(kObj);
  uint64_t x = k.lo;
  for (auto& c : b) {
    x = x * 6364136223846793005ull + 1;
    c = static_cast<std::byte>(x >> 56);
  }
  return b;
}

std::vector<kv::Key128> ThreeNodes::put_chain(uint64_t first, size_t n) {
  std::vector<kv::Key128> keys;
  for (size_t i = 0; i < n; ++i) {
    keys.push_back(ckey(first + i));
    auto d = payload(keys.back());
    EXPECT_TRUE(cluster->put(ns, keys.back(), d).ok()) << i;
  }
  return keys;
}

TEST(ClusterStore, BatchesSplitPerOwnerAndMergeInOrder) {
  ThreeNodes t;
  ASSERT_EQ(t.cluster->nodes().size(), 3u);
  constexpr size_t kN = 60;
  std::vector<kv::Key128> keys;
  std::vector<std::vector<std::byte>> data;
  std::vector<ByteView> views;
  std::map<std::string, size_t> per_node;
  for (size_t i = 0; i < kN; ++i) {
    keys.push_back(ckey(i));
    data.push_back(payload(keys.back()));
    ++per_node[t.cluster->owner_of(keys.back())];
  }
  for (const auto& d : data) views.emplace_back(d);
  ASSERT_EQ(per_node.size(), 3u) << "60 keys should land on every node";
  auto put = t.cluster->batch_put(t.ns, keys, views);
  ASSERT_TRUE(put.ok());
  for (const auto& r : *put) EXPECT_TRUE(r.stored());
  // Each server holds exactly the keys placed on it.
  for (size_t n = 0; n < 3; ++n) {
    auto st = t.servers[n]->store().local_stats();
    EXPECT_EQ(st.puts, per_node["node-" + std::to_string(n)]) << n;
  }
  // Batch get in reverse order: answers come back in the caller's order.
  std::vector<std::vector<std::byte>> out(kN, std::vector<std::byte>(kObj));
  std::vector<kv::BatchGetItem> items;
  for (size_t i = kN; i-- > 0;) items.push_back(kv::BatchGetItem{keys[i], out[i]});
  auto got = t.cluster->batch_get(t.ns, items);
  ASSERT_TRUE(got.ok());
  for (size_t j = 0; j < kN; ++j) {
    size_t i = kN - 1 - j;
    ASSERT_TRUE((*got)[j].hit) << i;
    EXPECT_EQ(out[i], data[i]) << i;
  }
  auto m = t.cluster->match_prefix(t.ns, keys);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->blocks, kN);
  EXPECT_EQ(m->ram_blocks, kN);
  EXPECT_EQ(m->tiers.size(), kN);
}

TEST(ClusterStore, MatchPrefixStopsAtTheFirstMissingKeyOnAnyNode) {
  ThreeNodes t;
  const std::vector<kv::Key128> keys = t.put_chain(100, 40);
  for (size_t hole : {size_t{0}, size_t{17}, size_t{39}}) {
    ASSERT_TRUE(t.cluster->remove(t.ns, keys[hole]).ok());
    auto m = t.cluster->match_prefix(t.ns, keys);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->blocks, hole) << "hole at " << hole;
    auto d = payload(keys[hole]);
    ASSERT_TRUE(t.cluster->put(t.ns, keys[hole], d).ok());
  }
  // Two holes on different nodes: the earlier one decides.
  size_t a = 30, b = 10;
  while (t.cluster->owner_of(keys[b]) == t.cluster->owner_of(keys[a])) ++b;
  ASSERT_TRUE(t.cluster->remove(t.ns, keys[a]).ok());
  ASSERT_TRUE(t.cluster->remove(t.ns, keys[b]).ok());
  auto m = t.cluster->match_prefix(t.ns, keys);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->blocks, std::min(a, b));
}

// over_stores: in-process stores as nodes, with the placement of a
// networked cluster of the same ids.
TEST(ClusterStore, InProcessNodesTakeTheKeysTheirIdsOwn) {
  std::vector<std::unique_ptr<kv::Store>> stores;
  std::vector<std::pair<std::string, KvStore*>> nodes;
  for (int i = 0; i < 3; ++i) {
    kv::StoreOptions so;
    so.ram_bytes = 256 * kObj;
    so.max_object_bytes = kObj;
    auto store = kv::Store::open(so);
    ASSERT_TRUE(store.ok());
    stores.push_back(std::move(*store));
    nodes.emplace_back("node-" + std::to_string(i), stores.back().get());
  }
  auto cluster = ClusterStore::over_stores(nodes);
  const Placement placement({"node-0", "node-1", "node-2"});
  const uint16_t ns = *cluster->register_namespace(cluster_namespace());
  std::vector<kv::Key128> keys;
  std::vector<size_t> per_node(3, 0);
  for (uint64_t i = 0; i < 60; ++i) {
    keys.push_back(ckey(i));
    auto d = payload(keys.back());
    ASSERT_TRUE(cluster->put(ns, keys.back(), d)->stored()) << i;
    EXPECT_EQ(cluster->owner_of(keys.back()), placement.node_ids()[placement.owner(keys.back())]);
    ++per_node[placement.owner(keys.back())];
  }
  for (size_t n = 0; n < 3; ++n) {
    EXPECT_GT(per_node[n], 0u) << n;
    EXPECT_EQ(stores[n]->local_stats().puts, per_node[n]) << n;
  }
  EXPECT_EQ(cluster->match_prefix(ns, keys)->blocks, keys.size());
  ASSERT_TRUE(cluster->remove(ns, keys[25]).ok());
  EXPECT_EQ(cluster->match_prefix(ns, keys)->blocks, 25u);
  EXPECT_EQ(cluster->stats()->puts, keys.size());
}

TEST(ClusterStore, StoppedNodeGivesMissesNotErrors) {
  ThreeNodes t;
  constexpr size_t kN = 30;
  const std::vector<kv::Key128> keys = t.put_chain(500, kN);
  ASSERT_TRUE(t.servers[1]->stop().ok());
  std::vector<std::byte> buf(kObj);
  size_t misses = 0;
  for (size_t i = 0; i < kN; ++i) {
    auto g = t.cluster->get(t.ns, keys[i], buf);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    if (t.cluster->owner_of(keys[i]) == "node-1") {
      EXPECT_FALSE(g->hit);
      ++misses;
    } else {
      EXPECT_TRUE(g->hit);
      EXPECT_EQ(buf, payload(keys[i]));
    }
  }
  EXPECT_GT(misses, 0u);
  EXPECT_TRUE(ClusterStore::open(ClusterStoreOptions{}).status().code() ==
              StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier::net
