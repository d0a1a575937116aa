// Validation of the simulator against the testbed: each case runs first in
// the testbed (real store operations, measured times) and then in the
// simulator on the same workload, protocol and deployment, fed the store
// rates that testbed run measured. Where the simulator's model is right, its
// throughput ratios, hit shares and TTFT percentiles agree with the
// testbed's (docs/simulator.md, "Validation").
#pragma once

#include <string>
#include <vector>

#include "bench/study_driver.h"
#include "bench/study_runner.h"

namespace kvtier::sim {

// The store rates a testbed run measured, in stored bytes per wall second,
// which are deployment bytes per charged second (both sides scale alike):
// RAM-served loads, disk-served loads and saves (for case E, over its link;
// for F, its direct reads); and the mean time of a lookup (a load's time
// outside its reads), in deployment seconds: its wall time x
// `charge_scale`, the testbed run's factor from wall to virtual seconds.
bench::StudyOptions::ModeledStoreRates measured_store_rates(const bench::CaseResult& r,
                                                            double charge_scale);

struct ValidationRow {
  std::string protocol;
  bench::StudyCase id = bench::StudyCase::kA;
  std::string metric;  // "throughput / A", "store hit share", "TTFT p50 s", ...
  double testbed = 0, simulator = 0;
  // simulator / testbed (1 when both are 0).
  double ratio() const;
};

struct ValidationReport {
  std::vector<bench::CaseResult> testbed, simulator;
  std::vector<ValidationRow> rows;
  // The rows whose ratio is outside [1 - tolerance, 1 + tolerance], among
  // those of the metrics named in `checked` (all when empty).
  std::vector<ValidationRow> outside(double tolerance,
                                     const std::vector<std::string>& checked = {}) const;
  std::string markdown(double tolerance) const;
};

// Runs every case of `o` under every protocol of `o`, in the testbed and
// then in the simulator.
Result<ValidationReport> validate_against_testbed(const bench::Workload& w,
                                                  const bench::StudyRunOptions& o,
                                                  const bench::SchedulerFactory& schedulers);

}  // namespace kvtier::sim
