// `kvtier bench store`: measures the in-process store against the limits of
// the same machine in one run (memcpy for the RAM tier, fio on the same file
// for the disk tier) and returns a report with each ratio.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "bench/report.h"
#include "common/status.h"

namespace kvtier::bench {

struct StoreBenchOptions {
  std::string volume_path = "kvtier-bench.vol";  // a file on a real filesystem (O_DIRECT)
  uint64_t volume_bytes = 4ull << 30;
  uint32_t object_bytes = 1536u << 10;  // 16 tokens x 96 KiB
  unsigned queue_depth = 8;             // disk reads in flight, for kvtier and fio alike
  double seconds = 3;                   // per timed measurement
  // Disk measurements: kvtier and fio take turns this many times (alternating
  // which goes first); each ratio is the median of the rounds' ratios.
  unsigned rounds = 7;
  uint64_t ram_pool_bytes = 512ull << 20;
  bool keep_volume = false;
  std::function<void(const std::string&)> progress;  // one line per step
};

Result<BenchReport> run_store_bench(const StoreBenchOptions& options);

}  // namespace kvtier::bench
