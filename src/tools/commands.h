// Subcommands of the `kvtier` CLI. Each registers its options on the parent
// CLI11 app and runs when selected.
#pragma once

#include <CLI/CLI.hpp>

namespace kvtier::tools {

// `kvtier bench ...`
void add_bench_commands(CLI::App& app);

// `kvtier store ...` (serve, stats)
void add_store_commands(CLI::App& app);

}  // namespace kvtier::tools
