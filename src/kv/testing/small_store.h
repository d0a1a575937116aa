// A small real Store for tests: objects of `object_bytes`, a RAM tier of
// `ram_slots` such objects and 1 MiB disk regions on the given volume, so a
// test fills tiers and crosses regions in a few puts. Tests change what they
// need on the returned options before opening.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "blk/block_device.h"
#include "kv/store.h"

namespace kvtier::kv::testing {

inline constexpr uint32_t kSmallObject = 64 << 10;

inline StoreOptions small_store_options(std::shared_ptr<blk::BlockDevice> volume,
                                        uint64_t ram_slots = 16,
                                        uint32_t object_bytes = kSmallObject) {
  StoreOptions o;
  o.ram_bytes = ram_slots * object_bytes;
  o.max_object_bytes = object_bytes;
  o.volume = std::move(volume);
  o.disk.region_bytes = 1 << 20;
  o.disk.flush_chunk_bytes = 256 << 10;
  o.disk.read_depth = 8;
  o.io_timeout_ms = 500;
  return o;
}

// Opens `o` (a failed open fails the test and returns null).
inline std::unique_ptr<Store> open_store(const StoreOptions& o) {
  auto s = Store::open(o);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(s).value() : nullptr;
}

}  // namespace kvtier::kv::testing
