// `kvtier bench nvmf`: kvtier's NVMe/TCP host against kvtier's target over
// loopback on a RAM namespace. 128 KiB sequential reads and writes at a
// queue depth (default 32) compared with a single-stream iperf3 run in the
// same command (the physical limit of loopback TCP); 4 KiB random-read IOPS;
// CPU seconds (host + target, one process) per GB moved.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace kvtier::bench {

struct NvmfBenchOptions {
  double seconds = 3;
  uint32_t ram_mib = 512;
  uint32_t queue_depth = 32;  // requests in flight (threads)
  uint32_t io_queues = 4;
  std::string iperf3 = "iperf3";
  // The slow-reader phase: another host's 128 KiB reads at queue_depth on a
  // file volume, alone and then beside a host that stopped reading with 128
  // reads in flight (bar 0.8), and the time until the target drops that host.
  bool slow_reader = true;
  // Where the slow-reader phase puts its volume file (removed after).
  std::string scratch_dir;  // empty: the system's temporary directory
  std::function<void(const std::string&)> progress;
};

struct NvmfBenchReport {
  nlohmann::json figures;
  nlohmann::json json() const { return figures; }
  std::string table() const;
};

Result<NvmfBenchReport> run_nvmf_bench(const NvmfBenchOptions& options);

}  // namespace kvtier::bench
