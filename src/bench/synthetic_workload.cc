// The built-in synthetic agentic workload. Every random draw goes through
// SplitMix-seeded std::mt19937_64 and the hand-written transforms below
// (not std::*_distribution, whose output differs between standard
// libraries), so a seed gives the same workload everywhere.
#include "bench/synthetic_workload.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <random>

namespace kvtier::bench {
namespace {

// Calibration constants (real tokens, before length_scale). Derivation and
// the figures they produce are in docs/workloads.md.
constexpr uint32_t kMinCalls = 3;
constexpr double kCallsSigma = 0.45;       // spread of calls per session
constexpr double kTaskMedianTokens = 900;  // first prompt beyond the preamble
constexpr double kTaskSigma = 0.6;
constexpr double kFinalMedianTokens = 78000;  // a session's last prompt
constexpr double kFinalSigma = 0.28;
constexpr double kFinalCapTokens = 180000;
constexpr double kFinalMinGrowth = 4096;  // the last prompt exceeds the first by this
constexpr double kGrowthSigma = 1.37;     // per-turn new tokens: heavy tailed
constexpr double kGrowthDecay = 0.8;      // turn k's share ~ k^-decay: early turns grow most
constexpr double kMinNewTokens = 16;      // new tokens a turn adds besides the last answer
constexpr double kOutputMedianTokens = 246;
constexpr double kOutputSigma = 1.22;  // mean/median 2.1 as in the public corpus
constexpr double kOutputCapTokens = 16384;

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(splitmix(seed)) {}
  // Uniform in (0, 1): 53 random bits, never exactly 0.
  double uniform() {
    return (static_cast<double>(gen_() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  }
  double normal() {  // Box-Muller, one value per call
    const double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  // Log-normal with the given median and shape.
  double lognormal(double median, double sigma) { return median * std::exp(sigma * normal()); }
  uint64_t below(uint64_t n) { return static_cast<uint64_t>(uniform() * static_cast<double>(n)); }

 private:
  static uint64_t splitmix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }
  std::mt19937_64 gen_;
};

template <typename T>
void shuffle(std::vector<T>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);
}

// Calls per session: log-normal around the mean, then nudged one call at a
// time (in a seeded order) so the total is exactly round(sessions * mean).
std::vector<uint32_t> draw_call_counts(uint32_t sessions, double mean, Rng& rng) {
  std::vector<uint32_t> n(sessions);
  for (auto& c : n) {
    const double raw = mean * std::exp(kCallsSigma * rng.normal() - kCallsSigma * kCallsSigma / 2);
    c = std::max<uint32_t>(kMinCalls, static_cast<uint32_t>(std::lround(raw)));
  }
  const auto target =
      static_cast<int64_t>(std::llround(sessions * std::max(mean, 1.0 * kMinCalls)));
  int64_t diff = target - std::accumulate(n.begin(), n.end(), int64_t{0});
  std::vector<uint32_t> order(sessions);
  std::iota(order.begin(), order.end(), 0);
  shuffle(order, rng);
  for (size_t i = 0; diff != 0 && sessions > 0; i = (i + 1) % sessions) {
    auto& c = n[order[i]];
    if (diff > 0) {
      ++c;
      --diff;
    } else if (c > kMinCalls) {
      --c;
      ++diff;
    } else if (std::all_of(n.begin(), n.end(), [](uint32_t x) { return x <= kMinCalls; })) {
      break;
    }
  }
  return n;
}

// Prompt lengths of one session in real tokens: a first prompt (preamble +
// task), then each turn = previous prompt + previous answer + new tokens,
// the new tokens drawn heavy-tailed and front-loaded, scaled so the last
// prompt lands on a per-session target.
std::vector<double> draw_prompt_lengths(uint32_t calls, double preamble,
                                        const std::vector<double>& outputs, Rng& rng) {
  std::vector<double> len(calls);
  len[0] = preamble + std::floor(rng.lognormal(kTaskMedianTokens, kTaskSigma));
  const double final_len = std::clamp(rng.lognormal(kFinalMedianTokens, kFinalSigma),
                                      len[0] + kFinalMinGrowth, kFinalCapTokens);
  std::vector<double> inc(calls > 0 ? calls - 1 : 0);
  double sum = 0;
  for (size_t k = 0; k < inc.size(); ++k) {
    inc[k] =
        std::exp(kGrowthSigma * rng.normal()) * std::pow(static_cast<double>(k + 1), -kGrowthDecay);
    sum += inc[k];
  }
  for (size_t k = 0; k < inc.size(); ++k) {
    const double want = inc[k] / sum * (final_len - len[0]);
    len[k + 1] = len[k] + std::max(std::floor(want), outputs[k] + kMinNewTokens);
  }
  return len;
}

uint32_t scaled(double tokens, double scale) {
  return static_cast<uint32_t>(std::max(1.0, std::round(tokens * scale)));
}

}  // namespace

double standard_normal_quantile(double u) {
  // Bisection on the CDF 0.5*erfc(-x/sqrt2): slow but exact to double
  // precision, and only called once per planned gap.
  double lo = -40, hi = 40;
  for (int i = 0; i < 200 && hi - lo > 1e-13; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (0.5 * std::erfc(-mid / std::sqrt(2.0)) < u) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return 0.5 * (lo + hi);
}

double ClippedLogNormal::quantile(double u) const {
  return std::min(cap_s, std::exp(mu + sigma * standard_normal_quantile(u)));
}

ClippedLogNormal ClippedLogNormal::fit(double p50_s, double p90_s, double cap_s) {
  ClippedLogNormal d;
  d.mu = std::log(p50_s);
  d.sigma = std::log(p90_s / p50_s) / standard_normal_quantile(0.9);
  d.cap_s = cap_s;
  return d;
}

ClippedLogNormal study_gap_distribution() {
  return ClippedLogNormal::fit(kStudyGapP50S, kStudyGapP90S, kStudyGapCapS);
}

Workload make_synthetic_agentic_workload(const SyntheticWorkloadOptions& o) {
  Workload w;
  w.name = "synthetic-agentic";
  w.block_tokens = std::max<uint32_t>(o.block_tokens, 1);
  w.length_groups = study_length_groups(o.length_scale);
  Rng rng(o.seed);
  const auto calls = draw_call_counts(o.sessions, o.mean_calls_per_session, rng);
  const uint64_t shared_blocks =
      static_cast<uint64_t>(std::floor(o.shared_preamble_tokens * o.length_scale)) / w.block_tokens;

  w.sessions.resize(o.sessions);
  for (uint32_t s = 0; s < o.sessions; ++s) {
    const bool shares = rng.uniform() < o.shared_preamble_fraction;
    std::vector<double> outputs(calls[s]);
    for (auto& out : outputs) {
      out = std::clamp(std::round(rng.lognormal(kOutputMedianTokens, kOutputSigma)), 1.0,
                       kOutputCapTokens);
    }
    auto lengths = draw_prompt_lengths(calls[s], o.shared_preamble_tokens, outputs, rng);
    // A context limit ends the session at the first call that would pass it
    // (an engine refuses such a prompt); a first call is cut to fit.
    uint32_t n_calls = calls[s];
    for (uint32_t t = 0; o.max_context_tokens > 0 && t < calls[s]; ++t) {
      if (lengths[t] + outputs[t] <= static_cast<double>(o.max_context_tokens)) continue;
      if (t == 0) {
        outputs[0] = std::min<double>(outputs[0], o.max_context_tokens / 2.0);
        lengths[0] = static_cast<double>(o.max_context_tokens) - outputs[0];
      }
      n_calls = std::max<uint32_t>(t, 1);
      break;
    }
    auto& turns = w.sessions[s].turns;
    turns.resize(n_calls);
    for (uint32_t t = 0; t < n_calls; ++t) {
      auto& r = turns[t];
      r.prompt_tokens = scaled(lengths[t], o.length_scale);
      r.output_tokens = scaled(outputs[t], o.length_scale);
      // Each turn's prompt extends the previous one, so block k of a session
      // has one content in every turn that holds it in full: its id is
      // (namespace, k). Namespace 0 is the common preamble.
      const uint64_t blocks = r.prompt_tokens / w.block_tokens;
      r.block_ids.resize(blocks);
      for (uint64_t k = 0; k < blocks; ++k) {
        const uint64_t ns = shares && k < shared_blocks ? 0 : uint64_t{s} + 1;
        r.block_ids[k] = (ns << 32) | k;
      }
    }
  }
  // Planned start-to-start gaps: stratified draws from the fitted clipped
  // log-normal (one per stratum of equal probability, randomly assigned to
  // turns), so the plan's own figures track the published ones closely even
  // for a few thousand gaps.
  std::vector<double> gaps;
  uint64_t n_gaps = 0;
  for (const auto& ses : w.sessions) n_gaps += ses.turns.empty() ? 0 : ses.turns.size() - 1;
  const auto dist = study_gap_distribution();
  gaps.reserve(n_gaps);
  for (uint64_t i = 0; i < n_gaps; ++i) {
    gaps.push_back(dist.quantile((static_cast<double>(i) + rng.uniform()) / n_gaps));
  }
  shuffle(gaps, rng);
  size_t next_gap = 0;
  for (auto& ses : w.sessions) {
    for (size_t t = 1; t < ses.turns.size(); ++t) ses.turns[t].gap_s = gaps[next_gap++];
  }
  w.records_read = w.request_count();
  finalize_workload(w);
  return w;
}

}  // namespace kvtier::bench
