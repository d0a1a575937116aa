#include "common/log.h"

#include <cstdlib>

namespace kvtier {

void init_logging() {
  const char* level = std::getenv("KVTIER_LOG");
  spdlog::set_level(level ? spdlog::level::from_str(level) : spdlog::level::warn);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
}

}  // namespace kvtier
