#include "net/cluster/etcd_client.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "net/cluster/cluster_store.h"
#include "net/server/server_config.h"

namespace kvtier::net {
namespace {

using nlohmann::json;

TEST(EtcdJson, Base64RoundTripAndKnownValues) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("/kvtier/nodes/"), "L2t2dGllci9ub2Rlcy8=");
  for (const std::string& s :
       std::vector<std::string>{"", "a", "ab", "abc", std::string("\0\xff\x10", 3)}) {
    auto d = base64_decode(base64_encode(s));
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(*d, s);
  }
  EXPECT_FALSE(base64_decode("abc").ok());
  EXPECT_FALSE(base64_decode("a!c=").ok());
}

TEST(EtcdJson, PrefixRangeEnd) {
  EXPECT_EQ(prefix_range_end("/kvtier/nodes/"), "/kvtier/nodes0");
  EXPECT_EQ(prefix_range_end(std::string("a\xff", 2)), "b");
  EXPECT_EQ(prefix_range_end(std::string("\xff", 1)), std::string(1, '\0'));
}

TEST(EtcdJson, RequestBodies) {
  json put = json::parse(etcd_put_request("/p/nodes/a", "127.0.0.1:7470", 42));
  EXPECT_EQ(put["key"], base64_encode("/p/nodes/a"));
  EXPECT_EQ(put["value"], base64_encode("127.0.0.1:7470"));
  EXPECT_EQ(put["lease"], "42");
  EXPECT_FALSE(json::parse(etcd_put_request("k", "v", 0)).contains("lease"));
  json range = json::parse(etcd_range_request("/p/", prefix_range_end("/p/")));
  EXPECT_EQ(range["range_end"], base64_encode("/p0"));
  EXPECT_EQ(json::parse(etcd_lease_grant_request(10))["TTL"], "10");
  EXPECT_EQ(json::parse(etcd_lease_id_request(7587))["ID"], "7587");
}

TEST(EtcdJson, ParsesAnswers) {
  std::string range = json{
      {"header", {{"revision", "5"}}},
      {"kvs",
       {{{"key", base64_encode("/p/nodes/a")},
         {"value", base64_encode("127.0.0.1:1")},
         {"lease", "694d7d"}},
        {{"key", base64_encode("/p/nodes/b")},
         {"value", base64_encode("[::1]:2")},
         {"lease", "123"}}}},
      {"count", "2"}}.dump();
  // "694d7d" is not decimal: an error, not a silent 0.
  EXPECT_FALSE(parse_etcd_range_response(range).ok());
  range = json{{"kvs",
                {{{"key", base64_encode("/p/nodes/a")},
                  {"value", base64_encode("127.0.0.1:1")},
                  {"lease", "7587"}}}}}
              .dump();
  auto kvs = parse_etcd_range_response(range);
  ASSERT_TRUE(kvs.ok()) << kvs.status().to_string();
  ASSERT_EQ(kvs->size(), 1u);
  EXPECT_EQ((*kvs)[0].key, "/p/nodes/a");
  EXPECT_EQ((*kvs)[0].value, "127.0.0.1:1");
  EXPECT_EQ((*kvs)[0].lease, 7587);
  // No key: the gateway leaves "kvs" out.
  auto none = parse_etcd_range_response(R"({"header":{"revision":"3"}})");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());

  auto grant = parse_etcd_lease_grant_response(R"({"header":{},"ID":"7587869","TTL":"10"})");
  ASSERT_TRUE(grant.ok());
  EXPECT_EQ(grant->first, 7587869);
  EXPECT_EQ(grant->second, 10);
  EXPECT_FALSE(parse_etcd_lease_grant_response(R"({"header":{}})").ok());

  auto ttl = parse_etcd_keepalive_response(R"({"result":{"header":{},"ID":"1","TTL":"9"}})");
  ASSERT_TRUE(ttl.ok());
  EXPECT_EQ(*ttl, 9);
  auto gone = parse_etcd_keepalive_response(R"({"result":{"header":{},"ID":"1"}})");
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(*gone, 0);

  auto err = parse_etcd_range_response(R"({"error":"etcdserver: bad","code":3,"message":"bad"})");
  EXPECT_FALSE(err.ok());
  EXPECT_NE(err.status().message().find("bad"), std::string::npos);
  EXPECT_FALSE(parse_etcd_range_response("not json").ok());
}

TEST(EtcdJson, UrlsAndNodeAddresses) {
  auto ep = parse_etcd_url("http://127.0.0.1:2379/");
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->host, "127.0.0.1");
  EXPECT_EQ(ep->port, 2379);
  EXPECT_FALSE(ep->tls);
  auto tls = parse_etcd_url("https://x:1");
  ASSERT_TRUE(tls.ok());
  EXPECT_TRUE(tls->tls);
  EXPECT_EQ(tls->url(), "https://x:1");
  EXPECT_FALSE(parse_etcd_url("ftp://x:1").ok());
  EXPECT_FALSE(parse_etcd_url("http://x:0").ok());
  EXPECT_FALSE(parse_etcd_url("http://:12").ok());
  auto n = parse_node_address("a", "[::1]:7470");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->host, "::1");
  EXPECT_EQ(n->port, 7470);
  EXPECT_FALSE(parse_node_address("a", "127.0.0.1").ok());
  EXPECT_FALSE(parse_node_address("a", "h:99999").ok());
  EXPECT_EQ(etcd_nodes_key_prefix("/kvtier/"), "/kvtier/nodes/");
}

TEST(EtcdJson, UnreachableEtcdIsAClearErrorWithinTheTimeout) {
  // Port 1 on loopback: nothing listens there.
  EtcdClient etcd(EtcdEndpoint{"127.0.0.1", 1}, 500);
  auto r = etcd.range_prefix("/x/");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("127.0.0.1:1"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace kvtier::net

namespace kvtier::net {
namespace {

TEST(EtcdJson, ServerConfigEtcdSection) {
  auto c = parse_server_config(
      R"({"etcd": {"url": "http://127.0.0.1:2379", "node_id": "a", "ttl_s": 5}})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ASSERT_TRUE(c->etcd.has_value());
  EXPECT_EQ(c->etcd->node_id, "a");
  EXPECT_EQ(c->etcd->ttl_s, 5u);
  EXPECT_EQ(c->etcd->prefix, "kvtier");
  EXPECT_FALSE(parse_server_config("{}")->etcd.has_value());
  auto typo = parse_server_config(R"({"etcd": {"url": "http://h:1", "node_id": "a", "tll_s": 5}})");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("etcd.tll_s"), std::string::npos);
  EXPECT_FALSE(parse_server_config(R"({"etcd": {"url": "http://h:1"}})").ok());
  EXPECT_FALSE(parse_server_config(R"({"etcd": {"url": "h:1", "node_id": "a"}})").ok());
  EXPECT_FALSE(parse_server_config(R"({"etcd": {"url": "http://h:1", "node_id": "a/b"}})").ok());
  EXPECT_FALSE(
      parse_server_config(R"({"etcd": {"url": "http://h:1", "node_id": "a", "ttl_s": 1}})").ok());
}

}  // namespace
}  // namespace kvtier::net
