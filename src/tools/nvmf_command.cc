// `kvtier nvmf serve`: export block devices over NVMe/TCP (docs/nvme-tcp.md).
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <string>

#include "nvmf/serve.h"
#include "tools/commands.h"

namespace kvtier::tools {
namespace {

void add_nvmf(CLI::App& root) {
  auto* nvmf = root.add_subcommand("nvmf", "NVMe over TCP: export volumes to any NVMe/TCP host");
  nvmf->require_subcommand(1);
  auto* serve = nvmf->add_subcommand(
      "serve",
      "Run an NVMe/TCP target (discovery + NVM subsystems) until SIGINT/SIGTERM.\n"
      "Listens on 127.0.0.1:4420 unless the config says otherwise; hosts not listed in a\n"
      "subsystem's allowed_hosts are refused unless it sets allow_any_host.");
  auto config = std::make_shared<std::string>();
  serve
      ->add_option(
          "--config", *config,
          "JSON file: {\"listen\":{\"address\":..,\"port\":..},\"subsystems\":[{\"nqn\":..,"
          "\"allowed_hosts\":[..],\"namespaces\":[{\"mem_mib\":N}|{\"file\":P,"
          "\"size_mib\":N}]}]}")
      ->required()
      ->check(CLI::ExistingFile);
  serve->callback([config] { std::exit(nvmf::serve_until_signal(*config)); });
}

RegisterCommands reg(60, add_nvmf);

}  // namespace
}  // namespace kvtier::tools
