// A DiskTier on a MemDevice for unit tests: 1 MiB regions streamed out in
// 256 KiB chunks, 60 KiB payloads (one 64 KiB entry with its header page)
// whose bytes follow from their test keys, and helpers that append block i
// (indexing it) and read a record back through the tier's async path.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "blk/dev/mem_device.h"
#include "common/crc32c.h"
#include "kv/disk_tier.h"
#include "kv/test_payload.h"

namespace kvtier::kv::testing {

inline constexpr uint32_t kFixturePayload = 60 << 10;

inline DiskTierOptions fixture_tier_options() {
  DiskTierOptions o;
  o.region_bytes = 1 << 20;
  o.flush_chunk_bytes = 256 << 10;
  o.max_payload_bytes = kFixturePayload;
  o.read_depth = 4;
  o.reinsert_hot = false;
  return o;
}

struct DiskTierFixture {
  std::shared_ptr<blk::MemDevice> dev;
  Index index{10000};
  NamespaceTable namespaces;
  std::unique_ptr<DiskTier> tier;
  uint16_t ns = 0;

  explicit DiskTierFixture(
      std::shared_ptr<blk::MemDevice> d = std::make_shared<blk::MemDevice>(8 << 20),
      const DiskTierOptions& o = fixture_tier_options())
      : dev(std::move(d)) {
    auto t = DiskTier::open(dev, o, &index, &namespaces);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    tier = std::move(t).value();
    ns = *namespaces.intern(Key128{1, 2}, true);
  }

  // Appends block i and indexes it; the record says where it went.
  IndexRecord append(uint64_t i) {
    AlignedBuffer b(kFixturePayload);
    fill_payload(test_key(i), b.view());
    auto page = tier->append(test_key(i), ns, b.view(), crc32c(b.view()));
    EXPECT_TRUE(page.ok());
    IndexRecord rec;
    rec.key = test_key(i);
    rec.disk_page = *page;
    rec.length = kFixturePayload;
    rec.ns = ns;
    EXPECT_EQ(index.insert(rec), Index::InsertResult::kInserted);
    return rec;
  }

  Status read(const IndexRecord& rec, AlignedBuffer& out) {
    auto target = std::make_shared<ReadTarget>(out.view());
    const uint64_t deadline = now_ns() + 1000000000ull;
    tier->read_async(rec, target, deadline);
    return target->wait_until(deadline);
  }
};

}  // namespace kvtier::kv::testing
