// Tests of the built-in synthetic agentic workload: the sampled figures
// against the study's published ones, the prompt chains, sharing, scale and
// determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <vector>

#include "bench/synthetic_workload.h"

namespace kvtier::bench {
namespace {

// Nearest-rank percentile of a sorted sample.
double percentile(const std::vector<double>& sorted, double p) {
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * sorted.size()));
  return sorted[std::max<size_t>(rank, 1) - 1];
}

std::vector<double> gaps_of(const Workload& w) {
  std::vector<double> g;
  for (const auto& s : w.sessions) {
    for (size_t t = 1; t < s.turns.size(); ++t) g.push_back(s.turns[t].gap_s);
  }
  std::sort(g.begin(), g.end());
  return g;
}

Workload full_size() {
  SyntheticWorkloadOptions o;
  o.block_tokens = 512;  // same lengths and gaps as the default, fewer ids to hold
  return make_synthetic_agentic_workload(o);
}

TEST(SyntheticWorkload, FittedDistributionHitsThePublishedQuantiles) {
  const auto d = study_gap_distribution();
  EXPECT_NEAR(d.quantile(0.5), kStudyGapP50S, 1e-9);
  EXPECT_NEAR(d.quantile(0.9), kStudyGapP90S, 1e-9);
  // Not fitted, yet implied by the other two: the published figures are a
  // log-normal's.
  EXPECT_NEAR(d.quantile(0.99), kStudyGapP99S, 0.01 * kStudyGapP99S);
  EXPECT_NEAR(std::exp(d.mu + d.sigma * d.sigma / 2), kStudyGapMeanS, 0.01 * kStudyGapMeanS);
  EXPECT_EQ(d.quantile(1 - 1e-12), kStudyGapCapS);
  EXPECT_NEAR(standard_normal_quantile(0.975), 1.959963985, 1e-8);
  EXPECT_NEAR(standard_normal_quantile(0.5), 0.0, 1e-12);
}

TEST(SyntheticWorkload, ShapeMatchesTheStudy) {
  const Workload w = full_size();
  ASSERT_EQ(w.sessions.size(), 256u);
  EXPECT_EQ(w.request_count(), 256u * 31u);  // about 31 calls per session (the study: 30.9)
  EXPECT_EQ(w.records_read, w.request_count());
  EXPECT_EQ(w.records_skipped, 0u);

  // Start-to-start gaps against the published figures.
  const auto g = gaps_of(w);
  ASSERT_EQ(g.size(), w.request_count() - 256);
  double mean = 0;
  for (double x : g) mean += x;
  mean /= g.size();
  EXPECT_NEAR(mean, kStudyGapMeanS, 0.03 * kStudyGapMeanS);
  EXPECT_NEAR(percentile(g, 50), kStudyGapP50S, 0.02 * kStudyGapP50S);
  EXPECT_NEAR(percentile(g, 90), kStudyGapP90S, 0.02 * kStudyGapP90S);
  EXPECT_NEAR(percentile(g, 99), kStudyGapP99S, 0.04 * kStudyGapP99S);
  EXPECT_LE(g.back(), kStudyGapCapS);

  // Prompt-length groups: the study's shares (1,116 / 3,061 / 2,779 / 947 of
  // 7,903 calls) within 3 percentage points.
  const double study[4] = {1116, 3061, 2779, 947};
  std::vector<double> share(4, 0);
  for (const auto& s : w.sessions) {
    for (const auto& r : s.turns) share.at(r.length_group) += 1.0 / w.request_count();
  }
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(share[i], study[i] / 7903, 0.03) << "group " << i;
  std::printf(
      "sampled gaps: mean %.2f p50 %.2f p90 %.2f p99 %.2f max %.2f s; groups "
      "%.1f/%.1f/%.1f/%.1f%%\n",
      mean, percentile(g, 50), percentile(g, 90), percentile(g, 99), g.back(), 100 * share[0],
      100 * share[1], 100 * share[2], 100 * share[3]);

  // Outputs: median near the public corpus's 246 tokens.
  std::vector<double> outs;
  for (const auto& s : w.sessions) {
    for (const auto& r : s.turns) outs.push_back(r.output_tokens);
  }
  std::sort(outs.begin(), outs.end());
  EXPECT_NEAR(percentile(outs, 50), 246, 25);
}

TEST(SyntheticWorkload, PromptsGrowAsAgentHistories) {
  SyntheticWorkloadOptions o;
  o.sessions = 64;
  const Workload w = make_synthetic_agentic_workload(o);
  uint64_t sharing = 0;
  std::set<uint64_t> tail_ids;
  for (const auto& s : w.sessions) {
    ASSERT_GE(s.turns.size(), 3u);
    for (size_t t = 0; t < s.turns.size(); ++t) {
      const auto& r = s.turns[t];
      ASSERT_EQ(r.block_ids.size(), r.prompt_tokens / o.block_tokens);
      if (t == 0) {
        EXPECT_EQ(r.gap_s, 0);
        continue;
      }
      const auto& prev = s.turns[t - 1];
      // This prompt = the previous prompt + its answer + new tokens.
      ASSERT_GE(r.prompt_tokens, prev.prompt_tokens + prev.output_tokens);
      ASSERT_TRUE(std::equal(prev.block_ids.begin(), prev.block_ids.end(), r.block_ids.begin()));
    }
    // The common preamble: 11,520 tokens = 720 blocks of 16, namespace 0.
    const auto& first = s.turns[0].block_ids;
    const bool shares = first[0] >> 32 == 0;
    sharing += shares;
    for (size_t k = 0; k < first.size(); ++k) {
      ASSERT_EQ(first[k] >> 32 == 0, shares && k < 720) << k;
    }
    for (uint64_t id : s.turns.back().block_ids) {
      if (id >> 32 != 0) {
        ASSERT_TRUE(tail_ids.insert(id).second);  // no other session has it
      }
    }
  }
  // 93.8% expected; with 64 sessions allow a binomial spread.
  EXPECT_GE(sharing, 54u);
  EXPECT_LT(sharing, 64u + 1);
}

TEST(SyntheticWorkload, DeterministicForASeed) {
  SyntheticWorkloadOptions o;
  o.sessions = 32;
  const Workload a = make_synthetic_agentic_workload(o);
  const Workload b = make_synthetic_agentic_workload(o);
  o.seed = 43;
  const Workload c = make_synthetic_agentic_workload(o);
  ASSERT_EQ(a.request_count(), b.request_count());
  bool same = true, differs = false;
  for (size_t s = 0; s < a.sessions.size(); ++s) {
    for (size_t t = 0; t < a.sessions[s].turns.size(); ++t) {
      const auto &x = a.sessions[s].turns[t], &y = b.sessions[s].turns[t];
      same = same && x.prompt_tokens == y.prompt_tokens && x.output_tokens == y.output_tokens &&
             x.gap_s == y.gap_s && x.block_ids == y.block_ids;
    }
  }
  EXPECT_TRUE(same);
  for (size_t s = 0; s < std::min(a.sessions.size(), c.sessions.size()); ++s) {
    differs = differs || a.sessions[s].turns.size() != c.sessions[s].turns.size() ||
              a.sessions[s].turns[0].prompt_tokens != c.sessions[s].turns[0].prompt_tokens;
  }
  EXPECT_TRUE(differs);
}

TEST(SyntheticWorkload, ScaleShrinksPromptsAndKeepsTheGroups) {
  SyntheticWorkloadOptions full, small;
  full.sessions = small.sessions = 48;
  small.length_scale = 0.125;
  const Workload a = make_synthetic_agentic_workload(full);
  const Workload b = make_synthetic_agentic_workload(small);
  ASSERT_EQ(a.request_count(), b.request_count());
  EXPECT_EQ(b.length_groups[0].max_tokens, 4097u);  // 32K * 0.125, inclusive
  uint64_t ta = 0, tb = 0, same_group = 0;
  for (size_t s = 0; s < a.sessions.size(); ++s) {
    for (size_t t = 0; t < a.sessions[s].turns.size(); ++t) {
      const auto &x = a.sessions[s].turns[t], &y = b.sessions[s].turns[t];
      ta += x.prompt_tokens;
      tb += y.prompt_tokens;
      EXPECT_EQ(x.gap_s, y.gap_s);
      same_group += x.length_group == y.length_group;
    }
  }
  EXPECT_NEAR(static_cast<double>(tb) / ta, 0.125, 0.001);
  // Rounding moves at most a few prompts across a group boundary.
  EXPECT_GE(same_group, a.request_count() * 99 / 100);
}

}  // namespace
}  // namespace kvtier::bench
