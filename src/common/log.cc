#include "common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

namespace kvtier {

void init_logging() {
  // Logs go to stderr so that stdout carries only a command's output
  // (tables, --json objects).
  // Idempotent: spdlog refuses a second logger with the same name.
  auto logger = spdlog::get("kvtier");
  if (!logger) logger = spdlog::stderr_color_mt("kvtier");
  spdlog::set_default_logger(logger);
  const char* level = std::getenv("KVTIER_LOG");
  spdlog::set_level(level ? spdlog::level::from_str(level) : spdlog::level::warn);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
}

}  // namespace kvtier
