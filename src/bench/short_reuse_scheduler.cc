// The short-reuse protocol (the study's experiment 1): a few active
// sessions, each turn after its planned start-to-start gap. Rule text in
// session_scheduler.h. Owned by the runner's thread (not thread safe).
#include <algorithm>

#include "bench/session_scheduler.h"

namespace kvtier::bench {
namespace {

class ShortReuseScheduler final : public SessionScheduler {
 public:
  ShortReuseScheduler(const Workload& w, const ShortReuseOptions& o)
      : w_(w), o_(o), last_issue_s_(w.sessions.size(), 0.0) {
    total_ = w.request_count();
  }

  std::vector<Issue> start(double now_s) override {
    std::vector<Issue> out;
    const uint32_t group = std::max<uint32_t>(o_.active_sessions, 1);
    for (uint32_t i = 0; i < group; ++i) {
      const Session* s = next_session();
      if (!s) break;
      issue(out, s->turns[0], now_s + i * o_.first_group_stagger_s / group);
    }
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

  bool exhausted() const override { return issued_ == total_; }

 private:
  // The next waiting session with at least one turn, or nullptr.
  const Session* next_session() {
    while (next_ < w_.sessions.size() && w_.sessions[next_].turns.empty()) ++next_;
    return next_ < w_.sessions.size() ? &w_.sessions[next_++] : nullptr;
  }
  void issue(std::vector<Issue>& out, const TraceRequest& r, double at_s) {
    last_issue_s_[r.session] = at_s;
    out.push_back({at_s, &r});
    ++issued_;
  }

  const Workload& w_;
  const ShortReuseOptions o_;
  std::vector<double> last_issue_s_;  // per session: issue time of its latest turn
  size_t next_ = 0;
  uint64_t issued_ = 0, total_ = 0;
};

}  // namespace

std::unique_ptr<SessionScheduler> make_short_reuse(const Workload& w, const ShortReuseOptions& o) {
  return std::make_unique<ShortReuseScheduler>(w, o);
}

}  // namespace kvtier::bench
