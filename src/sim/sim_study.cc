#include "sim/sim_study.h"

#include <algorithm>
#include <thread>

#include "kv/disk_format.h"
#include "sim/sparse_page_device.h"

namespace kvtier::sim {

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
      align_up(std::max<uint64_t>(blocks, 1) * kv::disk::entry_bytes(1), region_bytes);
  // The disk tier's layout puts its metadata (which grows with the volume)
  // before the regions: grow the volume until the regions that follow it
  // hold `data`. The checkpoint has room for an entry per page, as the study
  // runner asks (kv/disk_format.h, volume_layout).
  uint64_t capacity = data;
  for (;;) {
    const uint64_t need =
        kv::disk::volume_layout(capacity, region_bytes, kv::disk::kPageBytes).data_offset + data;
    if (capacity >= need) return capacity;
    capacity = need;
  }
}

std::function<Result<std::shared_ptr<blk::BlockDevice>>(uint64_t)> sparse_volume_factory() {
  return [](uint64_t blocks) -> Result<std::shared_ptr<blk::BlockDevice>> {
    return std::shared_ptr<blk::BlockDevice>(
        std::make_shared<SparsePageDevice>(sparse_volume_bytes(blocks, bench::kStudyRegionBytes)));
  };
}

void configure_simulation(const SimProfile& p, bench::StudyRunOptions* o) {
  bench::StudyOptions& s = o->study;
  s.profile = sim_engine_profile(p);
  // Stored bytes x this = deployment bytes; modeled times are charged in
  // deployment bytes over the profile's rates.
  s.store_charge_scale = 0;
  s.modeled_store = p.rates;
  // Store nodes' transfers together are capped by the prefill host's link,
  // the one of its prefill-to-decode transfers (the study's 400 Gb/s).
  if (s.modeled_store->host_link_bytes_per_s == 0) {
    s.modeled_store->host_link_bytes_per_s = p.engine.pd_link_bytes_per_s;
  }
  s.pd_transfer = bench::PdTransferMode::kModeled;
  // The deployment's replicas share one volume (or link): their reads queue.
  s.shared_disk = true;
  s.make_volume = sparse_volume_factory();
  s.background_promotion = false;  // the same decisions on every run
  o->measure_limits = false;
  o->parallel_runs = std::max(1u, std::thread::hardware_concurrency());
  o->disk_to_recompute = 0;
}

bench::StudyRunOptions study_connector_run(const SimProfile& p) {
  bench::StudyRunOptions run;
  configure_simulation(p, &run);
  run.study.load_policy = bench::LoadPolicy::kLoadAll;
  return run;
}

}  // namespace kvtier::sim
