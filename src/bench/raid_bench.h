// RaidBench: `kvtier bench raid`. On member files opened with O_DIRECT it
// measures, in one run, each figure next to its physical limit:
//  - RAID0 over 2 members (sequential reads and writes) vs fio running on
//    both member files at once with the member request size and depth;
//  - RAID5 full-stripe sequential write vs RAID0 write over the same members
//    scaled by (n-1)/n;
//  - degraded RAID5 sequential read (one member failed) vs healthy;
//  - CPU seconds per GB of parity (encode and reconstruct, thread CPU time).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace kvtier::bench {

struct RaidBenchOptions {
  std::string dir = ".";  // where member files are created (not tmpfs)
  uint64_t member_bytes = 256ull << 20;
  uint64_t strip_bytes = 256 << 10;  // also the member request size
  unsigned queue_depth = 8;
  unsigned raid5_members = 3;
  double seconds = 2;
  bool keep_files = false;
  std::function<void(const std::string&)> progress;
};

struct RaidBenchReport {
  nlohmann::json figures;
  std::string table() const;
  nlohmann::json json() const { return figures; }
};

Result<RaidBenchReport> run_raid_bench(const RaidBenchOptions& options);

}  // namespace kvtier::bench
