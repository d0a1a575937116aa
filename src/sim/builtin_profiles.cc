// The built-in simulator profiles. Line numbers ("L224") are of the study's
// text (the reference study of KV-cache offload for agentic inference, cited
// in docs/simulator.md); "calibrated" marks a figure the study does not state.
#include "sim/sim_profile.h"

namespace kvtier::sim {

namespace {

SimProfile study_h100() {
  SimProfile p;
  p.name = "study-h100";
  p.description =
      "The study's deployment: H100 80 GB prefill and decode replicas with "
      "Qwen3-Coder-30B-A3B-Instruct-FP8 and BF16 KV, a Mooncake-style store with a RAM tier, "
      "a local RAID0 NVMe or remote NVMe-oF disk tier, and a direct (GDS) read path, over one "
      "400 Gb/s receive direction";
  p.prefill_tokens_per_s = 14850;
  p.sources["prefill_tokens_per_s"] = "study L224: measured prefill rate of 14,850 tokens/s";
  p.decode_s_per_token = 0.015;
  p.sources["decode_s_per_token"] =
      "calibrated: not stated; the testbed's H100 figure (15 ms per output token)";
  p.kv_bytes_per_token = 98304;
  p.sources["kv_bytes_per_token"] =
      "model: 48 layers x 4 KV heads x 128 dims x (K, V) x 2 bytes (BF16 KV, study L108); "
      "agrees with study L242 (1.43 GB/s recompute-equivalent / 14,850 tokens/s)";
  p.hbm_pool_tokens = 166512;
  p.sources["hbm_pool_tokens"] = "study L210: the HBM prefix pool holds 166,512 tokens per endpoint";
  p.pd_link_bytes_per_s = 50e9;
  p.sources["pd_link_bytes_per_s"] = "study L184: one 400 Gb/s receive direction";
  p.ram_load_bytes_per_s = 25e9;
  p.sources["ram_load_bytes_per_s"] =
      "calibrated: not stated; host RAM to HBM over PCIe Gen5 x16 at about 40% of its 64 GB/s";
  p.save_bytes_per_s = 25e9;
  p.sources["save_bytes_per_s"] = "calibrated: not stated; as ram_load_bytes_per_s, the other way";
  p.disk_load_bytes_per_s = 5.45e9;
  p.sources["disk_load_bytes_per_s"] = "study L242: effective rate of the local RAID0, 5.45 GB/s";
  p.remote_load_bytes_per_s = 5.78e9;
  p.sources["remote_load_bytes_per_s"] =
      "study L242: effective rate of the remote NVMe-oF target, 5.78 GB/s";
  p.remote_save_bytes_per_s = 25e9;
  p.sources["remote_save_bytes_per_s"] =
      "calibrated: not stated; puts land in the store's RAM tier first (as save_bytes_per_s)";
  p.direct_load_bytes_per_s = 8e9;
  p.sources["direct_load_bytes_per_s"] =
      "calibrated: not stated; study L182 gives F's run-average read rate (5.01 GiB/s), which "
      "the effective rate must exceed; fitted so that F's simulated average matches it "
      "(docs/simulator.md)";
  return p;
}

}  // namespace

const std::vector<SimProfile>& builtin_sim_profiles() {
  static const std::vector<SimProfile> profiles = {study_h100()};
  return profiles;
}

}  // namespace kvtier::sim
