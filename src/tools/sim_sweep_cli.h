// `kvtier sim sweep`: the simulator over a grid of deployments and the sizing
// table (src/sim/sweep.h).
#pragma once

#include <CLI/CLI.hpp>

namespace kvtier::tools {

void add_sim_sweep_command(CLI::App* sim);

}  // namespace kvtier::tools
