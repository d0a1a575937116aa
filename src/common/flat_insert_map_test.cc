#include "common/flat_insert_map.h"

#include <gtest/gtest.h>

#include <unordered_map>

namespace kvtier {
namespace {

struct IdentityHash {
  size_t operator()(uint64_t k) const { return static_cast<size_t>(k); }
};

TEST(FlatInsertMap, AgreesWithUnorderedMapThroughGrowthAndCollisions) {
  FlatInsertMap<uint64_t, uint32_t, IdentityHash> flat;
  std::unordered_map<uint64_t, uint32_t> ref;
  // Keys that collide in the low bits probe past each other.
  for (uint32_t i = 0; i < 20000; ++i) {
    const uint64_t key = (uint64_t{i % 97} << 32) | (i % 3000) * 1024;
    auto [value, inserted] = flat.emplace(key, i);
    auto [it, ref_inserted] = ref.emplace(key, i);
    ASSERT_EQ(inserted, ref_inserted) << i;
    ASSERT_EQ(*value, it->second) << i;
  }
  EXPECT_EQ(flat.size(), ref.size());
  for (const auto& [k, v] : ref) {
    const uint32_t* got = flat.find(k);
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(*got, v);
  }
  EXPECT_EQ(flat.find(uint64_t{1} << 60), nullptr);
  FlatInsertMap<uint64_t, uint32_t, IdentityHash> empty;
  EXPECT_EQ(empty.find(7), nullptr);
}

}  // namespace
}  // namespace kvtier
