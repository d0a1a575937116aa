// Tests of the study's protocols: hand-made workloads run through a tiny
// discrete-event loop (a fake clock and a fixed number of servers), with
// issue times computed by hand from the rules in session_scheduler.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <queue>
#include <utility>
#include <vector>

#include "bench/session_scheduler.h"

namespace kvtier::bench {
namespace {

// Sessions with the given planned gaps (the first entry of each is turn 0's 0).
Workload workload(const std::vector<std::vector<double>>& gaps) {
  Workload w;
  w.name = "hand-made";
  w.block_tokens = 16;
  for (uint32_t s = 0; s < gaps.size(); ++s) {
    Session ses;
    for (uint32_t t = 0; t < gaps[s].size(); ++t) {
      TraceRequest r;
      r.session = s;
      r.turn = t;
      r.prompt_tokens = 100 * (t + 1);
      r.output_tokens = 10;
      r.gap_s = gaps[s][t];
      ses.turns.push_back(r);
    }
    w.sessions.push_back(std::move(ses));
  }
  return w;
}

struct Run {
  double issue_s = 0, start_s = 0, end_s = 0;
  uint64_t completions_before_issue = 0;  // completions of the run when issued
  uint64_t outstanding_before_issue = 0;  // issued and not completed, when issued
  uint64_t completion_number = 0;         // 1 for the run's first completion
};

// Runs the scheduler to the end: an issued request waits until its time, then
// for a free server (FIFO), is served for service(request) seconds.
std::map<std::pair<uint32_t, uint32_t>, Run> drive(
    SessionScheduler& sched, const std::function<double(const TraceRequest&)>& service,
    size_t servers) {
  struct Ev {
    double t;
    uint64_t seq;
    bool completion;
    const TraceRequest* r;
    bool operator>(const Ev& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  std::priority_queue<Ev, std::vector<Ev>, std::greater<>> events;
  std::deque<const TraceRequest*> queue;
  std::map<std::pair<uint32_t, uint32_t>, Run> runs;
  uint64_t seq = 0, completed = 0, issued = 0;
  size_t busy = 0;
  double now = 0;
  auto accept = [&](const std::vector<Issue>& out) {
    for (const auto& is : out) {
      EXPECT_GE(is.at_s, now) << "issued in the past";
      auto& run = runs[{is.request->session, is.request->turn}];
      EXPECT_EQ(run.issue_s, 0) << "issued twice";
      run.issue_s = is.at_s;
      run.completions_before_issue = completed;
      run.outstanding_before_issue = issued - completed;
      ++issued;
      events.push({is.at_s, seq++, false, is.request});
    }
  };
  auto serve = [&] {
    while (busy < servers && !queue.empty()) {
      const TraceRequest* r = queue.front();
      queue.pop_front();
      ++busy;
      auto& run = runs[{r->session, r->turn}];
      run.start_s = now;
      run.end_s = now + service(*r);
      events.push({run.end_s, seq++, true, r});
    }
  };
  accept(sched.start(0.0));
  while (!events.empty()) {
    const Ev ev = events.top();
    events.pop();
    now = ev.t;
    if (ev.completion) {
      --busy;
      ++completed;
      runs[{ev.r->session, ev.r->turn}].completion_number = completed;
      accept(sched.on_complete(*ev.r, now));
    } else {
      queue.push_back(ev.r);
    }
    serve();
  }
  EXPECT_TRUE(sched.exhausted());
  return runs;
}

double two_s(const TraceRequest&) { return 2.0; }

TEST(ShortReuse, PlannedGapsCompletionsAndReplacement) {
  // Session 0: gaps 5 and 1; session 1: gap 3; session 2: one turn; two
  // active sessions staggered over 30 s; every request is served in 2 s.
  const Workload w = workload({{0, 5, 1}, {0, 3}, {0}});
  ShortReuseOptions o;
  o.active_sessions = 2;
  o.first_group_stagger_s = 30;
  auto sched = make_short_reuse(w, o);
  auto runs = drive(*sched, two_s, 16);
  ASSERT_EQ(runs.size(), 6u);
  EXPECT_DOUBLE_EQ((runs[{0, 0}].issue_s), 0);   // stagger: 0 * 30 / 2
  EXPECT_DOUBLE_EQ((runs[{1, 0}].issue_s), 15);  // 1 * 30 / 2
  EXPECT_DOUBLE_EQ((runs[{0, 1}].issue_s), 5);   // max(0 + 5, done at 2)
  EXPECT_DOUBLE_EQ((runs[{0, 2}].issue_s), 7);   // max(5 + 1, done at 7)
  EXPECT_DOUBLE_EQ((runs[{2, 0}].issue_s), 9);   // replaces session 0, done at 9
  EXPECT_DOUBLE_EQ((runs[{1, 1}].issue_s), 18);  // max(15 + 3, done at 17)
}

TEST(ShortReuse, SlowCompletionDelaysTheNextTurn) {
  const Workload w = workload({{0, 4, 4}});
  auto sched = make_short_reuse(w, ShortReuseOptions{});
  auto runs = drive(
      *sched, [](const TraceRequest& r) { return r.turn == 0 ? 10.0 : 1.0; }, 16);
  EXPECT_DOUBLE_EQ((runs[{0, 1}].issue_s), 10);  // gap over, waits for completion at 10
  EXPECT_DOUBLE_EQ((runs[{0, 2}].issue_s), 14);  // planned: 10 + 4 (done at 11)
}

// Three sessions of two turns under long reuse, one server, 1 s a turn.
std::map<std::pair<uint32_t, uint32_t>, Run> three_sessions_long_reuse(uint32_t min_other) {
  const Workload w = workload({{0, 0}, {0, 0}, {0, 0}});
  LongReuseOptions o;
  o.min_other_completions = min_other;
  o.target_in_flight = 1;
  auto sched = make_long_reuse(w, o);
  return drive(
      *sched, [](const TraceRequest&) { return 1.0; }, 1);
}

TEST(LongReuse, WaitsForOtherCompletions) {
  // Min 2 others: turns complete in the order issued.
  auto runs = three_sessions_long_reuse(2);
  for (uint32_t s = 0; s < 3; ++s) EXPECT_DOUBLE_EQ((runs[{s, 0}].issue_s), 0);
  // Completions: #1 s0 (t=1), #2 s1 (t=2), #3 s2 (t=3). s0's next is eligible
  // at #1 + 2 = #3, s1's at #4, s2's at #5.
  EXPECT_DOUBLE_EQ((runs[{0, 1}].issue_s), 3);
  EXPECT_DOUBLE_EQ((runs[{1, 1}].issue_s), 4);
  EXPECT_DOUBLE_EQ((runs[{2, 1}].issue_s), 5);
}

TEST(LongReuse, RelaxesOnlyToAvoidIdling) {
  // Min 3 others cannot be met: once nothing is outstanding the waiting turn
  // with the lowest eligibility number goes at once.
  auto runs = three_sessions_long_reuse(3);
  EXPECT_DOUBLE_EQ((runs[{0, 1}].issue_s), 3);  // eligible at #4, relaxed at #3
  EXPECT_DOUBLE_EQ((runs[{1, 1}].issue_s), 4);  // eligible at #5, relaxed at #4
  EXPECT_DOUBLE_EQ((runs[{2, 1}].issue_s), 5);  // eligible at #6, relaxed at #5
  EXPECT_EQ((runs[{0, 1}].outstanding_before_issue), 0u);
}

TEST(LongReuse, RuleHoldsOnALargerRun) {
  // 24 sessions of 3 to 9 turns plus one of 30, 4 servers, uneven service
  // times. Every later turn is issued either after at least 8 other
  // completions since its previous turn completed, or by the relaxation
  // (fewer than 4 outstanding), which the long session's tail needs.
  std::vector<std::vector<double>> gaps;
  for (uint32_t s = 0; s < 24; ++s) gaps.emplace_back(3 + (s % 4) * 2, 0.0);
  gaps.emplace_back(30, 0.0);
  const Workload w = workload(gaps);
  LongReuseOptions o;
  o.min_other_completions = 8;
  o.target_in_flight = 4;
  auto sched = make_long_reuse(w, o);
  auto runs = drive(
      *sched,
      [](const TraceRequest& r) { return 1.0 + static_cast<double>((r.session * 7 + r.turn) % 5); },
      4);
  ASSERT_EQ(runs.size(), w.request_count());
  uint64_t relaxed = 0, normal = 0;
  for (const auto& [key, run] : runs) {
    if (key.second == 0) continue;
    const auto& prev = runs[{key.first, key.second - 1}];
    ASSERT_GE(run.issue_s, prev.end_s);
    const uint64_t others = run.completions_before_issue - prev.completion_number;
    if (others >= 8) {
      ++normal;
    } else {
      ++relaxed;
      EXPECT_LT(run.outstanding_before_issue, 4u);
    }
  }
  EXPECT_GT(normal, 2 * relaxed);  // the rule, not the relaxation, drives the run
  EXPECT_GT(relaxed, 0u);
}

TEST(Fleet, BatchGroupsStartTogether) {
  const Workload w = workload({{0, 0}, {0}, {0}});
  FleetOptions o;
  o.concurrent_sessions = 2;
  o.pause_s = 10;
  auto sched = make_fleet(w, o);
  auto runs = drive(*sched, two_s, 16);
  EXPECT_DOUBLE_EQ((runs[{0, 0}].issue_s), 0);
  EXPECT_DOUBLE_EQ((runs[{1, 0}].issue_s), 0);
  EXPECT_DOUBLE_EQ((runs[{0, 1}].issue_s), 12);  // done at 2 + pause 10
  EXPECT_DOUBLE_EQ((runs[{2, 0}].issue_s), 14);  // when the whole first group is done
}

TEST(Fleet, SteadyStateReplacesAtOnce) {
  const Workload w = workload({{0, 0}, {0}, {0}});
  FleetOptions o;
  o.concurrent_sessions = 2;
  o.steady_state = true;
  o.stagger_s = 30;
  o.pause_s = 10;
  auto sched = make_fleet(w, o);
  auto runs = drive(*sched, two_s, 16);
  EXPECT_DOUBLE_EQ((runs[{0, 0}].issue_s), 0);
  EXPECT_DOUBLE_EQ((runs[{1, 0}].issue_s), 15);
  EXPECT_DOUBLE_EQ((runs[{2, 0}].issue_s), 14);  // session 0 finished at 14
  EXPECT_DOUBLE_EQ((runs[{0, 1}].issue_s), 12);
}

// Six turns in three rounds: turns 0-1, 2-3, 4-5; only a round's first
// turn waits for the pause (each turn takes 2 s).
TEST(Fleet, RoundsPauseOnlyBetweenRounds) {
  const Workload w = workload({{0, 0, 0, 0, 0, 0}});
  FleetOptions o;
  o.concurrent_sessions = 1;
  o.pause_s = 300;
  o.rounds = 3;
  auto sched = make_fleet(w, o);
  auto runs = drive(*sched, two_s, 16);
  EXPECT_DOUBLE_EQ((runs[{0, 1}].issue_s), 2);
  EXPECT_DOUBLE_EQ((runs[{0, 2}].issue_s), 304);
  EXPECT_DOUBLE_EQ((runs[{0, 3}].issue_s), 306);
  EXPECT_DOUBLE_EQ((runs[{0, 4}].issue_s), 608);
  EXPECT_DOUBLE_EQ((runs[{0, 5}].issue_s), 610);
}

TEST(Schedulers, EmptySessionsAndEmptyWorkloads) {
  const Workload w = workload({{}, {0, 1}, {}});
  auto a = make_short_reuse(w, ShortReuseOptions{});
  EXPECT_EQ(drive(*a, two_s, 1).size(), 2u);
  auto b = make_long_reuse(w, LongReuseOptions{});
  EXPECT_EQ(drive(*b, two_s, 1).size(), 2u);
  auto c = make_fleet(w, FleetOptions{});
  EXPECT_EQ(drive(*c, two_s, 1).size(), 2u);
  const Workload none;
  auto d = make_long_reuse(none, LongReuseOptions{});
  EXPECT_TRUE(d->start(0).empty());
  EXPECT_TRUE(d->exhausted());
}

}  // namespace
}  // namespace kvtier::bench
