#include <cstdio>
#include <iostream>
#include <memory>

#include "bench/store_bench.h"
#include "tools/commands.h"

namespace kvtier::tools {

namespace {

struct StoreBenchCli {
  bench::StoreBenchOptions opts;
  double volume_gib = 4;
  uint32_t object_kib = 1536;
  double ram_pool_mib = 512;
  bool json = false;
};

int run_store_bench_cli(const StoreBenchCli& cli) {
  bench::StoreBenchOptions o = cli.opts;
  o.volume_bytes = static_cast<uint64_t>(cli.volume_gib * (1ull << 30)) / 4096 * 4096;
  o.object_bytes = cli.object_kib * 1024;
  o.ram_pool_bytes = static_cast<uint64_t>(cli.ram_pool_mib * (1 << 20));
  o.progress = print_progress;
  return print_bench_report("kvtier bench store", bench::run_store_bench(o), cli.json);
}

}  // namespace

namespace {

void add_store_bench_command(CLI::App& app) {
  auto cli = std::make_shared<StoreBenchCli>();
  auto* store = add_ratio_bench(
      app, "store",
      "In-process store: RAM-tier get vs memcpy, disk-tier cold get and writes vs fio on the same "
      "file (O_DIRECT), match_prefix latency over a 128K-token chain, index memory per block",
      cli, run_store_bench_cli);
  store
      ->add_option("--volume", cli->opts.volume_path,
                   "File to use as the disk-tier volume (created; must be on a filesystem that "
                   "supports O_DIRECT, not tmpfs)")
      ->capture_default_str();
  add_ranged_option(store, "--volume-gib", cli->volume_gib, "Size of the volume file in GiB", 1.0,
                    4096.0);
  add_ranged_option(store, "--object-kib", cli->object_kib,
                    "Object (KV block) size in KiB; 1536 = 16 tokens x 96 KiB/token", 4u, 65536u);
  add_ranged_option(store, "--qd", cli->opts.queue_depth,
                    "Disk reads in flight, for kvtier and fio alike", 1u, 256u);
  add_ranged_option(store, "--seconds", cli->opts.seconds, "Length of each timed measurement", 0.5,
                    600.0);
  add_ranged_option(store, "--ram-mib", cli->ram_pool_mib,
                    "RAM tier size for the RAM-get measurement", 16.0, 65536.0);
  store->add_flag("--keep-volume", cli->opts.keep_volume,
                  "Do not delete the volume file at the end");
}

const RegisterCommands kRegisterStoreBench{100, add_store_bench_command};

}  // namespace

}  // namespace kvtier::tools
