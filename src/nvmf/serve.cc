// Foreground target with signal-driven shutdown.
#include "nvmf/serve.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/stop_signals.h"
#include "nvmf/target.h"

namespace kvtier::nvmf {

int serve_until_signal(const std::string& config_path) {
  std::ifstream in(config_path);
  if (!in) {
    std::fprintf(stderr, "kvtier nvmf serve: cannot read %s\n", config_path.c_str());
    return 2;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  auto cfg = parse_target_config(ss.str());
  if (!cfg.ok()) {
    std::fprintf(stderr, "kvtier nvmf serve: %s\n", cfg.status().to_string().c_str());
    return 2;
  }
  // Before the target's threads start: a stop then closes the connections
  // and joins them.
  const StopSignals stop(/*ignore_sigpipe=*/true);
  const std::string address = cfg->address;
  auto target = NvmfTarget::start(std::move(cfg.value()));
  if (!target.ok()) {
    std::fprintf(stderr, "kvtier nvmf serve: %s\n", target.status().to_string().c_str());
    return 1;
  }
  std::printf("READY %s %u\n", address.c_str(), unsigned((*target)->port()));
  std::fflush(stdout);
  const int sig = stop.wait();
  std::fprintf(stderr, "kvtier nvmf serve: signal %d, stopping\n", sig);
  (*target)->stop();
  return 0;
}

}  // namespace kvtier::nvmf
