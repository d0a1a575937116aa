// Block keys: see block_key.h and docs/block-keys.md for the byte encoding.
#include "kv/block_key.h"

#include <openssl/evp.h>
#include <openssl/sha.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <memory>

namespace kvtier::kv {
namespace {

// Domain tag, first byte of every chain-link message. The namespace encoding
// starts with ASCII 'k' (0x6b), so the three message kinds never share bytes.
constexpr uint8_t kTagTokens = 0x01;
constexpr uint8_t kTagId = 0x02;

// tag (1) || ns_digest (16) || prev (16)
constexpr size_t kHeaderBytes = 33;
// Messages up to this size are built on the stack and hashed in one shot
// (1,015 u32 tokens). Larger blocks stream through a context that is created
// once per chain and reused for every block.
constexpr size_t kStackBytes = 4096;

inline void put_u32_le(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v >> 16);
  p[3] = static_cast<uint8_t>(v >> 24);
}

inline void put_u64_le(uint8_t* p, uint64_t v) {
  put_u32_le(p, static_cast<uint32_t>(v));
  put_u32_le(p + 4, static_cast<uint32_t>(v >> 32));
}

inline uint64_t get_u64_be(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

inline void put_key_le(uint8_t* p, const Key128& k) {
  put_u64_le(p, k.hi);
  put_u64_le(p + 8, k.lo);
}

inline void put_header(uint8_t* p, uint8_t tag, const Key128& ns, const Key128& prev) {
  p[0] = tag;
  put_key_le(p + 1, ns);
  put_key_le(p + 17, prev);
}

inline Key128 from_xxh(XXH128_hash_t h) { return Key128{h.high64, h.low64}; }

inline Key128 from_sha(const uint8_t* md) { return Key128{get_u64_be(md), get_u64_be(md + 8)}; }

bool known_scheme(KeyScheme s) { return s == KeyScheme::kXxh3_128 || s == KeyScheme::kSha256; }

struct XxhStateFree {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};
struct EvpCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

// Hashes chain links. Small blocks: message assembled in a stack buffer and
// hashed in one call, no heap. Large blocks: streamed in chunks through a
// context allocated on first use and reused for the rest of the chain.
class LinkHasher {
 public:
  explicit LinkHasher(KeyScheme scheme) : scheme_(scheme) {}

  Key128 tokens_link(const Key128& ns, const Key128& prev, std::span<const uint32_t> tokens) {
    if (!known_scheme(scheme_)) return Key128{};
    const size_t payload = tokens.size() * 4;
    if (payload <= kStackBytes - kHeaderBytes) {
      uint8_t buf[kStackBytes];
      put_header(buf, kTagTokens, ns, prev);
      uint8_t* p = buf + kHeaderBytes;
      for (uint32_t t : tokens) {
        put_u32_le(p, t);
        p += 4;
      }
      return digest128(scheme_, std::span<const uint8_t>(buf, kHeaderBytes + payload));
    }
    return streamed(ns, prev, tokens);
  }

  Key128 id_link(const Key128& ns, const Key128& prev, uint64_t id) {
    if (!known_scheme(scheme_)) return Key128{};
    uint8_t buf[kHeaderBytes + 8];
    put_header(buf, kTagId, ns, prev);
    put_u64_le(buf + kHeaderBytes, id);
    return digest128(scheme_, std::span<const uint8_t>(buf, sizeof(buf)));
  }

 private:
  Key128 streamed(const Key128& ns, const Key128& prev, std::span<const uint32_t> tokens) {
    uint8_t buf[kStackBytes];
    put_header(buf, kTagTokens, ns, prev);
    begin();
    update(buf, kHeaderBytes);
    constexpr size_t kChunk = kStackBytes / 4;
    for (size_t i = 0; i < tokens.size(); i += kChunk) {
      const size_t n = std::min(kChunk, tokens.size() - i);
      for (size_t j = 0; j < n; ++j) put_u32_le(buf + 4 * j, tokens[i + j]);
      update(buf, 4 * n);
    }
    return finish();
  }

  void begin() {
    if (scheme_ == KeyScheme::kXxh3_128) {
      if (!xxh_) xxh_.reset(XXH3_createState());
      XXH3_128bits_reset(xxh_.get());
    } else {
      if (!evp_) evp_.reset(EVP_MD_CTX_new());
      EVP_DigestInit_ex(evp_.get(), EVP_sha256(), nullptr);
    }
  }
  void update(const uint8_t* p, size_t n) {
    if (scheme_ == KeyScheme::kXxh3_128) {
      XXH3_128bits_update(xxh_.get(), p, n);
    } else {
      EVP_DigestUpdate(evp_.get(), p, n);
    }
  }
  Key128 finish() {
    if (scheme_ == KeyScheme::kXxh3_128) return from_xxh(XXH3_128bits_digest(xxh_.get()));
    uint8_t md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(evp_.get(), md, &len);
    return from_sha(md);
  }

  KeyScheme scheme_;
  std::unique_ptr<XXH3_state_t, XxhStateFree> xxh_;
  std::unique_ptr<EVP_MD_CTX, EvpCtxFree> evp_;
};

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string Key128::to_hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[i] = kDigits[(hi >> (60 - 4 * i)) & 0xf];
    out[16 + i] = kDigits[(lo >> (60 - 4 * i)) & 0xf];
  }
  return out;
}

std::optional<Key128> key128_from_hex(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  Key128 k;
  for (size_t i = 0; i < 32; ++i) {
    const int v = hex_value(hex[i]);
    if (v < 0) return std::nullopt;
    uint64_t& half = i < 16 ? k.hi : k.lo;
    half = (half << 4) | static_cast<uint64_t>(v);
  }
  return k;
}

const char* key_scheme_name(KeyScheme s) {
  switch (s) {
    case KeyScheme::kXxh3_128:
      return "xxh3_128";
    case KeyScheme::kSha256:
      return "sha256";
  }
  return "unknown";
}

Key128 digest128(KeyScheme scheme, std::span<const uint8_t> bytes) {
  switch (scheme) {
    case KeyScheme::kXxh3_128:
      return from_xxh(XXH3_128bits(bytes.data(), bytes.size()));
    case KeyScheme::kSha256: {
      uint8_t md[SHA256_DIGEST_LENGTH];
      SHA256(bytes.data(), bytes.size(), md);
      return from_sha(md);
    }
  }
  return Key128{};
}

Key128 next_block_key(KeyScheme scheme, const Key128& ns_digest, const Key128& prev,
                      std::span<const uint32_t> tokens) {
  LinkHasher h(scheme);
  return h.tokens_link(ns_digest, prev, tokens);
}

std::vector<Key128> chain_block_keys(KeyScheme scheme, const Key128& ns_digest,
                                     uint32_t tokens_per_block, std::span<const uint32_t> tokens) {
  std::vector<Key128> keys;
  if (tokens_per_block == 0) return keys;
  const size_t n = tokens.size() / tokens_per_block;
  keys.reserve(n);
  LinkHasher h(scheme);
  Key128 prev{};
  for (size_t i = 0; i < n; ++i) {
    prev = h.tokens_link(ns_digest, prev, tokens.subspan(i * tokens_per_block, tokens_per_block));
    keys.push_back(prev);
  }
  return keys;
}

std::vector<Key128> chain_block_keys_from_ids(KeyScheme scheme, const Key128& ns_digest,
                                              std::span<const uint64_t> block_ids) {
  return chain_block_keys_from_ids(scheme, ns_digest, Key128{}, block_ids);
}

std::vector<Key128> chain_block_keys_from_ids(KeyScheme scheme, const Key128& ns_digest,
                                              const Key128& first_prev,
                                              std::span<const uint64_t> block_ids) {
  std::vector<Key128> keys;
  keys.reserve(block_ids.size());
  LinkHasher h(scheme);
  Key128 prev = first_prev;
  for (uint64_t id : block_ids) {
    prev = h.id_link(ns_digest, prev, id);
    keys.push_back(prev);
  }
  return keys;
}

}  // namespace kvtier::kv
