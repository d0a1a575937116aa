// The direct channel: the server's channel thread on its own (over a
// socketpair, with a real Store whose RAM arena is a shared memfd), then
// StoreServer + RemoteStore end to end: RAM hits copied by the client
// straight from the arena, disk hits through the client's area, leases
// released by the client or, when the client goes away, by the server.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <atomic>
#include <optional>

#include <chrono>
#include <cstring>
#include <thread>

#include "blk/dev/mem_device.h"
#include "common/buffer.h"
#include "kv/test_payload.h"
#include "net/client/remote_store.h"
#include "net/server/shm_channel_server.h"
#include "net/server/store_server.h"
#include "net/shm/shm_channel_io.h"
#include "net/testing/store_test_util.h"

namespace kvtier::net {
namespace {

using kv::fill_payload;
using kv::payload_matches;
using kv::test_key;

constexpr uint32_t kObj = 128 << 10;

kv::Namespace channel_namespace() { return kv::test_namespace("channel-model"); }

std::unique_ptr<kv::Store> arena_store(uint64_t ram_slots, bool with_disk) {
  kv::StoreOptions o;
  o.ram_bytes = ram_slots * kObj;
  o.max_object_bytes = kObj;
  o.share_ram_arena = true;
  if (with_disk) {
    o.volume = std::make_shared<blk::MemDevice>(64 << 20);
    o.disk.region_bytes = 1 << 20;
    o.disk.flush_chunk_bytes = 256 << 10;
    o.promote_on_disk_hit = false;  // keep disk hits on disk
  }
  auto s = kv::Store::open(o);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return std::move(s).value();
}

bool wait_for(const std::function<bool()>& cond) {
  for (int i = 0; i < 500; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

// A channel thread on one end of a socketpair; the test speaks the other.
struct ChannelRig {
  explicit ChannelRig(uint32_t max_leases = 64, uint64_t max_server_leases = 0)
      : store(arena_store(16, false)) {
    ns = *store->register_namespace(channel_namespace());
    auto a = ShmArea::create(4 * kObj);
    EXPECT_TRUE(a.ok());
    area = *a;
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    client = sv[0];
    reader = std::make_unique<ChannelReader>(client);
    ShmChannelContext ctx;
    ctx.store = store.get();
    ctx.area = area;
    ctx.lease_from_arena = true;
    ctx.max_object_bytes = kObj;
    ctx.max_leases = max_leases;
    if (max_server_leases > 0) {
      ctx.server_leases = server_leases;
      ctx.max_server_leases = max_server_leases;
    }
    ctx.peer = "test";
    ctx.check_ns = [this](uint16_t h) {
      return h == ns ? Status::ok_status() : Status::invalid_argument("unknown namespace");
    };
    ctx.count_request = [](MessageType, uint64_t) {};
    ctx.count_bytes = [](uint64_t) {};
    server = ShmChannelServer::start(sv[1], std::move(ctx));
    arena = static_cast<const std::byte*>(
        ::mmap(nullptr, store->ram_arena_bytes(), PROT_READ, MAP_SHARED, store->ram_arena_fd(), 0));
    EXPECT_NE(arena, MAP_FAILED);
  }
  ~ChannelRig() {
    ::close(client);
    server->join();
    ::munmap(const_cast<std::byte*>(arena), store->ram_arena_bytes());
  }
  void put(uint64_t id) {
    AlignedBuffer b(kObj);
    fill_payload(test_key(id), b.view());
    ASSERT_TRUE(store->put(ns, test_key(id), b.view()).ok());
  }
  Result<Frame> ask(const Message& m, uint64_t rid) {
    KVTIER_RETURN_IF_ERROR(channel_send(client, m, rid));
    return reader->read(5000);
  }
  std::unique_ptr<kv::Store> store;
  std::shared_ptr<std::atomic<uint64_t>> server_leases = std::make_shared<std::atomic<uint64_t>>(0);
  uint16_t ns = 0;
  std::shared_ptr<ShmArea> area;
  int client = -1;
  std::shared_ptr<ShmChannelServer> server;
  const std::byte* arena = nullptr;
  std::unique_ptr<ChannelReader> reader;
};

TEST(ShmChannelServer, RamHitIsLeasedInTheArenaUntilReleased) {
  ChannelRig rig;
  rig.put(1);
  auto f = rig.ask(ShmLeaseGetRequest{rig.ns, test_key(1), 0, kObj, {}}, 1);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->header.request_id, 1u);
  auto r = decode_message_as<ShmLeaseGetResponse>(f->header, f->descriptor);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(r->result.hit);
  ASSERT_EQ(r->placement, ShmPlacement::kArena);
  ASSERT_EQ(r->result.length, kObj);
  EXPECT_TRUE(payload_matches(test_key(1), ByteView(rig.arena + r->arena_offset, kObj)));
  EXPECT_EQ(rig.store->local_stats().ram_leased, 1u);
  // The lease keeps the slot: removing the block cannot free it under us.
  // Releasing a lease the channel does not hold changes nothing.
  ASSERT_TRUE(channel_send(rig.client, ShmReleaseRequest{{r->lease + 1}}, 2).ok());
  ASSERT_TRUE(channel_send(rig.client, ShmReleaseRequest{{r->lease}}, 3).ok());
  EXPECT_TRUE(wait_for([&] { return rig.store->local_stats().ram_leased == 0; }));
  // A miss names no place; an unknown namespace is an Error, not a close.
  f = rig.ask(ShmLeaseGetRequest{rig.ns, test_key(99), 0, kObj, {}}, 4);
  ASSERT_TRUE(f.ok());
  r = decode_message_as<ShmLeaseGetResponse>(f->header, f->descriptor);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->result.hit);
  EXPECT_EQ(r->result.miss, kv::MissReason::kNotFound);
  f = rig.ask(ShmLeaseGetRequest{static_cast<uint16_t>(rig.ns + 7), test_key(1), 0, kObj, {}}, 5);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->header.type, MessageType::kErrorResponse);
  // A range outside the client's area is an Error too.
  f = rig.ask(ShmLeaseGetRequest{rig.ns, test_key(1), 4 * kObj, kObj, {}}, 6);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->header.type, MessageType::kErrorResponse);
  // Other requests are not served here.
  f = rig.ask(GetRequest{rig.ns, test_key(1), kObj}, 7);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->header.type, MessageType::kErrorResponse);
  EXPECT_FALSE(rig.server->finished());
}

TEST(ShmChannelServer, TheNextRequestCarriesTheReleases) {
  ChannelRig rig;
  rig.put(1);
  rig.put(2);
  auto f = rig.ask(ShmLeaseGetRequest{rig.ns, test_key(1), 0, kObj, {}}, 1);
  ASSERT_TRUE(f.ok());
  auto first = decode_message_as<ShmLeaseGetResponse>(f->header, f->descriptor);
  ASSERT_TRUE(first.ok() && first->placement == ShmPlacement::kArena);
  f = rig.ask(ShmLeaseGetRequest{rig.ns, test_key(2), 0, kObj, {first->lease}}, 2);
  ASSERT_TRUE(f.ok());
  auto second = decode_message_as<ShmLeaseGetResponse>(f->header, f->descriptor);
  ASSERT_TRUE(second.ok() && second->placement == ShmPlacement::kArena);
  EXPECT_EQ(rig.store->local_stats().ram_leased, 1u);  // only the second
}

TEST(ShmChannelServer, ClientThatGoesAwayLosesItsLeases) {
  ChannelRig rig;
  for (uint64_t id = 1; id <= 3; ++id) {
    rig.put(id);
    auto f = rig.ask(ShmLeaseGetRequest{rig.ns, test_key(id), 0, kObj, {}}, id);
    ASSERT_TRUE(f.ok());
  }
  EXPECT_EQ(rig.store->local_stats().ram_leased, 3u);
  ::shutdown(rig.client, SHUT_RDWR);
  EXPECT_TRUE(wait_for([&] { return rig.server->finished(); }));
  EXPECT_EQ(rig.store->local_stats().ram_leased, 0u);
}

TEST(ShmChannelServer, MalformedFrameClosesTheChannelAndFreesLeases) {
  ChannelRig rig;
  rig.put(1);
  ASSERT_TRUE(rig.ask(ShmLeaseGetRequest{rig.ns, test_key(1), 0, kObj, {}}, 1).ok());
  EXPECT_EQ(rig.store->local_stats().ram_leased, 1u);
  std::byte junk[64];
  std::memset(junk, 0x5A, sizeof junk);
  ASSERT_EQ(::send(rig.client, junk, sizeof junk, MSG_NOSIGNAL), 64);
  EXPECT_TRUE(wait_for([&] { return rig.server->finished(); }));
  EXPECT_EQ(rig.store->local_stats().ram_leased, 0u);
}

TEST(ShmChannelServer, PastTheLeaseLimitHitsAreCopiedIntoTheArea) {
  ChannelRig rig(/*max_leases=*/1);
  rig.put(1);
  rig.put(2);
  ASSERT_TRUE(rig.ask(ShmLeaseGetRequest{rig.ns, test_key(1), 0, kObj, {}}, 1).ok());
  auto f = rig.ask(ShmLeaseGetRequest{rig.ns, test_key(2), kObj, kObj, {}}, 2);
  ASSERT_TRUE(f.ok());
  auto r = decode_message_as<ShmLeaseGetResponse>(f->header, f->descriptor);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->result.hit);
  EXPECT_EQ(r->placement, ShmPlacement::kArea);
  EXPECT_TRUE(payload_matches(test_key(2), ByteView(rig.area->data() + kObj, kObj)));
  EXPECT_EQ(rig.store->local_stats().ram_leased, 1u);
}

// Channels together cannot lease all of RAM: past the server-wide bound a
// hit is copied, and a release makes room again.
TEST(ShmChannelServer, LeasesAreBoundedServerWideAcrossChannels) {
  ChannelRig rig(/*max_leases=*/64, /*max_server_leases=*/1);
  rig.put(1);
  rig.put(2);
  auto placement = [&](uint64_t id, uint64_t offset, uint64_t rid,
                       std::vector<uint32_t> release = {}) -> std::optional<ShmLeaseGetResponse> {
    auto f =
        rig.ask(ShmLeaseGetRequest{rig.ns, test_key(id), offset, kObj, std::move(release)}, rid);
    if (!f.ok()) return std::nullopt;
    auto r = decode_message_as<ShmLeaseGetResponse>(f->header, f->descriptor);
    if (!r.ok()) return std::nullopt;
    return *r;
  };
  auto first = placement(1, 0, 1);
  ASSERT_TRUE(first && first->result.hit);
  EXPECT_EQ(first->placement, ShmPlacement::kArena);
  EXPECT_EQ(rig.server_leases->load(), 1u);
  auto second = placement(2, kObj, 2);
  ASSERT_TRUE(second && second->result.hit);
  EXPECT_EQ(second->placement, ShmPlacement::kArea) << "the server-wide bound was not applied";
  EXPECT_EQ(rig.store->local_stats().ram_leased, 1u);
  // Releasing the first lease (carried by the next request) makes room.
  auto third = placement(2, kObj, 3, {first->lease});
  ASSERT_TRUE(third && third->result.hit);
  EXPECT_EQ(third->placement, ShmPlacement::kArena);
  EXPECT_EQ(rig.server_leases->load(), 1u);
}

// ---- End to end ----

std::unique_ptr<StoreServer> start_server(std::unique_ptr<kv::Store> store) {
  ServerConfig c = testing::test_config();
  c.metrics_enabled = false;
  c.store.max_object_bytes = kObj;
  auto s = StoreServer::start(c, std::move(store));
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(s).value() : nullptr;
}

std::unique_ptr<RemoteStore> connect(uint16_t port) {
  RemoteStoreOptions o = testing::client_options(port);
  o.connections = 1;
  auto c = RemoteStore::open(o);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE((*c)->wait_connected(5000).ok());
  return std::move(c).value();
}

TEST(DirectChannel, RamHitsAreCopiedStraightFromTheArenaByteForByte) {
  auto server = start_server(arena_store(64, false));
  ASSERT_TRUE(server);
  auto c = connect(server->port());
  auto ns = c->register_namespace(channel_namespace());
  ASSERT_TRUE(ns.ok());
  AlignedBuffer in(kObj), out(kObj);
  for (uint64_t id = 1; id <= 30; ++id) {
    const size_t len = 1 + (id * 7919) % kObj;
    fill_payload(test_key(id), in.subview(0, len));
    ASSERT_TRUE(c->put(*ns, test_key(id), in.subview(0, len)).ok());
  }
  for (uint64_t id = 1; id <= 30; ++id) {
    const size_t len = 1 + (id * 7919) % kObj;
    std::memset(out.data(), 0xEE, kObj);
    auto g = c->get(*ns, test_key(id), out.view());
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    ASSERT_TRUE(g->hit);
    ASSERT_EQ(g->length, len);
    EXPECT_TRUE(payload_matches(test_key(id), out.subview(0, len))) << id;
  }
  auto g = c->get(*ns, test_key(999), out.view());
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->hit);
  // A get that finds the channel busy (the I/O thread flushing releases at
  // that moment) takes the other path: nearly all, not all, go direct.
  const auto st = c->client_stats();
  EXPECT_EQ(st.direct_channels, 1u);
  EXPECT_GE(st.direct_gets, 25u);
  EXPECT_LE(st.direct_gets, 31u);
  EXPECT_GE(st.arena_reads, 24u);
  EXPECT_LE(st.arena_reads, 30u);
  // Every lease came back (releases are one-way: allow them a moment).
  EXPECT_TRUE(wait_for([&] { return server->store().local_stats().ram_leased == 0; }));
}

TEST(DirectChannel, MatchPrefixOverTheChannelEqualsTcp) {
  auto server = start_server(arena_store(64, true));
  ASSERT_TRUE(server);
  auto c = connect(server->port());
  auto ns = c->register_namespace(channel_namespace());
  ASSERT_TRUE(ns.ok());
  RemoteStoreOptions o = testing::client_options(server->port());
  o.shared_memory = false;
  auto tcp = RemoteStore::open(o);
  ASSERT_TRUE(tcp.ok() && (*tcp)->wait_connected(5000).ok());
  auto tns = (*tcp)->register_namespace(channel_namespace());
  ASSERT_TRUE(tns.ok());
  // A chain of 40 blocks with a hole at 30.
  std::vector<kv::Key128> chain;
  AlignedBuffer in(4096);
  for (uint64_t id = 1; id <= 40; ++id) {
    chain.push_back(test_key(id));
    if (id == 30) continue;
    fill_payload(test_key(id), in.view());
    ASSERT_TRUE(c->put(*ns, test_key(id), in.view()).ok());
  }
  auto direct = c->match_prefix(*ns, chain);
  auto over_tcp = (*tcp)->match_prefix(*tns, chain);
  ASSERT_TRUE(direct.ok() && over_tcp.ok());
  EXPECT_EQ(direct->blocks, 29u);
  EXPECT_EQ(direct->blocks, over_tcp->blocks);
  EXPECT_EQ(direct->tiers, over_tcp->tiers);
  EXPECT_EQ(c->client_stats().direct_matches, 1u);
  EXPECT_EQ((*tcp)->client_stats().direct_matches, 0u);
  // A handle the server never gave this connection is an error, not a close.
  auto bad = c->match_prefix(static_cast<uint16_t>(*ns + 5), chain);
  EXPECT_FALSE(bad.ok());
  EXPECT_TRUE(c->match_prefix(*ns, chain).ok());
  EXPECT_EQ(c->client_stats().direct_matches, 2u);
}

TEST(DirectChannel, DiskHitsComeThroughTheClientsArea) {
  auto server = start_server(arena_store(4, true));
  ASSERT_TRUE(server);
  auto c = connect(server->port());
  auto ns = c->register_namespace(channel_namespace());
  ASSERT_TRUE(ns.ok());
  AlignedBuffer in(kObj), out(kObj);
  for (uint64_t id = 1; id <= 20; ++id) {
    fill_payload(test_key(id), in.view());
    ASSERT_TRUE(c->put(*ns, test_key(id), in.view()).ok());
  }
  ASSERT_TRUE(server->store().flush().ok());
  for (uint64_t id = 1; id <= 20; ++id) {
    auto g = c->get(*ns, test_key(id), out.view());
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    ASSERT_TRUE(g->hit) << id;
    EXPECT_TRUE(payload_matches(test_key(id), out.view())) << id;
  }
  const auto st = c->client_stats();
  EXPECT_GE(st.direct_gets, 15u);  // a get finding the channel busy takes the other path
  EXPECT_LE(st.arena_reads, 4u);   // at most the RAM tier's 4 slots
  EXPECT_GE(server->store().local_stats().hits_disk, 16u);
  EXPECT_TRUE(wait_for([&] { return server->store().local_stats().ram_leased == 0; }));
}

TEST(DirectChannel, BatchGetsGoBlockByBlockOverTheChannelWhenNoneCanBeRefused) {
  auto server = start_server(arena_store(16, false));
  ASSERT_TRUE(server);
  auto c = connect(server->port());
  auto ns = c->register_namespace(channel_namespace());
  ASSERT_TRUE(ns.ok());
  constexpr size_t kBlocks = 6;
  std::vector<AlignedBuffer> in, out;
  std::vector<kv::Key128> keys;
  std::vector<ByteView> views;
  std::vector<kv::BatchGetItem> items;
  for (size_t i = 0; i < kBlocks; ++i) {
    keys.push_back(test_key(100 + i));
    in.emplace_back(kObj);
    out.emplace_back(kObj);
    fill_payload(keys.back(), in.back().view());
    views.push_back(in.back().view());
  }
  ASSERT_TRUE(c->batch_put(*ns, keys, views).ok());
  for (size_t i = 0; i < kBlocks; ++i) items.push_back({keys[i], out[i].view()});
  const uint64_t direct_before = c->client_stats().direct_gets;
  auto got = c->batch_get(*ns, items);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  for (size_t i = 0; i < kBlocks; ++i) {
    ASSERT_TRUE((*got)[i].hit) << i;
    EXPECT_TRUE(payload_matches(keys[i], out[i].view())) << i;
  }
  // Block by block over the channel (a get finding it busy may take TCP).
  EXPECT_GE(c->client_stats().direct_gets - direct_before, kBlocks - 1);
  // Overlapping buffers: refused before anything is read.
  AlignedBuffer both(2 * kObj);
  std::vector<kv::BatchGetItem> overlap = {{keys[0], both.view()},
                                           {keys[1], both.subview(kObj / 2, kObj)}};
  auto bad = c->batch_get(*ns, overlap);
  EXPECT_FALSE(bad.ok());
  // Buffers smaller than the server's largest object: one TCP batch, so a
  // buffer too small for its block is refused before any other is written.
  const uint64_t direct_mid = c->client_stats().direct_gets;
  std::vector<AlignedBuffer> small;
  std::vector<kv::BatchGetItem> small_items;
  for (size_t i = 0; i < 2; ++i) {
    small.emplace_back(kObj - 4096);
    small_items.push_back({keys[i], small.back().view()});
  }
  auto refused = c->batch_get(*ns, small_items);
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(c->client_stats().direct_gets, direct_mid);
}

TEST(DirectChannel, AServerWithoutASharedArenaStillServesTheChannel) {
  kv::StoreOptions o;
  o.ram_bytes = 16 * kObj;
  o.max_object_bytes = kObj;
  auto store = kv::Store::open(o);  // share_ram_arena off
  ASSERT_TRUE(store.ok());
  auto server = start_server(std::move(*store));
  ASSERT_TRUE(server);
  auto c = connect(server->port());
  auto ns = c->register_namespace(channel_namespace());
  ASSERT_TRUE(ns.ok());
  AlignedBuffer in(kObj), out(kObj);
  fill_payload(test_key(1), in.view());
  ASSERT_TRUE(c->put(*ns, test_key(1), in.view()).ok());
  auto g = c->get(*ns, test_key(1), out.view());
  ASSERT_TRUE(g.ok() && g->hit);
  EXPECT_TRUE(payload_matches(test_key(1), out.view()));
  EXPECT_EQ(c->client_stats().direct_gets, 1u);
  EXPECT_EQ(c->client_stats().arena_reads, 0u);
}

}  // namespace
}  // namespace kvtier::net
