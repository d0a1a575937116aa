// What the three protocols' schedulers share: the sessions not yet started,
// taken in workload order, and the count of requests issued against the
// workload's total. Owned by the runner's thread (not thread safe).
#pragma once

#include <vector>

#include "bench/session_scheduler.h"

namespace kvtier::bench {

class SchedulerBase : public SessionScheduler {
 public:
  bool exhausted() const override { return issued_ == total_; }

 protected:
  explicit SchedulerBase(const Workload& w) : w_(w), total_(w.request_count()) {}

  // The next waiting session with at least one turn, or nullptr.
  const Session* next_session() {
    while (next_ < w_.sessions.size() && w_.sessions[next_].turns.empty()) ++next_;
    return next_ < w_.sessions.size() ? &w_.sessions[next_++] : nullptr;
  }
  // Issues turn 0 of up to `count` next sessions, the i-th due at
  // now_s + offset_s(i).
  template <typename OffsetFn>
  std::vector<Issue> start_sessions(size_t count, double now_s, OffsetFn offset_s) {
    std::vector<Issue> out;
    for (size_t i = 0; i < count; ++i) {
      const Session* s = next_session();
      if (!s) break;
      issue(out, s->turns[0], now_s + offset_s(i));
    }
    return out;
  }
  // Adds `r` to `out`, due at `at_s`, and counts it as issued.
  void issue(std::vector<Issue>& out, const TraceRequest& r, double at_s) {
    out.push_back({at_s, &r});
    ++issued_;
  }
  uint64_t issued() const { return issued_; }

  const Workload& w_;

 private:
  size_t next_ = 0;  // the first session not yet started
  uint64_t issued_ = 0;
  const uint64_t total_;
};

}  // namespace kvtier::bench
