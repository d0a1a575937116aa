#include "sim/sim_study.h"

#include <algorithm>
#include <thread>

#include "kv/disk_format.h"
#include "sim/sparse_page_device.h"

namespace kvtier::sim {

namespace {
// The study runner's disk-tier region size (bench/study_runner.cc).
constexpr uint64_t kRegionBytes = 16ull << 20;

uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }
}  // namespace

engine::EngineProfile sim_engine_profile(const SimProfile& p) {
  engine::EngineProfile e = p.engine;
  e.name = "sim:" + p.name;
  e.description = p.description;
  e.token_scale = 1.0;
  e.stored_kv_bytes_per_token = kStoredBytesPerToken;
  return e;
}

uint64_t sparse_volume_bytes(uint64_t blocks, uint64_t region_bytes) {
  // An entry of a few bytes: its header page and one payload page.
  const uint64_t data =
      round_up(std::max<uint64_t>(blocks, 1) * kv::disk::entry_bytes(1), region_bytes);
  // The checkpoint area has room for one entry per page of the volume
  // (kv/disk_tier_recovery.cc, plan_layout), and a region record each.
  const uint64_t pages = data / kv::disk::kPageBytes + 1;
  const uint64_t checkpoint = pages * sizeof(kv::disk::CheckpointEntry) +
                              (data / region_bytes + 1) * sizeof(kv::disk::CheckpointRegion);
  // Superblock page, the checkpoint rounded to 1 MiB, and one region spare
  // for the rounding of the layout.
  return data + round_up(kv::disk::kPageBytes + checkpoint + (1u << 20), 1u << 20) + region_bytes;
}

void configure_simulation(const SimProfile& p, bench::StudyRunOptions* o) {
  bench::StudyOptions& s = o->study;
  s.profile = sim_engine_profile(p);
  // Stored bytes x this = deployment bytes; modeled times are charged in
  // deployment bytes over the profile's rates.
  s.store_charge_scale = 0;
  s.modeled_store = p.rates;
  s.pd_transfer = bench::PdTransferMode::kModeled;
  // The deployment's replicas share one volume (or link): their reads queue.
  s.shared_disk = true;
  s.make_volume = [](uint64_t blocks) -> Result<std::shared_ptr<blk::BlockDevice>> {
    return std::shared_ptr<blk::BlockDevice>(
        std::make_shared<SparsePageDevice>(sparse_volume_bytes(blocks, kRegionBytes)));
  };
  o->measure_limits = false;
  o->parallel_runs = std::max(1u, std::thread::hardware_concurrency());
  o->disk_to_recompute = 0;
}

}  // namespace kvtier::sim
