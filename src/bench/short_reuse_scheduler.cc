// The short-reuse protocol (the study's experiment 1): a few active
// sessions, each turn after its planned start-to-start gap. Rule text in
// session_scheduler.h. Owned by the runner's thread (not thread safe).
#include <algorithm>

#include "bench/scheduler_base.h"

namespace kvtier::bench {
namespace {

class ShortReuseScheduler final : public SchedulerBase {
 public:
  ShortReuseScheduler(const Workload& w, const ShortReuseOptions& o)
      : SchedulerBase(w), o_(o), last_issue_s_(w.sessions.size(), 0.0) {}

  std::vector<Issue> start(double now_s) override {
    const uint32_t group = std::max<uint32_t>(o_.active_sessions, 1);
    auto out = start_sessions(group, now_s, [&](size_t i) {
      return static_cast<double>(i) * o_.first_group_stagger_s / group;
    });
    for (const Issue& is : out) last_issue_s_[is.request->session] = is.at_s;
    return out;
  }

  std::vector<Issue> on_complete(const TraceRequest& done, double now_s) override {
    std::vector<Issue> out;
    const auto& turns = w_.sessions[done.session].turns;
    if (done.turn + 1 < turns.size()) {
      const TraceRequest& next = turns[done.turn + 1];
      issue(out, next, std::max(last_issue_s_[done.session] + next.gap_s, now_s));
    } else if (const Session* s = next_session()) {
      issue(out, s->turns[0], now_s);
    }
    return out;
  }

 private:
  // Also remembers when each session's latest turn was issued.
  void issue(std::vector<Issue>& out, const TraceRequest& r, double at_s) {
    last_issue_s_[r.session] = at_s;
    SchedulerBase::issue(out, r, at_s);
  }

  const ShortReuseOptions o_;
  std::vector<double> last_issue_s_;  // per session: issue time of its latest turn
};

}  // namespace

std::unique_ptr<SessionScheduler> make_short_reuse(const Workload& w, const ShortReuseOptions& o) {
  return std::make_unique<ShortReuseScheduler>(w, o);
}

}  // namespace kvtier::bench
