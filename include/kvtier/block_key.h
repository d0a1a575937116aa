// Block keys: the 128-bit chained digests that name KV blocks.
//
//   key[i] = H(ns_digest, key[i-1], tokens of block i)      (key[-1] = 0)
//
// Only full blocks get keys, so equal keys mean equal prefixes under equal
// namespaces. The byte encoding fed to H is fixed and little-endian so other
// languages can reproduce keys; see docs/block-keys.md for the encoding and
// golden vectors.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::kv {

struct Key128 {
  uint64_t hi = 0;
  uint64_t lo = 0;
  friend bool operator==(const Key128&, const Key128&) = default;
  bool is_zero() const { return hi == 0 && lo == 0; }
  std::string to_hex() const;  // 32 lowercase hex digits, hi first
};

struct Key128Hash {
  size_t operator()(const Key128& k) const {
    return static_cast<size_t>(k.lo ^ (k.hi * 0x9E3779B97F4A7C15ull));
  }
};

enum class KeyScheme : uint8_t {
  kXxh3_128 = 1,  // default: fast, not collision resistant against an adversary
  kSha256 = 2,    // first 128 bits of SHA-256, for hostile multi-tenant deployments
};

// Inverse of Key128::to_hex(): exactly 32 hex digits (either case), hi first;
// nullopt for anything else.
std::optional<Key128> key128_from_hex(std::string_view hex);

// "xxh3_128", "sha256", or "unknown".
const char* key_scheme_name(KeyScheme s);

// The 128-bit digest of `bytes` under `scheme`, as used for namespace digests
// and chain links: XXH3-128 gives {hi = high64, lo = low64}; SHA-256 gives the
// first 16 digest bytes read as two big-endian u64s (hi, lo). Either way
// to_hex() equals the first 32 hex digits of the usual hexdigest.
Key128 digest128(KeyScheme scheme, std::span<const uint8_t> bytes);

// Chain functions (and digest128) given a scheme other than the two above return zero keys
// (Namespace::validate() rejects such schemes before they get here).

// One link of the chain. `tokens` are the token ids of exactly one block.
Key128 next_block_key(KeyScheme scheme, const Key128& ns_digest, const Key128& prev,
                      std::span<const uint32_t> tokens);

// Keys of every full block of `tokens` (tokens.size() / tokens_per_block of
// them); a trailing partial block gets no key. tokens_per_block == 0 gives
// no keys.
std::vector<Key128> chain_block_keys(KeyScheme scheme, const Key128& ns_digest,
                                     uint32_t tokens_per_block, std::span<const uint32_t> tokens);

// For traces that already carry one id per block (Mooncake hash_ids,
// kv-cache-tester): each id stands for the block's tokens in the chain.
std::vector<Key128> chain_block_keys_from_ids(KeyScheme scheme, const Key128& ns_digest,
                                              std::span<const uint64_t> block_ids);
// The same chain continued after the block whose key is `prev` (a zero key:
// from the start, as above). A context that grows turn by turn hashes only
// its new blocks: keys(ids[0..n)) followed by
// chain_block_keys_from_ids(scheme, ns, keys.back(), ids[n..]) equals
// keys(ids).
std::vector<Key128> chain_block_keys_from_ids(KeyScheme scheme, const Key128& ns_digest,
                                              const Key128& prev,
                                              std::span<const uint64_t> block_ids);

}  // namespace kvtier::kv

template <>
struct std::hash<kvtier::kv::Key128> : kvtier::kv::Key128Hash {};
