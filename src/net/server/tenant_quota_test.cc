// Tenants' byte quotas and the store's namespace handles, through a real
// server and real clients: a tenant at its RAM or disk byte quota has its
// puts refused with RefuseReason::kQuota and a metric while another tenant
// keeps storing; clients that register ever new namespaces and go away do
// not fill the store's handle table.
#include <gtest/gtest.h>

#include <thread>

#include "blk/dev/mem_device.h"
#include "common/buffer.h"
#include "net/testing/store_test_util.h"

namespace kvtier::net {
namespace {

using namespace kvtier::net::testing;  // NOLINT

const std::string kTokenA = "token-of-tenant-a-0123456789";
const std::string kTokenB = "token-of-tenant-b-0123456789";

// Waits until the server serves `n` connections (the registrations of those
// that ended are released as they end).
bool wait_connections(const StoreServer& s, size_t n = 0) {
  for (int i = 0; i < 1000; ++i) {
    if (s.active_connections() == n) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

void byte_quota(bool shared_memory) {
  ServerConfig cfg = test_config();
  TenantConfig a, b;
  a.name = "a";
  a.token = kTokenA;
  a.max_ram_bytes = 4 * kObj;
  b.name = "b";
  b.token = kTokenB;
  cfg.tenants = {a, b};
  auto server = start_server(cfg);
  ASSERT_TRUE(server);
  auto client = [&](const std::string& token) {
    RemoteStoreOptions o = client_options(server->port());
    o.auth_token = token;
    o.shared_memory = shared_memory;
    return connect(o);
  };
  auto ca = client(kTokenA);
  auto cb = client(kTokenB);
  const uint16_t na = *ca->register_namespace(test_namespace());
  const uint16_t nb = *cb->register_namespace(test_namespace());
  AlignedBuffer buf(kObj);
  for (int i = 0; i < 4; ++i) {
    fill_payload(test_key(i), buf.view());
    auto p = ca->put(na, test_key(i), buf.view());
    ASSERT_TRUE(p.ok() && p->stored()) << i;
  }
  auto over = ca->put(na, test_key(10), buf.view());
  ASSERT_TRUE(over.ok());
  EXPECT_EQ(over->refuse, kv::RefuseReason::kQuota);
  std::vector<kv::Key128> keys = {test_key(11), test_key(12)};
  std::vector<ByteView> parts = {buf.view(), buf.view()};
  auto batch = ca->batch_put(na, keys, parts);
  ASSERT_TRUE(batch.ok());
  for (const auto& r : *batch) EXPECT_EQ(r.refuse, kv::RefuseReason::kQuota);
  // The other tenant stores past a's quota.
  for (int i = 0; i < 6; ++i) {
    auto p = cb->put(nb, test_key(100 + i), buf.view());
    ASSERT_TRUE(p.ok() && p->stored()) << i;
  }
  const std::string metrics = server->render_metrics();
  EXPECT_GE(
      metric_value(metrics, "kvtier_server_tenant_refused_total{tenant=\"a\",quota=\"ram_bytes\"}"),
      3u);
  EXPECT_EQ(metric_value(metrics, "kvtier_server_tenant_ram_bytes{tenant=\"a\"}"), 4u * kObj);
  // Back under the quota, a stores again; its blocks were never lost.
  EXPECT_TRUE(*ca->remove(na, test_key(0)));
  auto again = ca->put(na, test_key(10), buf.view());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->stored());
  EXPECT_EQ(
      ca->match_prefix(na, std::vector<kv::Key128>{test_key(1), test_key(2), test_key(3)})->blocks,
      3u);
  // Blocks count after their connection is gone: a new connection of a,
  // registering the same namespace, is still at its quota.
  ca.reset();
  ASSERT_TRUE(wait_connections(*server, 2));  // b's two
  auto ca2 = client(kTokenA);
  const uint16_t na2 = *ca2->register_namespace(test_namespace());
  auto still = ca2->put(na2, test_key(20), buf.view());
  ASSERT_TRUE(still.ok());
  EXPECT_EQ(still->refuse, kv::RefuseReason::kQuota);
}

TEST(TenantBytes, QuotaRefusesPutsOverTcp) { byte_quota(false); }
TEST(TenantBytes, QuotaRefusesPutsOverSharedMemory) { byte_quota(true); }

TEST(TenantBytes, ConfigParsed) {
  auto c = parse_server_config(R"({"tenants": [{"name": "a", "token": "0123456789abcdef",
      "max_ram_bytes": "64MiB", "max_disk_bytes": "1GiB"}]})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->tenants[0].max_ram_bytes, 64ull << 20);
  EXPECT_EQ(c->tenants[0].max_disk_bytes, 1ull << 30);
}

TEST(HostileClients, NamespaceChurnDoesNotFillTheHandleTable) {
  kv::StoreOptions so;
  so.ram_bytes = 16 * kObj;
  so.max_object_bytes = kObj;
  so.max_namespaces = 8;
  auto store = kv::Store::open(so);
  ASSERT_TRUE(store.ok());
  auto server = start_server(test_config(), std::move(*store));
  ASSERT_TRUE(server);
  // 40 clients, one after another, each with two namespaces never seen
  // before: 80 namespaces through a table of 8.
  for (int i = 0; i < 40; ++i) {
    RemoteStoreOptions o = tcp_client_options(server->port(), 1);
    auto c = connect(o);
    for (int j = 0; j < 2; ++j) {
      auto h = c->register_namespace(test_namespace("churn-" + std::to_string(2 * i + j)));
      ASSERT_TRUE(h.ok()) << i << ": " << h.status().to_string();
    }
    c.reset();
    ASSERT_TRUE(wait_connections(*server));
  }
  EXPECT_LE(server->store().namespace_handles(), 8u);
  // A client holding 8 namespaces fills the table; a ninth is refused,
  // typed, and the first eight keep working.
  RemoteStoreOptions o = tcp_client_options(server->port(), 1);
  auto full = connect(o);
  std::vector<uint16_t> held;
  for (int j = 0; j < 8; ++j) {
    held.push_back(*full->register_namespace(test_namespace("held-" + std::to_string(j))));
  }
  auto ninth = full->register_namespace(test_namespace("ninth"));
  ASSERT_FALSE(ninth.ok());
  EXPECT_EQ(ninth.status().code(), StatusCode::kOutOfSpace);
  AlignedBuffer buf(kObj);
  fill_payload(test_key(1), buf.view());
  EXPECT_TRUE(full->put(held[0], test_key(1), buf.view())->stored());
}

// Silent connections (no Hello) are capped at max_pending_hello, oldest
// closed first, so they cannot keep a client out until their Hello timeout
// (a minute here): the client is served while they are still open.
void silent_connections(uint32_t max_connections, uint32_t max_pending_hello) {
  ServerConfig cfg = test_config();
  cfg.hello_timeout_ms = 60000;
  cfg.max_connections = max_connections;
  cfg.max_pending_hello = max_pending_hello;
  auto server = start_server(cfg);
  ASSERT_TRUE(server);
  std::vector<std::unique_ptr<RawClient>> silent;
  for (int i = 0; i < 500; ++i) silent.push_back(std::make_unique<RawClient>(server->port()));
  RemoteStoreOptions o = tcp_client_options(server->port(), 1);
  auto c = connect(o, /*must_connect=*/false);
  ASSERT_TRUE(c->wait_connected(20000).ok());
  const uint16_t ns = *c->register_namespace(test_namespace());
  std::vector<std::byte> buf(kObj);
  kv::fill_payload(kv::test_key(5), buf);
  EXPECT_TRUE(c->put(ns, kv::test_key(5), buf)->stored());
  EXPECT_GE(metric_value(server->render_metrics(),
                         "kvtier_server_connections_refused_total{reason=\"hello_evicted\"}"),
            400u);
  EXPECT_LE(server->active_connections(), max_connections + 1);
}

TEST(HostileClients, SilentConnectionsCannotKeepClientsOut) { silent_connections(128, 16); }
// Fewer slots than max_pending_hello: the slots fill first, and still the
// oldest silent connection makes room.
TEST(HostileClients, SilentConnectionsCannotKeepClientsOutOfAFullServer) {
  silent_connections(16, 64);
}

// A tenant that registers a namespace, puts one block and goes away, again
// and again, holds a store handle for each (its blocks keep it): those count
// against its max_namespaces, so it cannot fill the store's table.
TEST(TenantBytes, NamespacesHoldingBlocksCountAgainstTheTenant) {
  ServerConfig cfg = test_config();
  TenantConfig a;
  a.name = "a";
  a.token = kTokenA;
  a.max_namespaces = 3;
  cfg.tenants = {a};
  auto server = start_server(cfg);
  ASSERT_TRUE(server);
  AlignedBuffer buf(kObj);
  for (int i = 0; i < 4; ++i) {
    RemoteStoreOptions o = client_options(server->port());
    o.auth_token = kTokenA;
    o.connections = 1;
    o.shared_memory = false;
    auto c = connect(o);
    auto h = c->register_namespace(test_namespace("model-" + std::to_string(i)));
    if (i < 3) {
      ASSERT_TRUE(h.ok()) << i << ": " << h.status().to_string();
      fill_payload(test_key(i), buf.view());
      ASSERT_TRUE(c->put(*h, test_key(i), buf.view())->stored());
    } else {
      ASSERT_FALSE(h.ok());
      EXPECT_EQ(h.status().code(), StatusCode::kOutOfSpace) << h.status().to_string();
    }
    c.reset();
    ASSERT_TRUE(wait_connections(*server));
  }
}

}  // namespace
}  // namespace kvtier::net
