// Test helpers of the PD frame (tests only): a valid frame and one malformed
// variant per error class, shared by the codec test and the receiver test.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "engine/kv_content.h"
#include "kv/test_payload.h"
#include "serve/pd_frame.h"

namespace kvtier::serve::testing {

inline kv::Key128 test_ns() { return {0x1234, 0x5678}; }
using kv::test_key;  // the tests' one key helper

// Limits small enough that each limit case is a short frame.
inline PdLimits test_limits() {
  PdLimits l;
  l.max_blocks = 8;
  l.max_block_bytes = 4096;
  l.max_payload_bytes = 16384;
  return l;
}

// A valid frame of `sizes.size()` blocks holding their keys' KV.
inline std::vector<std::byte> valid_frame(uint64_t request_id, std::vector<uint32_t> sizes,
                                          kv::Key128 ns = test_ns()) {
  std::vector<kv::Key128> keys;
  std::vector<std::vector<std::byte>> data;
  std::vector<ByteView> views;
  for (size_t i = 0; i < sizes.size(); ++i) {
    keys.push_back(test_key(i));
    data.emplace_back(sizes[i]);
    engine::fill_kv_block(keys.back(), data.back());
  }
  for (const auto& d : data) views.emplace_back(d);
  return encode_pd_frame(request_id, ns, keys, views);
}

template <typename T>
void patch(std::vector<std::byte>* f, size_t off, T v) {
  std::memcpy(f->data() + off, &v, sizeof v);
}
// Recomputes the header CRC after a patch, so that the check behind it runs.
inline void reseal_header(std::vector<std::byte>* f) {
  patch<uint32_t>(f, 44, crc32c(f->data(), 44));
}
// Same for the block table of a frame with `blocks` entries.
inline void reseal_table(std::vector<std::byte>* f, uint32_t blocks) {
  const size_t body = size_t{blocks} * kPdBlockEntrySize;
  patch<uint32_t>(f, kPdHeaderSize + body, crc32c(f->data() + kPdHeaderSize, body));
}

struct MalformedFrame {
  PdError expect;
  std::string what;
  std::vector<std::byte> bytes;
};

// One complete frame per error class a receiver detects by itself (the
// limits are test_limits(), the expected namespace test_ns()).
inline std::vector<MalformedFrame> malformed_frames() {
  std::vector<MalformedFrame> out;
  const auto base = valid_frame(7, {1024, 2048, 512});
  const size_t table_at = kPdHeaderSize, payload_at = kPdHeaderSize + pd_table_bytes(3);
  auto add = [&](PdError e, std::string what, auto mutate) {
    auto f = base;
    mutate(&f);
    out.push_back({e, std::move(what), std::move(f)});
  };
  add(PdError::kBadMagic, "magic", [](auto* f) { (*f)[0] ^= std::byte{1}; });
  add(PdError::kBadVersion, "version 2", [](auto* f) {
    patch<uint16_t>(f, 4, 2);
    reseal_header(f);
  });
  add(PdError::kHeaderChecksum, "request id flipped", [](auto* f) { (*f)[9] ^= std::byte{4}; });
  add(PdError::kBadReserved, "flags", [](auto* f) {
    patch<uint16_t>(f, 6, 1);
    reseal_header(f);
  });
  add(PdError::kTooManyBlocks, "block count 9", [](auto* f) {
    patch<uint32_t>(f, 32, 9);
    reseal_header(f);
  });
  add(PdError::kTooManyBlocks, "block count 2^32-1", [](auto* f) {
    patch<uint32_t>(f, 32, 0xFFFFFFFFu);
    reseal_header(f);
  });
  add(PdError::kPayloadTooLarge, "payload 2^63", [](auto* f) {
    patch<uint64_t>(f, 36, 1ull << 63);
    reseal_header(f);
  });
  add(PdError::kBlockTooLarge, "one block of 5000 bytes", [&](auto* f) {
    // Lengths 5000 + 100 + 150 * (header total 5250 <= 3 x 4096): only the
    // per-block limit catches it.
    patch<uint32_t>(f, table_at + 16, 5000);
    patch<uint32_t>(f, table_at + 24 + 16, 100);
    patch<uint32_t>(f, table_at + 48 + 16, 150);
    patch<uint64_t>(f, 36, 5250);
    reseal_header(f);
    reseal_table(f, 3);
  });
  add(PdError::kTableChecksum, "table length flipped",
      [&](auto* f) { (*f)[table_at + 16] ^= std::byte{2}; });
  add(PdError::kLengthMismatch, "header payload one byte short", [&](auto* f) {
    patch<uint64_t>(f, 36, 1024 + 2048 + 512 - 1);
    reseal_header(f);
  });
  add(PdError::kBlockChecksum, "payload byte flipped",
      [&](auto* f) { (*f)[payload_at + 1500] ^= std::byte{0x80}; });
  add(PdError::kWrongContent, "another key's bytes with a valid CRC", [&](auto* f) {
    // Block 1 carries block 0's key: its bytes and CRC are consistent, its
    // content is another key's.
    const auto k = test_key(0);
    patch<uint64_t>(f, table_at + 24, k.hi);
    patch<uint64_t>(f, table_at + 24 + 8, k.lo);
    reseal_table(f, 3);
  });
  add(PdError::kWrongNamespace, "namespace", [](auto* f) {
    patch<uint64_t>(f, 16, 99);
    reseal_header(f);
  });
  return out;
}

}  // namespace kvtier::serve::testing
