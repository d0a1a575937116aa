#include "tools/commands.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace kvtier::tools {

namespace {

// Function-local so that it exists before any static RegisterCommands runs.
std::vector<std::pair<int, CommandAdder>>& registry() {
  static std::vector<std::pair<int, CommandAdder>> adders;
  return adders;
}

}  // namespace

RegisterCommands::RegisterCommands(int order, CommandAdder add) {
  registry().emplace_back(order, add);
}

void add_all_commands(CLI::App& root) {
  auto adders = registry();
  std::stable_sort(adders.begin(), adders.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [order, add] : adders) add(root);
}

CLI::App* bench_group(CLI::App& root) {
  for (CLI::App* sub : root.get_subcommands([](CLI::App* s) { return s->get_name() == "bench"; })) {
    return sub;
  }
  auto* bench = root.add_subcommand("bench", "Measure kvtier against the limits of this machine");
  bench->require_subcommand(1);
  return bench;
}

}  // namespace kvtier::tools
