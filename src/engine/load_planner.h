// LoadPlanner: which part of a cached prefix to load from the store and which
// to recompute, when the replica can do both at once.
//
// The study's connector loads the whole matched prefix, then computes the
// rest: a load from a tier slower than the GPU's recompute rate then costs
// more than it saves. Prefill is causal from the front, while loading KV
// blocks has no order, so a replica can compute the prefix's front while it
// loads the back, and the two meet where their expected times are equal
// (the "compute or load" race). With loading at rate L and recompute at rate
// P (blocks per second), a prefix of n blocks is ready after n / (L + P)
// instead of n / L: a slow tier still helps, and a fast one is used in full.
//
// The planner works on expected per-block costs, one per tier, which a
// LoadRateTracker learns from the replica's own measured loads.
//
// Thread-safety: none; one tracker per replica (or per run).
#pragma once

#include <cstddef>
#include <optional>
#include <span>

#include "kv/store.h"

namespace kvtier::engine {

// Exponentially weighted seconds per block of each tier, from measured loads.
class LoadRateTracker {
 public:
  explicit LoadRateTracker(double weight_of_new = 0.2) : alpha_(weight_of_new) {}
  // A batch of `blocks` blocks from `tier` took `seconds` (as charged to the
  // replica's clock). Empty batches teach nothing and are ignored.
  void observe(kv::Tier tier, size_t blocks, double seconds);
  // Expected seconds per block, or nothing before the first observation.
  std::optional<double> seconds_per_block(kv::Tier tier) const;

 private:
  double alpha_;
  std::optional<double> ram_, disk_;
};

struct LoadSplit {
  size_t load_from = 0;           // first block to load; [from, load_from) is recomputed
  double expected_compute_s = 0;  // recompute of [from, load_from)
  double expected_load_s = 0;     // load of [load_from, matched)
};

// Picks load_from in [from, matched] that minimises
// max(recompute of [from, load_from), load of [load_from, matched)).
// `tiers[i]` is the tier the match reported for block i. A tier whose cost is
// unknown is taken as free, so the first loads happen and teach the tracker.
// Ties go to loading more (the bytes are then verified, not recomputed).
LoadSplit plan_compute_load_race(std::span<const kv::Tier> tiers, size_t from, size_t matched,
                                 double compute_s_per_block, const LoadRateTracker& rates);

}  // namespace kvtier::engine
