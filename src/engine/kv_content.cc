#include "engine/kv_content.h"

#include <cstring>

namespace kvtier::engine {

namespace {

// One 64-bit word per 8 bytes: a cheap mix of the key and the word index, so
// that generating and checking run near memory speed.
inline uint64_t word_at(const kv::Key128& key, uint64_t i) {
  uint64_t x = key.lo ^ (i * 0x9E3779B97F4A7C15ull);
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  return x ^ key.hi ^ (x >> 32);
}

}  // namespace

// Every stored, loaded and transferred block is generated or checked here,
// so the loops are vectorised: GCC clones them for AVX-512 (whose 64-bit
// multiply makes word_at one vector pass) and AVX2, picked at load time by
// the CPU, and the file is built with -O3 (engine/CMakeLists.txt), since
// -O2 does not vectorise these loops. The bytes are the same on every path.
// Not under ThreadSanitizer: the clones' resolver runs while the dynamic
// loader relocates, before the sanitizer's runtime is up, and crashes.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define KVTIER_KV_CONTENT_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define KVTIER_KV_CONTENT_CLONES
#endif

KVTIER_KV_CONTENT_CLONES
void fill_kv_block(const kv::Key128& key, MutableByteView out) {
  const size_t words = out.size() / 8;
  auto* p = out.data();
  for (size_t i = 0; i < words; ++i) {
    uint64_t w = word_at(key, i);
    std::memcpy(p + i * 8, &w, 8);
  }
  uint64_t tail = word_at(key, words);
  std::memcpy(p + words * 8, &tail, out.size() - words * 8);
}

KVTIER_KV_CONTENT_CLONES
bool verify_kv_block(const kv::Key128& key, ByteView data) {
  const size_t words = data.size() / 8;
  const auto* p = data.data();
  uint64_t diff = 0;
  for (size_t i = 0; i < words; ++i) {
    uint64_t w;
    std::memcpy(&w, p + i * 8, 8);
    diff |= w ^ word_at(key, i);
  }
  uint64_t tail = word_at(key, words);
  return diff == 0 && std::memcmp(p + words * 8, &tail, data.size() - words * 8) == 0;
}

}  // namespace kvtier::engine
