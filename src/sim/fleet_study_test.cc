// The fleet study on a small fleet: the counts that carry its findings
// (refused writes under a long time lease, the disk tier's share, saving
// growing with width) come from the real store's decisions on modeled
// time, so they are the same on every run and every machine.
#include "sim/fleet_study.h"

#include <gtest/gtest.h>

namespace kvtier::sim {
namespace {

using bench::StudyCase;

TEST(FleetStudy, LeasesRefuseWritesTheDiskTierAddsAndWidthRaisesTheSaving) {
  auto o = fleet_testbed_options(*find_sim_profile("study-h100"));
  o.widths = {2, 12};
  o.point_width = 12;
  o.window_s = 600;
  o.study.ram_bytes = 8'000'000'000ull;  // pressure at a few dozen sessions
  const auto w = fleet_workload(32, 1);
  auto report = run_fleet_study(w, o, {});
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  ASSERT_EQ(report->runs.size(), 2 * 2 + 3 * 2 + 2u);

  const auto* d = report->find("point", 12, StudyCase::kD, "kvtier");
  const auto* c = report->find("point", 12, StudyCase::kC, "kvtier");
  const auto* leased = report->find("point", 12, StudyCase::kD, "mooncake-300s");
  ASSERT_TRUE(d && c && leased);
  for (const auto* r : {d, c, leased}) {
    EXPECT_EQ(r->result.completed, w.request_count());
    EXPECT_GT(r->result.offered_write_blocks, 0u);
  }
  // kvtier demotes instead of refusing; Mooncake's 300 s lease refuses.
  EXPECT_EQ(d->result.write_refusals, 0u);
  EXPECT_GT(leased->result.write_refusals, 0u);
  EXPECT_LT(leased->result.store_hit_blocks, d->result.store_hit_blocks);
  // The disk tier serves what RAM evicted.
  EXPECT_GT(d->result.gross_busy_saved_ratio, c->result.gross_busy_saved_ratio);
  EXPECT_GT(d->result.store_blocks_from_disk, 0u);
  EXPECT_FALSE(d->window_bytes(o.window_s).empty());
  // A wider fleet turns HBM over faster: the store saves more.
  const auto* narrow = report->find("sweep", 2, StudyCase::kD, "kvtier");
  const auto* wide = report->find("sweep", 12, StudyCase::kD, "kvtier");
  ASSERT_TRUE(narrow && wide);
  EXPECT_GT(wide->result.gross_busy_saved_ratio, narrow->result.gross_busy_saved_ratio);
  const auto j = report->json();
  EXPECT_GT(j["disk_tier"]["kvtier"]["disk_tier_points"].get<double>(), 0.0);
}

}  // namespace
}  // namespace kvtier::sim
