#include "net/cluster/cluster_config.h"

#include <gtest/gtest.h>

namespace kvtier::net {
namespace {

TEST(ClusterConfig, StaticNodesByAddressAndById) {
  auto o = parse_cluster_client_config(R"({
    "nodes": ["10.0.0.1:7470", {"id": "b", "address": "[fd00::2]:7471"}],
    "auth_token": "s3cret", "call_timeout_ms": 250, "connections": 3, "shared_memory": false})");
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  ASSERT_EQ(o->nodes.size(), 2u);
  EXPECT_EQ(o->nodes[0].id, "10.0.0.1:7470");
  EXPECT_EQ(o->nodes[0].host, "10.0.0.1");
  EXPECT_EQ(o->nodes[0].port, 7470);
  EXPECT_EQ(o->nodes[1].id, "b");
  EXPECT_EQ(o->nodes[1].host, "fd00::2");
  EXPECT_EQ(o->nodes[1].port, 7471);
  EXPECT_TRUE(o->etcd_url.empty());
  EXPECT_EQ(o->node_options.auth_token, "s3cret");
  EXPECT_EQ(o->node_options.call_timeout_ms, 250u);
  EXPECT_EQ(o->node_options.connections, 3u);
  EXPECT_FALSE(o->node_options.shared_memory);
}

TEST(ClusterConfig, Etcd) {
  auto o = parse_cluster_client_config(
      R"({"etcd_url": "http://127.0.0.1:2379", "etcd_prefix": "prod", "poll_ms": 100})");
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_TRUE(o->nodes.empty());
  EXPECT_EQ(o->etcd_url, "http://127.0.0.1:2379");
  EXPECT_EQ(o->etcd_prefix, "prod");
  EXPECT_EQ(o->poll_ms, 100u);
}

TEST(ClusterConfig, RejectsWhatItCannotUse) {
  const char* bad[] = {
      "not json",
      "[]",
      "{}",                                                  // neither source
      R"({"nodes": ["a:1"], "etcd_url": "http://e:2379"})",  // both
      R"({"nodes": []})",                                    // empty list
      R"({"nodes": ["no-port"]})",                           // not host:port
      R"({"nodes": ["a:0"]})",                               // port 0
      R"({"nodes": ["a:70000"]})",                           // port too large
      R"({"nodes": ["a:1", "a:1"]})",                        // duplicate id
      R"({"nodes": [{"id": "x"}]})",                         // no address
      R"({"nodes": [{"address": "a:1", "weight": 2}]})",     // unknown node key
      R"({"nodes": [7]})",                                   // not a node
      R"({"nodes": ["a:1"], "call_timeout": 5})",            // typo
      R"({"nodes": ["a:1"], "call_timeout_ms": 0})",         // out of range
      R"({"nodes": ["a:1"], "call_timeout_ms": -1})",        // negative
      R"({"nodes": ["a:1"], "shared_memory": "yes"})",       // not a bool
      R"({"etcd_url": "https://e:2379"})",                   // only http
  };
  for (const char* text : bad) {
    auto o = parse_cluster_client_config(text);
    EXPECT_FALSE(o.ok()) << text;
    if (!o.ok()) {
      EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument) << text;
    }
  }
}

TEST(ClusterConfig, StatsSumAddsEveryWireField) {
  kv::StoreStats a, b;
  a.puts = 3;
  a.hits_ram = 5;
  a.misses[static_cast<size_t>(kv::MissReason::kNotFound)] = 2;
  a.ram_slots = 10;
  a.disk.reads = 4;
  b.puts = 4;
  b.hits_ram = 1;
  b.misses[static_cast<size_t>(kv::MissReason::kNotFound)] = 7;
  b.ram_slots = 30;
  b.disk.reads = 1;
  b.has_disk = true;
  kv::StoreStats sum;
  add_store_stats(sum, a);
  add_store_stats(sum, b);
  EXPECT_EQ(sum.puts, 7u);
  EXPECT_EQ(sum.hits_ram, 6u);
  EXPECT_EQ(sum.misses[static_cast<size_t>(kv::MissReason::kNotFound)], 9u);
  EXPECT_EQ(sum.ram_slots, 40u);
  EXPECT_EQ(sum.disk.reads, 5u);
  EXPECT_TRUE(sum.has_disk);
}

}  // namespace
}  // namespace kvtier::net
