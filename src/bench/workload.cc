// Helpers shared by the workload producers: the study's prompt-length groups
// and the final pass that numbers sessions and turns.
#include "bench/workload.h"

#include <cmath>
#include <cstdint>

namespace kvtier::bench {

std::vector<LengthGroup> study_length_groups(double length_scale) {
  // Exclusive upper bounds: one token above 32K, 64K and 96K, so that a
  // prompt of exactly 32,768 tokens counts as "<=32K" as in the study.
  auto bound = [&](uint32_t kilo) {
    const double b = std::ceil(static_cast<double>(kilo) * 1024.0 * length_scale);
    return static_cast<uint32_t>(b) + 1;
  };
  const uint32_t b32 = bound(32), b64 = bound(64), b96 = bound(96);
  return {{"<=32K", 0, b32}, {"32-64K", b32, b64}, {"64-96K", b64, b96}, {">96K", b96, UINT32_MAX}};
}

uint32_t length_group_of(const std::vector<LengthGroup>& groups, uint32_t prompt_tokens) {
  for (uint32_t g = 0; g < groups.size(); ++g) {
    if (prompt_tokens >= groups[g].min_tokens && prompt_tokens < groups[g].max_tokens) return g;
  }
  return groups.empty() ? 0 : static_cast<uint32_t>(groups.size() - 1);
}

void finalize_workload(Workload& w) {
  for (uint32_t s = 0; s < w.sessions.size(); ++s) {
    auto& turns = w.sessions[s].turns;
    for (uint32_t t = 0; t < turns.size(); ++t) {
      turns[t].session = s;
      turns[t].turn = t;
      turns[t].length_group = length_group_of(w.length_groups, turns[t].prompt_tokens);
    }
  }
}

void count_skipped(Workload& w, const std::string& reason, uint64_t n) {
  if (n == 0) return;
  w.records_skipped += n;
  w.skipped_by_reason[reason] += n;
}

}  // namespace kvtier::bench
