// Harness for the disk tier's recovery path against hostile volume contents,
// shared by the libFuzzer target (src/kv/disk_recovery_fuzz.cc) and the
// corpus replay test (src/kv/disk_recovery_corpus_test.cc). Header-only so
// that neither needs a library of its own.
//
// Each input overlays bytes onto the image of a volume that a store wrote
// (superblock, checkpoint, entries), optionally re-sealing every checksum the
// overlay broke, then opens a Store on it and uses it: gets and a prefix
// match of the blocks stored there, puts of new blocks (which reclaim regions
// and reinsert hot blocks), gets again, and optionally a clean close and a
// second open. The harness aborts (a finding) when
//   * a call the store's contract says cannot fail returns an error
//     (Store::open with format_if_invalid, get/put/match_prefix on valid
//     arguments, close), or
//   * a get returns bytes that are neither the bytes put under that key nor
//     the payload of an entry of the pre-open image that verifies completely
//     for that key (magic, version, header size, header CRC, volume id of
//     the image's superblock, key, namespace digest, length, payload CRC).
//     An entry forged with correct checksums is indistinguishable from a real
//     one: the format guards against accidents, not against an adversary who
//     can write the volume, so its bytes are acceptable, and nothing else is.
//   * the overlay is empty and a block that was on the volume is not found
//     (recovery must lose nothing from an intact image), or a block that was
//     removed before the image was taken is found (its tombstone was flushed,
//     so the remove is durable and must survive recovery from the checkpoint
//     and from a scan alike).
// Crashes, sanitizer reports and hangs are findings by themselves.
// (Inputs that hit the fixed bugs are in the corpus and must now pass.)
// Single-threaded: the harness keeps its images and device in statics.
// DISK_RECOVERY_VERBOSE=1 prints one line of recovery statistics per open.
//
// Input: byte 0 = flags, bytes 1..3 = offset (24-bit little-endian, modulo
// the size of the target area), the rest = the bytes to write there
// (truncated at the end of the area). Flags:
//   bits 0-1  area: 0 superblock page, 1 checkpoint area, 2 data area
//             (regions), 3 the whole volume
//   bit 2     base image: 0 after a clean close (valid checkpoint),
//             1 after a crash (flushed, no checkpoint)
//   bit 3     re-seal checksums after the overlay: payload and header CRCs of
//             entries near it, the checkpoint CRC, the superblock CRC
//   bit 4     reopen with a RAM tier (promotion, demotion) instead of none
//   bit 5     finish with close() and a second open() of the same volume
//   bits 6-7  new blocks put after the open: 0, 3, 12 or 40
#pragma once

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "blk/dev/mem_device.h"
#include "common/crc32c.h"
#include "kv/disk_format.h"
#include "kv/namespace.h"
#include "kv/store.h"
#include "kv/test_payload.h"

namespace kvtier::kv::fuzzing {

// Geometry: 4 MiB volume, 1 MiB of metadata (superblock + checkpoint area,
// rounded up to 1 MiB), 12 regions of 256 KiB, payloads of up to 64 KiB.
constexpr uint64_t kVolumeBytes = 4ull << 20;
constexpr uint64_t kRegionBytes = 256ull << 10;
constexpr uint32_t kMaxObject = 64u << 10;
constexpr uint32_t kBaseBlocks = 220;  // enough to wrap around the regions once
constexpr uint32_t kHotBlocks = 10;    // read twice early: reinserted when reclaimed
constexpr uint32_t kNewBlockBase = 100000;
constexpr uint64_t kFixedVolumeId = 0x6B76746965722D31ull;  // "1-reitvk"

inline StoreOptions harness_options(std::shared_ptr<blk::BlockDevice> volume, bool ram) {
  StoreOptions o;
  o.ram_bytes = ram ? 4ull * kMaxObject : 0;
  o.max_object_bytes = kMaxObject;
  o.volume = std::move(volume);
  o.disk.region_bytes = kRegionBytes;
  o.disk.write_buffers = 2;
  o.disk.flush_chunk_bytes = 64u << 10;
  o.disk.read_depth = 4;
  o.disk.checkpoint_min_entry_bytes = 4096;  // room for every entry
  o.io_timeout_ms = 5000;
  return o;
}

inline Namespace harness_namespace() { return Namespace::of_model("fuzz-model", "r1", "fuzz-tok"); }

// Block i: key test_key(i), bytes fill_payload(key, block_len(i)). Every
// fifth block is a full 64 KiB object, the others take one or two pages.
inline uint32_t block_len(uint32_t i) {
  if (i % 5 == 0) return kMaxObject;
  return 1 + static_cast<uint32_t>((uint64_t{i} * 2654435761u) % 7000);
}

// The bytes of block i, computed once per block.
inline ByteView expected_payload(uint32_t i) {
  static std::unordered_map<uint32_t, std::vector<std::byte>> cache;
  auto it = cache.find(i);
  if (it == cache.end()) {
    std::vector<std::byte> bytes(block_len(i));
    fill_payload(test_key(i), MutableByteView(bytes.data(), bytes.size()));
    it = cache.emplace(i, std::move(bytes)).first;
  }
  return ByteView(it->second.data(), it->second.size());
}

[[noreturn]] inline void finding(const char* what, uint64_t block) {
  std::fprintf(stderr, "disk_recovery: FINDING: %s (block %llu)\n", what,
               static_cast<unsigned long long>(block));
  std::abort();
}

inline disk::Superblock read_sb(const std::byte* img) {
  disk::Superblock sb;
  std::memcpy(&sb, img, sizeof(sb));
  return sb;
}

inline uint32_t sb_crc(disk::Superblock sb) {
  sb.header_crc = 0;
  return crc32c(&sb, sizeof(sb));
}

inline uint32_t entry_crc(disk::EntryHeader h) {
  h.header_crc = 0;
  return crc32c(&h, sizeof(h));
}

inline bool entry_header_ok(const disk::EntryHeader& h) {
  return h.magic == disk::kEntryMagic && h.version == disk::kFormatVersion &&
         h.header_bytes == sizeof(disk::EntryHeader) && entry_crc(h) == h.header_crc;
}

// Rewrites the volume id of a store's image (superblock, checkpoint header
// and CRC, every entry that carries the old id) so that the base images, and
// with them every fuzz input, behave the same in every process.
inline void set_volume_id(std::vector<std::byte>& img, uint64_t id) {
  disk::Superblock sb = read_sb(img.data());
  if (sb.magic != disk::kSuperMagic || sb_crc(sb) != sb.header_crc) finding("base superblock", 0);
  const uint64_t old = sb.volume_id;
  for (uint64_t off = sb.data_offset; off + sizeof(disk::EntryHeader) <= img.size();
       off += disk::kPageBytes) {
    disk::EntryHeader h;
    std::memcpy(&h, img.data() + off, sizeof(h));
    if (!entry_header_ok(h) || h.volume_id != old) continue;
    h.volume_id = id;
    h.header_crc = entry_crc(h);
    std::memcpy(img.data() + off, &h, sizeof(h));
  }
  if (sb.checkpoint_state == disk::kCheckpointValid) {
    disk::CheckpointHeader ch;
    std::memcpy(&ch, img.data() + sb.checkpoint_offset, sizeof(ch));
    ch.volume_id = id;
    std::memcpy(img.data() + sb.checkpoint_offset, &ch, sizeof(ch));
    sb.checkpoint_crc = crc32c(img.data() + sb.checkpoint_offset, sb.checkpoint_bytes);
  }
  sb.volume_id = id;
  sb.header_crc = sb_crc(sb);
  std::memcpy(img.data(), &sb, sizeof(sb));
}

struct BaseImages {
  std::vector<std::byte> clean;    // after close(): checkpoint valid
  std::vector<std::byte> crashed;  // after flush(), before close(): no checkpoint
  std::vector<bool> live;          // block i was in the store at the end
  std::vector<bool> removed;       // block i was removed (a tombstone was written)
  uint64_t checkpoint_capacity = 0;
  uint64_t data_offset = 0;
};

inline void check_ok(const Status& st, const char* what) {
  if (!st.ok()) {
    std::fprintf(stderr, "disk_recovery: %s: %s\n", what, st.to_string().c_str());
    finding(what, 0);
  }
}

inline const BaseImages& base_images() {
  static const BaseImages base = [] {
    BaseImages b;
    auto mem = std::make_shared<blk::MemDevice>(kVolumeBytes);
    auto opened = Store::open(harness_options(mem, false));
    check_ok(opened.status(), "base: open");
    std::unique_ptr<Store> store = std::move(opened).value();
    auto ns = store->register_namespace(harness_namespace());
    check_ok(ns.status(), "base: register_namespace");
    AlignedBuffer buf(kMaxObject);
    for (uint32_t i = 0; i < kBaseBlocks; ++i) {
      check_ok(store->put(*ns, test_key(i), expected_payload(i)).status(), "base: put");
      if (i == 40) {
        for (int round = 0; round < 2; ++round) {
          for (uint32_t h = 0; h < kHotBlocks; ++h) {
            check_ok(store->get(*ns, test_key(h), buf.view()).status(), "base: get");
          }
        }
      }
    }
    // Make the oldest live blocks hot (two disk hits each): the checkpoint
    // carries their hit counts, and a reclaim after the open reinserts them.
    for (int round = 0, made = 0; round < 2; ++round, made = 0) {
      for (uint32_t i = 0; i < kBaseBlocks && made < 10; ++i) {
        auto r = store->get(*ns, test_key(i), buf.view());
        check_ok(r.status(), "base: get");
        made += r->hit;
      }
    }
    // Remove some live blocks (not the hot ones): their tombstones go into
    // the log, and the entries they cancel stay on the volume before them.
    b.removed.assign(kBaseBlocks, false);
    for (uint32_t i = kHotBlocks; i < kBaseBlocks; ++i) {
      if (i % 11 != 7) continue;
      auto r = store->remove(*ns, test_key(i));
      check_ok(r.status(), "base: remove");
      b.removed[i] = *r;
    }
    if (std::count(b.removed.begin(), b.removed.end(), true) < 3) {
      finding("base: fewer than 3 live blocks removed", 0);
    }
    b.live.resize(kBaseBlocks);
    for (uint32_t i = 0; i < kBaseBlocks; ++i) {
      const Key128 key = test_key(i);
      auto m = store->match_prefix(*ns, std::span<const Key128>(&key, 1));
      check_ok(m.status(), "base: match_prefix");
      b.live[i] = m->blocks == 1;
    }
    check_ok(store->flush(), "base: flush");
    auto raw = mem->raw();
    b.crashed.assign(raw.data(), raw.data() + raw.size());
    check_ok(store->close(), "base: close");
    store.reset();
    raw = mem->raw();
    b.clean.assign(raw.data(), raw.data() + raw.size());
    set_volume_id(b.clean, kFixedVolumeId);
    set_volume_id(b.crashed, kFixedVolumeId);
    const disk::Superblock sb = read_sb(b.clean.data());
    if (sb.checkpoint_state != disk::kCheckpointValid) finding("base: no checkpoint", 0);
    b.checkpoint_capacity = sb.checkpoint_capacity;
    b.data_offset = sb.data_offset;
    return b;
  }();
  return base;
}

// Re-seals what an overlay of [from, to) broke: payload and header CRCs of
// the entries whose header carries the entry magic and that could overlap the
// range, then the checkpoint CRC and the superblock CRC.
inline void reseal(std::vector<std::byte>& img, uint64_t from, uint64_t to, uint64_t data_offset) {
  const uint64_t max_entry = disk::entry_bytes(kMaxObject);
  uint64_t first = from > max_entry ? align_down(from - max_entry, disk::kPageBytes) : 0;
  first = std::max(first, data_offset);
  for (uint64_t off = first; off < to && off + sizeof(disk::EntryHeader) <= img.size();
       off += disk::kPageBytes) {
    disk::EntryHeader h;
    std::memcpy(&h, img.data() + off, sizeof(h));
    if (h.magic != disk::kEntryMagic) continue;
    if (h.payload_bytes > 0 && h.payload_bytes <= kMaxObject &&
        off + disk::kPayloadOffset + h.payload_bytes <= img.size()) {
      h.payload_crc = crc32c(img.data() + off + disk::kPayloadOffset, h.payload_bytes);
    }
    h.header_crc = entry_crc(h);
    std::memcpy(img.data() + off, &h, sizeof(h));
  }
  disk::Superblock sb = read_sb(img.data());
  if (sb.checkpoint_bytes <= img.size() &&
      sb.checkpoint_offset <= img.size() - sb.checkpoint_bytes) {
    sb.checkpoint_crc = crc32c(img.data() + sb.checkpoint_offset, sb.checkpoint_bytes);
  }
  sb.header_crc = sb_crc(sb);
  std::memcpy(img.data(), &sb, sizeof(sb));
}

// True when `got` may be returned for `key`: the bytes put under it, or the
// payload of a fully verifying entry for it in the pre-open image.
inline bool acceptable(const std::vector<std::byte>& img, const Key128& ns_digest, uint32_t block,
                       ByteView got) {
  const Key128 key = test_key(block);
  const ByteView want = expected_payload(block);
  if (got.size() == want.size() && std::memcmp(got.data(), want.data(), want.size()) == 0) {
    return true;
  }
  const uint64_t volume_id = read_sb(img.data()).volume_id;
  for (uint64_t off = 0; off + disk::kPayloadOffset + got.size() <= img.size();
       off += disk::kPageBytes) {
    disk::EntryHeader h;
    std::memcpy(&h, img.data() + off, sizeof(h));
    if (!entry_header_ok(h) || h.volume_id != volume_id || h.key_hi != key.hi ||
        h.key_lo != key.lo || h.ns_hi != ns_digest.hi || h.ns_lo != ns_digest.lo ||
        h.payload_bytes != got.size()) {
      continue;
    }
    const std::byte* payload = img.data() + off + disk::kPayloadOffset;
    if (crc32c(payload, got.size()) == h.payload_crc &&
        std::memcmp(payload, got.data(), got.size()) == 0) {
      return true;
    }
  }
  return false;
}

class QuietLogs {
 public:
  QuietLogs() : prev_(spdlog::get_level()) { spdlog::set_level(spdlog::level::off); }
  ~QuietLogs() { spdlog::set_level(prev_); }

 private:
  spdlog::level::level_enum prev_;
};

// Gets every block in `blocks` and checks what comes back; returns the hits.
inline size_t get_and_check(Store& store, uint16_t ns, const std::vector<uint32_t>& blocks,
                            const std::vector<std::byte>& img, const Key128& ns_digest,
                            AlignedBuffer& buf) {
  size_t hits = 0;
  for (uint32_t i : blocks) {
    auto r = store.get(ns, test_key(i), buf.view());
    check_ok(r.status(), "get");
    if (!r->hit) continue;
    ++hits;
    if (r->length == 0 || r->length > kMaxObject) finding("hit with an impossible length", i);
    if (!acceptable(img, ns_digest, i, ByteView(buf.data(), r->length))) {
      finding("get returned bytes that no verifying entry holds", i);
    }
  }
  return hits;
}

// What one fuzz input asks for. Byte 0: bits 0-1 the area the overlay
// lands in (superblock, checkpoint, data, anywhere), bit 2 start from the
// crashed image, bit 3 re-seal checksums over the overlay, bit 4 a RAM tier,
// bit 5 open twice, bits 6-7 how many new blocks to put after the first
// open. Bytes 1-3: the overlay's offset in its area. The rest: the overlay.
struct RecoveryFuzzInput {
  uint8_t area = 0;
  bool crashed = false, fix_crcs = false, ram = false, reopen = false;
  uint32_t new_blocks = 0;
  uint32_t offset = 0;
  const uint8_t* patch = nullptr;
  size_t patch_len = 0;
};

inline RecoveryFuzzInput decode_fuzz_input(const uint8_t* data, size_t size) {
  static constexpr uint32_t kNewCounts[4] = {0, 3, 12, 40};
  RecoveryFuzzInput in;
  const uint8_t flags = size > 0 ? data[0] : 0;
  in.area = flags & 0x03;
  in.crashed = flags & 0x04;
  in.fix_crcs = flags & 0x08;
  in.ram = flags & 0x10;
  in.reopen = flags & 0x20;
  in.new_blocks = kNewCounts[flags >> 6];
  for (size_t i = 1; i < 4 && i < size; ++i) in.offset |= uint32_t{data[i]} << (8 * (i - 1));
  in.patch = size > 4 ? data + 4 : nullptr;
  in.patch_len = size > 4 ? size - 4 : 0;
  return in;
}

// The pre-open image in `img`: base + overlay (+ re-sealed checksums);
// returns how many bytes the overlay changed.
inline uint64_t build_fuzz_image(const RecoveryFuzzInput& in, const BaseImages& base,
                                 std::vector<std::byte>& img) {
  img = in.crashed ? base.crashed : base.clean;
  uint64_t area_from = 0, area_len = kVolumeBytes;
  switch (in.area) {
    case 0:
      area_from = 0, area_len = disk::kPageBytes;
      break;
    case 1:
      area_from = disk::kPageBytes, area_len = base.checkpoint_capacity;
      break;
    case 2:
      area_from = base.data_offset, area_len = kVolumeBytes - base.data_offset;
      break;
    default:
      break;
  }
  const uint64_t at = area_from + in.offset % area_len;
  const uint64_t n = std::min<uint64_t>(in.patch_len, area_from + area_len - at);
  if (n > 0) std::memcpy(img.data() + at, in.patch, n);
  if (in.fix_crcs && n > 0) reseal(img, at, at + n, base.data_offset);
  return n;
}

// On an intact image every block that was stored must be found, and no
// removed block may come back.
inline void check_intact_recovery(Store& store, uint16_t ns, const BaseImages& base,
                                  const std::vector<Key128>& chain, const MatchResult& m,
                                  size_t hits, AlignedBuffer& buf) {
  if (hits < chain.size() || m.blocks != chain.size()) {
    finding("blocks lost by recovery of an intact image", hits);
  }
  for (uint32_t i = 0; i < kBaseBlocks; ++i) {
    if (!base.removed[i]) continue;
    auto r = store.get(ns, test_key(i), buf.view());
    check_ok(r.status(), "get");
    if (r->hit) finding("a removed block came back after recovery of an intact image", i);
  }
}

inline void print_recovery(int round, const StoreStats& st, size_t matched, size_t hits) {
  std::fprintf(
      stderr,
      "disk_recovery: open %d: %s, recovered %llu, dropped %llu, matched %zu, "
      "hits %zu, corrupt misses %llu, regions reclaimed %llu, reinserted %llu\n",
      round, st.disk.recovered_from_checkpoint ? "checkpoint" : "scan/format",
      static_cast<unsigned long long>(st.disk.recovered_entries),
      static_cast<unsigned long long>(st.disk.recovery_dropped), matched, hits,
      static_cast<unsigned long long>(st.misses[static_cast<size_t>(MissReason::kCorrupt)]),
      static_cast<unsigned long long>(st.disk.regions_reclaimed),
      static_cast<unsigned long long>(st.disk.entries_reinserted));
}

inline int disk_recovery_fuzz_one(const uint8_t* data, size_t size) {
  QuietLogs quiet;
  static const bool verbose = std::getenv("DISK_RECOVERY_VERBOSE") != nullptr;
  const BaseImages& base = base_images();
  const RecoveryFuzzInput in = decode_fuzz_input(data, size);
  static std::vector<std::byte> img;
  const uint64_t n = build_fuzz_image(in, base, img);

  // One device for every run (allocating and zeroing 4 MiB per run is
  // most of a run's time); the previous store is gone.
  static const auto mem = std::make_shared<blk::MemDevice>(kVolumeBytes);
  std::memcpy(mem->raw().data(), img.data(), img.size());

  const Namespace nsdef = harness_namespace();
  const Key128 ns_digest = nsdef.digest();
  std::vector<uint32_t> blocks(kBaseBlocks);
  for (uint32_t i = 0; i < kBaseBlocks; ++i) blocks[i] = i;
  // The blocks that were in the store, in order: a prefix match over them
  // matches them all on an intact image.
  std::vector<Key128> chain;
  for (uint32_t i : blocks) {
    if (base.live[i]) chain.push_back(test_key(i));
  }
  AlignedBuffer buf(kMaxObject);

  for (int round = 0; round < (in.reopen ? 2 : 1); ++round) {
    auto opened = Store::open(harness_options(mem, in.ram));
    check_ok(opened.status(), "open");
    std::unique_ptr<Store> store = std::move(opened).value();
    auto ns = store->register_namespace(nsdef);
    check_ok(ns.status(), "register_namespace");

    auto m = store->match_prefix(*ns, chain);
    check_ok(m.status(), "match_prefix");
    if (m->blocks > chain.size() || m->blocks != m->ram_blocks + m->disk_blocks) {
      finding("match_prefix result inconsistent", m->blocks);
    }
    const size_t hits = get_and_check(*store, *ns, blocks, img, ns_digest, buf);
    if (round == 0 && n == 0) check_intact_recovery(*store, *ns, base, chain, *m, hits, buf);
    if (round == 0) {
      for (uint32_t j = 0; j < in.new_blocks; ++j) {
        const uint32_t i = kNewBlockBase + j;
        auto r = store->put(*ns, test_key(i), expected_payload(i));
        check_ok(r.status(), "put");
        blocks.push_back(i);
      }
      if (in.new_blocks > 0) get_and_check(*store, *ns, blocks, img, ns_digest, buf);
    }
    if (verbose) print_recovery(round, store->local_stats(), m->blocks, hits);
    if (in.reopen) check_ok(store->close(), "close");
  }
  return 0;
}

}  // namespace kvtier::kv::fuzzing
