// The simulator's study: the testbed's own study runner (bench/study_runner.h)
// with its own policies (router, session schedulers, HBM prefix pools, and
// the real kv::Store's index, RAM-tier eviction, demotion, leases and disk
// region log), but no payload bytes: each block of the deployment is stored
// as one byte per token, the disk tier's volume is a SparsePageDevice, and
// every transfer is charged from the profile's rates instead of measured. So
// the study's full scale (real token counts, a 256 GiB RAM tier, terabytes of
// disk) runs on one machine in about a minute (docs/simulator.md).
#pragma once

#include <cstdint>

#include "bench/study_driver.h"
#include "sim/sim_profile.h"

namespace kvtier::sim {

// Bytes each workload token carries in the simulated store: blocks of a few
// bytes keep the RAM tier and the disk entries tiny while every count
// (slots, entries, blocks loaded) is the deployment's.
inline constexpr uint64_t kStoredBytesPerToken = 1;

// The engine profile of a simulation of `p`: the deployment's figures at
// token scale 1 (real token counts), kStoredBytesPerToken stored per token.
engine::EngineProfile sim_engine_profile(const SimProfile& p);

// Sets `o` up to simulate `p`: the engine profile, modeled store rates and
// PD transfer, sparse volumes, and no measurement of this machine's limits.
// Capacities (ram_bytes, disk_bytes, hbm_pool_tokens) are left as given.
void configure_simulation(const SimProfile& p, bench::StudyRunOptions* o);

// The run options of a simulation with the study's connector (the whole
// matched prefix loaded, then the rest computed): configure_simulation()
// plus LoadPolicy::kLoadAll. The fleet study and the sweep start from it.
bench::StudyRunOptions study_connector_run(const SimProfile& p);

// Volume bytes the disk tier needs to hold `blocks` entries of at most a page
// of payload in regions of `region_bytes`, with its superblock and
// checkpoint area.
uint64_t sparse_volume_bytes(uint64_t blocks, uint64_t region_bytes);

// StudyOptions::make_volume of a simulation: a SparsePageDevice of
// sparse_volume_bytes() for the study runner's regions.
std::function<Result<std::shared_ptr<blk::BlockDevice>>(uint64_t blocks)> sparse_volume_factory();

}  // namespace kvtier::sim
