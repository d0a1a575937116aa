// The sweep's points come from the runner's decisions on modeled time, so
// their order is the same on every machine: a disk tier saves at least what
// RAM alone saves, store nodes add their rates (up to the host's link), and
// a slower link slows the remote tier.
#include "sim/sweep.h"

#include <gtest/gtest.h>

namespace kvtier::sim {
namespace {

const SweepPoint& point(const SweepReport& r, uint32_t nodes, double disk, double link) {
  for (const auto& p : r.points) {
    if (p.store_nodes == nodes && p.disk_tib == disk && p.link_gbps == link) return p;
  }
  ADD_FAILURE() << "no point " << nodes << " nodes, disk " << disk << ", link " << link;
  return r.points.front();
}

TEST(SimSweep, DiskTiersNodesAndLinksMoveTheSavingTheWayTheyShould) {
  auto o = sweep_options(*find_sim_profile("study-h100"));
  o.min_other = 16;
  o.axes.sessions = {24};
  o.axes.store_nodes = {1, 4};
  o.axes.ram_gib = {16};
  o.axes.disk_tib = {0, 1};
  o.axes.link_gbps = {25, 100};
  auto r = run_sweep(o, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  // Per node count: C, then E at each link.
  ASSERT_EQ(r->points.size(), 2u * 3u);
  const uint64_t requests = r->points.front().result.completed;
  EXPECT_GT(requests, 0u);
  for (const auto& p : r->points) {
    EXPECT_EQ(p.result.completed, requests);  // every point replays the whole workload
    EXPECT_GT(p.recompute_rps, 0);
  }
  const auto& ram_only = point(*r, 1, 0, 0);
  const auto& slow = point(*r, 1, 1, 25);
  const auto& fast = point(*r, 1, 1, 100);
  const auto& four_slow = point(*r, 4, 1, 25);
  EXPECT_EQ(ram_only.id, bench::StudyCase::kC);
  EXPECT_EQ(slow.id, bench::StudyCase::kE);
  EXPECT_GT(slow.prefill_saved(), ram_only.prefill_saved());
  EXPECT_GT(fast.throughput_vs_recompute(), slow.throughput_vs_recompute());
  // Four nodes at 25 Gb/s move 100 Gb/s together.
  EXPECT_GT(four_slow.throughput_vs_recompute(), slow.throughput_vs_recompute());
  // The placement spreads the blocks: four nodes of a quarter of the tiers
  // hold about what one node holds, so HBM and store together save as much
  // (which of them serves a block moves with the routing, which faster loads
  // change).
  EXPECT_NEAR(four_slow.prefill_saved(), slow.prefill_saved(), 0.02);
  const auto md = r->markdown();
  EXPECT_NE(md.find("## Sizing: 24 sessions"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::sim
