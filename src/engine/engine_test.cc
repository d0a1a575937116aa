#include <gtest/gtest.h>

#include <random>

#include <map>

#include <list>

#include <vector>

#include "engine/engine.h"
#include "engine/hbm_prefix_pool.h"
#include "engine/kv_content.h"

namespace kvtier::engine {
namespace {

kv::Key128 key(uint64_t i) { return {i * 7 + 1, i * 13 + 5}; }

TEST(KvContent, VerifiesOwnBytesAndRejectsOthers) {
  std::vector<std::byte> a(4100), b(4100);
  fill_kv_block(key(1), a);
  fill_kv_block(key(2), b);
  EXPECT_TRUE(verify_kv_block(key(1), a));
  EXPECT_FALSE(verify_kv_block(key(2), a));
  EXPECT_NE(a, b);
  a[4099] ^= std::byte{1};  // the unaligned tail is checked too
  EXPECT_FALSE(verify_kv_block(key(1), a));
  a[4099] ^= std::byte{1};
  a[17] ^= std::byte{0x80};
  EXPECT_FALSE(verify_kv_block(key(1), a));
}

// The content is a contract between whoever writes a block and whoever
// checks it (store, PD transfer): the vectorised paths must produce exactly
// the bytes of this word-by-word reference, for every length.
TEST(KvContent, BytesMatchTheWordByWordReference) {
  auto reference_word = [](const kv::Key128& k, uint64_t i) {
    uint64_t x = k.lo ^ (i * 0x9E3779B97F4A7C15ull);
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    return x ^ k.hi ^ (x >> 32);
  };
  for (size_t len : {0, 1, 7, 8, 9, 63, 64, 65, 1000, 4096, 32768 + 5}) {
    SCOPED_TRACE(len);
    const kv::Key128 k = key(len + 3);
    std::vector<std::byte> got(len), want(len);
    fill_kv_block(k, got);
    for (size_t i = 0; i < len; ++i) {
      const uint64_t w = reference_word(k, i / 8);
      want[i] = static_cast<std::byte>(w >> (8 * (i % 8)));
    }
    EXPECT_EQ(got, want);
    EXPECT_TRUE(verify_kv_block(k, got));
    if (len > 0) {
      got[len / 2] ^= std::byte{1};
      EXPECT_FALSE(verify_kv_block(k, got));
    }
  }
}

TEST(HbmPrefixPool, LongestPrefixAndLruEviction) {
  HbmPrefixPool pool(4);
  std::vector<kv::Key128> s1 = {key(1), key(2), key(3)};
  EXPECT_EQ(pool.match_prefix(s1), 0u);
  pool.insert(s1);
  EXPECT_EQ(pool.match_prefix(s1), 3u);
  std::vector<kv::Key128> s1b = {key(1), key(2), key(9)};
  EXPECT_EQ(pool.match_prefix(s1b), 2u);
  // Inserting two new blocks evicts the least recent: key(3) (key 1 and 2 were
  // touched by the match above).
  std::vector<kv::Key128> s2 = {key(4), key(5)};
  pool.insert(s2);
  EXPECT_EQ(pool.size(), 4u);
  EXPECT_EQ(pool.evictions(), 1u);
  EXPECT_EQ(pool.match_prefix(s1), 2u);
  // A gap breaks the prefix even when later blocks are present.
  std::vector<kv::Key128> gap = {key(7), key(4)};
  EXPECT_EQ(pool.match_prefix(gap), 0u);
}

TEST(HbmPrefixPool, ZeroCapacityHoldsNothing) {
  HbmPrefixPool pool(0);
  std::vector<kv::Key128> s = {key(1)};
  pool.insert(s);
  EXPECT_EQ(pool.match_prefix(s), 0u);
}

// The pool against the plainest LRU there is (a list and a map), over random
// prompts that share prefixes, with keys whose hashes collide in the table's
// low bits, through growth, eviction and the deletions that eviction does.
TEST(HbmPrefixPool, AgreesWithAReferenceLru) {
  struct ReferenceLru {
    size_t capacity;
    std::list<kv::Key128> lru;
    std::map<std::pair<uint64_t, uint64_t>, std::list<kv::Key128>::iterator> where;
    uint64_t evictions = 0;
    bool has(const kv::Key128& k) const { return where.count({k.hi, k.lo}) > 0; }
    void touch(const kv::Key128& k) {
      auto it = where.find({k.hi, k.lo});
      if (it != where.end()) {
        lru.splice(lru.begin(), lru, it->second);
        return;
      }
      if (capacity == 0) return;
      lru.push_front(k);
      where[{k.hi, k.lo}] = lru.begin();
      if (lru.size() > capacity) {
        where.erase({lru.back().hi, lru.back().lo});
        lru.pop_back();
        ++evictions;
      }
    }
  };
  for (size_t capacity : {size_t{0}, size_t{1}, size_t{37}, size_t{500}}) {
    HbmPrefixPool pool(capacity);
    ReferenceLru ref{capacity, {}, {}, 0};
    std::mt19937_64 rng(capacity + 1);
    for (int round = 0; round < 3000; ++round) {
      // A prompt: a shared stem, then blocks of one of 40 "sessions".
      std::vector<kv::Key128> keys;
      const uint64_t session = rng() % 40, len = 1 + rng() % 60;
      for (uint64_t b = 0; b < len; ++b) {
        const uint64_t id = b < 3 ? b : (session << 20) | b;
        keys.push_back(kv::Key128{id * 7, (id % 16) << 40});  // low hash bits collide
      }
      size_t expect = 0;
      while (expect < keys.size() && ref.has(keys[expect])) ++expect;
      for (size_t i = expect; i-- > 0;) ref.touch(keys[i]);
      ASSERT_EQ(pool.match_prefix(keys), expect) << capacity << " round " << round;
      if (rng() % 2) {
        pool.insert(keys);
        for (size_t i = keys.size(); i-- > 0;) ref.touch(keys[i]);
      }
      ASSERT_EQ(pool.size(), ref.lru.size());
      ASSERT_EQ(pool.evictions(), ref.evictions);
    }
  }
}

TEST(ModeledEngine, ProfilesAndScaling) {
  auto h100 = find_engine_profile("h100-qwen3-coder-30b");
  ASSERT_TRUE(h100.has_value());
  EXPECT_EQ(h100->kv_bytes_per_token, 96u * 1024);
  EXPECT_DOUBLE_EQ(h100->byte_scale(), 1.0);
  ModeledEngine e(*h100);
  EXPECT_NEAR(e.prefill_seconds(14850, 0), 1.0, 1e-12);
  auto scaled = find_engine_profile("h100-qwen3-coder-30b-scaled");
  ASSERT_TRUE(scaled.has_value());
  EXPECT_DOUBLE_EQ(scaled->byte_scale(), 96.0 * 1024 * 64 / 2048);
  // One scaled token stands for 64 real ones: same modeled time per real token.
  ModeledEngine s(*scaled);
  EXPECT_NEAR(s.prefill_seconds(14850, 0), 64.0, 1e-9);
  EXPECT_FALSE(find_engine_profile("nope").has_value());
}

}  // namespace
}  // namespace kvtier::engine
