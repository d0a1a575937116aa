// The deployment sweep (`kvtier sim sweep`, docs/simulator.md "Sizing"): the
// simulator run over a grid of deployments (sessions, prefill replicas, store
// nodes, RAM and disk sizes, link rates) on one protocol, each point against
// recomputation on the same sessions and replicas, and the sizing table that
// answers "for N sessions of this workload, RAM X and disk Y save Z% of
// prefill".
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/study_runner.h"
#include "sim/sim_profile.h"

namespace kvtier::sim {

struct SweepAxes {
  std::vector<uint32_t> sessions = {64, 256};
  std::vector<uint32_t> prefill_replicas = {2};
  std::vector<uint32_t> store_nodes = {1};
  std::vector<double> ram_gib = {32, 128, 512};
  std::vector<double> disk_tib = {0, 3};
  // Per store node. Empty: the disk tier is local (case D). Otherwise each
  // value runs the remote tier (case E) with its load and save rates capped
  // at that link.
  std::vector<double> link_gbps;
};

struct SweepOptions {
  bench::StudyOptions study;            // configure_simulation applied
  std::string protocol = "long-reuse";  // or "short-reuse"
  uint32_t min_other = 128;             // long reuse: other completions before a next turn
  uint32_t active_sessions = 16;        // short reuse
  SweepAxes axes;
  unsigned parallel_runs = 1;
};

struct SweepPoint {
  uint32_t sessions = 0, prefill_replicas = 0, store_nodes = 0;
  double ram_gib = 0, disk_tib = 0, link_gbps = 0;  // link 0: local disk tier
  bench::StudyCase id = bench::StudyCase::kD;       // C without disk, D local, E remote
  bench::CaseResult result;
  double recompute_rps = 0;  // case A on the same sessions and replicas

  // Prompt tokens not recomputed (HBM and store) over all prompt tokens.
  double prefill_saved() const;
  double store_hit_share() const;
  double throughput_vs_recompute() const;
};

struct SweepReport {
  SweepOptions options;
  std::vector<SweepPoint> points;
  double wall_s = 0;

  nlohmann::json json() const;
  // Every point, then per session count the sizing table (RAM down, disk
  // across, prefill saved and throughput x A in each cell) for the first
  // replica, node and link values.
  std::string markdown() const;
};

struct SweepProgress {
  size_t done = 0, total = 0;
};

// Options of a sweep simulated with profile `p` (every core).
SweepOptions sweep_options(const SimProfile& p);

Result<SweepReport> run_sweep(const SweepOptions& o,
                              const std::function<void(const SweepProgress&)>& progress);

}  // namespace kvtier::sim
