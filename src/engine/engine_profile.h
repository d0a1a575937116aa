// Named hardware/model profiles of the ModeledEngine: how long a GPU takes to
// prefill and decode, how many KV bytes a token has, and, for profiles meant
// for small machines, how the run is scaled down (see docs/study.md, "Scaling
// rule"). Profiles are plain values; `find_engine_profile` looks one up by name.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvtier::engine {

struct EngineProfile {
  std::string name;
  std::string description;
  // The modeled deployment (the study's numbers for the H100 profile).
  uint64_t kv_bytes_per_token = 96u << 10;  // BF16 KV of the model, all layers
  double prefill_tokens_per_s = 14850;      // per prefill replica
  double decode_s_per_token = 0.015;        // per request, per output token
  double pd_link_bytes_per_s = 50e9;        // prefill-to-decode transfer link
  // Local prefix pool per prefill replica: the study's measured vLLM figure
  // for this model on one H100 80 GB (166,512 tokens per endpoint).
  uint64_t hbm_pool_tokens = 166512;
  // Scaling for small machines. One workload token stands for 1/token_scale
  // real tokens (the workload is generated with length_scale = token_scale),
  // and one workload token carries stored_kv_bytes_per_token real bytes in
  // the store. 1 and kv_bytes_per_token for an unscaled run.
  double token_scale = 1.0;
  uint64_t stored_kv_bytes_per_token = 96u << 10;

  // Real bytes of the modeled deployment that one stored byte stands for:
  // kv_bytes_per_token / (token_scale * stored_kv_bytes_per_token). Measured
  // store wall time is multiplied by it when charged to the virtual clock,
  // and tier capacities given in deployment bytes are divided by it.
  double byte_scale() const {
    return static_cast<double>(kv_bytes_per_token) /
           (token_scale * static_cast<double>(stored_kv_bytes_per_token));
  }
  // Modeled seconds to prefill `workload_tokens` tokens of the workload.
  double prefill_seconds(uint64_t workload_tokens) const {
    return static_cast<double>(workload_tokens) / token_scale / prefill_tokens_per_s;
  }
  double decode_seconds(uint64_t workload_output_tokens) const {
    return static_cast<double>(workload_output_tokens) / token_scale * decode_s_per_token;
  }
  // Deployment tokens that `workload_tokens` stand for.
  double real_tokens(uint64_t workload_tokens) const {
    return static_cast<double>(workload_tokens) / token_scale;
  }
};

// Built-in profiles: "h100-qwen3-coder-30b" (unscaled) and
// "h100-qwen3-coder-30b-scaled" (the same deployment, scaled for a 2-core VM).
const std::vector<EngineProfile>& builtin_engine_profiles();
std::optional<EngineProfile> find_engine_profile(const std::string& name);

}  // namespace kvtier::engine
