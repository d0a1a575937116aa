// The fleet study's protocols: batch (groups of sessions start together) and
// steady state (staggered starts, a finished session replaced at once), with
// an optional pause between turns. Rule text in session_scheduler.h. Owned
// by the runner's thread (not thread safe).
#include <algorithm>

#include "bench/session_scheduler.h"

namespace kvtier::bench {
namespace {

class FleetScheduler final : public SessionScheduler {
 public:
  FleetScheduler(const Workload& w, const FleetOptions& o) : w_(w), o_(o) {
    total_ = w.request_count();
  }

  std::vector<Issue> start(double now_s) override {
    std::vector<Issue> out;
    const uint32_t width = std::max<uint32_t>(o_.concurrent_sessions, 1);
    for (uint32_t i = 0; i < width; ++i) {
      const Session* s = next_session();
      if (!s) break;
      const double offset = o_.steady_state ? i * o_.stagger_s / width : 0.0;
      issue(out, s->turns[0], now_s + offset);
      ++running_;
    }
    return out;
  }

  std::vector<Issue> on_complete(const TraceRequest& done, double now_s) override {
    std::vector<Issue> out;
    const auto& turns = w_.sessions[done.session].turns;
    if (done.turn + 1 < turns.size()) {
      issue(out, turns[done.turn + 1], now_s + o_.pause_s);
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

  bool exhausted() const override { return issued_ == total_; }

 private:
  const Session* next_session() {
    while (next_ < w_.sessions.size() && w_.sessions[next_].turns.empty()) ++next_;
    return next_ < w_.sessions.size() ? &w_.sessions[next_++] : nullptr;
  }
  void issue(std::vector<Issue>& out, const TraceRequest& r, double at_s) {
    out.push_back({at_s, &r});
    ++issued_;
  }

  const Workload& w_;
  const FleetOptions o_;
  size_t next_ = 0;
  uint32_t running_ = 0;  // sessions started and not finished
  uint64_t issued_ = 0, total_ = 0;
};

}  // namespace

std::unique_ptr<SessionScheduler> make_fleet(const Workload& w, const FleetOptions& o) {
  return std::make_unique<FleetScheduler>(w, o);
}

}  // namespace kvtier::bench
