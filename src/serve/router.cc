#include "serve/router.h"

namespace kvtier::serve {

SoftStickyRouter::SoftStickyRouter(size_t prefills, size_t decodes, RouterOptions options)
    : prefills_(prefills),
      decodes_(decodes),
      opts_(options),
      sessions_on_(prefills, 0),
      decode_picks_(decodes, 0) {
  stats_.pair_counts.assign(prefills * decodes, 0);
}

size_t SoftStickyRouter::least_loaded(std::span<const double> scores) const {
  // Ties (an idle service) go to the replica that took fewer sessions, so
  // that a burst of first turns spreads instead of piling onto replica 0.
  size_t best = 0;
  for (size_t i = 1; i < scores.size(); ++i) {
    if (scores[i] < scores[best] ||
        (scores[i] == scores[best] && sessions_on_[i] < sessions_on_[best])) {
      best = i;
    }
  }
  return best;
}

size_t SoftStickyRouter::route_prefill(uint32_t session, std::span<const double> scores) {
  const size_t best = least_loaded(scores);
  auto it = preferred_.find(session);
  if (it == preferred_.end()) {
    ++stats_.first_turns;
    preferred_[session] = best;
    ++sessions_on_[best];
    return best;
  }
  ++stats_.later_turns;
  const size_t pref = it->second;
  if (scores[pref] - scores[best] <= opts_.spill_margin) {
    ++stats_.stayed;
    return pref;
  }
  ++stats_.spilled;
  return best;
}

size_t SoftStickyRouter::route_decode(std::span<const double> budgets) {
  size_t best = 0;
  for (size_t i = 1; i < budgets.size(); ++i) {
    if (budgets[i] < budgets[best] ||
        (budgets[i] == budgets[best] && decode_picks_[i] < decode_picks_[best])) {
      best = i;
    }
  }
  ++decode_picks_[best];
  return best;
}

void SoftStickyRouter::record_pair(size_t prefill, size_t decode) {
  if (prefill < prefills_ && decode < decodes_) ++stats_.pair_counts[prefill * decodes_ + decode];
}

}  // namespace kvtier::serve
