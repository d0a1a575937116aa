// Reading a disk tier's volume image directly, for tests that damage one
// block's entry behind the store's back.
#pragma once

#include <cstring>
#include <vector>

#include "common/buffer.h"
#include "kv/block_key.h"
#include "kv/disk_format.h"

namespace kvtier::kv::testing {

// Byte offsets in `raw` of every entry header of `key` (current or stale),
// lowest first.
inline std::vector<size_t> entry_offsets(ByteView raw, const Key128& key) {
  std::vector<size_t> found;
  for (size_t off = 0; off + sizeof(disk::EntryHeader) <= raw.size(); off += disk::kPageBytes) {
    disk::EntryHeader h;
    std::memcpy(&h, raw.data() + off, sizeof(h));
    if (h.magic == disk::kEntryMagic && h.key_hi == key.hi && h.key_lo == key.lo) {
      found.push_back(off);
    }
  }
  return found;
}

}  // namespace kvtier::kv::testing
