// FioRunner: runs fio (the physical limit of a block device in the same run)
// with the same file, block size and queue depth as a kvtier measurement, and
// returns its bandwidth.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace kvtier::bench {

struct FioJob {
  std::string filename;
  std::string rw;  // "randread", "read", "write", ...
  uint64_t block_bytes = 0;
  unsigned iodepth = 1;
  uint64_t size_bytes = 0;  // extent of the file fio may touch
  unsigned seconds = 3;     // time-based run length
  bool end_fsync = false;   // fsync at the end, as a store flush() does
};

struct FioResult {
  double bytes_per_second = 0;
  double iops = 0;
  std::string command;  // for the report
};

// Fails with a clear message when fio is not installed.
Result<FioResult> run_fio(const FioJob& job);

}  // namespace kvtier::bench
