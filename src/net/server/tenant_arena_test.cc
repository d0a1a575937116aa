// One shared-memory RAM arena per tenant: a tenant that opts in reads its
// RAM hits straight from an arena that holds its blocks and no one else's;
// a tenant that does not is given no arena at all; filling one tenant's
// arena evicts only that tenant's blocks. Real server, real Store, real
// sockets, and the arenas' memfds mapped exactly as a client maps them.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <vector>

#include "blk/dev/mem_device.h"
#include "common/buffer.h"
#include "net/testing/store_test_util.h"

namespace kvtier::net {
namespace {

using namespace kvtier::net::testing;  // NOLINT

constexpr uint64_t kArenaSlots = 16;

struct Tenant {
  std::string name, token;
  bool arena = false;
};

const std::vector<Tenant> kTenants = {
    {"a", "token-of-tenant-a-0123456789", true},
    {"b", "token-of-tenant-b-0123456789", true},
    {"c", "token-of-tenant-c-0123456789", false},
};

// `own_store`: the server opens its store itself (RAM only), sizing the
// arenas from the tenants' max_ram_bytes; otherwise it is handed a store
// with a disk tier and two private arenas, which it gives to a and b.
std::unique_ptr<StoreServer> start_three_tenants(bool own_store) {
  ServerConfig cfg = test_config();
  cfg.store.ram_bytes = 64 * kObj;
  for (const Tenant& t : kTenants) {
    TenantConfig tc;
    tc.name = t.name;
    tc.token = t.token;
    tc.share_ram_arena = t.arena;
    if (t.arena) tc.max_ram_bytes = kArenaSlots * kObj;
    cfg.tenants.push_back(tc);
  }
  if (own_store) {
    auto s = StoreServer::start(cfg, nullptr);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  kv::StoreOptions o;
  o.ram_bytes = 64 * kObj;
  o.max_object_bytes = kObj;
  o.private_arena_bytes = {kArenaSlots * kObj, kArenaSlots * kObj};
  o.volume = std::make_shared<blk::MemDevice>(64 << 20);
  o.disk.region_bytes = 1 << 20;
  o.disk.flush_chunk_bytes = 256 << 10;
  o.io_timeout_ms = 500;
  auto store = kv::Store::open(o);
  EXPECT_TRUE(store.ok()) << store.status().to_string();
  if (!store.ok()) return nullptr;
  return start_server(cfg, std::move(store).value());
}

std::unique_ptr<RemoteStore> shm_client(const StoreServer& s, const Tenant& t) {
  RemoteStoreOptions o = client_options(s.port());
  o.auth_token = t.token;
  o.shared_memory = true;
  o.direct_channel = true;
  return connect(o);
}

// Keys per tenant that differ (the server salts them per tenant anyway, but
// distinct payloads let the arena scan tell whose bytes it sees).
kv::Key128 key_of(size_t tenant, int i) { return test_key(1000 * (tenant + 1) + i); }

// Maps arena `arena` of the server's store read-only, as a client does.
struct MappedArena {
  const std::byte* data = nullptr;
  size_t bytes = 0;
  MappedArena(const StoreServer& s, uint16_t arena) {
    kv::Store& store = const_cast<StoreServer&>(s).store();
    const int fd = store.ram_arena_fd(arena);
    bytes = store.ram_arena_bytes(arena);
    EXPECT_GE(fd, 0) << "arena " << arena << " is not shareable";
    if (fd < 0) return;
    void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    EXPECT_NE(p, MAP_FAILED);
    if (p != MAP_FAILED) data = static_cast<const std::byte*>(p);
  }
  ~MappedArena() {
    if (data) ::munmap(const_cast<std::byte*>(data), bytes);
  }
  // Whether block `key`'s payload sits at any slot of the arena.
  bool holds(const kv::Key128& key) const {
    for (size_t off = 0; data && off + kObj <= bytes; off += kObj) {
      if (payload_matches(key, ByteView(data + off, kObj))) return true;
    }
    return false;
  }
};

TEST(TenantArenas, EachOptedInTenantReadsFromAnArenaOfItsOwn) {
  auto server = start_three_tenants(/*own_store=*/true);
  ASSERT_TRUE(server);
  ASSERT_EQ(server->store().ram_arena_count(), 3u);  // common + a + b
  // A multi-tenant server never shares the common arena.
  EXPECT_LT(server->store().ram_arena_fd(0), 0);
  constexpr int kN = 8;
  std::vector<std::unique_ptr<RemoteStore>> clients;
  std::vector<uint16_t> ns;
  AlignedBuffer buf(kObj);
  for (size_t t = 0; t < kTenants.size(); ++t) {
    clients.push_back(shm_client(*server, kTenants[t]));
    ns.push_back(*clients[t]->register_namespace(test_namespace()));
    for (int i = 0; i < kN; ++i) {
      fill_payload(key_of(t, i), buf.view());
      ASSERT_TRUE(clients[t]->put(ns[t], key_of(t, i), buf.view())->stored());
    }
  }
  // Each reads its blocks back: from its own arena when it has one, copied
  // into its area otherwise.
  for (size_t t = 0; t < kTenants.size(); ++t) {
    for (int i = 0; i < kN; ++i) {
      auto g = clients[t]->get(ns[t], key_of(t, i), buf.view());
      ASSERT_TRUE(g.ok() && g->hit);
      EXPECT_TRUE(payload_matches(key_of(t, i), ByteView(buf.data(), g->length)));
    }
    EXPECT_EQ(clients[t]->client_stats().arena_reads, kTenants[t].arena ? kN : 0u)
        << "tenant " << kTenants[t].name;
  }
  // Arena 1 holds a's blocks and nobody else's; arena 2 b's.
  for (uint16_t arena = 1; arena <= 2; ++arena) {
    MappedArena m(*server, arena);
    ASSERT_NE(m.data, nullptr);
    EXPECT_EQ(m.bytes, kArenaSlots * kObj);
    for (size_t t = 0; t < kTenants.size(); ++t) {
      for (int i = 0; i < kN; ++i) {
        EXPECT_EQ(m.holds(key_of(t, i)), t + 1 == arena)
            << "arena " << arena << ", block " << i << " of tenant " << kTenants[t].name;
      }
    }
  }
}

TEST(TenantArenas, FillingOneArenaEvictsOnlyThatTenantsBlocks) {
  auto server = start_three_tenants(/*own_store=*/false);
  ASSERT_TRUE(server);
  auto a = shm_client(*server, kTenants[0]);
  auto b = shm_client(*server, kTenants[1]);
  const uint16_t na = *a->register_namespace(test_namespace());
  const uint16_t nb = *b->register_namespace(test_namespace());
  AlignedBuffer buf(kObj);
  constexpr int kB = 8;
  for (int i = 0; i < kB; ++i) {
    fill_payload(key_of(1, i), buf.view());
    ASSERT_TRUE(b->put(nb, key_of(1, i), buf.view())->stored());
  }
  // Three times its arena: a's puts are stored (older blocks go to disk),
  // not refused at max_ram_bytes, since the arena itself bounds a's RAM.
  constexpr int kA = 3 * kArenaSlots;
  for (int i = 0; i < kA; ++i) {
    fill_payload(key_of(0, i), buf.view());
    auto p = a->put(na, key_of(0, i), buf.view());
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(p->stored()) << "put " << i << " refused: " << static_cast<int>(p->refuse);
  }
  EXPECT_GT(server->store().local_stats().demotions, 0u);
  // b's blocks all stayed in RAM: every get is read from b's arena.
  for (int i = 0; i < kB; ++i) {
    auto g = b->get(nb, key_of(1, i), buf.view());
    ASSERT_TRUE(g.ok() && g->hit);
    EXPECT_EQ(g->tier, kv::Tier::kRam);
  }
  EXPECT_EQ(b->client_stats().arena_reads, static_cast<uint64_t>(kB));
  // a's oldest blocks were demoted, not lost.
  for (int i = 0; i < kA; ++i) {
    auto g = a->get(na, key_of(0, i), buf.view());
    ASSERT_TRUE(g.ok() && g->hit) << "block " << i;
    EXPECT_TRUE(payload_matches(key_of(0, i), ByteView(buf.data(), g->length)));
  }
}

TEST(TenantArenas, ServerRefusesATenantArenaTheStoreLacks) {
  ServerConfig cfg = test_config();
  TenantConfig a;
  a.name = "a";
  a.token = kTenants[0].token;
  a.share_ram_arena = true;
  a.max_ram_bytes = kArenaSlots * kObj;
  cfg.tenants = {a};
  auto s = StoreServer::start(cfg, small_store());  // no private arena
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("no private RAM arena"), std::string::npos)
      << s.status().to_string();
}

TEST(TenantArenas, StoreRefusesArenasThatDoNotFit) {
  kv::StoreOptions o;
  o.ram_bytes = 8 * kObj;
  o.max_object_bytes = kObj;
  o.private_arena_bytes = {4 * kObj, 8 * kObj};
  auto s = kv::Store::open(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("do not fit"), std::string::npos) << s.status().to_string();
  o.private_arena_bytes = {kObj / 2};
  s = kv::Store::open(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("cannot hold one object"), std::string::npos);
  // A namespace cannot be placed in an arena that does not exist.
  o.private_arena_bytes = {4 * kObj};
  s = kv::Store::open(o);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_FALSE((*s)->register_namespace(test_namespace(), 2).ok());
  EXPECT_TRUE((*s)->register_namespace(test_namespace(), 1).ok());
}

}  // namespace
}  // namespace kvtier::net
