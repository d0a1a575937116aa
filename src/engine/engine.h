// Engine: what a prefill or decode replica asks of the model runtime. The
// testbed has no GPU; ModeledEngine answers from a named profile
// (engine_profile.h), modelling GPU time as time the replica is busy, while
// the KV bytes it saves and loads are real (kv_content.h). The KV connector
// and the replicas do not know which engine they talk to.
#pragma once

#include <cstdint>

#include "engine/engine_profile.h"

namespace kvtier::engine {

class Engine {
 public:
  virtual ~Engine() = default;
  // Seconds of GPU time to prefill `new_tokens` after `cached_tokens` of
  // prefix were reused (workload tokens).
  virtual double prefill_seconds(uint64_t new_tokens, uint64_t cached_tokens) const = 0;
  // Seconds of GPU time for one request to produce `output_tokens`.
  virtual double decode_seconds(uint64_t output_tokens) const = 0;
  // Seconds to move the KV of `prompt_tokens` from a prefill to a decode replica.
  virtual double pd_transfer_seconds(uint64_t prompt_tokens) const = 0;
  // Bytes the store holds per workload token.
  virtual uint64_t stored_kv_bytes_per_token() const = 0;
  virtual const EngineProfile& profile() const = 0;
};

// GPU time from the profile: prefill is linear in the tokens computed (the
// study's reported rate already averages attention over its prompt mix).
class ModeledEngine final : public Engine {
 public:
  explicit ModeledEngine(EngineProfile profile) : profile_(std::move(profile)) {}
  double prefill_seconds(uint64_t new_tokens, uint64_t) const override {
    return profile_.prefill_seconds(new_tokens);
  }
  double decode_seconds(uint64_t output_tokens) const override {
    return profile_.decode_seconds(output_tokens);
  }
  double pd_transfer_seconds(uint64_t prompt_tokens) const override {
    return profile_.real_tokens(prompt_tokens) * static_cast<double>(profile_.kv_bytes_per_token) /
           profile_.pd_link_bytes_per_s;
  }
  uint64_t stored_kv_bytes_per_token() const override { return profile_.stored_kv_bytes_per_token; }
  const EngineProfile& profile() const override { return profile_; }

 private:
  EngineProfile profile_;
};

}  // namespace kvtier::engine
