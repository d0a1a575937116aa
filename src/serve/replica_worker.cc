#include "serve/replica_worker.h"

#include <algorithm>

#include "common/clock.h"

namespace kvtier::serve {

uint64_t ReplicaWorker::clock_ns() { return now_ns(); }

double overlap_seconds(
    const std::vector<const std::vector<std::pair<uint64_t, uint64_t>>*>& lists) {
  // Sweep the starts (+1) and ends (-1) in time order; ends first at a tie,
  // so back-to-back jobs of two replicas do not count as overlapping.
  std::vector<std::pair<uint64_t, int>> edges;
  for (const auto* l : lists) {
    for (const auto& [s, e] : *l) {
      edges.emplace_back(s, +1);
      edges.emplace_back(e, -1);
    }
  }
  std::sort(edges.begin(), edges.end());
  int open = 0;
  uint64_t since = 0, total = 0;
  for (const auto& [t, d] : edges) {
    if (open >= 2) total += t - since;
    open += d;
    since = t;
  }
  return static_cast<double>(total) / 1e9;
}

}  // namespace kvtier::serve
