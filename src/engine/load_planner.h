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

// What a batch read from each tier costs, learnt from measured loads as a
// fixed part plus a part per block (a least-squares fit over recent batches,
// older ones forgotten exponentially). The fixed part matters: charged at the
// profile's byte scale, one device round trip costs as much as recomputing
// several blocks, so a per-block average learnt from small batches would make
// every later load look too slow.
class LoadRateTracker {
 public:
  explicit LoadRateTracker(double forget = 0.05) : keep_(1 - forget) {}
  // A batch of `blocks` blocks from `tier` took `seconds` (as charged to the
  // replica's clock). Empty batches teach nothing and are ignored.
  void observe(kv::Tier tier, size_t blocks, double seconds);
  // Expected seconds to read `blocks` blocks from `tier` in one batch, or
  // nothing before the tier's first observation.
  std::optional<double> expected_seconds(kv::Tier tier, size_t blocks) const;

 private:
  struct Fit {  // exponentially decayed sums over (blocks k, seconds s)
    double n = 0, k = 0, kk = 0, s = 0, ks = 0;
  };
  Fit* fit_of(kv::Tier tier);
  const Fit* fit_of(kv::Tier tier) const;
  double keep_;
  Fit ram_, disk_;
};

struct LoadSplit {
  size_t load_from = 0;           // first block to load; [from, load_from) is recomputed
  double expected_compute_s = 0;  // recompute of [from, load_from)
  double expected_load_s = 0;     // load of [load_from, matched)
};

// Picks load_from in [from, matched] that minimises
// max(recompute of [from, load_from), load of [load_from, matched)), where
// the load reads the back's RAM blocks and then its disk blocks, one batch
// each. `tiers[i]` is the tier the match reported for block i. A tier whose
// cost is unknown is taken as free, so the first loads happen and teach the
// tracker. At least the last eighth of the range (one block at least) is
// always loaded, so the tracker keeps measuring a tier it has come to think
// slow. Ties go to loading more (the bytes are then verified, not recomputed).
LoadSplit plan_compute_load_race(std::span<const kv::Tier> tiers, size_t from, size_t matched,
                                 double compute_s_per_block, const LoadRateTracker& rates);

}  // namespace kvtier::engine
