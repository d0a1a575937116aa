// kvtier: the command-line front end. Subcommands live in their own files;
// this file only wires them together.
#include <CLI/CLI.hpp>

#include "common/log.h"
#include "tools/commands.h"

int main(int argc, char** argv) {
  kvtier::init_logging();
  CLI::App app{
      "kvtier keeps the KV cache of LLM prompt prefixes in a shared tier of RAM and NVMe.\n"
      "Set KVTIER_LOG=info|debug for more logging."};
  app.require_subcommand(1);
  kvtier::tools::add_all_commands(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
