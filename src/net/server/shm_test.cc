// The same-host shared-memory path: ShmArea and the attach handshake on
// their own, then StoreServer + RemoteStore in one process moving block bytes
// through the client's area (real memfd, real abstract Unix socket).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>

#include "blk/dev/mem_device.h"
#include "common/buffer.h"
#include "common/testing/eventually.h"
#include "kv/test_payload.h"
#include "net/client/remote_store.h"
#include "net/server/store_server.h"
#include "net/shm/shm_area.h"
#include "net/testing/store_test_util.h"

namespace kvtier::net {
namespace {

using kv::fill_payload;
using kv::payload_matches;
using kv::test_key;

constexpr uint32_t kObj = 256 << 10;

kv::Namespace shm_namespace() { return kv::test_namespace("shm-model"); }

std::unique_ptr<StoreServer> start_server(bool shm_enabled) {
  ServerConfig c = testing::test_config();
  c.metrics_enabled = false;
  c.shm_enabled = shm_enabled;
  c.store.max_object_bytes = kObj;
  kv::StoreOptions o;
  o.ram_bytes = 64ull * kObj;
  o.max_object_bytes = kObj;
  auto store = kv::Store::open(o);
  EXPECT_TRUE(store.ok()) << store.status().to_string();
  auto s = StoreServer::start(c, std::move(*store));
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(s).value() : nullptr;
}

std::unique_ptr<RemoteStore> connect(uint16_t port, bool shared_memory) {
  RemoteStoreOptions o = testing::client_options(port);
  o.shared_memory = shared_memory;
  auto c = RemoteStore::open(o);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE((*c)->wait_connected(5000).ok());
  return std::move(c).value();
}

uint64_t server_counter(StoreServer& s, const std::string& name) {
  std::string text = s.render_metrics();
  size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return 0;
  return std::stoull(text.substr(at + name.size() + 2));
}

// Puts objects of several sizes and reads them back, byte for byte.
void round_trip(RemoteStore& c, uint16_t ns, uint64_t first, int count) {
  AlignedBuffer in(kObj), out(kObj);
  for (int i = 0; i < count; ++i) {
    const uint64_t id = first + i;
    const size_t len = 1 + (id * 7919) % kObj;
    fill_payload(test_key(id), in.subview(0, len));
    auto p = c.put(ns, test_key(id), in.subview(0, len));
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    ASSERT_EQ(p->outcome, kv::PutResult::Outcome::kStored);
    std::memset(out.data(), 0xEE, out.size());
    auto g = c.get(ns, test_key(id), out.subview(0, kObj));
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    ASSERT_TRUE(g->hit) << id;
    ASSERT_EQ(g->length, len);
    EXPECT_TRUE(payload_matches(test_key(id), out.subview(0, len))) << id;
  }
}

template <typename M>
void expect_round_trip(const M& m) {
  auto frame = encode_message_frame(m, 42);
  ASSERT_TRUE(frame.ok()) << frame.status().to_string();
  auto f = decode_frame(*frame);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->header.type, M::kType);
  EXPECT_EQ(f->header.data_len, 0u);  // block bytes never ride in these frames
  auto back = decode_message_as<M>(f->header, f->descriptor);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(*back == m);
}

TEST(ShmProtocol, MessagesRoundTripAndCarryNoData) {
  expect_round_trip(ShmOfferRequest{});
  expect_round_trip(ShmOfferResponse{"kvtier-store-1-ab", "boot-id", test_key(3), 256 << 20});
  expect_round_trip(ShmPutRequest{1, test_key(4), 8192, 4096});
  expect_round_trip(
      ShmPutResponse{{kv::PutResult::Outcome::kStored, kv::Tier::kRam, kv::RefuseReason::kNone}});
  expect_round_trip(ShmGetRequest{1, test_key(5), 1u << 30, 1536u << 10});
  expect_round_trip(ShmGetResponse{{true, kv::Tier::kRam, kv::MissReason::kNone, 1536u << 10}});
  expect_round_trip(ShmLeaseGetRequest{1, test_key(6), 4096, 1536u << 10, {}});
  expect_round_trip(ShmLeaseGetRequest{1, test_key(6), 4096, 1536u << 10, {7, 8, 9}});
  expect_round_trip(ShmLeaseGetResponse{
      {true, kv::Tier::kRam, kv::MissReason::kNone, 100}, ShmPlacement::kArena, 1u << 30, 77});
  expect_round_trip(ShmLeaseGetResponse{
      {true, kv::Tier::kDisk, kv::MissReason::kNone, 100}, ShmPlacement::kArea, 0, 0});
  expect_round_trip(ShmLeaseGetResponse{
      {false, kv::Tier::kNone, kv::MissReason::kNotFound, 0}, ShmPlacement::kNone, 0, 0});
  expect_round_trip(ShmReleaseRequest{{1, 2, 3}});
  // Placements that contradict the outcome, and over-long release lists,
  // are refused both ways.
  std::vector<std::byte> bad;
  EXPECT_FALSE(ShmLeaseGetResponse(
                   {{true, kv::Tier::kRam, kv::MissReason::kNone, 100}, ShmPlacement::kNone, 0, 0})
                   .encode(bad)
                   .ok());
  EXPECT_FALSE(
      ShmLeaseGetResponse(
          {{false, kv::Tier::kNone, kv::MissReason::kNotFound, 0}, ShmPlacement::kArena, 0, 0})
          .encode(bad)
          .ok());
  EXPECT_FALSE(
      ShmLeaseGetResponse(
          {{true, kv::Tier::kDisk, kv::MissReason::kNone, 100}, ShmPlacement::kArea, 4096, 0})
          .encode(bad)
          .ok());
  EXPECT_FALSE(ShmReleaseRequest{std::vector<uint32_t>(kMaxShmReleases + 1, 1)}.encode(bad).ok());
  // A length over the protocol's limit cannot be encoded, and a data section
  // on these types is refused from the header alone.
  std::vector<std::byte> out;
  EXPECT_FALSE(ShmPutRequest({1, test_key(4), 0, kMaxDataBytes + 1}).encode(out).ok());
  std::vector<std::byte> desc;
  ASSERT_TRUE(ShmPutRequest({1, test_key(4), 0, 16}).encode(desc).ok());
  std::byte extra[16] = {};
  ByteView part(extra, sizeof extra);
  std::vector<std::byte> frame;
  Status st = encode_frame_prefix(MessageType::kShmPutRequest, 1, desc,
                                  std::span<const ByteView>(&part, 1), frame);
  if (st.ok()) {
    frame.insert(frame.end(), extra, extra + sizeof extra);
    auto f = decode_frame(frame);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(protocol_error_of(f.status()), ProtocolError::kUnexpectedData);
  }
}

TEST(ShmArea, CreateSealsAndMapsTheSameBytes) {
  auto a = ShmArea::create(1 << 20);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  int seals = fcntl((*a)->fd(), F_GET_SEALS);
  EXPECT_TRUE(seals & F_SEAL_SHRINK);
  EXPECT_TRUE(seals & F_SEAL_GROW);
  EXPECT_NE(ftruncate((*a)->fd(), 4096), 0);  // cannot shrink under a mapping
  auto b = ShmArea::map_received(dup((*a)->fd()), 1 << 20, 1 << 20);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  std::memcpy((*a)->data() + 12345, "kvtier", 6);
  EXPECT_EQ(std::memcmp((*b)->data() + 12345, "kvtier", 6), 0);
}

TEST(ShmArea, RefusesUnsealedWrongSizeAndOversizedAreas) {
  int fd = memfd_create("unsealed", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1 << 20), 0);
  EXPECT_FALSE(ShmArea::map_received(fd, 1 << 20, 1 << 20).ok());  // no seals: refused
  auto a = ShmArea::create(1 << 20);
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(ShmArea::map_received(dup((*a)->fd()), 2 << 20, 4 << 20).ok());    // size lie
  EXPECT_FALSE(ShmArea::map_received(dup((*a)->fd()), 1 << 20, 512 << 10).ok());  // over limit
  EXPECT_TRUE(ShmArea::map_received(dup((*a)->fd()), 1 << 20, 1 << 20).ok());
}

TEST(ShmArea, RangesNeverLeaveTheArea) {
  auto a = ShmArea::create(1 << 20);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE((*a)->range(0, 1 << 20).has_value());
  EXPECT_TRUE((*a)->range((1 << 20) - 1, 1).has_value());
  EXPECT_FALSE((*a)->range((1 << 20) - 1, 2).has_value());
  EXPECT_FALSE((*a)->range(1 << 20, 1).has_value());
  EXPECT_FALSE((*a)->range(~0ull, 2).has_value());  // offset + length overflows
  EXPECT_FALSE((*a)->range(8, ~0ull).has_value());
}

TEST(ShmArea, AttachHandshakePassesTheFdAndTheNonce) {
  auto nonce = random_nonce();
  ASSERT_TRUE(nonce.ok());
  const std::string name = "kvtier-shm-test-" + nonce->to_hex();
  auto l = ShmListener::listen(name);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  auto a = ShmArea::create(1 << 20);
  ASSERT_TRUE(a.ok());
  std::memcpy((*a)->data(), "hello", 5);
  Status sent;
  std::thread client([&] {
    sent = shm_attach_send(name, {*nonce, 1 << 20}, (*a)->fd(), 2000).status();
  });
  auto got = (*l)->accept_one(2000);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->msg.nonce, *nonce);
  EXPECT_EQ(got->msg.area_bytes, 1u << 20);
  auto mapped = ShmArea::map_received(got->fd, got->msg.area_bytes, 1 << 20);
  ASSERT_TRUE(mapped.ok());
  EXPECT_EQ(std::memcmp((*mapped)->data(), "hello", 5), 0);
  shm_attach_answer(got->conn, false);  // a refusal reaches the client as an error
  client.join();
  EXPECT_FALSE(sent.ok());
  EXPECT_FALSE(shm_attach_send("kvtier-shm-test-nobody-" + nonce->to_hex(), {*nonce, 1 << 20},
                               (*a)->fd(), 500)
                   .ok());
}

TEST(SharedMemoryPath, PutAndGetGoThroughTheAreaByteForByte) {
  auto server = start_server(true);
  ASSERT_TRUE(server);
  auto c = connect(server->port(), true);
  EXPECT_TRUE(c->shared_memory_active());
  auto ns = c->register_namespace(shm_namespace());
  ASSERT_TRUE(ns.ok());
  round_trip(*c, *ns, 1, 40);
  auto st = c->client_stats();
  EXPECT_GE(st.shm_sessions, 1u);
  EXPECT_EQ(st.shm_calls, 80u);  // every put and get
  EXPECT_EQ(st.shm_retired_slots, 0u);
  EXPECT_GE(server_counter(*server, "kvtier_server_shm_attached_total"), 1u);
  EXPECT_GT(server_counter(*server, "kvtier_server_shm_bytes_total"), 0u);
  // A miss through the area is a plain miss.
  AlignedBuffer out(kObj);
  auto g = c->get(*ns, test_key(999999), out.subview(0, kObj));
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->hit);
  EXPECT_EQ(g->miss, kv::MissReason::kNotFound);
  // TCP clients see what shared-memory clients wrote, and the other way round.
  auto tcp = connect(server->port(), false);
  auto tns = tcp->register_namespace(shm_namespace());
  ASSERT_TRUE(tns.ok());
  g = tcp->get(*tns, test_key(5), out.subview(0, kObj));
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(g->hit);
  EXPECT_TRUE(payload_matches(test_key(5), out.subview(0, g->length)));
  EXPECT_EQ(tcp->client_stats().shm_calls, 0u);
}

TEST(SharedMemoryPath, ConcurrentCallersShareTheSlotsSafely) {
  auto server = start_server(true);
  ASSERT_TRUE(server);
  auto c = connect(server->port(), true);
  ASSERT_TRUE(c->shared_memory_active());
  auto ns = c->register_namespace(shm_namespace());
  ASSERT_TRUE(ns.ok());
  constexpr int kThreads = 12, kOps = 60;  // more callers than slots: some fall back to TCP
  std::atomic<int> wrong{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      AlignedBuffer in(kObj), out(kObj);
      for (int i = 0; i < kOps; ++i) {
        const uint64_t id = 1000 * (t + 1) + i % 20;
        const size_t len = 4096 + (id * 131) % (kObj - 4096);
        fill_payload(test_key(id), in.subview(0, len));
        if (!c->put(*ns, test_key(id), in.subview(0, len)).ok()) ++errors;
        auto g = c->get(*ns, test_key(id), out.subview(0, kObj));
        if (!g.ok()) {
          ++errors;
        } else if (g->hit &&
                   (g->length != len || !payload_matches(test_key(id), out.subview(0, len)))) {
          ++wrong;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(c->client_stats().shm_calls, 0u);
}

TEST(SharedMemoryPath, DisabledOnEitherSideMeansTcp) {
  auto off = start_server(false);
  ASSERT_TRUE(off);
  auto c = connect(off->port(), true);
  EXPECT_FALSE(c->shared_memory_active());
  auto ns = c->register_namespace(shm_namespace());
  ASSERT_TRUE(ns.ok());
  round_trip(*c, *ns, 1, 5);
  EXPECT_EQ(c->client_stats().shm_calls, 0u);

  auto on = start_server(true);
  ASSERT_TRUE(on);
  auto tcp = connect(on->port(), false);
  EXPECT_FALSE(tcp->shared_memory_active());
  ns = tcp->register_namespace(shm_namespace());
  ASSERT_TRUE(ns.ok());
  round_trip(*tcp, *ns, 1, 5);
  EXPECT_EQ(tcp->client_stats().shm_calls, 0u);
  EXPECT_EQ(server_counter(*on, "kvtier_server_shm_attached_total"), 0u);
}

TEST(SharedMemoryPath, ServerStoppedMidStreamGivesMissesThenRecovers) {
  auto server = start_server(true);
  ASSERT_TRUE(server);
  const uint16_t port = server->port();
  RemoteStoreOptions o = testing::client_options(port);
  o.call_timeout_ms = 1000;
  o.connect_timeout_ms = 500;
  o.reconnect_max_ms = 50;
  auto c = RemoteStore::open(o);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->wait_connected(5000).ok());
  auto ns = (*c)->register_namespace(shm_namespace());
  ASSERT_TRUE(ns.ok());
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0}, errors{0}, hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      AlignedBuffer in(kObj), out(kObj);
      for (uint64_t i = 0; !stop; ++i) {
        const uint64_t id = 1 + t * 100000 + i % 50;
        fill_payload(test_key(id), in.subview(0, kObj));
        if (!(*c)->put(*ns, test_key(id), in.subview(0, kObj)).ok()) ++errors;
        auto g = (*c)->get(*ns, test_key(id), out.subview(0, kObj));
        if (!g.ok()) {
          ++errors;
        } else if (g->hit) {
          ++hits;
          if (!payload_matches(test_key(id), out.subview(0, g->length))) ++wrong;
        }
      }
    });
  }
  EXPECT_TRUE(kvtier::testing::eventually([&] { return hits.load() > 0; }));
  ASSERT_TRUE(server->stop().ok());  // every connection closes under the callers
  server.reset();
  // The callers go on against a stopped server for a while.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(kvtier::testing::eventually([&] { return !(*c)->shared_memory_active(); }));
  stop = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(errors.load(), 0);  // misses and refusals, never errors
  EXPECT_GT(hits.load(), 0);
  EXPECT_FALSE((*c)->shared_memory_active());
}

}  // namespace
}  // namespace kvtier::net
