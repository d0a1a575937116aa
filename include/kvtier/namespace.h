// Namespace: everything that must match for KV bytes to be reusable. Its
// digest seeds every block key, so two namespaces never share a block.
#pragma once

#include <cstdint>
#include <string>

#include "kvtier/block_key.h"
#include "kvtier/status.h"

namespace kvtier::kv {

struct Namespace {
  std::string model_id;        // e.g. "Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8"
  std::string model_revision;  // commit or version of the weights
  std::string tokenizer_id;    // tokenizer name and revision
  std::string kv_dtype;        // "bf16", "fp8_e4m3", ...
  std::string kv_layout;       // e.g. "NHD", "HND", or an engine-specific tag
  uint32_t tokens_per_block = 16;
  uint32_t tp_size = 1;
  uint32_t tp_rank = 0;
  uint32_t pp_size = 1;
  uint32_t pp_rank = 0;
  std::string tenant_salt;  // optional; empty = none
  KeyScheme scheme = KeyScheme::kXxh3_128;

  // The common case in one call: one model, no tensor or pipeline parallelism,
  // no tenant salt, the default key scheme.
  static Namespace of_model(std::string model_id, std::string model_revision,
                            std::string tokenizer_id, uint32_t tokens_per_block = 16,
                            std::string kv_dtype = "bf16", std::string kv_layout = "NHD");

  // Checks the fields: non-empty ids, tokens_per_block > 0, ranks < sizes.
  Status validate() const;
  // Digest of the canonical encoding of all fields (docs/block-keys.md),
  // computed with this namespace's scheme.
  Key128 digest() const;
  // "model@rev/tok/dtype/layout/b16/tp0of1/pp0of1" for logs.
  std::string describe() const;
};

}  // namespace kvtier::kv
