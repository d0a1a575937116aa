// KvConnector: the prefill replica's link to the shared store. It asks the
// store for the longest cached prefix of a prompt's block keys, loads the
// part the replica does not already hold, verifies every loaded block byte
// for byte against the key's deterministic content, and saves the blocks the
// store lacks. Each operation reports the wall time of the store calls alone
// (content generation and verification are testbed work, not store work, and
// are excluded), which the study runner charges to its virtual clock.
//
// Thread-safety: one connector per replica thread (it owns reusable buffers).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "common/buffer.h"
#include "kvtier/kv_store.h"

namespace kvtier::engine {

struct LoadOutcome {
  size_t store_matched = 0;    // leading blocks the store reported present
  size_t load_from = 0;        // first block read (`from`, or what choose_start said)
  size_t loaded = 0;           // leading blocks loaded and verified (from `load_from`)
  size_t from_ram = 0;         // of the loaded blocks, served by the RAM tier
  size_t from_disk = 0;        // of the loaded blocks, served by the disk tier
  size_t misses = 0;           // matched blocks that were gone at read time
  size_t verify_failures = 0;  // blocks whose bytes were not the key's (never used)
  uint64_t bytes = 0;          // payload bytes read
  double wall_s = 0;           // match + reads
  // The reads of blocks the match placed on disk only, timed on their own:
  // whether a disk-served prefix beats recomputation is decided by this rate,
  // not by the blend with RAM-served blocks.
  uint64_t disk_bytes = 0;
  double disk_wall_s = 0;
  double ram_wall_s = 0;  // the reads of blocks the match placed in RAM
};

// Given the match, where loading starts (at least `from`): blocks before it
// are recomputed by the caller while the rest loads (engine/load_planner.h).
using LoadStartChooser = std::function<size_t(const kv::MatchResult&)>;

struct SaveOutcome {
  size_t stored = 0, deduplicated = 0, refused = 0;
  uint64_t bytes = 0;
  double wall_s = 0;
};

class KvConnector {
 public:
  KvConnector(KvStore* store, uint16_t ns, uint32_t block_bytes);

  // Longest prefix the store has (blocks), without loading.
  Result<kv::MatchResult> lookup(std::span<const kv::Key128> keys);
  // Loads blocks [from, store match) of `keys`; `loaded` counts the leading
  // run of verified blocks, so `from + loaded` blocks of prefix are usable.
  // Blocks the match found in RAM and those it found on disk only are read
  // in two batches, so that each tier's read time is measured apart. With
  // `choose_start`, loading starts where it says instead of at `from`.
  Result<LoadOutcome> load_prefix(std::span<const kv::Key128> keys, size_t from,
                                  const LoadStartChooser& choose_start = {});
  // Saves `keys` (content generated from each key) in one batch.
  Result<SaveOutcome> save(std::span<const kv::Key128> keys);

  uint32_t block_bytes() const { return block_bytes_; }

 private:
  MutableByteView scratch(size_t blocks);

  KvStore* store_;
  uint16_t ns_;
  uint32_t block_bytes_;
  AlignedBuffer buf_;
};

}  // namespace kvtier::engine
