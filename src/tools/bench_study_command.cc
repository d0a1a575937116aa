// `kvtier bench study`: the study's benchmark (the main job), on this
// machine's own store and disks (tools/study_cli.h).
#include <memory>

#include "tools/commands.h"
#include "tools/study_cli.h"

namespace kvtier::tools {

namespace {

void add_study_bench_command(CLI::App& app) {
  auto cli = std::make_shared<StudyCli>();
  auto* cmd = bench_group(app)->add_subcommand(
      "study",
      "The study's benchmark: replay agent sessions through the six configurations (A recompute, "
      "B local prefix cache, C shared RAM, D RAM + local NVMe, E RAM + remote NVMe over NVMe/TCP, "
      "F direct volume reads) under short- and long-reuse protocols. A discrete-event run: GPU "
      "time is modeled, every store operation really runs (real bytes, O_DIRECT volume files) and "
      "its wall time x the profile's byte scale is charged to the virtual clock. Prints the "
      "study's tables 6, 7 and 9 (see docs/study.md)");
  add_study_options(cmd, cli);
}

const RegisterCommands kRegisterStudyBench{110, add_study_bench_command};

}  // namespace

}  // namespace kvtier::tools
