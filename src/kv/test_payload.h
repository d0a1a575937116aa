// Deterministic block payloads for tests and benchmarks: the bytes of a
// block follow from its key, so any reader can verify what it got.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "common/buffer.h"
#include "kv/block_key.h"
#include "kv/namespace.h"

namespace kvtier::kv {

inline void fill_payload(const Key128& key, MutableByteView out) {
  uint64_t s = key.hi ^ (key.lo * 0x9E3779B97F4A7C15ull) ^ out.size();
  if (s == 0) s = 1;
  size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    std::memcpy(out.data() + i, &s, 8);
  }
  for (; i < out.size(); ++i) out[i] = static_cast<std::byte>(s >> (8 * (i & 7)));
}

inline bool payload_matches(const Key128& key, ByteView got) {
  AlignedBuffer expect(got.size());
  fill_payload(key, expect.view());
  return std::memcmp(expect.data(), got.data(), got.size()) == 0;
}

// A key for tests: any non-zero 128-bit value will do.
inline Key128 test_key(uint64_t i) {
  return Key128{0xA5A5000000000000ull ^ (i * 0x9E3779B97F4A7C15ull) ^ (i << 1 | 1),
                i * 0xC2B2AE3D27D4EB4Full + 7};
}

// A namespace for tests: BF16 NHD KV of `model` at revision r1 ("tok"
// tokenizer). Tests that need two namespaces pass two model names.
inline Namespace test_namespace(const std::string& model = "test-model") {
  return Namespace::of_model(model, "r1", "tok");
}

}  // namespace kvtier::kv
