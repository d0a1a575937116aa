// The gateway's routing policy (the study's soft-sticky routing). A session's
// first turn goes to the least-loaded prefill replica, which the session then
// remembers; a later turn stays on that replica while its queued-token score
// is within `spill_margin` of the best score, else it spills to the best one
// (the preference is kept for the next turn). Decode is chosen per request:
// the replica with the smallest queued output-token budget.
//
// Thread-safety: none; owned by the gateway's thread.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace kvtier::serve {

struct RouterOptions {
  // Tokens (in the units of the scores) by which the preferred replica may
  // trail the best one before a turn spills.
  double spill_margin = 65536;
};

struct RouterStats {
  uint64_t first_turns = 0;
  uint64_t later_turns = 0;
  uint64_t stayed = 0;   // later turns routed to the preferred prefill
  uint64_t spilled = 0;  // later turns routed elsewhere
  // requests per (prefill, decode) pair, row-major by prefill
  std::vector<uint64_t> pair_counts;
  double stayed_share() const {
    return later_turns ? static_cast<double>(stayed) / static_cast<double>(later_turns) : 0.0;
  }
};

class SoftStickyRouter {
 public:
  SoftStickyRouter(size_t prefills, size_t decodes, RouterOptions options);

  // `prefill_scores[i]`: queued tokens of prefill i (waiting and in service).
  size_t route_prefill(uint32_t session, std::span<const double> prefill_scores);
  // `decode_budgets[i]`: output tokens still to produce on decode i.
  size_t route_decode(std::span<const double> decode_budgets);
  // Counts the pair a request used (for the share per combination).
  void record_pair(size_t prefill, size_t decode);

  const RouterStats& stats() const { return stats_; }

 private:
  size_t least_loaded(std::span<const double> scores) const;

  size_t prefills_, decodes_;
  RouterOptions opts_;
  std::unordered_map<uint32_t, size_t> preferred_;
  std::vector<uint64_t> sessions_on_;   // first turns placed per prefill (tie-break)
  std::vector<uint64_t> decode_picks_;  // requests placed per decode (tie-break)
  RouterStats stats_;
};

}  // namespace kvtier::serve
