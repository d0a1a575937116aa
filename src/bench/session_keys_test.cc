#include "bench/session_keys.h"

#include <gtest/gtest.h>

namespace kvtier::bench {
namespace {

const kv::Key128 kNs{0x1234, 0x5678};

Session session_of(const std::vector<std::vector<uint64_t>>& turns) {
  Session s;
  for (const auto& ids : turns) {
    TraceRequest r;
    r.block_ids = ids;
    s.turns.push_back(r);
  }
  return s;
}

// Every turn's keys are the chain of its own ids, whatever the turns do:
// grow, stay, shrink, change in the middle, start over, or are empty.
TEST(SessionKeys, EveryTurnHasTheKeysOfItsOwnIds) {
  const std::vector<std::vector<uint64_t>> turns = {
      {1, 2, 3},           // first
      {1, 2, 3, 4, 5},     // grows
      {1, 2, 3, 4, 5},     // the same
      {1, 2},              // a shorter prefix
      {1, 2, 3, 4, 5, 6},  // grows past the chain again
      {1, 2, 9, 10},       // changed after two blocks (compacted)
      {7, 8},              // nothing in common
      {},                  // no full block
      {7, 8, 11},
  };
  const Session s = session_of(turns);
  for (kv::KeyScheme scheme : {kv::KeyScheme::kXxh3_128, kv::KeyScheme::kSha256}) {
    const SessionKeys keys(scheme, kNs, s);
    ASSERT_EQ(keys.turn_count(), turns.size());
    for (size_t t = 0; t < turns.size(); ++t) {
      const auto want = kv::chain_block_keys_from_ids(scheme, kNs, turns[t]);
      const auto got = keys.turn(t);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.end())) << "turn " << t;
    }
    // Growing, repeating and shrinking share one chain; the change in the
    // middle and the fresh start each begin one (the empty turn is a prefix
    // of the last).
    EXPECT_EQ(keys.chain_count(), 3u);
    const std::vector<size_t> chains = {0, 0, 0, 0, 0, 1, 2, 2, 2};
    for (size_t t = 0; t < turns.size(); ++t) EXPECT_EQ(keys.chain_of(t), chains[t]) << t;
  }
}

}  // namespace
}  // namespace kvtier::bench
