#include "engine/load_planner.h"

#include <algorithm>
#include <vector>

namespace kvtier::engine {

LoadRateTracker::Fit* LoadRateTracker::fit_of(kv::Tier tier) {
  if (tier == kv::Tier::kDisk) return &disk_;
  if (tier == kv::Tier::kRam) return &ram_;
  return nullptr;
}

const LoadRateTracker::Fit* LoadRateTracker::fit_of(kv::Tier tier) const {
  return const_cast<LoadRateTracker*>(this)->fit_of(tier);
}

void LoadRateTracker::observe(kv::Tier tier, size_t blocks, double seconds) {
  Fit* fit = fit_of(tier);
  if (blocks == 0 || seconds < 0 || !fit) return;
  // One batch stalled by something else on the machine (a scheduler hiccup
  // is charged at the byte scale too) must not swing the split for many
  // requests: an observation counts as at most kOutlierFactor times what the
  // fit expected. A tier that really slows down still moves the fit, stepwise.
  constexpr double kOutlierFactor = 3;
  if (auto expected = expected_seconds(tier, blocks); expected && *expected > 0) {
    seconds = std::min(seconds, kOutlierFactor * *expected);
  }
  Fit& f = *fit;
  const double k = static_cast<double>(blocks);
  f = {f.n * keep_ + 1, f.k * keep_ + k, f.kk * keep_ + k * k, f.s * keep_ + seconds,
       f.ks * keep_ + k * seconds};
}

std::optional<double> LoadRateTracker::expected_seconds(kv::Tier tier, size_t blocks) const {
  const Fit* f = fit_of(tier);
  if (!f || f->n == 0) return std::nullopt;
  if (blocks == 0) return 0.0;
  const double mean_k = f->k / f->n, mean_s = f->s / f->n;
  const double var_k = f->kk / f->n - mean_k * mean_k;
  double per_block, fixed;
  if (var_k > 1e-9 * mean_k * mean_k) {
    per_block = std::max(0.0, (f->ks / f->n - mean_k * mean_s) / var_k);
    fixed = std::max(0.0, mean_s - per_block * mean_k);
  } else {  // one batch size seen so far: no way to split, so all per block
    per_block = mean_s / mean_k;
    fixed = 0;
  }
  return fixed + per_block * static_cast<double>(blocks);
}

LoadSplit plan_compute_load_race(std::span<const kv::Tier> tiers, size_t from, size_t matched,
                                 double compute_s_per_block, const LoadRateTracker& rates) {
  if (matched <= from) return {matched, 0, 0};
  const size_t n = matched - from;
  // ram_after[k] / disk_after[k]: blocks of each tier in [from + k, matched).
  std::vector<size_t> ram_after(n + 1, 0), disk_after(n + 1, 0);
  for (size_t k = n; k-- > 0;) {
    const size_t i = from + k;
    const bool disk = i < tiers.size() && tiers[i] == kv::Tier::kDisk;
    ram_after[k] = ram_after[k + 1] + (disk ? 0 : 1);
    disk_after[k] = disk_after[k + 1] + (disk ? 1 : 0);
  }
  auto load_cost = [&](size_t k) {
    return rates.expected_seconds(kv::Tier::kRam, ram_after[k]).value_or(0.0) +
           rates.expected_seconds(kv::Tier::kDisk, disk_after[k]).value_or(0.0);
  };
  const size_t max_front = n - std::max<size_t>(1, n / 8);
  // Scan from "load everything" towards the most recompute allowed; keep the
  // first (most loading) split with the smallest finish time.
  LoadSplit best{from, 0, load_cost(0)};
  double best_finish = best.expected_load_s;
  for (size_t k = 1; k <= max_front; ++k) {
    const double compute = static_cast<double>(k) * compute_s_per_block;
    const double load = load_cost(k);
    const double finish = std::max(compute, load);
    // Sums of costs carry rounding: only a real gain moves the split.
    if (finish < best_finish * (1 - 1e-9)) {
      best_finish = finish;
      best = {from + k, compute, load};
    }
  }
  return best;
}

}  // namespace kvtier::engine
