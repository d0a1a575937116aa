// `kvtier sim`: the simulator (src/sim, docs/simulator.md). `kvtier sim study`
// runs the study's cases with the options, report and JSON of `kvtier bench
// study`, at the deployment's scale, with every transfer charged from a
// profile; `kvtier sim profile` prints a profile's figures and their sources.
#include <cstdio>
#include <iostream>
#include <memory>

#include "sim/sim_profile.h"
#include "tools/commands.h"
#include "tools/sim_fleet_cli.h"
#include "tools/sim_sweep_cli.h"
#include "tools/study_cli.h"

namespace kvtier::tools {

namespace {

int print_profile(const std::string& name, const std::string& file) {
  auto p = sim::resolve_sim_profile(name, file);
  if (!p.ok()) {
    std::fprintf(stderr, "kvtier sim profile: %s\n", p.status().to_string().c_str());
    return 2;
  }
  std::cout << p->json().dump(2) << std::endl;
  return 0;
}

void add_sim_commands(CLI::App& app) {
  auto* sim = app.add_subcommand(
      "sim",
      "Simulate the study's deployment at its own scale: the testbed's policies (router, "
      "session schedulers, HBM pools, the real store's index, RAM tier, demotion and disk log) "
      "with no payload bytes and every transfer charged from a profile");
  sim->require_subcommand(1);

  auto cli = std::make_shared<StudyCli>();
  cli->command = "kvtier sim study";
  cli->simulate = true;
  cli->pd_transfer = "modeled";
  auto* study = sim->add_subcommand(
      "study",
      "The study's six configurations (A recompute, B local prefix cache, C shared RAM, D RAM + "
      "local NVMe, E RAM + remote NVMe-oF, F direct volume reads) under its protocols, at the "
      "deployment's scale (real token counts, 96 KiB of KV per token, the full RAM and disk "
      "tiers). Prints the tables of `kvtier bench study` (or --json)");
  add_study_options(study, cli);

  auto val = std::make_shared<StudyCli>();
  val->command = "kvtier sim validate";
  val->validate = true;
  val->pd_transfer = "modeled";  // the simulator models it, so the testbed does too
  auto* validate = sim->add_subcommand(
      "validate",
      "Check the simulator against the testbed: each case runs in the testbed (`kvtier bench "
      "study`, real store operations on this machine) and then in the simulator, on the same "
      "workload and deployment, fed the store rates the testbed run measured. Prints both, "
      "their ratio per figure (throughput / A, hit share, TTFT p50 and p90), and exits 1 when "
      "one is off by more than --tolerance");
  validate->add_option("--tolerance", val->tolerance, "Relative difference allowed per figure")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 10.0));
  validate
      ->add_option("--check", val->checked,
                   "Metrics whose tolerance decides the exit code (repeatable; default: all)")
      ->check(CLI::IsMember({"throughput / A", "hit share", "TTFT p50 s", "TTFT p90 s"}));
  add_study_options(validate, val);

  add_sim_fleet_command(sim);
  add_sim_sweep_command(sim);

  auto name = std::make_shared<std::string>("study-h100");
  auto file = std::make_shared<std::string>();
  auto* profile = sim->add_subcommand("profile",
                                      "Print a simulator profile as JSON, with the "
                                      "source of every figure");
  profile->add_option("name", *name, "Built-in profile")->capture_default_str();
  profile->add_option("--file", *file, "A profile file instead (checked as `sim study` would)");
  profile->callback([name, file] { std::exit(print_profile(*name, *file)); });
}

const RegisterCommands kRegisterSim{200, add_sim_commands};

}  // namespace

}  // namespace kvtier::tools
