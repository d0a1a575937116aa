#include "tools/sim_sweep_cli.h"

#include <cstdio>
#include <iostream>
#include <memory>

#include "bench/study_driver.h"
#include "sim/sweep.h"
#include "tools/commands.h"
#include "tools/study_cli.h"

namespace kvtier::tools {
namespace {

struct SweepCli {
  std::string profile = "study-h100";
  std::string profile_file;
  std::string protocol = "long";
  sim::SweepAxes axes;
  uint32_t min_other = 128;
  uint32_t active_sessions = 16;
  uint64_t seed = 1;
  std::string report_dir;
  bool json = false;
  bool quiet = false;
};

int run_sweep_cli(const SweepCli& cli) {
  auto profile = sim::resolve_sim_profile(cli.profile, cli.profile_file);
  if (!profile.ok()) {
    std::fprintf(stderr, "kvtier sim sweep: %s\n", profile.status().to_string().c_str());
    return 2;
  }
  if (cli.report_dir.find('\'') != std::string::npos) {
    std::fprintf(stderr, "kvtier sim sweep: --report must not contain a quote\n");
    return 2;
  }
  auto o = sim::sweep_options(*profile);
  o.protocol = cli.protocol + "-reuse";
  o.axes = cli.axes;
  o.min_other = cli.min_other;
  o.active_sessions = cli.active_sessions;
  o.study.seed = cli.seed;
  std::fprintf(stderr, "kvtier sim sweep: %s reuse, %u at a time\n", cli.protocol.c_str(),
               o.parallel_runs);
  auto report = sim::run_sweep(o, [&](const sim::SweepProgress& p) {
    if (!cli.quiet) std::fprintf(stderr, "\r%zu of %zu runs done   ", p.done, p.total);
  });
  if (!cli.quiet) std::fprintf(stderr, "\n");
  if (!report.ok()) {
    std::fprintf(stderr, "kvtier sim sweep: %s\n", report.status().to_string().c_str());
    return 1;
  }
  int rc = 0;
  if (!cli.report_dir.empty()) {
    const std::string script = find_plot_script("plot_sweep.py");
    if (script.empty()) std::fprintf(stderr, "kvtier sim sweep: scripts/plot_sweep.py not found\n");
    auto st =
        bench::write_report_folder(cli.report_dir, report->markdown(), report->json(), script);
    if (!st.ok()) {
      std::fprintf(stderr, "kvtier sim sweep: %s\n", st.to_string().c_str());
      rc = 1;
    } else {
      std::fprintf(stderr, "report written to %s\n", cli.report_dir.c_str());
    }
  }
  if (cli.json) {
    std::cout << report->json().dump(2) << std::endl;
  } else {
    std::cout << report->markdown() << std::endl;
  }
  std::fprintf(stderr, "kvtier sim sweep: %zu points in %.1f s\n", report->points.size(),
               report->wall_s);
  return rc;
}

}  // namespace

void add_sim_sweep_command(CLI::App* sim) {
  auto cli = std::make_shared<SweepCli>();
  auto* cmd = sim->add_subcommand(
      "sweep",
      "Size a deployment: the simulator over a grid of sessions, prefill replicas, store nodes "
      "(the cluster's rendezvous placement), RAM and disk tiers and link rates, each point "
      "against recomputation on the same sessions and replicas. Prints every point and, per "
      "session count, the sizing table: the share of prefill saved and the throughput x "
      "recompute for each RAM and disk size. --report DIR adds sweep plots");
  cmd->add_option("--profile", cli->profile, "Built-in simulator profile")->capture_default_str();
  cmd->add_option("--profile-file", cli->profile_file, "Simulator profile as a JSON file");
  cmd->add_option("--protocol", cli->protocol, "long or short reuse")
      ->check(CLI::IsMember({"long", "short"}))
      ->capture_default_str();
  cmd->add_option("--sessions", cli->axes.sessions, "Agent sessions of the synthetic workload")
      ->delimiter(',')
      ->check(CLI::Range(1u, 100000u))
      ->capture_default_str();
  cmd->add_option("--prefill", cli->axes.prefill_replicas,
                  "Prefill replicas (as many decode replicas)")
      ->delimiter(',')
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  cmd->add_option("--store-nodes", cli->axes.store_nodes,
                  "Store nodes sharing the RAM and disk tiers under rendezvous placement, each "
                  "with the profile's rates")
      ->delimiter(',')
      ->check(CLI::Range(1u, 16u))
      ->capture_default_str();
  cmd->add_option("--ram-gib", cli->axes.ram_gib, "RAM tier sizes, GiB in all")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--disk-tib", cli->axes.disk_tib, "Disk tier sizes, TiB in all (0: none)")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--link-gbps", cli->axes.link_gbps,
                  "Remote tier link rates per store node, Gb/s (case E; default: a local disk "
                  "tier, case D)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--min-other", cli->min_other,
                  "Long reuse: other requests that complete before a session's next turn")
      ->capture_default_str();
  cmd->add_option("--active-sessions", cli->active_sessions, "Short reuse: sessions at once")
      ->capture_default_str();
  cmd->add_option("--seed", cli->seed, "Seed of the workload and schedulers")
      ->capture_default_str();
  cmd->add_option("--report", cli->report_dir,
                  "Write report.md, results.json and sizing plots (scripts/plot_sweep.py) here");
  cmd->add_flag("--json", cli->json, "Print one JSON object instead of the tables");
  cmd->add_flag("--quiet", cli->quiet, "No progress");
  cmd->callback([cli] { std::exit(run_sweep_cli(*cli)); });
}

}  // namespace kvtier::tools
