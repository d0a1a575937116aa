// Tenants of one store service, and clients that misbehave (the hostile-
// client suite's store part; ctest label "security" runs these again):
// real server, real Store, real sockets. Each test asserts that a tenant
// cannot reach another's blocks, that quotas refuse with a typed error and a
// metric, and that a legitimate client keeps being served.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/un.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/buffer.h"
#include "net/server/tenant_registry.h"
#include "net/testing/store_test_util.h"

namespace kvtier::net {
namespace {

using namespace kvtier::net::testing;  // NOLINT

const std::string kTokenA = "token-of-tenant-a-0123456789";
const std::string kTokenB = "token-of-tenant-b-0123456789";

ServerConfig two_tenants() {
  ServerConfig c = test_config();
  TenantConfig a, b;
  a.name = "a";
  a.token = kTokenA;
  b.name = "b";
  b.token = kTokenB;
  c.tenants = {a, b};
  return c;
}

std::unique_ptr<RemoteStore> tenant_client(const StoreServer& s, const std::string& token,
                                           bool shared_memory, bool must_connect = true) {
  RemoteStoreOptions o = client_options(s.port());
  o.auth_token = token;
  o.shared_memory = shared_memory;
  o.direct_channel = shared_memory;
  return connect(o, must_connect);
}

TEST(TenantConfig, ParsedAndChecked) {
  auto ok = parse_server_config(R"({"tenants": [
      {"name": "a", "token": "0123456789abcdef", "max_connections": 2, "max_namespaces": 3,
       "max_pinned_blocks": 4, "max_ram_bytes": 8388608, "share_ram_arena": true},
      {"name": "b.team-1", "token": "fedcba9876543210"}]})");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  ASSERT_EQ(ok->tenants.size(), 2u);
  EXPECT_EQ(ok->tenants[0].max_pinned_blocks, 4u);
  EXPECT_TRUE(ok->tenants[0].share_ram_arena);
  // Tenants' tokens count as tokens off loopback.
  EXPECT_TRUE(parse_server_config(
                  R"({"listen": {"address": "0.0.0.0"},
                      "tenants": [{"name": "a", "token": "0123456789abcdef"}]})")
                  .ok());
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"tenants": [{"name": "a b", "token": "0123456789abcdef"}]})", "tenant name"},
      {R"({"tenants": [{"name": "a", "token": "short"}]})", "16"},
      {R"({"tenants": [{"name": "a", "token": "0123456789abcdef"},
                       {"name": "a", "token": "0123456789abcdeX"}]})",
       "twice"},
      {R"({"tenants": [{"name": "a", "token": "0123456789abcdef"},
                       {"name": "b", "token": "0123456789abcdef"}]})",
       "another tenant"},
      {R"({"tenants": [{"name": "a", "token": "0123456789abcdef", "share_ram_arena": true}]})",
       "share_ram_arena needs max_ram_bytes"},
      {R"({"auth_token": "x", "tenants": [{"name": "a", "token": "0123456789abcdef"}]})",
       "not both"},
      {R"({"tenants": [{"name": "a", "token": "0123456789abcdef", "quota": 1}]})",
       "tenants[0].quota"},
  };
  for (const auto& [text, says] : bad) {
    auto r = parse_server_config(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().to_string();
  }
}

TEST(TenantKeys, MappedPerNamespaceAndTenant) {
  kv::Namespace ns;
  ns.model_id = "m";
  const auto da = tenant_namespace("a", ns).digest();
  const auto db = tenant_namespace("b", ns).digest();
  EXPECT_NE(da, db);
  EXPECT_NE(da, ns.digest());
  // A name and salt cannot spell another tenant's.
  kv::Namespace salted = ns;
  salted.tenant_salt = "x";
  EXPECT_NE(tenant_namespace("a", salted).digest(), tenant_namespace("a:x", ns).digest());
  const kv::Key128 k = test_key(7);
  EXPECT_EQ(tenant_key(da, k), tenant_key(da, k));
  EXPECT_NE(tenant_key(da, k), tenant_key(db, k));
  EXPECT_NE(tenant_key(da, k), k);
}

// Tenant B, with the very same model fields and keys, can neither read,
// probe, pin, remove nor overwrite tenant A's blocks, over TCP or the
// same-host paths.
void cross_tenant(bool shared_memory) {
  auto server = start_server(two_tenants());
  ASSERT_TRUE(server);
  auto a = tenant_client(*server, kTokenA, shared_memory);
  auto b = tenant_client(*server, kTokenB, shared_memory);
  const uint16_t na = *a->register_namespace(test_namespace());
  const uint16_t nb = *b->register_namespace(test_namespace());
  constexpr int kN = 8;
  std::vector<kv::Key128> keys;
  AlignedBuffer buf(kObj);
  for (int i = 0; i < kN; ++i) {
    keys.push_back(test_key(100 + i));
    fill_payload(keys.back(), buf.view());
    ASSERT_TRUE(a->put(na, keys.back(), buf.view())->stored());
  }
  // Reads and probes by B: misses, nothing matched, nothing pinned.
  for (const auto& k : keys) {
    auto g = b->get(nb, k, buf.view());
    ASSERT_TRUE(g.ok());
    EXPECT_FALSE(g->hit) << "tenant b read tenant a's block";
  }
  EXPECT_EQ(b->match_prefix(nb, keys)->blocks, 0u);
  EXPECT_EQ(*b->pin(nb, keys, 60000), 0u);
  EXPECT_FALSE(*b->remove(nb, keys[0]));
  // B's own put of the same key is its own block, not a refusal that would
  // tell B the key exists, and not an overwrite of A's.
  std::vector<std::byte> other(kObj, std::byte{0x5A});
  auto p = b->put(nb, keys[1], ByteView(other.data(), other.size()));
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->stored());
  // A still has every block, intact.
  EXPECT_EQ(a->match_prefix(na, keys)->blocks, static_cast<size_t>(kN));
  for (const auto& k : keys) {
    auto g = a->get(na, k, buf.view());
    ASSERT_TRUE(g.ok() && g->hit);
    EXPECT_TRUE(payload_matches(k, ByteView(buf.data(), g->length)));
  }
  // And B reads back its own bytes.
  auto gb = b->get(nb, keys[1], buf.view());
  ASSERT_TRUE(gb.ok() && gb->hit);
  EXPECT_EQ(std::memcmp(buf.data(), other.data(), kObj), 0);
}

TEST(Tenants, CrossTenantGetPutRemoveMatchAndPinFailOverTcp) { cross_tenant(false); }
TEST(Tenants, CrossTenantGetPutRemoveMatchAndPinFailOverSharedMemory) { cross_tenant(true); }

TEST(Tenants, UnknownOrMissingTokenIsRefused) {
  auto server = start_server(two_tenants());
  ASSERT_TRUE(server);
  for (const std::string& token : {std::string(), std::string("token-of-nobody-0123456789")}) {
    auto c = tenant_client(*server, token, false, /*must_connect=*/false);
    Status st = wait_answered(*c, "authentication failed");
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("authentication failed"), std::string::npos) << st.to_string();
  }
}

TEST(Tenants, QuotasRefuseWithTypedErrorsAndMetrics) {
  ServerConfig cfg = two_tenants();
  cfg.tenants[0].max_connections = 1;
  cfg.tenants[0].max_namespaces = 2;
  cfg.tenants[0].max_pinned_blocks = 4;
  auto server = start_server(cfg);
  ASSERT_TRUE(server);
  RemoteStoreOptions o = client_options(server->port());
  o.auth_token = kTokenA;
  o.connections = 1;
  o.shared_memory = false;
  auto a = connect(o);
  // Connections: a second one of tenant a is refused; tenant b is not.
  auto a2 = connect(o, false);
  Status st = wait_answered(*a2, "quota");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("quota"), std::string::npos) << st.to_string();
  auto b = tenant_client(*server, kTokenB, false);
  EXPECT_TRUE(b->connected());
  // Namespaces.
  ASSERT_TRUE(a->register_namespace(test_namespace("m1")).ok());
  ASSERT_TRUE(a->register_namespace(test_namespace("m2")).ok());
  auto third = a->register_namespace(test_namespace("m3"));
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), StatusCode::kOutOfSpace);
  // Pins: 4 blocks at most.
  const uint16_t ns = *a->register_namespace(test_namespace("m1"));
  std::vector<kv::Key128> keys;
  AlignedBuffer buf(kObj);
  for (int i = 0; i < 6; ++i) {
    keys.push_back(test_key(500 + i));
    fill_payload(keys.back(), buf.view());
    ASSERT_TRUE(a->put(ns, keys.back(), buf.view())->stored());
  }
  EXPECT_EQ(*a->pin(ns, std::span(keys).first(4), 60000), 4u);
  auto over = a->pin(ns, std::span(keys).subspan(4), 60000);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kOutOfSpace);
  EXPECT_EQ(*a->unpin(ns, std::span(keys).first(2)), 2u);
  EXPECT_EQ(*a->pin(ns, std::span(keys).subspan(4), 60000), 2u);
  const std::string metrics = server->render_metrics();
  for (const char* q : {"connections", "namespaces", "pinned_blocks"}) {
    const std::string name =
        std::string("kvtier_server_tenant_refused_total{tenant=\"a\",quota=\"") + q + "\"}";
    EXPECT_GE(metric_value(metrics, name), 1u) << name;
  }
  EXPECT_EQ(metric_value(metrics, "kvtier_server_tenant_pinned_blocks{tenant=\"a\"}"), 4u);
}

TEST(Tenants, PinsAndQuotaEndWithTheConnection) {
  ServerConfig cfg = two_tenants();
  cfg.tenants[0].max_pinned_blocks = 4;
  auto server = start_server(cfg, small_store(8));
  ASSERT_TRUE(server);
  std::vector<kv::Key128> keys;
  {
    auto a = tenant_client(*server, kTokenA, false);
    const uint16_t ns = *a->register_namespace(test_namespace());
    AlignedBuffer buf(kObj);
    for (int i = 0; i < 4; ++i) {
      keys.push_back(test_key(900 + i));
      fill_payload(keys.back(), buf.view());
      ASSERT_TRUE(a->put(ns, keys.back(), buf.view())->stored());
    }
    ASSERT_EQ(*a->pin(ns, keys, 3600000), 4u);
  }  // the client goes away with its pins
  auto a = tenant_client(*server, kTokenA, false);
  const uint16_t ns = *a->register_namespace(test_namespace());
  // Waits for the server to see the old connection end.
  std::optional<size_t> pinned;
  for (int i = 0; i < 500; ++i) {
    auto r = a->pin(ns, keys, 60000);
    if (r.ok()) {
      pinned = *r;
      break;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_TRUE(pinned.has_value()) << "the quota was not given back";
  EXPECT_EQ(*pinned, 4u);
}

// ---- hostile clients ----------------------------------------------------------------

TEST(HostileClients, IdleConnectionIsClosedAndOthersAreServed) {
  ServerConfig cfg = test_config();
  cfg.idle_timeout_ms = 300;
  auto server = start_server(cfg);
  ASSERT_TRUE(server);
  RawClient idle(server->port());
  ASSERT_TRUE(raw_session(idle).has_value());
  EXPECT_TRUE(idle.closed_by_peer(10000));
  // A legitimate client keeps being served (its pool reconnects).
  RemoteStoreOptions o = tcp_client_options(server->port());
  auto c = connect(o);
  const uint16_t ns = *c->register_namespace(test_namespace());
  AlignedBuffer buf(kObj);
  fill_payload(test_key(1), buf.view());
  EXPECT_TRUE(c->put(ns, test_key(1), buf.view())->stored());
  EXPECT_GE(metric_value(server->render_metrics(),
                         "kvtier_server_connections_refused_total{reason=\"idle_timeout\"}"),
            1u);
}

TEST(HostileClients, ClientThatStopsReadingLosesItsConnectionAndLease) {
  ServerConfig cfg = test_config();
  cfg.write_timeout_ms = 500;
  auto server = start_server(cfg, small_store(64));
  ASSERT_TRUE(server);
  {
    RemoteStoreOptions o = tcp_client_options(server->port());
    auto loader = connect(o);
    const uint16_t ns = *loader->register_namespace(test_namespace());
    AlignedBuffer buf(kObj);
    for (int i = 0; i < 8; ++i) {
      fill_payload(test_key(8000 + i), buf.view());
      ASSERT_TRUE(loader->put(ns, test_key(8000 + i), buf.view())->stored());
    }
  }
  RawClient stalled(server->port(), 16 << 10);
  auto handle = raw_session(stalled);
  ASSERT_TRUE(handle.has_value());
  // More than the socket buffers hold, and never read.
  for (int i = 0; i < 320; ++i) {
    if (!stalled.send_message(GetRequest{*handle, test_key(8000 + i % 8), kObj},
                              static_cast<uint64_t>(100 + i))) {
      break;  // the server already closed it
    }
  }
  // Within the write deadline (waited for as a condition, not a sleep), the
  // lease is given back while the client still has not read a byte.
  bool released = false;
  for (int i = 0; i < 1000 && !released; ++i) {
    released =
        server->store().local_stats().ram_leased == 0 &&
        metric_value(server->render_metrics(),
                     "kvtier_server_connections_refused_total{reason=\"write_timeout\"}") >= 1;
    if (!released) std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_TRUE(released);
  // The blocks are all still there for everyone else.
  RemoteStoreOptions o = tcp_client_options(server->port());
  auto c = connect(o);
  const uint16_t ns = *c->register_namespace(test_namespace());
  AlignedBuffer buf(kObj);
  auto g = c->get(ns, test_key(8003), buf.view());
  ASSERT_TRUE(g.ok() && g->hit);
  EXPECT_TRUE(payload_matches(test_key(8003), ByteView(buf.data(), g->length)));
}

TEST(HostileClients, PutForAnUnregisteredNamespaceIsRefusedBeforeItsData) {
  auto server = start_server();
  ASSERT_TRUE(server);
  RawClient raw(server->port());
  ASSERT_TRUE(raw.connected());
  ASSERT_TRUE(raw.hello());
  // The frame announces a large put but sends only its head: the server
  // must refuse it from the descriptor, without waiting for (or allocating)
  // the data.
  std::vector<std::byte> data(kObj);
  auto frame = encode_message_frame(PutRequest{77, test_key(1), kObj}, 9,
                                    std::span<const ByteView>(std::array{ByteView(data)}));
  ASSERT_TRUE(frame.ok());
  ASSERT_TRUE(raw.send(ByteView(frame->data(), frame->size() - kObj)));
  auto f = raw.read_frame(5000);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->header.type, MessageType::kErrorResponse);
  EXPECT_TRUE(raw.closed_by_peer());
}

TEST(HostileClients, NamespaceHandlesPerConnectionAreBounded) {
  ServerConfig cfg = two_tenants();
  cfg.tenants[1].max_namespaces = 16;
  auto server = start_server(cfg);
  ASSERT_TRUE(server);
  auto b = tenant_client(*server, kTokenB, false);
  int refused = 0;
  for (int i = 0; i < 40; ++i) {
    auto r = b->register_namespace(test_namespace("exhaust-" + std::to_string(i)));
    if (!r.ok()) ++refused;
  }
  EXPECT_EQ(refused, 40 - 16);
  // Tenant a is unaffected.
  auto a = tenant_client(*server, kTokenA, false);
  EXPECT_TRUE(a->register_namespace(test_namespace("fine")).ok());
}

// Thousands of connections that never say a word, against the store port and
// the metrics port at once: the server neither crashes nor stops serving; a
// legitimate client gets in once the silent ones time out. The count is
// KVTIER_HOSTILE_CONNECTIONS (5000 by default), bounded by the fd limit.
TEST(HostileClients, ThousandsOfSilentConnectionsDoNotStopService) {
  rlimit rl{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  getrlimit(RLIMIT_NOFILE, &rl);
  size_t want = 5000;
  if (const char* e = std::getenv("KVTIER_HOSTILE_CONNECTIONS"))
    want = std::strtoul(e, nullptr, 10);
  // Each connection is two descriptors here (client and server ends).
  const size_t n = std::min<size_t>(want, rl.rlim_cur > 400 ? (rl.rlim_cur - 200) / 4 : 0);
  if (n < 100) GTEST_SKIP() << "descriptor limit too low: " << rl.rlim_cur;

  ServerConfig cfg = test_config();
  cfg.hello_timeout_ms = 1000;
  auto server = start_server(cfg);
  ASSERT_TRUE(server);
  std::vector<std::unique_ptr<RawClient>> silent;
  silent.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    silent.push_back(std::make_unique<RawClient>(server->port()));
    silent.push_back(std::make_unique<RawClient>(server->metrics_port()));
  }
  // A legitimate client is served (silent ones are evicted, or time out).
  RemoteStoreOptions o = tcp_client_options(server->port(), 1);
  auto c = connect(o, /*must_connect=*/false);
  ASSERT_TRUE(c->wait_connected(60000).ok());
  const uint16_t ns = *c->register_namespace(test_namespace());
  AlignedBuffer buf(kObj);
  fill_payload(test_key(3), buf.view());
  EXPECT_TRUE(c->put(ns, test_key(3), buf.view())->stored());
  const std::string metrics = http_fetch(server->metrics_port(), "/metrics");
  EXPECT_NE(metrics.find("kvtier_server_connections_total"), std::string::npos);
  EXPECT_GE(
      metric_value(metrics, "kvtier_server_connections_refused_total{reason=\"hello_timeout\"}") +
          metric_value(metrics,
                       "kvtier_server_connections_refused_total{reason=\"max_connections\"}") +
          metric_value(metrics,
                       "kvtier_server_connections_refused_total{reason=\"hello_evicted\"}"),
      n / 2);
}

// Local clients that connect to the shared-memory attach socket and never
// send their message wait beside the others, not in front of them: a client
// attaching meanwhile gets its area at once (it gave up after
// connect_timeout_ms when each silent one held the socket for a second).
TEST(HostileClients, SilentAttachConnectionsDoNotHoldUpOthers) {
  auto server = start_server();
  ASSERT_TRUE(server);
  RawClient raw(server->port());
  ASSERT_TRUE(raw_session(raw));
  ASSERT_TRUE(raw.send_message(ShmOfferRequest{}, 3));
  auto f = raw.read_frame();
  ASSERT_TRUE(f.ok());
  auto offer = decode_message_as<ShmOfferResponse>(f->header, f->descriptor);
  ASSERT_TRUE(offer.ok()) << offer.status().to_string();
  std::vector<int> silent;
  for (int i = 0; i < 50; ++i) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    // Abstract name: a leading NUL, then the name (no terminator).
    std::memcpy(a.sun_path + 1, offer->socket_name.data(), offer->socket_name.size());
    const auto len =
        static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + offer->socket_name.size());
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), len), 0) << i;
    silent.push_back(fd);
  }
  RemoteStoreOptions o = client_options(server->port());
  o.connections = 1;
  auto c = connect(o);
  EXPECT_EQ(c->client_stats().shm_sessions, 1u);
  for (int fd : silent) ::close(fd);
}

}  // namespace
}  // namespace kvtier::net
