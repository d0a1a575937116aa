// Namespace handles are reference-counted: clients that come and go with
// ever new namespaces cannot fill the table for everyone, and a handle is
// never given to another namespace while a registration holds it or a block
// carries it. The index counts each namespace's blocks and bytes exactly
// (tenants' byte quotas rest on it).
#include <gtest/gtest.h>

#include "blk/dev/mem_device.h"
#include "common/buffer.h"
#include "kv/index.h"
#include "kv/store.h"
#include "kv/test_payload.h"

namespace kvtier::kv {
namespace {

constexpr uint32_t kObj = 64 << 10;

Namespace named(const std::string& model) {
  Namespace ns = test_namespace();
  ns.model_id = model;
  return ns;
}

TEST(IndexUsage, CountsBlocksAndBytesPerNamespaceThroughEveryChange) {
  Index idx(1000, 4);
  IndexRecord a;
  a.key = test_key(1);
  a.ns = 7;
  a.length = 100;
  a.ram_slot = 3;
  ASSERT_EQ(idx.insert(a), Index::InsertResult::kInserted);
  IndexRecord b = a;
  b.key = test_key(2);
  b.length = 50;
  b.ram_slot = kNoRamSlot;
  b.disk_page = 9;
  ASSERT_EQ(idx.insert(b), Index::InsertResult::kInserted);
  ASSERT_EQ(idx.insert(a), Index::InsertResult::kExists);  // counts nothing twice
  NamespaceUsage u = idx.usage(7);
  EXPECT_EQ(u.blocks, 2u);
  EXPECT_EQ(u.ram_bytes, 100u);
  EXPECT_EQ(u.disk_bytes, 50u);
  EXPECT_EQ(idx.usage(8).blocks, 0u);
  // Demoted to disk: RAM bytes go, disk bytes come.
  idx.update(a.key, [](IndexRecord& r) {
    r.ram_slot = kNoRamSlot;
    r.disk_page = 4;
    return true;
  });
  u = idx.usage(7);
  EXPECT_EQ(u.ram_bytes, 0u);
  EXPECT_EQ(u.disk_bytes, 150u);
  EXPECT_TRUE(idx.erase(b.key));
  EXPECT_FALSE(idx.erase(b.key));
  u = idx.usage(7);
  EXPECT_EQ(u.blocks, 1u);
  EXPECT_EQ(u.disk_bytes, 100u);
}

// A RAM-only store whose namespace table holds `max_namespaces` handles.
Result<std::unique_ptr<Store>> store_with_table(uint32_t max_namespaces) {
  StoreOptions o;
  o.ram_bytes = 16 * kObj;
  o.max_object_bytes = kObj;
  o.max_namespaces = max_namespaces;
  return Store::open(o);
}

TEST(NamespaceHandles, ReusedOnlyWhenClosedAndEmpty) {
  auto s = store_with_table(4);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  Store& store = **s;
  AlignedBuffer buf(kObj);
  fill_payload(test_key(1), buf.view());

  const uint16_t a = *store.register_namespace(named("a"));
  ASSERT_TRUE(store.put(a, test_key(1), buf.view())->stored());
  store.release_namespace(a);
  EXPECT_FALSE(store.get(a, test_key(1), buf.view()).ok());  // closed: unknown handle
  const uint16_t b = *store.register_namespace(named("b"));
  const uint16_t c = *store.register_namespace(named("c"));
  const uint16_t d = *store.register_namespace(named("d"));
  // Full: a is closed but carries a block, b..d are open.
  auto e = store.register_namespace(named("e"));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kOutOfSpace);
  // Registered again, a finds its block under the same handle.
  EXPECT_EQ(*store.register_namespace(named("a")), a);
  EXPECT_TRUE(store.get(a, test_key(1), buf.view())->hit);
  // Its block removed and its registration dropped, a's handle goes to e.
  EXPECT_TRUE(*store.remove(a, test_key(1)));
  store.release_namespace(a);
  e = store.register_namespace(named("e"));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(*e, a);
  EXPECT_EQ(store.namespace_digest(*e), named("e").digest());
  EXPECT_FALSE(store.get(*e, test_key(1), buf.view())->hit);
  // Several registrations: closed only when the last is dropped.
  EXPECT_EQ(*store.register_namespace(named("b")), b);
  store.release_namespace(b);
  EXPECT_TRUE(store.match_prefix(b, std::vector<Key128>{test_key(1)}).ok());
  (void)c;
  (void)d;
}

TEST(NamespaceHandles, ClientsComingAndGoingNeverFillTheTable) {
  auto s = store_with_table(8);
  ASSERT_TRUE(s.ok());
  for (int i = 0; i < 1000; ++i) {
    auto h = (*s)->register_namespace(named("model-" + std::to_string(i)));
    ASSERT_TRUE(h.ok()) << i << ": " << h.status().to_string();
    (*s)->release_namespace(*h);
  }
  EXPECT_LE((*s)->namespace_handles(), 8u);
}

}  // namespace
}  // namespace kvtier::kv
