#include "tools/sim_fleet_cli.h"

#include <cstdio>
#include <iostream>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "sim/fleet_study.h"
#include "sim/sim_profile.h"
#include "tools/commands.h"

namespace kvtier::tools {
namespace {

struct FleetCli {
  std::string profile = "study-h100";
  std::string profile_file;
  uint32_t sessions = 256;
  uint64_t seed = 1;
  double ram_gib = static_cast<double>(bench::FleetTestbed::kRamBytes) / (1ull << 30);
  sim::FleetStudyOptions study;
  bool json = false;
  bool quiet = false;
};

int run_fleet(FleetCli& cli) {
  auto profile = sim::resolve_sim_profile(cli.profile, cli.profile_file);
  if (!profile.ok()) {
    std::fprintf(stderr, "kvtier sim fleet: %s\n", profile.status().to_string().c_str());
    return 2;
  }
  // The command line's choices over the fleet testbed's deployment.
  auto o = sim::fleet_testbed_options(*profile);
  o.widths = cli.study.widths;
  o.point_width = cli.study.point_width;
  o.window_s = cli.study.window_s;
  o.lease_row = cli.study.lease_row;
  o.fleet.pause_s = cli.study.fleet.pause_s;
  o.fleet.rounds = cli.study.fleet.rounds;
  o.fleet.seed = cli.seed;
  o.study.seed = cli.seed;
  o.study.ram_bytes = static_cast<uint64_t>(cli.ram_gib * (1ull << 30));
  const auto w = sim::fleet_workload(cli.sessions, cli.seed);
  std::fprintf(stderr,
               "kvtier sim fleet: %zu sessions, %llu requests; %zu widths and the operating "
               "points at %u sessions, %u at a time\n",
               w.sessions.size(), static_cast<unsigned long long>(w.request_count()),
               o.widths.size(), o.point_width, o.parallel_runs);
  auto report = sim::run_fleet_study(w, o, [&](const sim::FleetProgress& p) {
    if (!cli.quiet) std::fprintf(stderr, "\r%zu of %zu runs done   ", p.done, p.total);
  });
  if (!cli.quiet) std::fprintf(stderr, "\n");
  if (!report.ok()) {
    std::fprintf(stderr, "kvtier sim fleet: %s\n", report.status().to_string().c_str());
    return 1;
  }
  if (cli.json) {
    std::cout << report->json().dump(2) << std::endl;
  } else {
    std::cout << report->markdown() << std::endl;
  }
  std::fprintf(stderr, "kvtier sim fleet: %zu runs in %.1f s\n", report->runs.size(),
               report->wall_s);
  return 0;
}

}  // namespace

void add_sim_fleet_command(CLI::App* sim) {
  auto cli = std::make_shared<FleetCli>();
  auto* cmd = sim->add_subcommand(
      "fleet",
      "The study's fleet study on its fleet testbed (one endpoint per role, a 32 GB RAM tier, "
      "65,536-token contexts, steady state, three rounds per session with a 300 s gate "
      "between them): gross endpoint busy time saved over a width sweep (case D, local disk "
      "tier) and, at one width, the disk tier's share (C against D), the remote tier (E) and "
      "the lease row, each under kvtier's store policy and Mooncake Store's time leases");
  cmd->add_option("--profile", cli->profile, "Built-in simulator profile")->capture_default_str();
  cmd->add_option("--profile-file", cli->profile_file, "Simulator profile as a JSON file");
  add_ranged_option(cmd, "--sessions", cli->sessions, "Sessions of the synthetic agentic workload",
                    1u, 100000u);
  cmd->add_option("--widths", cli->study.widths, "Concurrent sessions of the sweep")
      ->delimiter(',')
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  add_ranged_option(cmd, "--point", cli->study.point_width,
                    "Concurrent sessions of the operating points", 1u, 4096u);
  cmd->add_option("--window", cli->study.window_s,
                  "Window of the per-window store volumes, virtual seconds")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--lease", cli->study.lease_row.time_lease_s,
                  "Mooncake lease of the lease row, seconds (the study's: 300)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--pause", cli->study.fleet.pause_s, "Gate pause between rounds, seconds")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--rounds", cli->study.fleet.rounds, "Rounds per session (0: a pause per turn)")
      ->capture_default_str();
  cmd->add_option("--ram-gib", cli->ram_gib, "RAM tier, GiB (the fleet testbed's: 32 GB)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", cli->seed, "Seed of the workload and the scheduler")
      ->capture_default_str();
  cmd->add_flag("--json", cli->json, "Print one JSON object instead of the tables");
  cmd->add_flag("--quiet", cli->quiet, "No progress");
  cmd->callback([cli] {
    cli->study.lease_row.name = fmt::format("mooncake-{:g}s", cli->study.lease_row.time_lease_s);
    std::exit(run_fleet(*cli));
  });
}

}  // namespace kvtier::tools
