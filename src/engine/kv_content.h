// Deterministic KV bytes: the content of a block is a function of its key, so
// the testbed needs no real model to produce KV and can verify every load byte
// for byte (a load that returned another block's bytes, stale bytes or torn
// bytes fails the check).
#pragma once

#include "common/buffer.h"
#include "kv/block_key.h"

namespace kvtier::engine {

// Fills `out` with the bytes of block `key`.
void fill_kv_block(const kv::Key128& key, MutableByteView out);
// True when `data` is exactly the bytes fill_kv_block would produce.
bool verify_kv_block(const kv::Key128& key, ByteView data);

}  // namespace kvtier::engine
