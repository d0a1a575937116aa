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

TEST(LoadRateTracker, OneBatchSizeIsAllPerBlock) {
  LoadRateTracker r;
  EXPECT_FALSE(r.expected_seconds(Tier::kDisk, 4).has_value());
  r.observe(Tier::kDisk, 4, 4.0);
  EXPECT_DOUBLE_EQ(*r.expected_seconds(Tier::kDisk, 4), 4.0);
  EXPECT_DOUBLE_EQ(*r.expected_seconds(Tier::kDisk, 2), 2.0);
  EXPECT_DOUBLE_EQ(*r.expected_seconds(Tier::kDisk, 0), 0.0);
  r.observe(Tier::kDisk, 0, 100.0);  // an empty batch teaches nothing
  EXPECT_DOUBLE_EQ(*r.expected_seconds(Tier::kDisk, 4), 4.0);
  EXPECT_FALSE(r.expected_seconds(Tier::kRam, 1).has_value());
}

TEST(LoadRateTracker, SeparatesTheFixedCostFromThePerBlockCost) {
  LoadRateTracker r(/*forget=*/0.0);
  r.observe(Tier::kDisk, 4, 4.0);
  r.observe(Tier::kDisk, 1, 2.0);  // fit: 4/3 s fixed + 2/3 s per block
  EXPECT_NEAR(*r.expected_seconds(Tier::kDisk, 7), 6.0, 1e-9);
  EXPECT_NEAR(*r.expected_seconds(Tier::kDisk, 1), 2.0, 1e-9);
}

TEST(LoadRateTracker, OneStalledBatchMovesTheFitOnlySoFar) {
  LoadRateTracker r(/*forget=*/0.0);
  r.observe(Tier::kRam, 8, 1.0);
  r.observe(Tier::kRam, 8, 1000.0);  // counted as 3 s, not 1000 s
  EXPECT_NEAR(*r.expected_seconds(Tier::kRam, 8), 2.0, 1e-9);
}

TEST(LoadRateTracker, ForgetsOldBatches) {
  LoadRateTracker r(/*forget=*/0.5);
  r.observe(Tier::kRam, 10, 10.0);
  for (int i = 0; i < 40; ++i) r.observe(Tier::kRam, 10, 1.0);
  EXPECT_NEAR(*r.expected_seconds(Tier::kRam, 10), 1.0, 1e-6);
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

TEST(ComputeLoadRace, FixedCostDoesNotMakeLargeBatchesLookSlow) {
  // A 1-block batch took 1 s and a 10-block batch 1.9 s: 0.9 s fixed and
  // 0.1 s per block. Averaged per block (1 s) the tier would look twice as
  // slow as recompute; fitted, loading 16 of 20 blocks takes 2.5 s while
  // computing the first 4 takes 2 s.
  LoadRateTracker r(/*forget=*/0.0);
  r.observe(Tier::kDisk, 1, 1.0);
  r.observe(Tier::kDisk, 10, 1.9);
  const auto t = tiers(0, 20);
  const LoadSplit s = plan_compute_load_race(t, 0, 20, 0.5, r);
  EXPECT_EQ(s.load_from, 4u);
  EXPECT_NEAR(s.expected_load_s, 2.5, 1e-9);
}

TEST(ComputeLoadRace, AlwaysLoadsAProbeOfTheBack) {
  // However slow the tier looks, the last eighth is loaded, so its cost keeps
  // being measured and a tier that speeds up is used again.
  LoadRateTracker r;
  r.observe(Tier::kDisk, 1, 100.0);
  const auto t = tiers(0, 16);
  EXPECT_EQ(plan_compute_load_race(t, 0, 16, 1.0, r).load_from, 14u);
  EXPECT_EQ(plan_compute_load_race(t, 0, 3, 1.0, r).load_from, 2u);
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
