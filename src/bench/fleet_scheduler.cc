// The fleet study's protocols: batch (groups of sessions start together) and
// steady state (staggered starts, a finished session replaced at once), with
// an optional pause between turns. Rule text in session_scheduler.h. Owned
// by the runner's thread (not thread safe).
#include <algorithm>

#include "bench/scheduler_base.h"

namespace kvtier::bench {
namespace {

class FleetScheduler final : public SchedulerBase {
 public:
  FleetScheduler(const Workload& w, const FleetOptions& o) : SchedulerBase(w), o_(o) {}

  std::vector<Issue> start(double now_s) override {
    const uint32_t width = std::max<uint32_t>(o_.concurrent_sessions, 1);
    auto out = start_sessions(width, now_s, [&](size_t i) {
      return o_.steady_state ? static_cast<double>(i) * o_.stagger_s / width : 0.0;
    });
    running_ += static_cast<uint32_t>(out.size());
    return out;
  }

  std::vector<Issue> on_complete(const TraceRequest& done, double now_s) override {
    std::vector<Issue> out;
    const auto& turns = w_.sessions[done.session].turns;
    if (done.turn + 1 < turns.size()) {
      const bool new_round = o_.rounds == 0 || round_of(done.turn + 1, turns.size()) !=
                                                   round_of(done.turn, turns.size());
      issue(out, turns[done.turn + 1], now_s + (new_round ? o_.pause_s : 0.0));
      return out;
    }
    --running_;
    if (o_.steady_state) {
      if (const Session* s = next_session()) {
        issue(out, s->turns[0], now_s);
        ++running_;
      }
    } else if (running_ == 0) {
      // The batch is over: the next group starts together.
      out = start(now_s);
    }
    return out;
  }

 private:
  // The round of turn `t` of a session of `n` turns, rounds as even as can be.
  uint64_t round_of(uint64_t t, uint64_t n) const { return t * o_.rounds / n; }

  const FleetOptions o_;
  uint32_t running_ = 0;  // sessions started and not finished
};

}  // namespace

std::unique_ptr<SessionScheduler> make_fleet(const Workload& w, const FleetOptions& o) {
  return std::make_unique<FleetScheduler>(w, o);
}

}  // namespace kvtier::bench
