// Subcommands of the `kvtier` CLI. Each family lives in its own
// src/tools/<family>_command.cc and registers itself with a static
// RegisterCommands object, so that adding a family touches no other file.
#pragma once

#include <CLI/CLI.hpp>

namespace kvtier::tools {

using CommandAdder = void (*)(CLI::App& root);

// Registers `add` to be called with the root app. Families are added in
// ascending `order` (the order `kvtier --help` lists them in).
struct RegisterCommands {
  RegisterCommands(int order, CommandAdder add);
};

// Calls every registered adder; main() runs this once.
void add_all_commands(CLI::App& root);

// The `kvtier bench` group, created on first use: every benchmark file adds
// its own `kvtier bench <name>` under it.
CLI::App* bench_group(CLI::App& root);

}  // namespace kvtier::tools
