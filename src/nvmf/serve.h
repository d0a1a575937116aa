// Runs an NVMe/TCP target in the foreground until SIGINT/SIGTERM: the body of
// `kvtier nvmf serve`, shared with the integration tests' helper program.
#pragma once

#include <string>

namespace kvtier::nvmf {

// Loads the JSON config at `config_path`, starts the target, prints
// "READY <address> <port>" on stdout once it listens, and returns the process
// exit status (0 after a signal-driven clean stop, 1 on failure, 2 bad config).
int serve_until_signal(const std::string& config_path);

}  // namespace kvtier::nvmf
