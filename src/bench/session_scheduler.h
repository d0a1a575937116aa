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

struct ShortReuseOptions {
  uint32_t active_sessions = 16;
  double first_group_stagger_s = 30;  // the first group's starts spread over this
  uint64_t seed = 1;
};

struct LongReuseOptions {
  uint32_t min_other_completions = 128;  // before a session's next turn
  uint32_t active_sessions = 0;          // 0: all sessions of the workload
  uint64_t seed = 1;
};

struct FleetOptions {
  uint32_t concurrent_sessions = 64;
  bool steady_state = false;  // false: batch (all start at once)
  double pause_s = 0;         // optional pause between turns
  uint64_t seed = 1;
};

std::unique_ptr<SessionScheduler> make_short_reuse(const Workload& w, const ShortReuseOptions& o);
std::unique_ptr<SessionScheduler> make_long_reuse(const Workload& w, const LongReuseOptions& o);
std::unique_ptr<SessionScheduler> make_fleet(const Workload& w, const FleetOptions& o);

}  // namespace kvtier::bench
