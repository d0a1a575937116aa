#include "engine/load_planner.h"

#include <algorithm>
#include <vector>

namespace kvtier::engine {

void LoadRateTracker::observe(kv::Tier tier, size_t blocks, double seconds) {
  if (blocks == 0 || seconds < 0) return;
  std::optional<double>* slot = tier == kv::Tier::kDisk  ? &disk_
                                : tier == kv::Tier::kRam ? &ram_
                                                         : nullptr;
  if (!slot) return;
  const double per_block = seconds / static_cast<double>(blocks);
  *slot = slot->has_value() ? (1 - alpha_) * **slot + alpha_ * per_block : per_block;
}

std::optional<double> LoadRateTracker::seconds_per_block(kv::Tier tier) const {
  if (tier == kv::Tier::kDisk) return disk_;
  if (tier == kv::Tier::kRam) return ram_;
  return std::nullopt;
}

LoadSplit plan_compute_load_race(std::span<const kv::Tier> tiers, size_t from, size_t matched,
                                 double compute_s_per_block, const LoadRateTracker& rates) {
  LoadSplit best{matched, 0, 0};
  if (matched <= from) return best;
  // load_after[k] = expected load time of blocks [from + k, matched).
  const size_t n = matched - from;
  std::vector<double> load_after(n + 1, 0.0);
  for (size_t k = n; k-- > 0;) {
    const size_t i = from + k;
    const kv::Tier t = i < tiers.size() ? tiers[i] : kv::Tier::kRam;
    load_after[k] = load_after[k + 1] + rates.seconds_per_block(t).value_or(0.0);
  }
  // Scan from "load everything" towards "compute everything"; keep the first
  // (most loading) split with the smallest finish time.
  double best_finish = load_after[0];
  best = {from, 0, load_after[0]};
  for (size_t k = 1; k <= n; ++k) {
    const double compute = static_cast<double>(k) * compute_s_per_block;
    const double finish = std::max(compute, load_after[k]);
    // Sums of per-block costs carry rounding: only a real gain moves the split.
    if (finish < best_finish * (1 - 1e-9)) {
      best_finish = finish;
      best = {from + k, compute, load_after[k]};
    }
  }
  return best;
}

}  // namespace kvtier::engine
