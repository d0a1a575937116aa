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
  // Cross-session sharing: this share of sessions starts with one common
  // preamble (system prompt and tool definitions) of this many tokens (before
  // length_scale); the others start with a preamble of their own. Figures of
  // the public corpus the study drew from: 93.8% share an 11,520-token prefix.
  double shared_preamble_fraction = 0.938;
  uint32_t shared_preamble_tokens = 11520;
  // The engine's context limit in real tokens (0: none): a session ends at
  // its first call whose prompt and output would pass it. The fleet study's
  // vLLM servers ran at 65,536.
  uint64_t max_context_tokens = 0;
};

// The start-to-start interval distribution: a log-normal with median e^mu
// and shape sigma, clipped (values above `cap_s` become `cap_s`).
struct ClippedLogNormal {
  double mu = 0;
  double sigma = 1;
  double cap_s = 300;
  // Value at cumulative probability u in (0, 1).
  double quantile(double u) const;
  // Fitted to a median and a 90th percentile (the study's p99 and mean then
  // follow: see docs/workloads.md).
  static ClippedLogNormal fit(double p50_s, double p90_s, double cap_s);
};

// The study's published inter-call figures and the distribution fitted to them.
inline constexpr double kStudyGapMeanS = 10.36, kStudyGapP50S = 5.16, kStudyGapP90S = 23.44,
                        kStudyGapP99S = 80.56, kStudyGapCapS = 300;
ClippedLogNormal study_gap_distribution();

// Inverse of the standard normal CDF (u in (0, 1)).
double standard_normal_quantile(double u);

Workload make_synthetic_agentic_workload(const SyntheticWorkloadOptions& options);

}  // namespace kvtier::bench
