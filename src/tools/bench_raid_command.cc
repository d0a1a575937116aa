// `kvtier bench raid`: RAID levels on O_DIRECT member files vs fio and vs
// each other (see src/bench/raid_bench.h).
#include <cstdio>
#include <iostream>
#include <memory>

#include "bench/raid_bench.h"
#include "tools/commands.h"

namespace kvtier::tools {

namespace {

struct RaidBenchCli {
  bench::RaidBenchOptions opts;
  double member_mib = 256;
  uint32_t strip_kib = 256;
  bool json = false;
};

int run_raid_bench_cli(const RaidBenchCli& cli) {
  bench::RaidBenchOptions o = cli.opts;
  o.member_bytes = static_cast<uint64_t>(cli.member_mib * (1 << 20)) / (1 << 20) * (1 << 20);
  o.strip_bytes = static_cast<uint64_t>(cli.strip_kib) * 1024;
  o.progress = print_progress;
  return print_bench_report("kvtier bench raid", bench::run_raid_bench(o), cli.json);
}

void add_raid_bench_command(CLI::App& app) {
  auto cli = std::make_shared<RaidBenchCli>();
  auto* raid = add_ratio_bench(
      app, "raid",
      "RAID on O_DIRECT member files: RAID0 x2 vs fio on both members at once, RAID5 full-stripe "
      "write vs RAID0 x (n-1)/n, degraded RAID5 read vs healthy, parity CPU seconds per GB",
      cli, run_raid_bench_cli);
  raid->add_option("--dir", cli->opts.dir,
                   "Folder for the member files (created; must support O_DIRECT, not tmpfs)")
      ->capture_default_str();
  add_ranged_option(raid, "--member-mib", cli->member_mib, "Size of each member file in MiB", 16.0,
                    1048576.0);
  add_ranged_option(raid, "--strip-kib", cli->strip_kib,
                    "Strip size in KiB; also the member request size given to fio", 4u, 16384u);
  add_ranged_option(raid, "--qd", cli->opts.queue_depth,
                    "Requests in flight (arrays and fio alike)", 1u, 256u);
  add_ranged_option(raid, "--raid5-members", cli->opts.raid5_members, "Members of the RAID5 array",
                    3u, 16u);
  add_ranged_option(raid, "--seconds", cli->opts.seconds, "Length of each timed measurement", 0.5,
                    600.0);
  raid->add_flag("--keep-files", cli->opts.keep_files, "Do not delete the member files");
}

const RegisterCommands kRegisterRaidBench{110, add_raid_bench_command};

}  // namespace

}  // namespace kvtier::tools
