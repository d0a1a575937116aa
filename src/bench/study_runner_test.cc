#include "bench/study_runner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "bench/study_metrics.h"
#include "bench/testing/study_testing.h"
#include "engine/engine.h"

namespace kvtier::bench {
namespace {

StudyOptions small_options() {
  StudyOptions o;
  o.volume_dir = ".";
  return o;
}

CaseResult run_case(const Workload& w, StudyCase c, const StudyOptions& o, uint32_t active,
                    uint32_t min_other) {
  testing::MiniScheduler s(w, active, min_other);
  auto r = run_study_case(w, s, min_other ? "long-reuse" : "short-reuse", c, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : CaseResult{};
}

TEST(StudyRunner, RecomputeTimesFollowTheProfile) {
  // One session, two turns, no reuse possible in A: with the modeled PD
  // transfer each request's TTFT is its modeled prefill + PD transfer + one
  // decode step.
  auto w = testing::tiny_workload(1, 2, 10, 2, 0);
  auto o = small_options();
  o.pd_transfer = PdTransferMode::kModeled;
  auto r = run_case(w, StudyCase::kA, o, 1, 0);
  ASSERT_EQ(r.completed, 2u);
  engine::ModeledEngine e(o.profile);
  const auto& t0 = w.sessions[0].turns[0];
  const double expect = e.prefill_seconds(t0.prompt_tokens, 0) +
                        e.pd_transfer_seconds(t0.prompt_tokens) + e.decode_seconds(1);
  EXPECT_NEAR(r.ttft_s[0], expect, 1e-9);
  EXPECT_EQ(r.hbm_hit_blocks + r.store_hit_blocks, 0u);
  EXPECT_EQ(r.computed_blocks, r.prompt_blocks);
  EXPECT_EQ(r.pd_transfer, "modeled");
  EXPECT_EQ(r.pd_frames, 0u);
  const auto& t1 = w.sessions[0].turns[1];
  EXPECT_EQ(r.network_bytes,
            uint64_t{t0.prompt_tokens + t1.prompt_tokens} * o.profile.stored_kv_bytes_per_token);
}

TEST(StudyRunner, LoopbackTransferTimeIsChargedToTheFirstToken) {
  // One request in A: its TTFT is prefill + the measured loopback transfer
  // x the byte scale + one decode step.
  auto w = testing::tiny_workload(1, 1, 40, 0, 0);
  auto o = small_options();
  auto r = run_case(w, StudyCase::kA, o, 1, 0);
  ASSERT_EQ(r.completed, 1u);
  EXPECT_EQ(r.pd_transfer, "loopback");
  ASSERT_EQ(r.pd_frames, 1u);
  EXPECT_GT(r.pd_wall_s, 0);
  EXPECT_NEAR(r.pd_charged_s, r.pd_wall_s * o.profile.byte_scale(), 1e-9);
  engine::ModeledEngine e(o.profile);
  const auto& t0 = w.sessions[0].turns[0];
  EXPECT_NEAR(r.ttft_s[0],
              e.prefill_seconds(t0.prompt_tokens, 0) + r.pd_charged_s + e.decode_seconds(1), 1e-9);
}

TEST(StudyRunner, NetworkBytesAreTheBytesTheReceiversVerified) {
  auto w = testing::tiny_workload(6, 3, 12, 3);
  auto o = small_options();
  o.decode_replicas = 3;
  for (auto c : {StudyCase::kA, StudyCase::kC}) {
    SCOPED_TRACE(case_spec(c).letter);
    auto r = run_case(w, c, o, 4, 0);
    ASSERT_EQ(r.completed, w.request_count());
    EXPECT_EQ(r.pd_frames, w.request_count());
    EXPECT_GT(r.network_bytes, 0u);
    EXPECT_EQ(r.network_bytes, r.pd_received_bytes);
    // Every prompt block crossed once, at its stored size, and checked out.
    EXPECT_EQ(r.pd_blocks_verified, r.prompt_blocks);
    EXPECT_EQ(r.pd_payload_bytes, r.prompt_blocks * r.block_bytes);
    EXPECT_EQ(r.network_bytes, r.pd_payload_bytes + r.pd_frames * (48 + 4) + r.prompt_blocks * 24);
    EXPECT_EQ(r.verify_failures, 0u);
    // All three decode replicas took part.
    for (size_t d = 0; d < 3; ++d) {
      uint64_t n = 0;
      for (size_t p = 0; p < o.prefill_replicas; ++p) n += r.pair_counts[p * 3 + d];
      EXPECT_GT(n, 0u) << "decode " << d;
    }
  }
}

TEST(StudyRunner, SharedRamLoadsVerifiedBlocksAndCountsReuse) {
  auto w = testing::tiny_workload(4, 4, 12, 3);
  auto o = small_options();
  o.hbm_pool_tokens = 0;
  o.profile.hbm_pool_tokens = 1;  // no useful local pool: reuse comes from the store
  auto r = run_case(w, StudyCase::kC, o, 4, 0);
  EXPECT_EQ(r.completed, w.request_count());
  EXPECT_EQ(r.verify_failures, 0u);
  EXPECT_GT(r.store_hit_blocks, 0u);
  EXPECT_GT(r.store_load_events, 0u);
  EXPECT_EQ(r.store_hit_blocks, r.store_blocks_from_ram);
  // Every later turn finds its whole previous prompt (same session); the
  // shared system blocks of first turns come from other sessions.
  EXPECT_GT(r.same_session_blocks, 0u);
  EXPECT_GT(r.cross_session_blocks, 0u);
  EXPECT_EQ(r.hbm_hit_blocks + r.store_hit_blocks + r.computed_blocks, r.prompt_blocks);
}

TEST(StudyRunner, ReplicasWorkOnTheirOwnThreadsAndOverlapWhenAsked) {
  auto w = testing::tiny_workload(8, 4, 40, 4);
  auto o = small_options();
  o.prefill_replicas = 2;
  // Default: every job is waited for at once, so no two replicas ever work
  // at the same time.
  auto serial = run_case(w, StudyCase::kC, o, 8, 0);
  ASSERT_EQ(serial.completed, w.request_count());
  EXPECT_EQ(serial.replica_threads, 2u);
  EXPECT_EQ(serial.replica_overlap_wall_s, 0.0);
  // Overlapped: saves and PD sends of one replica run while the other loads.
  o.overlap_replicas = true;
  auto overlapped = run_case(w, StudyCase::kC, o, 8, 0);
  ASSERT_EQ(overlapped.completed, w.request_count());
  EXPECT_EQ(overlapped.verify_failures, 0u);
  EXPECT_EQ(overlapped.pd_blocks_verified, overlapped.prompt_blocks);
  EXPECT_GT(overlapped.store_hit_blocks, 0u);
  EXPECT_GT(overlapped.replica_overlap_wall_s, 0.0);
  EXPECT_EQ(overlapped.hbm_hit_blocks + overlapped.store_hit_blocks + overlapped.computed_blocks,
            overlapped.prompt_blocks);
}

}  // namespace
}  // namespace kvtier::bench

namespace kvtier::bench {
namespace {

std::string summary(const CaseResult& r) {
  char buf[512];
  std::snprintf(
      buf, sizeof buf,
      "%s %s: %.4f req/s, TTFT p50 %.2f s, HBM %lu, store %lu (RAM %lu, disk %lu), "
      "computed %lu, store wall %.3f s (loads %.3f s), charged %.1f s, verify failures %lu",
      r.protocol.c_str(), case_spec(r.id).letter, r.throughput_rps, percentile(r.ttft_s, 50),
      static_cast<unsigned long>(r.hbm_hit_blocks), static_cast<unsigned long>(r.store_hit_blocks),
      static_cast<unsigned long>(r.store_blocks_from_ram),
      static_cast<unsigned long>(r.store_blocks_from_disk),
      static_cast<unsigned long>(r.computed_blocks), r.store_wall_s, r.store_load_wall_s,
      r.store_charged_s, static_cast<unsigned long>(r.verify_failures));
  return buf;
}

// The expected shape at small scale, on a hand-made workload of 48 sessions x
// 16 turns (prompts of 30-75 blocks = 30K-77K deployment tokens) with the
// scaled H100 profile. These tests pin the mechanism (which tier serves which
// prefix, and that a served prefix beats recomputing it), so they must not
// depend on how busy the machine is: the store's calls really run, with real
// bytes, but are charged at fixed rates of the order this machine measures
// (StudyOptions::modeled_store), and the PD transfer is modeled. Every
// throughput below is then the same on every run. The store is charged
// x(byte scale / 20): a store 20x faster than the machine's. The bench run
// (tests/study, check_shape.py) measures this machine at the real scale.
StudyOptions shape_options() {
  StudyOptions o = small_options();
  o.modeled_store.emplace();
  o.modeled_store->ram_load_bytes_per_s = 4e9;
  o.modeled_store->disk_load_bytes_per_s = 1e9;
  o.modeled_store->save_bytes_per_s = 1e9;
  o.pd_transfer = PdTransferMode::kModeled;
  o.store_charge_scale = o.profile.byte_scale() / 20;
  return o;
}

// With modeled store rates, a run's figures do not depend on the machine's
// speed at that moment: two runs of the same case agree to the last bit.
// (Case C, whose RAM tier has no I/O deadline that a busy machine could
// turn into a miss; a small tier, so eviction takes part.)
TEST(StudyRunner, ModeledStoreRatesMakeARunRepeatable) {
  auto w = testing::tiny_workload(12, 6, 30, 3, 2, 16, 8, 8);
  auto o = shape_options();
  o.ram_bytes = 8ull << 30;
  const CaseResult a = run_case(w, StudyCase::kC, o, 12, 6);
  const CaseResult b = run_case(w, StudyCase::kC, o, 12, 6);
  EXPECT_GT(a.store_hit_blocks, 0u) << summary(a);
  EXPECT_EQ(a.throughput_rps, b.throughput_rps) << summary(a) << "\n" << summary(b);
  EXPECT_EQ(a.store_hit_blocks, b.store_hit_blocks);
  EXPECT_EQ(a.race_recomputed_blocks, b.race_recomputed_blocks);
  EXPECT_EQ(a.store_charged_s, b.store_charged_s);
  EXPECT_EQ(a.ttft_s, b.ttft_s);
}

// Runs each case of `cases` on `w` (checking every request completed and
// verified); `all` gets their summaries, a line each, for failure messages.
std::map<StudyCase, CaseResult> run_cases(const Workload& w, std::initializer_list<StudyCase> cases,
                                          const StudyOptions& o, uint32_t active,
                                          uint32_t min_other, std::string* all) {
  std::map<StudyCase, CaseResult> r;
  for (auto c : cases) {
    r[c] = run_case(w, c, o, active, min_other);
    EXPECT_EQ(r[c].completed, w.request_count()) << summary(r[c]);
    EXPECT_EQ(r[c].verify_failures, 0u) << summary(r[c]);
    *all += summary(r[c]) + "\n";
  }
  return r;
}

TEST(StudyShape, ShortReuseSharedTiersFarAboveRecomputeAndLocalCache) {
  auto w = testing::tiny_workload(48, 16, 30, 3, 2, 16, 8, 8);
  std::string all;
  auto r = run_cases(w, {StudyCase::kA, StudyCase::kB, StudyCase::kC, StudyCase::kD},
                     shape_options(), 16, 0, &all);
  const double a = r[StudyCase::kA].throughput_rps, b = r[StudyCase::kB].throughput_rps;
  const double c = r[StudyCase::kC].throughput_rps, d = r[StudyCase::kD].throughput_rps;
  EXPECT_GT(b, a) << all;
  EXPECT_GT(c, 1.3 * a) << all;
  EXPECT_GT(d, 1.3 * a) << all;
  EXPECT_GT(c, 1.15 * b) << all;
  EXPECT_GT(d, 1.15 * b) << all;
  EXPECT_LT(std::abs(c - d) / std::max(c, d), 0.10) << all;
  // In short reuse the RAM tier serves almost everything.
  EXPECT_GT(r[StudyCase::kD].store_blocks_from_ram, 4 * r[StudyCase::kD].store_blocks_from_disk)
      << all;
}

// Long reuse: every session waits behind 24 other completions, which turns
// the HBM pools and a 96 GiB RAM tier over before it returns.
TEST(StudyShape, LongReuseDiskTiersAboveRamOnlyAndLocalCache) {
  auto w = testing::tiny_workload(48, 16, 30, 3, 2, 16, 8, 8);
  auto o = shape_options();
  o.ram_bytes = 96ull << 30;
  std::string all;
  auto r =
      run_cases(w, {StudyCase::kB, StudyCase::kC, StudyCase::kD, StudyCase::kF}, o, 48, 24, &all);
  const double b = r[StudyCase::kB].throughput_rps, c = r[StudyCase::kC].throughput_rps;
  const double d = r[StudyCase::kD].throughput_rps, f = r[StudyCase::kF].throughput_rps;
  // The wide working set evicts RAM before sessions return ...
  EXPECT_LT(r[StudyCase::kC].store_hit_blocks, r[StudyCase::kD].store_hit_blocks / 4) << all;
  // ... and the disk copy serves it.
  EXPECT_GT(r[StudyCase::kD].store_blocks_from_disk, r[StudyCase::kD].store_blocks_from_ram) << all;
  EXPECT_GT(d, 1.2 * c) << all;
  EXPECT_GT(d, 1.2 * b) << all;
  EXPECT_GE(f, 0.95 * d) << all;
}

// The compute-or-load race (LoadPolicy::kRace) on a store charged 20x slower
// than this machine, so loading a block costs far more than recomputing it:
// the study's connector then spends most of its time waiting for loads,
// while the race recomputes most of each prefix and loads only the share
// the tier can deliver in the same time. (Both pay the same slow saves, so
// neither reaches B, which has no store to write to.)
TEST(StudyShape, RaceGainsFromATierSlowerThanRecompute) {
  auto w = testing::tiny_workload(48, 16, 30, 3, 2, 16, 8, 8);
  auto o = shape_options();
  o.ram_bytes = 96ull << 30;
  o.store_charge_scale = o.profile.byte_scale() * 20;
  o.load_policy = LoadPolicy::kLoadAll;
  const CaseResult load = run_case(w, StudyCase::kD, o, 48, 24);
  o.load_policy = LoadPolicy::kRace;
  const CaseResult race = run_case(w, StudyCase::kD, o, 48, 24);
  const std::string all = summary(load) + "\n" + summary(race);
  EXPECT_EQ(race.completed, w.request_count());
  EXPECT_EQ(race.verify_failures, 0u);
  EXPECT_EQ(load.race_recomputed_blocks, 0u);
  EXPECT_GT(race.race_recomputed_blocks, 0u) << all;
  EXPECT_GT(race.store_hit_blocks, 0u) << all;
  EXPECT_GT(race.throughput_rps, 2 * load.throughput_rps) << all;
  EXPECT_LT(race.store_charged_s, load.store_charged_s / 2) << all;
}

// With a store much faster than recomputation the race loads (nearly) every
// cached block, as the study's connector does, and loses nothing.
TEST(StudyShape, RaceLoadsEverythingFromAFastTier) {
  auto w = testing::tiny_workload(24, 8, 30, 3, 2, 16, 8, 8);
  auto o = shape_options();
  o.load_policy = LoadPolicy::kLoadAll;
  const CaseResult load = run_case(w, StudyCase::kC, o, 16, 0);
  o.load_policy = LoadPolicy::kRace;
  const CaseResult race = run_case(w, StudyCase::kC, o, 16, 0);
  const std::string all = summary(load) + "\n" + summary(race);
  EXPECT_EQ(race.verify_failures, 0u);
  EXPECT_LT(race.race_recomputed_blocks, race.store_hit_blocks / 10) << all;
  EXPECT_GT(race.throughput_rps, 0.95 * load.throughput_rps) << all;
}

}  // namespace
}  // namespace kvtier::bench
