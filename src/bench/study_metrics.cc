#include "bench/study_metrics.h"

#include <algorithm>
#include <cmath>

namespace kvtier::bench {

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

double union_length(std::vector<std::pair<double, double>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  double total = 0, cur_start = 0, cur_end = 0;
  bool open = false;
  for (const auto& [s, e] : intervals) {
    if (e <= s) continue;
    if (!open || s > cur_end) {
      if (open) total += cur_end - cur_start;
      cur_start = s;
      cur_end = e;
      open = true;
    } else {
      cur_end = std::max(cur_end, e);
    }
  }
  if (open) total += cur_end - cur_start;
  return total;
}

double throughput_rps(uint64_t completed, double first_start, double last_end) {
  const double span = last_end - first_start;
  return span > 0 ? static_cast<double>(completed) / span : 0.0;
}

double gross_busy_time_saved(double kv_served_tokens, double prefill_tokens_per_s,
                             double busy_union_s) {
  if (prefill_tokens_per_s <= 0 || busy_union_s <= 0) return 0;
  return kv_served_tokens / prefill_tokens_per_s / busy_union_s;
}

double safe_ratio(double a, double b) { return b != 0 ? a / b : 0.0; }

}  // namespace kvtier::bench
