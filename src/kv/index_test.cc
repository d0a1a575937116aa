#include "kv/index.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <unordered_map>

#include "kv/test_payload.h"

namespace kvtier::kv {
namespace {

IndexRecord rec_for(uint64_t i) {
  IndexRecord r;
  r.key = test_key(i);
  r.ram_slot = static_cast<uint32_t>(i);
  r.disk_page = static_cast<uint32_t>(i * 3);
  r.length = static_cast<uint32_t>(i * 7 + 1);
  r.ns = static_cast<uint16_t>(i & 0xFF);
  return r;
}

TEST(Index, InsertFindUpdateErase) {
  Index idx(1000, 4);
  EXPECT_EQ(idx.insert(rec_for(1)), Index::InsertResult::kInserted);
  IndexRecord existing;
  EXPECT_EQ(idx.insert(rec_for(1), &existing), Index::InsertResult::kExists);
  EXPECT_EQ(existing.length, rec_for(1).length);
  auto f = idx.find(test_key(1));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->disk_page, 3u);
  EXPECT_FALSE(idx.find(test_key(2)));
  EXPECT_TRUE(idx.update(test_key(1), [](IndexRecord& r) {
    r.ram_slot = kNoRamSlot;
    return true;
  }));
  EXPECT_FALSE(idx.find(test_key(1))->in_ram());
  EXPECT_TRUE(idx.erase(test_key(1)));
  EXPECT_FALSE(idx.find(test_key(1)));
  EXPECT_FALSE(idx.erase(test_key(1)));
  EXPECT_EQ(idx.size(), 0u);
}

// Random operations against std::unordered_map, with a tiny table so probe
// runs wrap and backward-shift deletion is exercised.
TEST(Index, MatchesReferenceModelUnderRandomOps) {
  Index idx(300, 2);
  std::unordered_map<uint64_t, IndexRecord> model;
  std::mt19937_64 rng(42);
  for (int step = 0; step < 200000; ++step) {
    uint64_t i = rng() % 400;
    switch (rng() % 3) {
      case 0: {
        auto r = idx.insert(rec_for(i));
        if (model.count(i)) {
          ASSERT_EQ(r, Index::InsertResult::kExists);
        } else if (r == Index::InsertResult::kInserted) {
          model[i] = rec_for(i);
        } else {
          ASSERT_EQ(r, Index::InsertResult::kFull);
        }
        break;
      }
      case 1:
        ASSERT_EQ(idx.erase(test_key(i)), model.erase(i) == 1);
        break;
      default: {
        auto f = idx.find(test_key(i));
        ASSERT_EQ(f.has_value(), model.count(i) == 1) << "step " << step;
        if (f) {
          ASSERT_EQ(f->length, model[i].length);
        }
      }
    }
  }
  EXPECT_EQ(idx.size(), model.size());
  size_t visited = 0;
  idx.for_each([&](const IndexRecord&) { ++visited; });
  EXPECT_EQ(visited, model.size());
}

TEST(Index, RefusesWhenFull) {
  Index idx(100, 1);
  int inserted = 0;
  for (uint64_t i = 0; i < 1000; ++i)
    inserted += idx.insert(rec_for(i)) == Index::InsertResult::kInserted;
  EXPECT_GE(inserted, 100);
  EXPECT_LT(inserted, 1000);
  EXPECT_EQ(idx.insert(rec_for(5000)), Index::InsertResult::kFull);
}

TEST(Index, MatchPrefixStopsAtFirstMiss) {
  Index idx(1000);
  std::vector<Key128> chain;
  for (uint64_t i = 0; i < 100; ++i) chain.push_back(test_key(i));
  for (uint64_t i = 0; i < 100; ++i) {
    if (i != 60) idx.insert(rec_for(i));
  }
  std::vector<IndexRecord> out(100);
  EXPECT_EQ(idx.match_prefix(chain, out.data()), 60u);
  EXPECT_EQ(out[59].length, rec_for(59).length);
  EXPECT_EQ(idx.match_prefix(std::span<const Key128>(chain).first(60)), 60u);
  EXPECT_EQ(idx.match_prefix({}), 0u);
}

TEST(Index, AtMost48BytesPerBlockAtOneMillion) {
  Index idx(1000000);
  for (uint64_t i = 0; i < 1000000; ++i) {
    ASSERT_EQ(idx.insert(rec_for(i + 1)), Index::InsertResult::kInserted) << i;
  }
  double per_block = static_cast<double>(idx.memory_bytes()) / 1e6;
  EXPECT_LE(per_block, 48.0);
  EXPECT_EQ(idx.size(), 1000000u);
}

// Readers racing writers must never see a record mixed from two versions.
TEST(Index, ConcurrentReadersNeverSeeTornRecords) {
  Index idx(4096, 4);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> torn{0}, reads{0};
  std::thread writer([&] {
    std::mt19937_64 rng(1);
    while (!stop.load()) {
      uint64_t i = rng() % 2000;
      if (rng() & 1) {
        idx.insert(rec_for(i));
      } else {
        idx.erase(test_key(i));
      }
      uint64_t j = rng() % 2000;
      idx.update(test_key(j), [&](IndexRecord& r) {
        uint32_t v = static_cast<uint32_t>(rng());
        r.ram_slot = v;
        r.disk_page = v ^ 0xFFFF;  // invariant: disk_page == ram_slot ^ 0xFFFF
        return true;
      });
    }
  });
  std::thread reader([&] {
    while (!stop.load()) {
      for (uint64_t i = 0; i < 2000; ++i) {
        auto f = idx.find(test_key(i));
        reads.fetch_add(1);
        if (!f) continue;
        bool original = f->ram_slot == i && f->disk_page == i * 3;
        bool updated = f->disk_page == (f->ram_slot ^ 0xFFFF);
        if (!original && !updated) torn.fetch_add(1);
        if (f->length != rec_for(i).length) torn.fetch_add(1);
      }
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stop = true;
  writer.join();
  reader.join();
  EXPECT_GT(reads.load(), 1000u);
  EXPECT_EQ(torn.load(), 0u);
}

}  // namespace
}  // namespace kvtier::kv
