#include "serve/router.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvtier::serve {
namespace {

TEST(SoftStickyRouter, FirstTurnLeastLoadedThenSticky) {
  SoftStickyRouter r(2, 2, RouterOptions{100});
  std::vector<double> scores = {50, 10};
  EXPECT_EQ(r.route_prefill(7, scores), 1u);  // first turn: least loaded
  scores = {0, 90};                           // preferred trails by 90 <= 100: stays
  EXPECT_EQ(r.route_prefill(7, scores), 1u);
  scores = {0, 100};  // exactly the margin: stays
  EXPECT_EQ(r.route_prefill(7, scores), 1u);
  scores = {0, 101};  // beyond the margin: spills to the best
  EXPECT_EQ(r.route_prefill(7, scores), 0u);
  scores = {60, 0};  // the preference is kept after a spill
  EXPECT_EQ(r.route_prefill(7, scores), 1u);
  EXPECT_EQ(r.stats().first_turns, 1u);
  EXPECT_EQ(r.stats().later_turns, 4u);
  EXPECT_EQ(r.stats().stayed, 3u);
  EXPECT_EQ(r.stats().spilled, 1u);
  EXPECT_DOUBLE_EQ(r.stats().stayed_share(), 0.75);
}

TEST(SoftStickyRouter, IdleTiesSpreadSessions) {
  SoftStickyRouter r(2, 2, RouterOptions{});
  std::vector<double> idle = {0, 0};
  EXPECT_EQ(r.route_prefill(1, idle), 0u);
  EXPECT_EQ(r.route_prefill(2, idle), 1u);
  EXPECT_EQ(r.route_prefill(3, idle), 0u);
}

TEST(SoftStickyRouter, DecodeByQueuedOutputBudget) {
  SoftStickyRouter r(2, 3, RouterOptions{});
  std::vector<double> budgets = {300, 100, 200};
  EXPECT_EQ(r.route_decode(budgets), 1u);
  budgets = {0, 0, 0};  // ties: fewest requests placed so far
  EXPECT_EQ(r.route_decode(budgets), 0u);
  EXPECT_EQ(r.route_decode(budgets), 2u);
  r.record_pair(1, 2);
  r.record_pair(1, 2);
  EXPECT_EQ(r.stats().pair_counts[1 * 3 + 2], 2u);
}

}  // namespace
}  // namespace kvtier::serve
