// A simulator profile: the hardware and model of a deployment, as the rates
// the simulator charges (docs/simulator.md). Every figure carries its source
// (the study's text, a datasheet, or "calibrated: why"), so a reader can tell
// a stated number from a fitted one.
//
// Profiles are JSON files ("kvtier sim study --sim-profile FILE"); the
// built-in "study-h100" is the study's own hardware.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace kvtier::sim {

struct SimProfile {
  std::string name;
  std::string description;
  // The GPU and model (engine::EngineProfile's deployment figures).
  double prefill_tokens_per_s = 14850;
  double decode_s_per_token = 0.015;
  uint64_t kv_bytes_per_token = 96u << 10;
  uint64_t hbm_pool_tokens = 166512;
  double pd_link_bytes_per_s = 50e9;
  // The store's tiers, in deployment bytes per second.
  double ram_load_bytes_per_s = 0;     // a RAM-tier hit into the prefill's HBM
  double save_bytes_per_s = 0;         // a put of a freshly computed block
  double disk_load_bytes_per_s = 0;    // a disk-tier hit (local NVMe, through RAM)
  double remote_load_bytes_per_s = 0;  // case E: a disk-tier hit over NVMe-oF
  double remote_save_bytes_per_s = 0;  // case E: a put that reaches the remote volume
  double direct_load_bytes_per_s = 0;  // case F: a direct (GDS) read of the volume
  // Where each figure comes from, by field name.
  std::map<std::string, std::string> sources;

  nlohmann::json json() const;
  // Every rate positive and every field's source given; else says which.
  Status check() const;
};

// Parses a profile; unknown keys and missing fields are errors that name them.
Result<SimProfile> parse_sim_profile(const std::string& json_text);
Result<SimProfile> load_sim_profile(const std::string& path);

const std::vector<SimProfile>& builtin_sim_profiles();
std::optional<SimProfile> find_sim_profile(const std::string& name);

}  // namespace kvtier::sim
