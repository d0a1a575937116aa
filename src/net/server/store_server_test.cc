// StoreServer and RemoteStore on loopback, in one process: real sockets, a
// real Store (RAM tier over a MemDevice disk tier), real threads.
#include "net/server/store_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "blk/dev/mem_device.h"
#include "common/clock.h"
#include "net/client/remote_store.h"
#include "net/server/server_config.h"
#include "net/testing/store_test_util.h"

namespace kvtier::net {
namespace {

using namespace kvtier::net::testing;  // NOLINT

// ---- Round trips --------------------------------------------------------------------------

// Single-object put and get: outcomes, short objects, misses by reason.
void check_put_get(RemoteStore& client, uint16_t ns, uint16_t other) {
  AlignedBuffer buf(kObj), out(kObj);
  fill_payload(test_key(1), buf.view());
  auto p = client.put(ns, test_key(1), buf.view());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->outcome, kv::PutResult::Outcome::kStored);
  EXPECT_EQ(p->tier, kv::Tier::kRam);
  EXPECT_EQ(client.put(ns, test_key(1), buf.view())->outcome,
            kv::PutResult::Outcome::kDeduplicated);
  auto g = client.get(ns, test_key(1), out.view());
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_TRUE(g->hit);
  EXPECT_EQ(g->length, kObj);
  EXPECT_TRUE(payload_matches(test_key(1), out.view()));
  // A short object and a big buffer.
  fill_payload(test_key(2), buf.subview(0, 1000));
  ASSERT_TRUE(client.put(ns, test_key(2), ByteView(buf.data(), 1000))->stored());
  AlignedBuffer big(4 * kObj);
  g = client.get(ns, test_key(2), big.view());
  ASSERT_TRUE(g->hit);
  EXPECT_EQ(g->length, 1000u);
  EXPECT_TRUE(payload_matches(test_key(2), ByteView(big.data(), 1000)));
  // Misses and the other namespace.
  g = client.get(ns, test_key(99), out.view());
  EXPECT_FALSE(g->hit);
  EXPECT_EQ(g->miss, kv::MissReason::kNotFound);
  g = client.get(other, test_key(1), out.view());
  EXPECT_FALSE(g->hit);
  EXPECT_EQ(g->miss, kv::MissReason::kForeignNamespace);
}

// Bad input is an error, as with the in-process Store.
void check_bad_input(RemoteStore& client, uint16_t ns) {
  AlignedBuffer buf(kObj), out(kObj);
  EXPECT_EQ(client.get(ns, test_key(1), out.subview(0, 100)).status().code(),
            StatusCode::kInvalidArgument);  // buffer too small (server says so)
  EXPECT_EQ(client.put(ns, kv::Key128{}, buf.view()).status().code(), StatusCode::kInvalidArgument);
  AlignedBuffer huge(kObj + 1);
  EXPECT_EQ(client.put(ns, test_key(3), huge.view()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client.get(77, test_key(1), out.view()).status().code(), StatusCode::kInvalidArgument);
}

// batch_put / batch_get over a chain of kN keys, then match_prefix over it
// with a gap at 30; `keys` is the chain.
constexpr int kN = 40;
void check_batches_and_match(RemoteStore& client, uint16_t ns, std::vector<kv::Key128>& keys) {
  std::vector<AlignedBuffer> objs;
  std::vector<ByteView> views;
  for (int i = 0; i < kN; ++i) {
    objs.emplace_back(kObj);
    keys.push_back(test_key(1000 + i));
    fill_payload(keys.back(), objs.back().view());
  }
  for (auto& o : objs) views.push_back(o.view());
  auto bp = client.batch_put(ns, keys, views);
  ASSERT_TRUE(bp.ok()) << bp.status().to_string();
  ASSERT_EQ(bp->size(), size_t(kN));
  for (const auto& r : *bp) EXPECT_TRUE(r.stored());
  std::vector<AlignedBuffer> outs;
  std::vector<kv::BatchGetItem> items;
  for (int i = 0; i < kN; ++i) outs.emplace_back(kObj);
  for (int i = 0; i < kN; ++i) items.push_back({keys[i], outs[i].view()});
  auto bg = client.batch_get(ns, items);
  ASSERT_TRUE(bg.ok()) << bg.status().to_string();
  ASSERT_EQ(bg->size(), size_t(kN));
  for (int i = 0; i < kN; ++i) {
    ASSERT_TRUE((*bg)[i].hit) << i;
    EXPECT_TRUE(payload_matches(keys[i], outs[i].view())) << i;
  }
  // A batch with misses between hits: the hits' bytes land in their own buffers.
  AlignedBuffer o1(kObj), o2(kObj), o3(kObj);
  std::vector<kv::BatchGetItem> mixed{
      {keys[0], o1.view()}, {test_key(5555), o2.view()}, {keys[5], o3.view()}};
  auto mg = client.batch_get(ns, mixed);
  ASSERT_TRUE(mg.ok());
  EXPECT_TRUE((*mg)[0].hit);
  EXPECT_FALSE((*mg)[1].hit);
  EXPECT_TRUE((*mg)[2].hit);
  EXPECT_TRUE(payload_matches(keys[0], o1.view()));
  EXPECT_TRUE(payload_matches(keys[5], o3.view()));

  // match_prefix over the chain with a gap at 30.
  ASSERT_TRUE(*client.remove(ns, keys[30]));
  EXPECT_FALSE(*client.remove(ns, keys[30]));
  auto m = client.match_prefix(ns, keys);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->blocks, 30u);
  EXPECT_EQ(m->tiers.size(), 30u);
  EXPECT_EQ(m->ram_blocks + m->disk_blocks, 30u);
}

void check_stats(RemoteStore& client, StoreServer& server) {
  auto st = client.stats();
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_EQ(st->puts, server.store().local_stats().puts);
  EXPECT_GE(st->puts, size_t(kN) + 2);
  EXPECT_GE(st->hits_ram + st->hits_disk, size_t(kN));
  EXPECT_GE(st->misses[static_cast<size_t>(kv::MissReason::kNotFound)], 1u);
  EXPECT_TRUE(st->has_disk);
  EXPECT_EQ(st->ram_slots, 64u);
  auto counters = client.stat_counters();
  ASSERT_TRUE(counters.ok());
  bool saw_server = false;
  for (const auto& c : *counters) saw_server |= c.name == "kvtier_server_connections_total";
  EXPECT_TRUE(saw_server);
  auto json = client.stats_json();
  ASSERT_TRUE(json.ok()) << json.status().to_string();
  auto j = nlohmann::json::parse(*json);
  EXPECT_EQ(j["counters"]["kvtier_store_puts_total"].get<uint64_t>(), st->puts);
  EXPECT_EQ(j["server"]["port"].get<uint16_t>(), server.port());
}

TEST(StoreServer, EveryOperationRoundTrips) {
  auto server = start_server();
  ASSERT_TRUE(server);
  auto client = connect(client_options(server->port()));
  EXPECT_EQ(client->server_limits().max_object_bytes, kObj);

  auto ns = client->register_namespace(test_namespace());
  ASSERT_TRUE(ns.ok()) << ns.status().to_string();
  EXPECT_EQ(*client->register_namespace(test_namespace()), *ns);  // idempotent
  auto other = client->register_namespace(test_namespace("other-model"));
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *ns);
  kv::Namespace bad = test_namespace();
  bad.model_id.clear();
  EXPECT_EQ(client->register_namespace(bad).status().code(), StatusCode::kInvalidArgument);

  check_put_get(*client, *ns, *other);
  check_bad_input(*client, *ns);
  std::vector<kv::Key128> keys;
  check_batches_and_match(*client, *ns, keys);
  if (HasFatalFailure()) return;
  // pin / unpin
  std::vector<kv::Key128> first(keys.begin(), keys.begin() + 4);
  auto pn = client->pin(*ns, first, 60000);
  ASSERT_TRUE(pn.ok());
  EXPECT_LE(*pn, 4u);
  auto un = client->unpin(*ns, first);
  ASSERT_TRUE(un.ok());
  EXPECT_EQ(*un, *pn);
  check_stats(*client, *server);
}

TEST(StoreServer, LargeRequestsAreSplitToTheServerLimitsAndPipelined) {
  ServerConfig cfg = test_config();
  cfg.max_data_bytes = 4 * kObj;
  cfg.max_batch = 8;
  cfg.max_match_keys = 16;
  auto server = start_server(cfg, small_store(128));
  ASSERT_TRUE(server);
  // TCP only: same-host batches would take the direct channel instead.
  RemoteStoreOptions tcp = tcp_client_options(server->port());
  auto client = connect(tcp);
  EXPECT_EQ(client->server_limits().max_data_bytes, 4 * kObj);
  uint16_t ns = *client->register_namespace(test_namespace());
  constexpr int kN = 40;
  std::vector<AlignedBuffer> objs, outs;
  std::vector<kv::Key128> keys;
  std::vector<ByteView> views;
  std::vector<kv::BatchGetItem> items;
  for (int i = 0; i < kN; ++i) {
    keys.push_back(test_key(500 + i));
    objs.emplace_back(kObj);
    outs.emplace_back(kObj);
    fill_payload(keys.back(), objs.back().view());
  }
  for (int i = 0; i < kN; ++i) {
    views.push_back(objs[i].view());
    items.push_back({keys[i], outs[i].view()});
  }
  auto bp = client->batch_put(ns, keys, views);
  ASSERT_TRUE(bp.ok()) << bp.status().to_string();
  for (const auto& r : *bp) EXPECT_TRUE(r.stored());
  auto bg = client->batch_get(ns, items);
  ASSERT_TRUE(bg.ok()) << bg.status().to_string();
  for (int i = 0; i < kN; ++i) {
    ASSERT_TRUE((*bg)[i].hit) << i;
    EXPECT_TRUE(payload_matches(keys[i], outs[i].view())) << i;
  }
  auto m = client->match_prefix(ns, keys);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->blocks, size_t(kN));
  auto pn = client->pin(ns, keys, 1000);
  ASSERT_TRUE(pn.ok());
  EXPECT_GT(*pn, 0u);
  EXPECT_EQ(*client->unpin(ns, keys), *pn);
  std::string metrics = server->render_metrics();
  // 4 objects per frame: 10 frames each way; 16 keys per match: 3 requests.
  EXPECT_EQ(metric_value(metrics, "kvtier_server_requests_total{op=\"batch_put\"}"), 10u);
  EXPECT_EQ(metric_value(metrics, "kvtier_server_requests_total{op=\"batch_get\"}"), 10u);
  EXPECT_EQ(metric_value(metrics, "kvtier_server_requests_total{op=\"match_prefix\"}"), 3u);
  EXPECT_EQ(metric_value(metrics, "kvtier_server_requests_total{op=\"pin\"}"), 3u);
  EXPECT_EQ(metric_value(metrics, "kvtier_server_error_responses_total{code=\"InvalidArgument\"}"),
            0u);
}

TEST(StoreServer, MetricsAndHealthEndpoint) {
  auto server = start_server();
  ASSERT_TRUE(server);
  ASSERT_NE(server->metrics_port(), 0);
  // Over TCP: the shared-memory path counts its ops as shm_put/shm_get
  // (shm_test.cc checks those).
  RemoteStoreOptions co = tcp_client_options(server->port());
  auto client = connect(co);
  uint16_t ns = *client->register_namespace(test_namespace());
  AlignedBuffer buf(kObj);
  fill_payload(test_key(1), buf.view());
  ASSERT_TRUE(client->put(ns, test_key(1), buf.view())->stored());
  ASSERT_TRUE(client->get(ns, test_key(1), buf.view())->hit);
  EXPECT_FALSE(client->get(ns, test_key(2), buf.view())->hit);
  // A response is counted, and a RAM hit's lease released, when the server's
  // write of it completes, which may be just after the client has the bytes.
  std::string metrics = http_fetch(server->metrics_port(), "/metrics");
  for (int i = 0;
       i < 1000 && (server->store().local_stats().ram_leased != 0 ||
                    metric_value(metrics, "kvtier_server_requests_total{op=\"get\"}") < 2);
       ++i) {
    std::this_thread::sleep_for(milliseconds(10));
    metrics = http_fetch(server->metrics_port(), "/metrics");
  }
  EXPECT_NE(metrics.find("200 OK"), std::string::npos);
  EXPECT_EQ(metric_value(metrics, "kvtier_store_hits_total{tier=\"ram\"}"), 1u) << metrics;
  EXPECT_EQ(metric_value(metrics, "kvtier_store_misses_total{reason=\"not_found\"}"), 1u);
  EXPECT_EQ(metric_value(metrics, "kvtier_server_requests_total{op=\"get\"}"), 2u);
  EXPECT_EQ(metric_value(metrics, "kvtier_server_request_seconds_count{op=\"put\"}"), 1u);
  EXPECT_EQ(metric_value(metrics, "kvtier_server_connections_active"), 2u);
  EXPECT_EQ(metric_value(metrics, "kvtier_store_ram_used_slots"), 1u);
  EXPECT_EQ(metric_value(metrics, "kvtier_store_ram_leased_slots"), 0u);
  EXPECT_GT(metric_value(metrics, "kvtier_server_bytes_received_total"), uint64_t(kObj));
  EXPECT_GT(metric_value(metrics, "kvtier_server_bytes_sent_total"), uint64_t(kObj));
  EXPECT_NE(metrics.find("kvtier_disk_appends_total"), std::string::npos);
  std::string health = http_fetch(server->metrics_port(), "/health");
  EXPECT_NE(health.find("200 OK"), std::string::npos);
  EXPECT_NE(health.find("ok"), std::string::npos);
}

// `tcp_only`: block bytes over TCP (no shared memory), and Stats calls
// mixed in. The server writes each response while it serves the next request
// of the connection, from one of two buffer sets: a set reused too early
// would show here as wrong bytes, a response out of order as errors.
void pipelined_concurrent_clients(bool tcp_only) {
  ServerConfig cfg = test_config();
  auto server = start_server(cfg, small_store(256));
  ASSERT_TRUE(server);
  RemoteStoreOptions oa = client_options(server->port());
  oa.shared_memory = !tcp_only;
  auto a = connect(oa);
  RemoteStoreOptions ob = client_options(server->port());
  ob.connections = 1;  // every thread of this one shares one pipelined connection
  ob.shared_memory = !tcp_only;
  auto b = connect(ob);
  uint16_t na = *a->register_namespace(test_namespace());
  uint16_t nb = *b->register_namespace(test_namespace());

  constexpr int kThreads = 8, kOps = 150;
  std::atomic<int> bad_bytes{0}, errors{0}, hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      RemoteStore& c = t % 2 ? *a : *b;
      uint16_t ns = t % 2 ? na : nb;
      AlignedBuffer buf(kObj), out(kObj);
      for (int i = 0; i < kOps; ++i) {
        uint64_t k = static_cast<uint64_t>(t) * 100000 + i;
        uint32_t len = 512 + (k * 7919) % (kObj - 512);
        fill_payload(test_key(k), buf.subview(0, len));
        auto p = c.put(ns, test_key(k), ByteView(buf.data(), len));
        if (!p.ok() || !p->stored()) ++errors;
        // Read back a recent block of this thread or of another one.
        uint64_t rk = (i % 3 == 0 && t > 0) ? static_cast<uint64_t>(t - 1) * 100000 + i / 2 : k;
        auto g = c.get(ns, test_key(rk), out.view());
        if (!g.ok()) {
          ++errors;
          continue;
        }
        if (g->hit) {
          ++hits;
          if (!payload_matches(test_key(rk), ByteView(out.data(), g->length))) ++bad_bytes;
        }
        if (i % 25 == 0) {
          std::vector<kv::Key128> chain{test_key(k), test_key(k + 1)};
          auto m = c.match_prefix(ns, chain);
          if (!m.ok() || m->blocks < 1) ++errors;
        }
        if (tcp_only && i % 10 == 0) {
          // The Stats JSON is a local of the handler: sent from a copy.
          auto j = c.stats_json();
          if (!j.ok() || j->find("kvtier_store_puts_total") == std::string::npos) ++errors;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(bad_bytes.load(), 0);
  EXPECT_GE(hits.load(), kThreads * kOps / 2);
  EXPECT_EQ(a->client_stats().timeouts + b->client_stats().timeouts, 0u);
  if (tcp_only) {
    EXPECT_EQ(a->client_stats().shm_calls + b->client_stats().shm_calls, 0u);
  }
}

TEST(StoreServer, PipelinedConcurrentClients) { pipelined_concurrent_clients(false); }
TEST(StoreServer, PipelinedConcurrentClientsOverTcpWithStats) {
  pipelined_concurrent_clients(true);
}

// A client that sends many gets and reads nothing for a while: the server's
// write of one response blocks while it serves the gets behind it, whose
// store copies must not land in the bytes still being sent.
// Puts blocks `first` .. `first + count - 1` (payloads from their keys)
// through a TCP client.
void put_payloads(StoreServer& server, uint64_t first, int count) {
  RemoteStoreOptions o = tcp_client_options(server.port());
  auto loader = connect(o);
  uint16_t ns = *loader->register_namespace(test_namespace());
  AlignedBuffer buf(kObj);
  for (int i = 0; i < count; ++i) {
    fill_payload(test_key(first + i), buf.view());
    ASSERT_TRUE(loader->put(ns, test_key(first + i), buf.view())->stored());
  }
}

TEST(StoreServer, SlowReaderGetsEveryPipelinedResponseIntact) {
  auto server = start_server(test_config(), small_store(64));
  ASSERT_TRUE(server);
  constexpr int kKeys = 24;
  put_payloads(*server, 7000, kKeys);
  RawClient raw(server->port(), 16 << 10);
  auto handle = raw_session(raw);
  ASSERT_TRUE(handle.has_value());
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(raw.send_message(GetRequest{*handle, test_key(7000 + i), kObj},
                                 static_cast<uint64_t>(100 + i)));
  }
  std::this_thread::sleep_for(milliseconds(300));
  for (int i = 0; i < kKeys; ++i) {
    auto f = raw.read_frame();
    ASSERT_TRUE(f.ok()) << "response " << i << ": " << f.status().to_string();
    ASSERT_EQ(f->header.type, MessageType::kGetResponse);
    EXPECT_EQ(f->header.request_id, static_cast<uint64_t>(100 + i)) << "out of order";
    auto r = GetResponse::decode(f->descriptor);
    ASSERT_TRUE(r.ok() && r->result.hit) << i;
    ASSERT_EQ(f->data.size(), kObj);
    EXPECT_TRUE(payload_matches(test_key(7000 + i), ByteView(f->data.data(), f->data.size())))
        << "response " << i << " carries wrong bytes";
  }
  // Every lease came back once its write was done.
  kvtier::testing::eventually([&] { return server->store().local_stats().ram_leased == 0; });
  EXPECT_EQ(server->store().local_stats().ram_leased, 0u);
}

TEST(StoreServer, ReaderThatVanishesMidWriteLeavesNoLeaseBehind) {
  auto server = start_server(test_config(), small_store(64));
  ASSERT_TRUE(server);
  put_payloads(*server, 8000, 8);
  {
    RawClient raw(server->port(), 16 << 10);
    auto handle = raw_session(raw);
    ASSERT_TRUE(handle.has_value());
    // More than the socket buffers hold (20 MiB), so a write blocks.
    for (int i = 0; i < 320; ++i) {
      ASSERT_TRUE(raw.send_message(GetRequest{*handle, test_key(8000 + i % 8), kObj},
                                   static_cast<uint64_t>(100 + i)));
    }
    // RAM hits are written from their slots: the one being written stays
    // leased while the reader does not read.
    EXPECT_TRUE(
        kvtier::testing::eventually([&] { return server->store().local_stats().ram_leased >= 1; }));
  }  // closed without reading
  kvtier::testing::eventually([&] { return server->store().local_stats().ram_leased == 0; });
  EXPECT_EQ(server->store().local_stats().ram_leased, 0u);
}

// ---- Refusals -----------------------------------------------------------------------------

TEST(StoreServer, WrongTokenIsRefused) {
  ServerConfig cfg = test_config();
  cfg.auth_token = "correct horse";
  auto server = start_server(cfg);
  ASSERT_TRUE(server);

  RemoteStoreOptions o = client_options(server->port());
  o.auth_token = "wrong";
  auto bad = connect(o, false);
  Status st = wait_answered(*bad, "authentication failed");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("authentication failed"), std::string::npos) << st.to_string();
  EXPECT_FALSE(bad->connected());
  // Calls become misses, not errors and not waits.
  uint16_t ns = *bad->register_namespace(test_namespace());
  AlignedBuffer out(kObj);
  auto g = bad->get(ns, test_key(1), out.view());
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->hit);
  EXPECT_EQ(g->miss, kv::MissReason::kIoError);
  EXPECT_EQ(bad->put(ns, test_key(1), out.view())->outcome, kv::PutResult::Outcome::kRefused);

  // No token at all, on a raw socket: an Error frame, then the server closes.
  RawClient raw(server->port());
  ASSERT_TRUE(raw.connected());
  ASSERT_TRUE(raw.send_message(HelloRequest{1, 1, "raw", ""}, 7));
  auto f = raw.read_frame();
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->header.type, MessageType::kErrorResponse);
  EXPECT_EQ(f->header.request_id, 7u);
  EXPECT_TRUE(raw.closed_by_peer());

  // The right token works.
  o.auth_token = "correct horse";
  auto good = connect(o);
  uint16_t gns = *good->register_namespace(test_namespace());
  fill_payload(test_key(1), out.view());
  EXPECT_TRUE(good->put(gns, test_key(1), out.view())->stored());

  std::string metrics = server->render_metrics();
  EXPECT_GE(metric_value(metrics, "kvtier_server_connections_refused_total{reason=\"auth\"}"), 2u);
}

TEST(StoreServer, RequestBeforeHelloIsRefused) {
  auto server = start_server();
  ASSERT_TRUE(server);
  RawClient raw(server->port());
  ASSERT_TRUE(raw.send_message(StatsRequest{}, 3));
  auto f = raw.read_frame();
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ASSERT_EQ(f->header.type, MessageType::kErrorResponse);
  auto e = ErrorResponse::decode(f->descriptor);
  EXPECT_EQ(e->code, StatusCode::kFailedPrecondition);
  EXPECT_TRUE(raw.closed_by_peer());
}

// The server's answer to a malformed frame: one ErrorResponse whose message
// starts with the error's class (and the request id it names), then the
// connection closed.
void expect_error_and_close(RawClient& raw, const std::string& error_class,
                            uint64_t* request_id = nullptr) {
  auto f = raw.read_frame();
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  if (request_id) *request_id = f->header.request_id;
  auto e = ErrorResponse::decode(f->descriptor);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->message.rfind(error_class, 0), 0u) << e->message;
  EXPECT_TRUE(raw.closed_by_peer());
}

// Registers the test namespace on `raw`, then sends a 4 KiB put of `key`
// whose last data byte no longer matches the frame's CRC.
void send_put_with_damaged_data(RawClient& raw, const kv::Key128& key) {
  ASSERT_TRUE(raw.send_message(RegisterNamespaceRequest{test_namespace()}, 2));
  auto r = raw.read_frame();
  ASSERT_TRUE(r.ok());
  uint16_t h = RegisterNamespaceResponse::decode(r->descriptor)->handle;
  AlignedBuffer obj(4096);
  fill_payload(key, obj.view());
  ByteView part = obj.view();
  auto frame =
      encode_message_frame(PutRequest{h, key, 4096}, 3, std::span<const ByteView>(&part, 1));
  ASSERT_TRUE(frame.ok());
  (*frame)[frame->size() - 1] ^= std::byte{1};  // damage the last data byte
  ASSERT_TRUE(raw.send(*frame));
}

TEST(StoreServer, MalformedAndOversizedFramesCloseOnlyThatConnection) {
  auto server = start_server();
  ASSERT_TRUE(server);
  auto client = connect(client_options(server->port()));
  uint16_t ns = *client->register_namespace(test_namespace());
  AlignedBuffer buf(kObj), out(kObj);
  fill_payload(test_key(1), buf.view());
  ASSERT_TRUE(client->put(ns, test_key(1), buf.view())->stored());

  // 1. Not our protocol at all.
  {
    RawClient raw(server->port());
    // (A header's 40 bytes are needed before anything is judged; a shorter
    // foreign greeting waits for the Hello timeout instead.)
    std::string http = "GET /metrics HTTP/1.1\r\nHost: localhost\r\nUser-Agent: curl\r\n\r\n";
    raw.send(ByteView(reinterpret_cast<const std::byte*>(http.data()), http.size()));
    expect_error_and_close(raw, "bad_magic");
  }
  // 2. After Hello: a header announcing more data than the server accepts.
  {
    RawClient raw(server->port());
    ASSERT_TRUE(raw.hello());
    FrameHeader h;
    h.type = MessageType::kPutRequest;
    h.request_id = 42;
    h.descriptor_len = 22;
    h.data_len = server->limits().max_data_bytes + 1;
    std::byte hdr[kFrameHeaderSize];
    encode_header(h, std::span<std::byte, kFrameHeaderSize>(hdr));
    ASSERT_TRUE(raw.send(ByteView(hdr, sizeof hdr)));
    uint64_t answered_id = 1;
    expect_error_and_close(raw, "data_too_large", &answered_id);
    EXPECT_EQ(answered_id, 0u);  // the header failed its checks: id unknown
  }
  // 3. Before Hello, even a modest descriptor is too large (nothing big is
  //    allocated for a peer that has not authenticated).
  {
    RawClient raw(server->port());
    FrameHeader h;
    h.type = MessageType::kHelloRequest;
    h.descriptor_len = 100000;
    std::byte hdr[kFrameHeaderSize];
    encode_header(h, std::span<std::byte, kFrameHeaderSize>(hdr));
    ASSERT_TRUE(raw.send(ByteView(hdr, sizeof hdr)));
    expect_error_and_close(raw, "descriptor_too_large");
  }
  // 4. A data section whose CRC does not match: nothing is stored.
  {
    RawClient raw(server->port());
    ASSERT_TRUE(raw.hello());
    send_put_with_damaged_data(raw, test_key(777));
    expect_error_and_close(raw, "data_crc_mismatch");
    EXPECT_FALSE(client->get(ns, test_key(777), out.view())->hit);
  }
  // 5. A descriptor that lies about its list count.
  {
    RawClient raw(server->port());
    ASSERT_TRUE(raw.hello());
    std::vector<std::byte> desc(6);
    desc[2] = std::byte{0xFF};  // u16 ns = 0, u32 count = 255: no keys follow
    std::vector<std::byte> out_frame;
    ASSERT_TRUE(encode_frame_prefix(MessageType::kMatchPrefixRequest, 5, desc, {}, out_frame).ok());
    ASSERT_TRUE(raw.send(out_frame));
    expect_error_and_close(raw, "count_exceeds_remaining");
  }

  // The well-behaved client never noticed, and the block is intact.
  auto g = client->get(ns, test_key(1), out.view());
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(g->hit);
  EXPECT_TRUE(payload_matches(test_key(1), out.view()));
  EXPECT_EQ(client->client_stats().broken, 0u);
  std::string metrics = server->render_metrics();
  EXPECT_EQ(metric_value(metrics, "kvtier_server_malformed_frames_total{class=\"bad_magic\"}"), 1u);
  EXPECT_EQ(metric_value(metrics, "kvtier_server_malformed_frames_total{class=\"data_too_large\"}"),
            1u);
  EXPECT_EQ(
      metric_value(metrics, "kvtier_server_malformed_frames_total{class=\"data_crc_mismatch\"}"),
      1u);
}

TEST(StoreServer, ConnectionLimitRefusesExtraClients) {
  ServerConfig cfg = test_config();
  cfg.max_connections = 1;
  auto server = start_server(cfg);
  ASSERT_TRUE(server);
  RemoteStoreOptions o = client_options(server->port());
  o.connections = 1;
  auto first = connect(o);
  auto second = connect(o, false);
  Status st = wait_answered(*second, "connection limit");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("connection limit"), std::string::npos) << st.to_string();
  EXPECT_EQ(server->active_connections(), 1u);
  // The first still works.
  uint16_t ns = *first->register_namespace(test_namespace());
  AlignedBuffer buf(kObj);
  fill_payload(test_key(1), buf.view());
  EXPECT_TRUE(first->put(ns, test_key(1), buf.view())->stored());
}

TEST(StoreServer, SilentPeerIsClosedAfterHelloTimeout) {
  ServerConfig cfg = test_config();
  cfg.hello_timeout_ms = 200;
  auto server = start_server(cfg);
  ASSERT_TRUE(server);
  RawClient raw(server->port());
  ASSERT_TRUE(raw.connected());
  EXPECT_TRUE(raw.closed_by_peer(3000));
}

}  // namespace
}  // namespace kvtier::net
