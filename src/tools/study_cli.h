// The study's command line, shared by `kvtier bench study` (the testbed: real
// store operations on this machine, scaled) and `kvtier sim study` (the
// simulator: the same runner with modeled tiers, at the study's scale). Both
// replay a workload through the six service configurations under the chosen
// protocols and print the study's tables (or one JSON object), optionally
// writing a report folder with plots.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/study_driver.h"

namespace kvtier::tools {

struct StudyCli {
  std::string command = "kvtier bench study";  // for messages
  bool simulate = false;                       // kvtier sim study
  bool validate = false;                       // kvtier sim validate (testbed options)
  double tolerance = 0.10;                     // validate: relative, per figure
  std::vector<std::string> checked;            // validate: metrics that decide (all if empty)
  bench::StudyRunOptions run;
  std::string profile = "h100-qwen3-coder-30b-scaled";
  std::string sim_profile = "study-h100";
  std::string sim_profile_file;
  std::string protocol = "both";
  std::string cases = "ABCDEF";
  std::string trace;
  std::string pd_transfer = "loopback";
  std::string report_dir;
  std::string plot_script;
  uint32_t sessions = 256;
  double ram_gib = 256;
  double disk_tib = 3;
  double prefill_tokens_per_s = 0;  // 0: the profile's
  std::optional<bool> shared_disk;  // unset: the testbed's or simulator's default
  uint32_t active_sessions = 16;
  uint32_t min_other = 128;
  uint32_t fleet_sessions = 12;
  bool fleet_steady = false;
  double fleet_pause_s = 0;
  uint32_t fleet_rounds = 0;
  uint64_t max_context_tokens = 0;  // the synthetic workload's context limit (0: none)
  bool json = false;
  bool quiet = false;
};

// A plotting script of scripts/ (`name`): for plot_study.py
// $KVTIER_PLOT_SCRIPT when set, else the one
// next to the source tree the binary was built in (build/src/tools/kvtier),
// else under the working directory; "" when none is found.
std::string find_plot_script(const std::string& name);

// `--protocol fleet` runs the study's fleet testbed unless an option says
// otherwise: one prefill and one decode endpoint, a 32 GB RAM tier,
// 65,536-token contexts, steady state, three rounds per session with a
// 300 s pause between them, load-all.
void apply_fleet_testbed_defaults(const CLI::App& cmd, StudyCli* cli);

// Runs the study as `cli` says and prints or writes its report; the exit code.
int run_study_cli(StudyCli cli);

// Adds the study's options to `cmd` (those of the testbed only where
// cli->simulate is false) and its callback, which exits with run_study_cli().
void add_study_options(CLI::App* cmd, const std::shared_ptr<StudyCli>& cli);

}  // namespace kvtier::tools
