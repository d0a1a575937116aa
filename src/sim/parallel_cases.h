// Runs independent study-runner cases on several threads (the simulator's
// runs measure nothing, so they may share the cores): the fleet study's and
// the sweep's runs.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "bench/study_runner.h"

namespace kvtier::sim {

// run(i) for every i in [0, count), `threads` at a time; the results in
// order. An exception in run(i) becomes its error. progress(done, count) is
// called after each run, one call at a time.
std::vector<Result<bench::CaseResult>> run_cases_in_parallel(
    size_t count, unsigned threads, const std::function<Result<bench::CaseResult>(size_t)>& run,
    const std::function<void(size_t done, size_t count)>& progress);

}  // namespace kvtier::sim
