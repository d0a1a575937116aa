// StoreServer and RemoteStore when things go wrong: a stopped, restarted or
// unresponsive server, a graceful stop, a store opened from the config.
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

// ---- Outages ------------------------------------------------------------------------------

TEST(StoreServer, StoppedServerGivesMissesThenClientRecoversOnRestart) {
  ServerConfig cfg = test_config();
  auto server = start_server(cfg);
  ASSERT_TRUE(server);
  const uint16_t port = server->port();
  RemoteStoreOptions o = client_options(port);
  o.call_timeout_ms = 500;
  auto client = connect(o);
  uint16_t ns = *client->register_namespace(test_namespace());
  AlignedBuffer buf(kObj), out(kObj);
  fill_payload(test_key(1), buf.view());
  ASSERT_TRUE(client->put(ns, test_key(1), buf.view())->stored());
  ASSERT_TRUE(client->get(ns, test_key(1), out.view())->hit);

  ASSERT_TRUE(server->stop().ok());
  server.reset();

  // Every call returns promptly with a miss / refusal / nothing.
  for (int i = 0; i < 20; ++i) {
    uint64_t t0 = now_ns();
    auto g = client->get(ns, test_key(1), out.view());
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    EXPECT_FALSE(g->hit);
    EXPECT_TRUE(g->miss == kv::MissReason::kIoError || g->miss == kv::MissReason::kTimeout);
    auto p = client->put(ns, test_key(2), buf.view());
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->outcome, kv::PutResult::Outcome::kRefused);
    std::vector<kv::Key128> chain{test_key(1)};
    EXPECT_EQ(client->match_prefix(ns, chain)->blocks, 0u);
    EXPECT_FALSE(*client->remove(ns, test_key(1)));
    EXPECT_FALSE(client->stats().ok());
    // Each call ends by its timeout (500 ms): a hang check, with room for a
    // busy machine.
    EXPECT_LT(now_ns() - t0, 20'000'000'000ull);
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_FALSE(client->connected());

  // Restart on the same port (a new, empty store): the client reconnects by
  // itself and re-registers its namespace without being asked.
  cfg.listen_port = port;
  server = start_server(cfg);
  ASSERT_TRUE(server);
  ASSERT_TRUE(client->wait_connected(20000).ok());
  bool recovered = false;
  for (int i = 0; i < 2000 && !recovered; ++i) {
    auto p = client->put(ns, test_key(3), buf.view());
    ASSERT_TRUE(p.ok());
    recovered = p->stored();
    if (!recovered) std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_TRUE(recovered);
  fill_payload(test_key(3), buf.view());
  ASSERT_TRUE(client->put(ns, test_key(3), buf.view()).ok());
  // All pool connections come back.
  for (int i = 0; i < 100; ++i) {
    auto g = client->get(ns, test_key(1), out.view());
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(g->miss, kv::MissReason::kNotFound);  // new store: truly absent, not unreachable
  }
  EXPECT_GE(client->client_stats().sessions, 3u);
}

// A peer that says Hello and then misbehaves: it ignores most requests,
// answers a Get with a header that announces bytes it never sends, and stops
// reading when a BatchPut arrives. Calls time out as misses/refusals within
// call_timeout_ms, also while the connection holds the caller's buffers.
class MisbehavingServer {
 public:
  MisbehavingServer() {
    lfd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(lfd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(lfd_, 16), 0);
    socklen_t len = sizeof a;
    ::getsockname(lfd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~MisbehavingServer() {
    stop_ = true;
    acceptor_.join();
    for (auto& t : conns_) t.join();
    ::close(lfd_);
  }
  uint16_t port() const { return port_; }

 private:
  void accept_loop() {
    while (!stop_) {
      pollfd p{lfd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int fd = ::accept(lfd_, nullptr, nullptr);
      if (fd >= 0) conns_.emplace_back([this, fd] { serve(fd); });
    }
  }
  void serve(int fd) {
    FrameDecoder d;
    std::byte b[4096];
    bool stalled = false;
    while (!stop_) {
      if (stalled) {
        std::this_thread::sleep_for(milliseconds(10));
        continue;
      }
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      ssize_t n = ::recv(fd, b, sizeof b, 0);
      if (n <= 0) break;
      size_t off = 0;
      while (off < static_cast<size_t>(n) && !stalled) {
        auto used = d.feed(ByteView(b + off, static_cast<size_t>(n) - off));
        if (!used.ok()) break;
        off += *used;
        if (d.state() != FrameDecoder::State::kHeader &&
            d.header().type == MessageType::kBatchPutRequest) {
          stalled = true;  // stop reading: the client's writes back up
          break;
        }
        if (d.state() != FrameDecoder::State::kReady) continue;
        Frame f = d.take_frame();
        if (f.header.type == MessageType::kHelloRequest) {
          HelloResponse hr;
          hr.limits.max_object_bytes = kObj;
          auto out = encode_message_frame(hr, f.header.request_id);
          (void)::send(fd, out->data(), out->size(), MSG_NOSIGNAL);
        } else if (f.header.type == MessageType::kRegisterNamespaceRequest) {
          auto out = encode_message_frame(RegisterNamespaceResponse{1}, f.header.request_id);
          (void)::send(fd, out->data(), out->size(), MSG_NOSIGNAL);
        } else if (f.header.type == MessageType::kGetRequest) {
          // A hit of kObj bytes, of which only 1000 ever come.
          GetResponse gr{GetOutcome{true, kv::Tier::kRam, kv::MissReason::kNone, kObj}};
          std::vector<std::byte> prefix;
          std::vector<std::byte> body(kObj);
          ByteView part(body);
          EXPECT_TRUE(encode_message_prefix(gr, f.header.request_id,
                                            std::span<const ByteView>(&part, 1), prefix)
                          .ok());
          prefix.insert(prefix.end(), body.begin(), body.begin() + 1000);
          (void)::send(fd, prefix.data(), prefix.size(), MSG_NOSIGNAL);
        }
        // Everything else: never answered.
      }
    }
    ::close(fd);
  }

  int lfd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> conns_;  // touched by the acceptor thread, then the destructor
};

TEST(StoreServer, UnresponsiveServerTimesOutAsMisses) {
  MisbehavingServer fake;
  RemoteStoreOptions o = client_options(fake.port());
  o.shared_memory = false;  // the fake server speaks Hello and Get only
  o.call_timeout_ms = 300;
  o.connections = 1;
  auto client = connect(o);
  uint16_t ns = *client->register_namespace(test_namespace());
  AlignedBuffer out(kObj);

  // No answer at all.
  uint64_t t0 = now_ns();
  std::vector<kv::Key128> chain{test_key(1), test_key(2)};
  auto m = client->match_prefix(ns, chain);
  uint64_t took = now_ns() - t0;
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->blocks, 0u);
  EXPECT_GE(took, 250'000'000ull);     // it did wait for the answer ...
  EXPECT_LT(took, 10'000'000'000ull);  // ... and gave up (300 ms timeout), not hung
  // A second unanswered call: the client stops trusting the connection and
  // reconnects instead of paying a full timeout on every later call.
  EXPECT_EQ(client->match_prefix(ns, chain)->blocks, 0u);
  kvtier::testing::eventually([&] { return client->client_stats().sessions >= 2; });
  EXPECT_GE(client->client_stats().sessions, 2u);
  ASSERT_TRUE(client->wait_connected(20000).ok());

  // Half an answer: the reader is writing into `out` when time runs out; the
  // client breaks the connection and returns only once `out` is free.
  t0 = now_ns();
  auto g = client->get(ns, test_key(1), out.view());
  took = now_ns() - t0;
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_FALSE(g->hit);
  EXPECT_EQ(g->miss, kv::MissReason::kTimeout);
  EXPECT_LT(took, 10'000'000'000ull);

  // A write that cannot finish (the peer stopped reading): the caller's
  // buffers are released by breaking the connection. (First wait for the
  // connection the get reset to come back.)
  kvtier::testing::eventually([&] { return client->client_stats().sessions >= 3; });
  ASSERT_TRUE(client->wait_connected(20000).ok());
  AlignedBuffer obj(kObj);
  std::vector<kv::Key128> keys;
  std::vector<ByteView> views;
  for (int i = 0; i < 512; ++i) {  // 32 MiB in one frame: more than the socket buffers
    keys.push_back(test_key(100 + i));
    views.push_back(obj.view());
  }
  t0 = now_ns();
  auto bp = client->batch_put(ns, keys, views);
  took = now_ns() - t0;
  ASSERT_TRUE(bp.ok()) << bp.status().to_string();
  for (const auto& r : *bp) EXPECT_EQ(r.outcome, kv::PutResult::Outcome::kRefused);
  EXPECT_LT(took, 10'000'000'000ull);
  EXPECT_GE(client->client_stats().timeouts, 4u);
  client.reset();
}

TEST(StoreServer, GracefulStopClosesTheStoreWithACheckpoint) {
  auto dev = std::make_shared<blk::MemDevice>(64 << 20);
  kv::StoreOptions so;
  so.ram_bytes = 16 * kObj;
  so.max_object_bytes = kObj;
  so.volume = dev;
  so.disk.region_bytes = 1 << 20;
  so.disk.flush_chunk_bytes = 256 << 10;
  auto server = start_server(test_config(), std::move(kv::Store::open(so)).value());
  ASSERT_TRUE(server);
  auto client = connect(client_options(server->port()));
  uint16_t ns = *client->register_namespace(test_namespace());
  AlignedBuffer buf(kObj);
  for (int i = 1; i <= 10; ++i) {
    fill_payload(test_key(i), buf.view());
    ASSERT_TRUE(client->put(ns, test_key(i), buf.view())->stored());
  }
  EXPECT_TRUE(server->stop().ok());
  EXPECT_TRUE(server->stop().ok());  // idempotent
  server.reset();
  client.reset();
  // Reopen the same volume: a warm restart finds every block.
  auto reopened = kv::Store::open(so);
  ASSERT_TRUE(reopened.ok()) << reopened.status().to_string();
  EXPECT_TRUE((*reopened)->local_stats().disk.recovered_from_checkpoint);
  uint16_t h = *(*reopened)->register_namespace(test_namespace());
  for (int i = 1; i <= 10; ++i) {
    auto g = (*reopened)->get(h, test_key(i), buf.view());
    ASSERT_TRUE(g.ok());
    EXPECT_TRUE(g->hit) << i;
    EXPECT_TRUE(payload_matches(test_key(i), buf.view()));
  }
}

TEST(StoreServer, OpensItsStoreFromTheConfigWithAFileVolume) {
  std::string path = ::testing::TempDir() + "/kvtier_store_server_test.vol";
  std::remove(path.c_str());
  auto cfg = parse_server_config(R"({"listen": {"port": 0}, "metrics": null,
      "store": {"ram_bytes": "1MiB", "max_object_bytes": "64KiB", "region_bytes": "1MiB",
                "volume": {"path": ")" +
                                 path + R"(", "size": "32MiB", "direct": false}}})");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  auto server = StoreServer::start(*cfg);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  EXPECT_EQ((*server)->metrics_port(), 0);
  EXPECT_EQ(std::filesystem::file_size(path), 32u << 20);  // created at its size
  auto client = connect(client_options((*server)->port()));
  uint16_t ns = *client->register_namespace(test_namespace());
  AlignedBuffer buf(kObj), out(kObj);
  for (int i = 1; i <= 40; ++i) {  // more than the RAM tier's 16 slots
    fill_payload(test_key(i), buf.view());
    ASSERT_TRUE(client->put(ns, test_key(i), buf.view())->stored());
  }
  for (int i = 1; i <= 40; ++i) {
    auto g = client->get(ns, test_key(i), out.view());
    ASSERT_TRUE(g.ok() && g->hit) << i;
    EXPECT_TRUE(payload_matches(test_key(i), out.view()));
  }
  auto st = client->stats();
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(st->has_disk);
  EXPECT_GT(st->demotions, 0u);
  EXPECT_TRUE((*server)->stop().ok());
  std::remove(path.c_str());

  // A volume that cannot be opened is a clear error.
  ServerConfig bad = *cfg;
  bad.store.volume->path = "/nonexistent-dir/x.vol";
  auto s2 = StoreServer::start(bad);
  ASSERT_FALSE(s2.ok());
  EXPECT_NE(s2.status().message().find("/nonexistent-dir/x.vol"), std::string::npos)
      << s2.status().to_string();
}

TEST(StoreServer, StatsCounterMappingRoundTrips) {
  kv::StoreStats s;
  s.puts = 1;
  s.hits_disk = 2;
  s.misses[static_cast<size_t>(kv::MissReason::kCorrupt)] = 3;
  s.refusals[static_cast<size_t>(kv::RefuseReason::kAdmission)] = 4;
  s.ram_leased = 5;
  s.disk.entries_reinserted = 6;
  s.has_disk = true;
  auto back = store_stats_from_counters(store_stats_to_counters(s));
  EXPECT_EQ(back.puts, 1u);
  EXPECT_EQ(back.hits_disk, 2u);
  EXPECT_EQ(back.misses[static_cast<size_t>(kv::MissReason::kCorrupt)], 3u);
  EXPECT_EQ(back.refusals[static_cast<size_t>(kv::RefuseReason::kAdmission)], 4u);
  EXPECT_EQ(back.ram_leased, 5u);
  EXPECT_EQ(back.disk.entries_reinserted, 6u);
  EXPECT_TRUE(back.has_disk);
  for (const auto& c : store_stats_to_counters(s)) EXPECT_LE(c.name.size(), kMaxNameBytes);
}

}  // namespace
}  // namespace kvtier::net
