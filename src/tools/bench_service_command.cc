// `kvtier bench service`: the store service against this machine's limits
// (iperf3 on loopback, memcpy), match_prefix latency and a many-client mixed
// load; see src/bench/service_bench.h.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include "bench/service_bench.h"
#include "tools/commands.h"

namespace kvtier::tools {

namespace {

struct ServiceBenchCli {
  bench::ServiceBenchOptions opts;
  double object_kib = 1536;
  bool quick = false;
  bool in_process = false;
  bool json = false;
};

std::string self_binary() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

int run_service_bench_cli(ServiceBenchCli& cli) {
  bench::ServiceBenchOptions o = cli.opts;
  o.object_bytes = static_cast<uint32_t>(cli.object_kib * 1024);
  if (cli.quick) {
    // The CI form: the same measurements, short and with fewer clients.
    o.seconds = 1;
    o.match_calls = 100;
    o.clients = 16;
    o.mixed_seconds = 3;
  }
  if (!cli.in_process) o.server_binary = self_binary();
  o.progress = [](const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  };
  auto r = bench::run_service_bench(o);
  if (!r.ok()) {
    std::fprintf(stderr, "kvtier bench service: %s\n", r.status().to_string().c_str());
    return 1;
  }
  if (cli.json) {
    std::cout << r->report.json().dump(2) << std::endl;
  } else {
    std::cout << r->report.table() << std::endl;
  }
  if (r->errors != 0) {
    std::fprintf(stderr, "kvtier bench service: %llu calls failed or returned wrong bytes\n",
                 static_cast<unsigned long long>(r->errors));
    return 1;
  }
  return 0;
}

void add_service_bench_command(CLI::App& app) {
  auto cli = std::make_shared<ServiceBenchCli>();
  auto* svc = add_ratio_bench(
      app, "service",
      "Store service: 1.5 MiB get over loopback TCP vs single-stream iperf3, get through the "
      "same-host shared-memory path vs memcpy, match_prefix of 8192 keys (p99), and many "
      "clients doing mixed put/get/match (errors, server RSS, p99 per op). Exits 1 when any "
      "call failed or returned wrong bytes.",
      cli, run_service_bench_cli);
  add_ranged_option(svc, "--object-kib", cli->object_kib,
                    "Object size of the get measurements, KiB", 4.0, 65536.0);
  add_ranged_option(svc, "--seconds", cli->opts.seconds, "Length of each throughput measurement",
                    0.5, 600.0);
  add_ranged_option(svc, "--tcp-depth", cli->opts.tcp_depth,
                    "TCP gets in flight on the one connection", 1u, 64u);
  add_ranged_option(svc, "--match-keys", cli->opts.match_keys, "Keys per match_prefix call", 1u,
                    65536u);
  add_ranged_option(svc, "--clients", cli->opts.clients, "Concurrent clients of the mixed load", 1u,
                    4096u);
  add_ranged_option(svc, "--mixed-seconds", cli->opts.mixed_seconds, "Length of the mixed load",
                    1.0, 86400.0);
  svc->add_option("--iperf3", cli->opts.iperf3, "iperf3 binary")->capture_default_str();
  svc->add_option("--work-dir", cli->opts.work_dir, "Where the server's config and log go")
      ->capture_default_str();
  svc->add_flag("--quick", cli->quick,
                "Short form for CI: 1 s measurements, 16 clients for 3 s, 100 match calls");
  svc->add_flag("--in-process", cli->in_process,
                "Run the server inside this process instead of as a `kvtier store serve` process");
}

const RegisterCommands kRegisterServiceBench{110, add_service_bench_command};

}  // namespace

}  // namespace kvtier::tools
