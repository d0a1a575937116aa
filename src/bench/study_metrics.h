// Metric formulas of the study report, kept apart from the runner so that
// tests can pin them against hand-computed cases.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace kvtier::bench {

// Percentile by linear interpolation between closest ranks (p in [0, 100]):
// rank = p/100 * (n-1). 0 for an empty set.
double percentile(std::vector<double> values, double p);

// Total length of the union of [start, end) intervals.
double union_length(std::vector<std::pair<double, double>> intervals);

// Requests per second over [first_start, last_end]; 0 when the span is empty.
double throughput_rps(uint64_t completed, double first_start, double last_end);

// The fleet study's gross endpoint busy-time saved: prefill seconds avoided
// (tokens the external store served / prefill rate) over the union of the
// intervals in which a replica had a request outstanding.
double gross_busy_time_saved(double kv_served_tokens, double prefill_tokens_per_s,
                             double busy_union_s);

// a / b, 0 when b is 0.
double safe_ratio(double a, double b);

}  // namespace kvtier::bench
