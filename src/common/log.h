// Logging setup: one spdlog logger for the process; levels from the
// KVTIER_LOG environment variable (trace, debug, info, warn, error, off).
#pragma once

#include <spdlog/spdlog.h>

namespace kvtier {
void init_logging();
}  // namespace kvtier
