#include "engine/load_planner.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvtier::engine {
namespace {

using kv::Tier;

std::vector<Tier> tiers(size_t ram, size_t disk) {
  std::vector<Tier> t(ram, Tier::kRam);
  t.insert(t.end(), disk, Tier::kDisk);
  return t;
}

TEST(LoadRateTracker, FirstObservationThenWeightedAverage) {
  LoadRateTracker r(0.5);
  EXPECT_FALSE(r.seconds_per_block(Tier::kDisk).has_value());
  r.observe(Tier::kDisk, 4, 4.0);  // 1 s per block
  EXPECT_DOUBLE_EQ(*r.seconds_per_block(Tier::kDisk), 1.0);
  r.observe(Tier::kDisk, 2, 6.0);  // 3 s per block: halfway with weight 0.5
  EXPECT_DOUBLE_EQ(*r.seconds_per_block(Tier::kDisk), 2.0);
  r.observe(Tier::kDisk, 0, 100.0);  // an empty batch teaches nothing
  EXPECT_DOUBLE_EQ(*r.seconds_per_block(Tier::kDisk), 2.0);
  EXPECT_FALSE(r.seconds_per_block(Tier::kRam).has_value());
  r.observe(Tier::kRam, 10, 0.01);
  EXPECT_DOUBLE_EQ(*r.seconds_per_block(Tier::kRam), 0.001);
}

TEST(ComputeLoadRace, UnknownRatesLoadEverything) {
  LoadRateTracker r;
  const auto t = tiers(3, 7);
  const LoadSplit s = plan_compute_load_race(t, 0, 10, 1.0, r);
  EXPECT_EQ(s.load_from, 0u);
  EXPECT_EQ(s.expected_compute_s, 0.0);
}

TEST(ComputeLoadRace, FastTierIsLoadedInFull) {
  LoadRateTracker r;
  r.observe(Tier::kRam, 1, 0.001);
  const auto t = tiers(10, 0);
  // Computing one block (0.01 s) already takes as long as loading all ten.
  EXPECT_EQ(plan_compute_load_race(t, 0, 10, 0.01, r).load_from, 0u);
}

TEST(ComputeLoadRace, EqualRatesMeetInTheMiddle) {
  LoadRateTracker r;
  r.observe(Tier::kDisk, 1, 1.0);
  const auto t = tiers(0, 10);
  const LoadSplit s = plan_compute_load_race(t, 0, 10, 1.0, r);
  EXPECT_EQ(s.load_from, 5u);
  EXPECT_DOUBLE_EQ(s.expected_compute_s, 5.0);
  EXPECT_DOUBLE_EQ(s.expected_load_s, 5.0);
}

TEST(ComputeLoadRace, SlowTierStillTakesItsShare) {
  // Loading costs 4x recomputing: compute 8 blocks while loading 2, ready
  // after 8 s instead of 10 s (all recomputed) or 40 s (all loaded).
  LoadRateTracker r;
  r.observe(Tier::kDisk, 1, 4.0);
  const auto t = tiers(0, 10);
  const LoadSplit s = plan_compute_load_race(t, 0, 10, 1.0, r);
  EXPECT_EQ(s.load_from, 8u);
  EXPECT_DOUBLE_EQ(s.expected_load_s, 8.0);
}

TEST(ComputeLoadRace, CostsFollowEachBlocksTier) {
  // Front 4 blocks in RAM (free), back 6 on disk at 2 s each; compute 1 s.
  // Computing the 4 RAM blocks would be wasted: the race starts computing
  // and the split lands inside the disk run (k=8: 8 s compute, 4 s load is
  // worse than k=7: 7 s compute vs 6 s load).
  LoadRateTracker r;
  r.observe(Tier::kRam, 1, 0.0);
  r.observe(Tier::kDisk, 1, 2.0);
  const auto t = tiers(4, 6);
  const LoadSplit s = plan_compute_load_race(t, 0, 10, 1.0, r);
  EXPECT_EQ(s.load_from, 7u);
  EXPECT_DOUBLE_EQ(s.expected_compute_s, 7.0);
  EXPECT_DOUBLE_EQ(s.expected_load_s, 6.0);
}

TEST(ComputeLoadRace, RespectsFromAndEmptyRanges) {
  LoadRateTracker r;
  r.observe(Tier::kDisk, 1, 1.0);
  const auto t = tiers(0, 10);
  EXPECT_EQ(plan_compute_load_race(t, 6, 10, 1.0, r).load_from, 8u);
  EXPECT_EQ(plan_compute_load_race(t, 10, 10, 1.0, r).load_from, 10u);
  EXPECT_EQ(plan_compute_load_race(t, 12, 10, 1.0, r).load_from, 10u);
}

}  // namespace
}  // namespace kvtier::engine
