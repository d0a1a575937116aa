// kvtier_crash_writer: the victim process of crash_test.cc. It opens a Store
// on a volume through UringDevice (O_DIRECT) and writes blocks start,
// start+1, ... with deterministic payloads, calling flush() every N blocks.
// After each successful flush it prints
//
//   flushed <n>
//
// and flushes stdout: every block i of this run with i < n is durable from
// then on. The test SIGKILLs it at some moment while it writes.
//
// Usage: kvtier_crash_writer VOLUME VOLUME_BYTES OBJECT_BYTES RAM_BYTES START FLUSH_EVERY
//                            [MAX_BLOCKS] [REGION_BYTES]
//
// The writer never lets the disk tier evict: once the volume is nearly full
// it flushes, prints "full <n>" and waits to be killed; after MAX_BLOCKS
// blocks (0 = no limit) it does the same with "done <n>". Other output:
// "ready <regions> <recovered_entries> <from_checkpoint>" once the store is
// open. Logs go to stderr. Exit codes: 2 bad usage, 3 open failed, 4 a put
// failed or was refused, 5 flush failed, 6 the disk tier evicted something.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "blk/dev/uring_device.h"
#include "common/buffer.h"
#include "common/log.h"
#include "kv/namespace.h"
#include "kv/store.h"
#include "kv/test_payload.h"

namespace {

using namespace kvtier;      // NOLINT
using namespace kvtier::kv;  // NOLINT

// Keep in sync with crash_test.cc: the test reopens the volume with the same
// geometry and recomputes every block's length.
constexpr uint64_t kDefaultRegionBytes = 4u << 20;

uint32_t block_length(uint64_t i, uint32_t max) {
  uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  if (h % 4 == 0) return max;  // full-size blocks are the common case
  return static_cast<uint32_t>(1 + (h >> 8) % max);
}

Namespace crash_namespace() { return test_namespace("crash-test-model"); }

bool parse_u64(const char* s, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 0);
  if (errno != 0 || end == s || *end != '\0') return false;
  *out = v;
  return true;
}

[[noreturn]] void wait_for_kill() {
  for (;;) pause();
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("kvtier"));
  kvtier::init_logging();
  if (argc < 7 || argc > 9) {
    std::fprintf(stderr,
                 "usage: %s VOLUME VOLUME_BYTES OBJECT_BYTES RAM_BYTES START FLUSH_EVERY "
                 "[MAX_BLOCKS] [REGION_BYTES]\n",
                 argv[0]);
    return 2;
  }
  uint64_t volume_bytes, object_bytes, ram_bytes, start, flush_every, max_blocks = 0;
  uint64_t region_bytes = kDefaultRegionBytes;
  if (!parse_u64(argv[2], &volume_bytes) || !parse_u64(argv[3], &object_bytes) ||
      !parse_u64(argv[4], &ram_bytes) || !parse_u64(argv[5], &start) ||
      !parse_u64(argv[6], &flush_every) || (argc > 7 && !parse_u64(argv[7], &max_blocks)) ||
      (argc > 8 && !parse_u64(argv[8], &region_bytes)) || flush_every == 0 || object_bytes == 0 ||
      object_bytes > (64u << 20)) {
    std::fprintf(stderr, "crash_writer: bad arguments\n");
    return 2;
  }

  blk::UringOptions uo;
  uo.path = argv[1];
  uo.create_size = volume_bytes;
  uo.direct = true;
  // A shallow ring with small region-write chunks: sealed regions and
  // flushes queue requests in the device's user-space backlog, which a kill
  // loses, so a flush that returned before its writes completed would show.
  uo.queue_depth = 4;
  auto dev = blk::UringDevice::open(uo);
  if (!dev.ok()) {
    std::fprintf(stderr, "crash_writer: %s\n", dev.status().to_string().c_str());
    return 3;
  }
  StoreOptions so;
  so.ram_bytes = ram_bytes;
  so.max_object_bytes = static_cast<uint32_t>(object_bytes);
  so.volume = std::shared_ptr<blk::BlockDevice>(std::move(dev).value());
  so.disk.region_bytes = region_bytes;
  so.disk.flush_chunk_bytes = 256u << 10;
  auto opened = Store::open(so);
  if (!opened.ok()) {
    std::fprintf(stderr, "crash_writer: %s\n", opened.status().to_string().c_str());
    return 3;
  }
  std::unique_ptr<Store> store = std::move(opened).value();
  auto ns = store->register_namespace(crash_namespace());
  if (!ns.ok()) {
    std::fprintf(stderr, "crash_writer: %s\n", ns.status().to_string().c_str());
    return 3;
  }
  {
    const StoreStats st = store->local_stats();
    std::printf("ready %" PRIu32 " %" PRIu64 " %d\n", st.disk.region_count,
                st.disk.recovered_entries, st.disk.recovered_from_checkpoint ? 1 : 0);
    std::fflush(stdout);
  }

  AlignedBuffer buf(object_bytes);
  auto flush_or_die = [&] {
    Status fs = store->flush();
    if (!fs.ok()) {
      std::fprintf(stderr, "crash_writer: flush: %s\n", fs.to_string().c_str());
      std::exit(5);
    }
    const StoreStats st = store->local_stats();
    if (st.disk.regions_reclaimed != 0 || st.disk.entries_evicted != 0 || st.eviction_drops != 0) {
      std::fprintf(stderr,
                   "crash_writer: the disk tier evicted (regions %" PRIu64 ", entries %" PRIu64
                   ", drops %" PRIu64 "); make the volume bigger\n",
                   st.disk.regions_reclaimed, st.disk.entries_evicted, st.eviction_drops);
      std::exit(6);
    }
  };

  for (uint64_t i = start;; ++i) {
    const StoreStats st = store->local_stats();
    // Stop while at least two regions are free: the open region plus the
    // flushing ones never reach the oldest sealed region.
    const bool full = st.disk.regions_in_use + 2 >= st.disk.region_count;
    const bool done = max_blocks != 0 && i - start >= max_blocks;
    if (full || done) {
      flush_or_die();
      std::printf("flushed %" PRIu64 "\n%s %" PRIu64 "\n", i, full ? "full" : "done", i);
      std::fflush(stdout);
      wait_for_kill();
    }
    const Key128 key = test_key(i);
    const uint32_t len = block_length(i, static_cast<uint32_t>(object_bytes));
    fill_payload(key, buf.subview(0, len));
    auto r = store->put(*ns, key, ByteView(buf.data(), len));
    if (!r.ok() || !r->stored()) {
      std::fprintf(stderr, "crash_writer: put %" PRIu64 ": %s\n", i,
                   r.ok() ? refuse_reason_name(r->refuse) : r.status().to_string().c_str());
      return 4;
    }
    if ((i - start + 1) % flush_every == 0) {
      flush_or_die();
      std::printf("flushed %" PRIu64 "\n", i + 1);
      std::fflush(stdout);
    }
  }
}
