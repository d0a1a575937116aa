// The long-reuse protocol (the study's experiment 2): a session's next turn
// waits until many other requests have completed. Rule text in
// session_scheduler.h. Owned by the runner's thread (not thread safe).
#include <algorithm>
#include <set>
#include <utility>

#include "bench/scheduler_base.h"

namespace kvtier::bench {
namespace {

class LongReuseScheduler final : public SchedulerBase {
 public:
  LongReuseScheduler(const Workload& w, const LongReuseOptions& o) : SchedulerBase(w), o_(o) {}

  std::vector<Issue> start(double now_s) override {
    const size_t population = o_.active_sessions == 0 ? w_.sessions.size() : o_.active_sessions;
    return start_sessions(population, now_s, [](size_t) { return 0.0; });
  }

  std::vector<Issue> on_complete(const TraceRequest& done, double now_s) override {
    std::vector<Issue> out;
    ++completed_;
    const auto& turns = w_.sessions[done.session].turns;
    if (done.turn + 1 < turns.size()) {
      waiting_.insert({completed_ + o_.min_other_completions, &turns[done.turn + 1]});
    } else if (const Session* s = next_session()) {
      issue(out, s->turns[0], now_s);
    }
    // Turns whose wait is over, in order of eligibility.
    while (!waiting_.empty() && waiting_.begin()->first <= completed_) release(out, now_s);
    // End-of-run relaxation: never let the service run below its in-flight
    // target (or idle) while sessions only wait for others' completions.
    const uint64_t target = std::max<uint32_t>(o_.target_in_flight, 1);
    while (!waiting_.empty() && issued() - completed_ < target) {
      release(out, now_s);
    }
    return out;
  }

 private:
  struct ByEligibility {
    bool operator()(const std::pair<uint64_t, const TraceRequest*>& a,
                    const std::pair<uint64_t, const TraceRequest*>& b) const {
      if (a.first != b.first) return a.first < b.first;
      return a.second->session < b.second->session;
    }
  };

  void release(std::vector<Issue>& out, double now_s) {
    issue(out, *waiting_.begin()->second, now_s);
    waiting_.erase(waiting_.begin());
  }

  const LongReuseOptions o_;
  // Waiting next turns keyed by the completion count that makes them eligible.
  std::set<std::pair<uint64_t, const TraceRequest*>, ByEligibility> waiting_;
  uint64_t completed_ = 0;
};

}  // namespace

std::unique_ptr<SessionScheduler> make_long_reuse(const Workload& w, const LongReuseOptions& o) {
  return std::make_unique<LongReuseScheduler>(w, o);
}

}  // namespace kvtier::bench
