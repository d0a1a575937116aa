// The built-in synthetic agentic workload: the main job's embedded default,
// calibrated to the study's published figures (256 sessions, ~31 calls per
// session, the study's prompt-length groups, clipped log-normal start-to-start
// intervals). Deterministic for a given seed.
#pragma once

#include <cstdint>

#include "bench/workload.h"

namespace kvtier::bench {

struct SyntheticWorkloadOptions {
  uint32_t sessions = 256;
  double mean_calls_per_session = 31;
  // Multiplies every prompt and output length (and so the number of blocks):
  // below 1 for small machines and CI.
  double length_scale = 1.0;
  uint32_t block_tokens = 16;
  uint64_t seed = 42;
};

Workload make_synthetic_agentic_workload(const SyntheticWorkloadOptions& options);

}  // namespace kvtier::bench
