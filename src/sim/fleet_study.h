// The fleet study in the simulator (the study's Part II, docs/simulator.md
// "The fleet study"): a width sweep and the operating points of one width,
// each a fleet-protocol run of the study runner on the fleet testbed's
// deployment (bench::FleetTestbed). Every row runs under kvtier's store
// policy and under Mooncake Store's time leases (kv::StoreOptions::
// time_lease_ms), so the study's lease row and kvtier's answer to it sit
// side by side.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/session_scheduler.h"
#include "bench/study_driver.h"
#include "bench/study_runner.h"
#include "sim/sim_profile.h"

namespace kvtier::sim {

// A store policy of the fleet study: kvtier's (time_lease_s 0) or Mooncake's
// with a lease of time_lease_s.
struct StorePolicy {
  std::string name;  // "kvtier", "mooncake-10s", ...
  double time_lease_s = 0;
};

struct FleetStudyOptions {
  // The runs' options (configure_simulation applied; prefill replicas, RAM
  // tier and load policy as the fleet testbed's unless changed).
  bench::StudyOptions study;
  // Steady state, pause and rounds (the fleet testbed's unless changed).
  bench::FleetOptions fleet = {.steady_state = true,
                               .pause_s = bench::FleetTestbed::kPauseS,
                               .rounds = bench::FleetTestbed::kRounds};
  std::vector<uint32_t> widths = {1, 2, 6, 12, 18, 32, 64};
  uint32_t point_width = 12;  // the operating points' width
  double window_s = 900;      // the study's re-measured windows
  // Policies of the sweep and the operating points. Mooncake's default lease
  // is 10 s (5 s before its PR #778); the study's lease row ran 300 s.
  std::vector<StorePolicy> policies = {{"kvtier", 0}, {"mooncake-10s", 10}};
  StorePolicy lease_row = {"mooncake-300s", bench::FleetTestbed::kMooncakeLeaseS};
  unsigned parallel_runs = 1;
};

// The fleet testbed's deployment simulated with profile `p`: one prefill and
// one decode endpoint, the 32 GB RAM tier, the whole matched prefix loaded,
// runs on every core.
FleetStudyOptions fleet_testbed_options(const SimProfile& p);

// The fleet testbed's workload: the synthetic agentic sessions under its
// 65,536-token context limit.
bench::Workload fleet_workload(uint32_t sessions, uint64_t seed);

struct FleetRun {
  std::string part;  // "sweep" or "point"
  uint32_t width = 0;
  bench::StudyCase id = bench::StudyCase::kD;
  std::string policy;
  bench::CaseResult result;

  // The store's bytes served per full window of `window_s` (deployment
  // bytes), from the second window (the first is warm-up) to the last that
  // ended before the run did.
  std::vector<double> window_bytes(double window_s) const;
  // Refused share of the blocks the saves offered.
  double refused_write_share() const;
};

struct FleetStudyReport {
  FleetStudyOptions options;
  std::vector<FleetRun> runs;
  double wall_s = 0;

  // The run of (part, width, case, policy), or null.
  const FleetRun* find(const std::string& part, uint32_t width, bench::StudyCase id,
                       const std::string& policy) const;
  nlohmann::json json() const;
  std::string markdown() const;
};

struct FleetProgress {
  size_t done = 0, total = 0;
};

// Runs the sweep (case D at each width, under each policy) and the operating
// points (cases C, D and E at point_width under each policy, and D under the
// lease row) on `w`, parallel_runs at a time.
Result<FleetStudyReport> run_fleet_study(const bench::Workload& w, const FleetStudyOptions& o,
                                         const std::function<void(const FleetProgress&)>& progress);

}  // namespace kvtier::sim
