// The 16-byte form of a block key that the C API and the Python package use:
// hi then lo, each most significant byte first, so the bytes in order read as
// the key's hex form (Key128::to_hex()).
#pragma once

#include <cstdint>

#include "kvtier/block_key.h"

namespace kvtier::api {

inline void key_to_bytes(const kv::Key128& k, uint8_t out[16]) {
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<uint8_t>(k.hi >> (56 - 8 * i));
    out[8 + i] = static_cast<uint8_t>(k.lo >> (56 - 8 * i));
  }
}

inline kv::Key128 key_from_bytes(const uint8_t in[16]) {
  kv::Key128 k;
  for (int i = 0; i < 8; ++i) {
    k.hi = (k.hi << 8) | in[i];
    k.lo = (k.lo << 8) | in[8 + i];
  }
  return k;
}

}  // namespace kvtier::api
