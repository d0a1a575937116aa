// `kvtier bench service`: the store service measured against the limits of
// the same machine in one run:
// - get of large objects (1.5 MiB) from one client over loopback TCP vs a
//   single-stream iperf3 on loopback (bar 0.8x);
// - the same gets over TLS vs plain TCP (the cost of encryption; no bar);
// - get through the same-host shared-memory path vs single-thread memcpy
//   (bar 0.5x);
// - match_prefix of 8,192 keys as one RPC: p99 (bar 1 ms);
// - many concurrent clients doing mixed put/get/match for a while: no error,
//   no wrong byte, server RSS stable within 10% after warm-up, p99 per op.
// The server runs as a real `kvtier store serve` process when a server
// binary is given (the CLI passes itself), else in this process; the report
// says which.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "bench/report.h"
#include "common/status.h"

namespace kvtier::bench {

struct ServiceBenchOptions {
  uint32_t object_bytes = 1536u << 10;
  double seconds = 3;      // each throughput measurement (and iperf3)
  unsigned tcp_depth = 4;  // gets in flight on the one TCP connection
  unsigned match_keys = 8192;
  unsigned match_calls = 500;
  unsigned clients = 256;  // mixed load
  double mixed_seconds = 60;
  uint32_t mixed_object_bytes = 64u << 10;
  std::string server_binary;  // empty: in-process server
  std::string iperf3 = "iperf3";
  std::string work_dir = "/tmp";  // server config and log (process mode)
  std::function<void(const std::string&)> progress;
};

struct ServiceBenchResult {
  BenchReport report{"kvtier bench service"};
  uint64_t errors = 0;  // failed calls and wrong bytes in any phase
};

Result<ServiceBenchResult> run_service_bench(const ServiceBenchOptions& options);

}  // namespace kvtier::bench
