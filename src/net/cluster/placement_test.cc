#include "net/cluster/placement.h"

#include <gtest/gtest.h>

#include <map>

#include "kv/test_payload.h"

namespace kvtier::net {
namespace {

using kv::test_key;

// Golden values: the weight function is part of the cluster's format (every
// client must place a key on the same node); a change here moves every key.
TEST(Placement, GoldenValues) {
  EXPECT_EQ(node_seed("node-a"), 0xdadea24aa12481feull);
  EXPECT_EQ(rendezvous_weight(node_seed("node-a"), kv::Key128{1, 2}), 0x74a1045d27951fdfull);
  Placement p({"node-c", "node-a", "node-b"});
  const char* expected[] = {"node-b", "node-a", "node-b", "node-a", "node-b", "node-b"};
  for (uint64_t i = 0; i < 6; ++i) {
    const kv::Key128 key{i, i * 0x9E3779B97F4A7C15ull};  // fixed inputs of the golden values
    EXPECT_EQ(p.node_ids()[p.owner(key)], expected[i]) << "key " << i;
  }
}

TEST(Placement, BalancedOverThreeNodes) {
  Placement p({"node-a", "node-b", "node-c"});
  constexpr int kKeys = 100000;
  std::map<size_t, int> count;
  for (uint64_t i = 0; i < kKeys; ++i) ++count[p.owner(test_key(i))];
  ASSERT_EQ(count.size(), 3u);
  for (const auto& [node, n] : count) {
    double share = static_cast<double>(n) / kKeys;
    EXPECT_NEAR(share, 1.0 / 3, 0.02) << p.node_ids()[node];
  }
}

TEST(Placement, RemovedNodeMovesOnlyItsKeysAndJoinTakesAShare) {
  Placement three({"node-a", "node-b", "node-c"});
  Placement two({"node-a", "node-c"});
  Placement four({"node-a", "node-b", "node-c", "node-d"});
  constexpr int kKeys = 100000;
  int moved_from_b = 0, taken_by_d = 0;
  for (uint64_t i = 0; i < kKeys; ++i) {
    kv::Key128 k = test_key(i);
    const std::string& before = three.node_ids()[three.owner(k)];
    const std::string& after = two.node_ids()[two.owner(k)];
    if (before == "node-b") {
      ++moved_from_b;
    } else {
      EXPECT_EQ(before, after) << "key " << i << " moved though its node stayed";
    }
    const std::string& joined = four.node_ids()[four.owner(k)];
    if (joined == "node-d") {
      ++taken_by_d;
    } else {
      EXPECT_EQ(before, joined) << "key " << i << " moved between staying nodes on a join";
    }
  }
  EXPECT_NEAR(static_cast<double>(moved_from_b) / kKeys, 1.0 / 3, 0.02);
  EXPECT_NEAR(static_cast<double>(taken_by_d) / kKeys, 1.0 / 4, 0.02);
}

TEST(Placement, EmptyAndDuplicateNodes) {
  Placement none({});
  EXPECT_EQ(none.owner(test_key(1)), 0u);
  EXPECT_TRUE(none.empty());
  Placement dup({"x", "x", "y"});
  EXPECT_EQ(dup.size(), 2u);
}

}  // namespace
}  // namespace kvtier::net
