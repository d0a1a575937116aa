// `kvtier sim fleet`: the study's fleet study (its Part II) in the simulator:
// the width sweep and the operating points of one width under kvtier's store
// policy and Mooncake Store's time leases (src/sim/fleet_study.h).
#pragma once

#include <CLI/CLI.hpp>

namespace kvtier::tools {

void add_sim_fleet_command(CLI::App* sim);

}  // namespace kvtier::tools
