// Test helpers of the study runner: a small hand-made agentic workload and a
// minimal scheduler (tests only; the study's real protocols are in
// session_scheduler.h).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "bench/session_scheduler.h"
#include "bench/workload.h"

namespace kvtier::bench::testing {

// `sessions` sessions of `turns` turns. Every prompt starts with
// `shared_blocks` blocks common to all sessions (a system prompt); turn t of a
// session extends turn t-1 by `growth_blocks` blocks, starting from
// `first_blocks`. Two length groups split at `split_tokens`.
inline Workload tiny_workload(uint32_t sessions, uint32_t turns, uint32_t first_blocks,
                              uint32_t growth_blocks, uint32_t shared_blocks = 2,
                              uint32_t block_tokens = 16, uint32_t output_tokens = 8,
                              double gap_s = 5) {
  Workload w;
  w.name = "tiny";
  w.block_tokens = block_tokens;
  const uint32_t split = (first_blocks + growth_blocks * turns / 2) * block_tokens;
  w.length_groups = {{"short", 0, split}, {"long", split, UINT32_MAX}};
  for (uint32_t s = 0; s < sessions; ++s) {
    Session ses;
    for (uint32_t t = 0; t < turns; ++t) {
      TraceRequest r;
      r.session = s;
      r.turn = t;
      const uint32_t blocks = first_blocks + growth_blocks * t;
      for (uint32_t b = 0; b < blocks; ++b) {
        r.block_ids.push_back(b < shared_blocks ? 1000 + b
                                                : (uint64_t{s + 1} << 32) | (uint64_t{b} + 7));
      }
      r.prompt_tokens = blocks * block_tokens + block_tokens / 2;
      r.output_tokens = output_tokens;
      r.gap_s = t == 0 ? 0 : gap_s;
      r.length_group = r.prompt_tokens < split ? 0 : 1;
      ses.turns.push_back(std::move(r));
    }
    w.sessions.push_back(std::move(ses));
  }
  w.records_read = w.request_count();
  return w;
}

// `active` sessions at a time; a session's next turn is issued after its
// previous one completed and at least `min_other` other requests completed
// since (0: after gap_s); a finished session is replaced by a waiting one.
class MiniScheduler final : public SessionScheduler {
 public:
  MiniScheduler(const Workload& w, uint32_t active, uint32_t min_other)
      : w_(w), active_(active), min_other_(min_other) {}
  std::vector<Issue> start(double now) override {
    std::vector<Issue> out;
    while (next_session_ < w_.sessions.size() && next_session_ < active_) {
      out.push_back({now + next_session_ * 0.5, &w_.sessions[next_session_++].turns[0]});
    }
    issued_ = out.size();
    return out;
  }
  std::vector<Issue> on_complete(const TraceRequest& done, double now) override {
    ++completions_;
    std::vector<Issue> out;
    const auto& ses = w_.sessions[done.session];
    if (done.turn + 1 < ses.turns.size()) {
      const TraceRequest* next = &ses.turns[done.turn + 1];
      if (min_other_ == 0) {
        out.push_back({now + next->gap_s, next});
      } else {
        waiting_.push_back({completions_ + min_other_, next});
      }
    } else if (next_session_ < w_.sessions.size()) {
      out.push_back({now, &w_.sessions[next_session_++].turns[0]});
    }
    // Waiting turns become eligible after enough other completions, or when
    // nothing else is in flight (no artificial idleness).
    const bool idle = issued_ + out.size() == completions_;
    while (!waiting_.empty() && (waiting_.front().first <= completions_ || idle)) {
      out.push_back({now, waiting_.front().second});
      waiting_.pop_front();
      if (!idle) continue;
      break;
    }
    issued_ += out.size();
    return out;
  }
  bool exhausted() const override {
    return next_session_ >= w_.sessions.size() && waiting_.empty() && issued_ == w_.request_count();
  }

 private:
  const Workload& w_;
  uint32_t active_, min_other_;
  size_t next_session_ = 0;
  uint64_t completions_ = 0, issued_ = 0;
  std::deque<std::pair<uint64_t, const TraceRequest*>> waiting_;
};

}  // namespace kvtier::bench::testing
