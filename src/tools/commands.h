// Subcommands of the `kvtier` CLI. Each family lives in its own
// src/tools/<family>_command.cc and registers itself with a static
// RegisterCommands object, so that adding a family touches no other file.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "common/status.h"

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

// An option that shows its default in --help and refuses a value outside
// [lo, hi] with CLI11's message, before anything runs.
template <typename T, typename Bound>
CLI::Option* add_ranged_option(CLI::App* app, const std::string& name, T& value,
                               const std::string& help, Bound lo, Bound hi) {
  return app->add_option(name, value, help)->capture_default_str()->check(CLI::Range(lo, hi));
}

// The --json flag of a benchmark: its report as one JSON object on stdout.
inline CLI::Option* add_ratio_json_flag(CLI::App* app, bool& json) {
  return app->add_flag(
      "--json", json,
      "Print one JSON object (every ratio under a key ending in _ratio) instead of a table");
}

// A `kvtier bench <name>` subcommand with the --json flag of a ratio report:
// its options fill `*cli` (which the callback keeps alive), and the command
// exits with run(*cli). Returns the subcommand, for its own options.
template <typename Cli, typename Run>
CLI::App* add_ratio_bench(CLI::App& root, const std::string& name, const std::string& help,
                          std::shared_ptr<Cli> cli, Run run) {
  CLI::App* cmd = bench_group(root)->add_subcommand(name, help);
  add_ratio_json_flag(cmd, cli->json);
  cmd->callback([cli, run] { std::exit(run(*cli)); });
  return cmd;
}

// Progress lines of a long benchmark: to stderr, so stdout carries only the
// table or the JSON object.
inline void print_progress(const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

// Prints a benchmark report (a type with json() and table()) to stdout, or
// the error to stderr; returns the process exit status.
template <typename Report>
int print_bench_report(const char* command, const Result<Report>& report, bool json) {
  if (!report.ok()) {
    std::fprintf(stderr, "%s: %s\n", command, report.status().to_string().c_str());
    return 1;
  }
  if (json) {
    std::cout << report->json().dump(2) << std::endl;
  } else {
    std::cout << report->table() << std::endl;
  }
  return 0;
}

}  // namespace kvtier::tools
