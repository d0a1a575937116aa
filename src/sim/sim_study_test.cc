// The simulator's store is the real one with blocks of a byte per token: it
// must make exactly the decisions (hits, tiers, evictions) and charge exactly
// the times of a store holding blocks of real size, on the same workload.
#include "sim/sim_study.h"

#include <gtest/gtest.h>

#include <cmath>

#include "bench/study_runner.h"
#include "bench/testing/study_testing.h"
#include "blk/dev/mem_device.h"
#include "kv/disk_format.h"
#include "kv/store.h"
#include "sim/sparse_page_device.h"

namespace kvtier::sim {
namespace {

using bench::CaseResult;
using bench::StudyCase;

constexpr uint64_t kRegionBytes = bench::kStudyRegionBytes;

// A small deployment: RAM for 600 blocks, disk for 3,000, HBM for 100.
bench::StudyRunOptions small_deployment(const SimProfile& p) {
  bench::StudyRunOptions o;
  configure_simulation(p, &o);
  const double block_bytes = 16.0 * static_cast<double>(p.engine.kv_bytes_per_token);
  o.study.ram_bytes = static_cast<uint64_t>(600 * block_bytes);
  o.study.disk_bytes = static_cast<uint64_t>(3000 * block_bytes);
  o.study.hbm_pool_tokens = 100 * 16;
  o.study.prefill_replicas = 2;
  o.study.decode_replicas = 2;
  return o;
}

CaseResult run(const bench::Workload& w, StudyCase c, const bench::StudyOptions& o) {
  bench::testing::MiniScheduler sched(w, 12, 24);
  auto r = bench::run_study_case(w, sched, "long-reuse", c, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : CaseResult{};
}

void expect_same_run(const CaseResult& real, const CaseResult& sim) {
  SCOPED_TRACE(bench::case_spec(real.id).letter);
  EXPECT_EQ(sim.completed, real.completed);
  EXPECT_EQ(sim.verify_failures, 0u);
  EXPECT_EQ(real.verify_failures, 0u);
  EXPECT_EQ(sim.hbm_hit_blocks, real.hbm_hit_blocks);
  EXPECT_EQ(sim.store_hit_blocks, real.store_hit_blocks);
  EXPECT_EQ(sim.store_blocks_from_ram, real.store_blocks_from_ram);
  EXPECT_EQ(sim.store_blocks_from_disk, real.store_blocks_from_disk);
  EXPECT_EQ(sim.ram_evictions, real.ram_evictions);
  EXPECT_EQ(sim.write_refusals, real.write_refusals);
  // Times are charged from deployment bytes over the same rates.
  EXPECT_NEAR(sim.throughput_rps, real.throughput_rps, 1e-9 * real.throughput_rps);
  EXPECT_NEAR(sim.store_charged_s, real.store_charged_s, 1e-9 * (1 + real.store_charged_s));
}

TEST(SimStudy, ByteFreeStoreDecidesAndChargesAsAStoreOfRealSizedBlocks) {
  const SimProfile p = *find_sim_profile("study-h100");
  const auto w = bench::testing::tiny_workload(24, 10, 20, 4);
  const bench::StudyRunOptions sim = small_deployment(p);
  // The same deployment with 256 stored bytes per token: a 4 KiB block, a
  // page of payload on the volume like the simulator's 16 bytes.
  bench::StudyOptions real = sim.study;
  real.profile.stored_kv_bytes_per_token = 256;
  real.make_volume = [](uint64_t blocks) -> Result<std::shared_ptr<blk::BlockDevice>> {
    return std::shared_ptr<blk::BlockDevice>(
        std::make_shared<blk::MemDevice>(sparse_volume_bytes(blocks, kRegionBytes)));
  };
  for (StudyCase c : {StudyCase::kC, StudyCase::kD, StudyCase::kE, StudyCase::kF}) {
    const CaseResult r = run(w, c, real), s = run(w, c, sim.study);
    expect_same_run(r, s);
  }
}

TEST(SimStudy, EveryCaseRunsAndTheTiersDoWhatTheyAreFor) {
  const SimProfile p = *find_sim_profile("study-h100");
  const auto w = bench::testing::tiny_workload(24, 10, 20, 4);
  const bench::StudyRunOptions o = small_deployment(p);
  std::map<StudyCase, CaseResult> r;
  for (const auto& spec : bench::study_cases()) {
    r[spec.id] = run(w, spec.id, o.study);
    EXPECT_EQ(r[spec.id].completed, w.request_count()) << spec.letter;
  }
  EXPECT_EQ(r[StudyCase::kA].store_hit_blocks + r[StudyCase::kA].hbm_hit_blocks, 0u);
  EXPECT_GT(r[StudyCase::kB].hbm_hit_blocks, 0u);
  EXPECT_EQ(r[StudyCase::kB].store_hit_blocks, 0u);
  // RAM for 600 blocks evicts in C; the disk tier serves what it evicted.
  EXPECT_GT(r[StudyCase::kC].ram_evictions, 0u);
  EXPECT_GT(r[StudyCase::kD].store_blocks_from_disk, 0u);
  EXPECT_GT(r[StudyCase::kD].store_hit_blocks, r[StudyCase::kC].store_hit_blocks);
  EXPECT_EQ(r[StudyCase::kF].store_blocks_from_ram, 0u);
  // E is D with its disk reached over the remote link (another rate, so
  // another schedule, but the same tiers at work).
  EXPECT_GT(r[StudyCase::kE].store_blocks_from_disk, 0u);
  EXPECT_GT(r[StudyCase::kE].store_blocks_from_ram, 0u);
}

// Each device's costs besides bytes are charged to the loads that use it:
// the local disk's to D, the remote volume's to E, and the lookup to every
// case that consults the store. A case that does not use a device runs
// exactly as without its costs.
TEST(SimStudy, CostsPerOperationAreChargedToTheCasesThatPayThem) {
  SimProfile bare = *find_sim_profile("study-h100");
  bare.rates.lookup_s = 0;
  for (auto* ops : {&bare.rates.ram_ops, &bare.rates.disk_ops, &bare.rates.remote_ops,
                    &bare.rates.direct_ops}) {
    *ops = {};
  }
  const auto w = bench::testing::tiny_workload(24, 10, 20, 4);
  auto run_with = [&](StudyCase c, auto&& change) {
    SimProfile p = bare;
    change(p.rates);
    return run(w, c, small_deployment(p).study);
  };
  auto none = [](auto&) {};
  auto slow_disk = [](auto& r) { r.disk_ops = {0.02, 0.01, 4}; };
  auto slow_remote = [](auto& r) { r.remote_ops = {0.02, 0.01, 4}; };
  auto slow_lookup = [](auto& r) { r.lookup_s = 0.02; };
  std::map<StudyCase, CaseResult> base;
  for (StudyCase c : {StudyCase::kC, StudyCase::kD, StudyCase::kE}) base[c] = run_with(c, none);
  ASSERT_GT(base[StudyCase::kD].store_blocks_from_disk, 0u);
  ASSERT_GT(base[StudyCase::kE].store_blocks_from_disk, 0u);

  const CaseResult d_disk = run_with(StudyCase::kD, slow_disk);
  EXPECT_GT(d_disk.store_charged_s, base[StudyCase::kD].store_charged_s);
  EXPECT_LT(d_disk.throughput_rps, base[StudyCase::kD].throughput_rps);
  for (StudyCase c : {StudyCase::kC, StudyCase::kE}) {
    const CaseResult r = run_with(c, slow_disk);
    EXPECT_EQ(r.store_charged_s, base[c].store_charged_s) << bench::case_spec(c).letter;
    EXPECT_EQ(r.throughput_rps, base[c].throughput_rps) << bench::case_spec(c).letter;
  }
  const CaseResult e_remote = run_with(StudyCase::kE, slow_remote);
  EXPECT_GT(e_remote.store_charged_s, base[StudyCase::kE].store_charged_s);
  EXPECT_LT(e_remote.throughput_rps, base[StudyCase::kE].throughput_rps);
  EXPECT_EQ(run_with(StudyCase::kD, slow_remote).store_charged_s,
            base[StudyCase::kD].store_charged_s);
  // C has no disk: a lookup is all it pays besides RAM transfers.
  const CaseResult c_lookup = run_with(StudyCase::kC, slow_lookup);
  EXPECT_GT(c_lookup.store_charged_s, base[StudyCase::kC].store_charged_s);
  EXPECT_LT(c_lookup.throughput_rps, base[StudyCase::kC].throughput_rps);
}

// The costs are deployment seconds, charged once each: with transfers made
// free (rates of 1e18 bytes/s), a run's charged store time is exactly its
// lookups (C), or its disk-served blocks' operations (D).
TEST(SimStudy, CostsAreChargedInDeploymentSecondsOnce) {
  SimProfile free = *find_sim_profile("study-h100");
  for (double* rate : {&free.rates.ram_load_bytes_per_s, &free.rates.disk_load_bytes_per_s,
                       &free.rates.save_bytes_per_s, &free.rates.remote_load_bytes_per_s,
                       &free.rates.remote_save_bytes_per_s, &free.rates.direct_load_bytes_per_s}) {
    *rate = 1e18;
  }
  free.engine.pd_link_bytes_per_s = 1e18;  // also the host link, which caps the store's rates
  free.rates.lookup_s = 0;
  for (auto* ops : {&free.rates.ram_ops, &free.rates.disk_ops, &free.rates.remote_ops,
                    &free.rates.direct_ops}) {
    *ops = {};
  }
  const auto w = bench::testing::tiny_workload(24, 10, 20, 4);
  SimProfile lookups = free;
  lookups.rates.lookup_s = 0.02;
  const CaseResult c = run(w, StudyCase::kC, small_deployment(lookups).study);
  ASSERT_GT(c.store_lookups, 0u);
  EXPECT_NEAR(c.store_charged_s, 0.02 * static_cast<double>(c.store_lookups), 1e-6);

  SimProfile disk_ops = free;
  disk_ops.rates.disk_ops = {0, 0.004, 4};  // 1 ms a block
  const CaseResult d = run(w, StudyCase::kD, small_deployment(disk_ops).study);
  ASSERT_GT(d.store_blocks_from_disk, 0u);
  EXPECT_NEAR(d.store_charged_s, 0.001 * static_cast<double>(d.store_blocks_from_disk), 1e-6);
}

TEST(SimStudy, VolumeHoldsTheDeploymentsBlocks) {
  // A disk tier laid out on sparse_volume_bytes(n) has room for at least n
  // entries of a page of payload, and at most two regions more.
  for (uint64_t n : {1ull, 5000ull, 2'000'000ull}) {
    kv::StoreOptions so;
    so.max_object_bytes = 16;
    so.ram_bytes = 0;
    so.disk.region_bytes = kRegionBytes;
    so.disk.max_payload_bytes = 4096;
    so.disk.checkpoint_min_entry_bytes = 4096;
    so.volume = std::make_shared<SparsePageDevice>(sparse_volume_bytes(n, kRegionBytes));
    auto store = kv::Store::open(so);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    const uint64_t per_region = kRegionBytes / kv::disk::entry_bytes(16);
    const uint64_t entries = uint64_t{(*store)->local_stats().disk.region_count} * per_region;
    EXPECT_GE(entries, n);
    EXPECT_LE(entries, n + 2 * per_region);
  }
  // Larger volumes by the layout's arithmetic alone (a store of that size
  // would need gigabytes of index): the metadata grows with the volume.
  for (uint64_t n : {32'000'000ull, 500'000'000ull}) {
    const uint64_t bytes = sparse_volume_bytes(n, kRegionBytes);
    const auto layout = kv::disk::volume_layout(bytes, kRegionBytes, kv::disk::kPageBytes);
    const uint64_t entries =
        (bytes - layout.data_offset) / kRegionBytes * (kRegionBytes / kv::disk::entry_bytes(16));
    EXPECT_GE(entries, n);
    EXPECT_LE(entries, n + 2 * (kRegionBytes / kv::disk::entry_bytes(16)));
  }
}

}  // namespace
}  // namespace kvtier::sim
