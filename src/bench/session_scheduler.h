// Session schedulers: the study's protocols (short reuse, long reuse, fleet)
// decide when each turn of each session is issued. They are event driven and
// clock agnostic: the runner reports starts and completions in seconds of its
// own clock (virtual or wall) and issues what the scheduler returns, so the
// same timing rules drive a discrete-event run and a real-time one.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "bench/workload.h"

namespace kvtier::bench {

// A request to issue at (or after) `at_s` on the runner's clock.
struct Issue {
  double at_s = 0;
  const TraceRequest* request = nullptr;  // points into the Workload
};

class SessionScheduler {
 public:
  virtual ~SessionScheduler() = default;
  // The first requests of the run; `now_s` is the run's start.
  virtual std::vector<Issue> start(double now_s) = 0;
  // `done` has completed (its last output token) at `now_s`; returns what
  // becomes issuable because of it.
  virtual std::vector<Issue> on_complete(const TraceRequest& done, double now_s) = 0;
  // True when every request that will ever be issued has been returned.
  virtual bool exhausted() const = 0;
};

// Rules of the three protocols, exactly as implemented (docs/workloads.md
// has the same text with worked examples):
//
// Short reuse: sessions 0..k-1 (k = active_sessions) start turn 0 at
// start + i * first_group_stagger_s / k. A later turn is issued at
// max(previous turn's issue time + its planned gap_s, previous turn's
// completion). When a session's last turn completes, the next session in
// workload order starts its turn 0 at that moment.
//
// Long reuse: every session of the population (all, or the first
// active_sessions with replacement as above) issues turn 0 at the start.
// When a turn completes as the c-th completion of the run, the session's next
// turn becomes eligible at the completion numbered c + min_other_completions
// and is issued then (no think time). Relaxation: after every completion, while
// fewer than target_in_flight requests are issued and not completed and some
// session waits, the waiting session with the lowest eligibility number
// (ties: lower session index) is issued at once.
//
// Fleet: a session's next turn is issued pause_s after its previous turn
// completes; with rounds > 0, its turns are cut into that many rounds of
// consecutive turns (as even as the turn count allows), a turn within a
// round follows the previous one at once, and only a round's first turn
// waits pause_s (the fleet study's test gate between rounds). Batch: sessions run in groups of
// concurrent_sessions in workload order; a group's turns 0 all start together when the previous
// group has completely finished. Steady state: the first concurrent_sessions sessions start at
// start + i * stagger_s / N, and a finished session is replaced at once by the next one.
struct ShortReuseOptions {
  uint32_t active_sessions = 16;
  double first_group_stagger_s = 30;  // the first group's starts spread over this
  uint64_t seed = 1;                  // unused: the planned gaps come from the workload
};

struct LongReuseOptions {
  uint32_t min_other_completions = 128;  // before a session's next turn
  uint32_t active_sessions = 0;          // 0: all sessions of the workload
  uint64_t seed = 1;
  // The end-of-run relaxation keeps at least this many requests issued and
  // not completed (the runner's in-flight limit) while sessions wait; see
  // docs/workloads.md for the exact rule.
  uint32_t target_in_flight = 16;
};

struct FleetOptions {
  uint32_t concurrent_sessions = 64;
  bool steady_state = false;  // false: batch (all start at once)
  double pause_s = 0;         // optional pause between turns (or rounds)
  uint32_t rounds = 0;        // 0: pause before every turn; else rounds per session
  uint64_t seed = 1;
  double stagger_s = 30;  // steady state: the first sessions' starts spread over this
};

std::unique_ptr<SessionScheduler> make_short_reuse(const Workload& w, const ShortReuseOptions& o);
std::unique_ptr<SessionScheduler> make_long_reuse(const Workload& w, const LongReuseOptions& o);
std::unique_ptr<SessionScheduler> make_fleet(const Workload& w, const FleetOptions& o);

}  // namespace kvtier::bench
