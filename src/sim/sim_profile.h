// A simulator profile: the hardware and model of a deployment, as the rates
// the simulator charges (docs/simulator.md). Every figure carries its source
// (the study's text, a datasheet, or "calibrated: why"), so a reader can tell
// a stated number from a fitted one.
//
// Profiles are JSON files (`kvtier sim study --profile-file FILE`); the
// built-in ones are the files of src/sim/profiles/, compiled in ("study-h100"
// is the study's own hardware).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/study_config.h"
#include "common/status.h"
#include "engine/engine_profile.h"

namespace kvtier::sim {

struct SimProfile {
  std::string name;
  std::string description;
  // The GPU and model: prefill and decode rates, KV bytes per token, the HBM
  // prefix pool and the prefill-to-decode link (deployment figures; the
  // scaling fields are the simulator's, set by sim_engine_profile()).
  engine::EngineProfile engine;
  // The store's tiers, in deployment bytes per second: RAM loads and saves,
  // local disk loads, case E's remote loads and saves, case F's direct reads.
  bench::StudyOptions::ModeledStoreRates rates;
  // Where each figure comes from, by its name in the file.
  std::map<std::string, std::string> sources;

  nlohmann::json json() const;
  // Every figure positive and sourced; else says which is not.
  Status check() const;
};

// Parses a profile; unknown keys and missing fields are errors that name them.
Result<SimProfile> parse_sim_profile(const std::string& json_text);
Result<SimProfile> load_sim_profile(const std::string& path);

const std::vector<SimProfile>& builtin_sim_profiles();
std::optional<SimProfile> find_sim_profile(const std::string& name);
// The profile in `file` when it is not empty, else the built-in `name`; an
// unknown name's error lists the built-in ones.
Result<SimProfile> resolve_sim_profile(const std::string& name, const std::string& file);

}  // namespace kvtier::sim
