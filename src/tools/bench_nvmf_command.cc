// `kvtier bench nvmf`: NVMe/TCP host against target over loopback vs iperf3.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "bench/nvmf_bench.h"
#include "tools/commands.h"

namespace kvtier::tools {
namespace {

struct NvmfBenchCli {
  bench::NvmfBenchOptions opts;
  bool json = false;
};

void add_nvmf_bench(CLI::App& app) {
  auto cli = std::make_shared<NvmfBenchCli>();
  auto* c = bench_group(app)->add_subcommand(
      "nvmf",
      "kvtier NVMe/TCP host -> kvtier target over loopback on a RAM namespace: 128 KiB "
      "sequential read/write at --qd vs a single-stream iperf3 run in the same command "
      "(bar 0.85 with --io-queues 1), 4 KiB random-read IOPS, CPU seconds per GB, each from "
      "--qd waiting threads and from one thread with --qd asynchronous requests in flight "
      "(async_* keys); then a slow reader: another "
      "host's 128 KiB reads on a file volume beside a host that stopped reading with 128 reads "
      "in flight, as a ratio of their rate alone (bar 0.8), and the time until the target drops "
      "the stalled host");
  add_ranged_option(c, "--seconds", cli->opts.seconds, "Length of each measurement", 0.5, 600.0);
  add_ranged_option(c, "--ram-mib", cli->opts.ram_mib, "Size of the RAM namespace", 64u, 65536u);
  add_ranged_option(c, "--qd", cli->opts.queue_depth, "Requests in flight", 1u, 256u);
  add_ranged_option(c, "--io-queues", cli->opts.io_queues, "NVMe I/O queues (TCP connections)", 1u,
                    64u);
  c->add_option("--iperf3", cli->opts.iperf3, "iperf3 binary")->capture_default_str();
  c->add_flag("!--no-slow-reader", cli->opts.slow_reader, "Skip the slow-reader phase");
  c->add_option("--scratch-dir", cli->opts.scratch_dir,
                "Directory of the slow-reader phase's volume file (--ram-mib bytes, removed "
                "after; default: the system's temporary directory)");
  c->add_flag("--json", cli->json, "Print one JSON object (ratios under keys ending in _ratio)");
  c->callback([cli] {
    cli->opts.progress = [](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); };
    auto rep = bench::run_nvmf_bench(cli->opts);
    if (!rep.ok()) {
      std::fprintf(stderr, "kvtier bench nvmf: %s\n", rep.status().to_string().c_str());
      std::exit(1);
    }
    std::cout << (cli->json ? rep->json().dump(2) : rep->table()) << std::endl;
    // A phase that failed leaves its reason among the figures, and the
    // command fails after printing the rest.
    if (rep->figures.contains("slow_reader_error")) {
      std::fprintf(stderr, "kvtier bench nvmf: slow reader: %s\n",
                   rep->figures["slow_reader_error"].get<std::string>().c_str());
      std::exit(1);
    }
    std::exit(0);
  });
}

RegisterCommands reg(61, add_nvmf_bench);

}  // namespace
}  // namespace kvtier::tools
