// Configuration of the NVMe/TCP target: where it listens, which NVM
// subsystems it exports, their namespaces (any BlockDevice) and which host
// NQNs may connect to each (deny by default; `allow_any_host` opens it).
// Loaded from JSON by `kvtier nvmf serve --config FILE`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "blk/block_device.h"
#include "common/status.h"

namespace kvtier::nvmf {

constexpr const char* kDiscoveryNqn = "nqn.2014-08.org.nvmexpress.discovery";

struct SubsystemConfig {
  std::string nqn;
  std::string serial;  // derived from the NQN when empty
  // Namespace i+1 is namespaces[i]. Shared: a device may outlive the target.
  std::vector<std::shared_ptr<blk::BlockDevice>> namespaces;
  std::vector<std::string> allowed_hosts;
  bool allow_any_host = false;
};

struct TargetConfig {
  std::string address = "127.0.0.1";  // loopback unless configured
  uint16_t port = 4420;               // 0: pick a free port (tests)
  std::vector<SubsystemConfig> subsystems;
  uint32_t max_io_queues = 8;  // per controller
  uint32_t queue_depth = 128;  // MQES + 1 and MAXCMD
  // Bytes of write data accepted in a capsule: writes up to this size skip the
  // R2T round trip (hosts read it from IOCCSZ).
  uint32_t in_capsule_data = 131072;
  uint32_t max_transfer = 1u << 20;  // MDTS, a power of two >= 4 KiB
  uint32_t maxh2cdata = 1u << 20;    // largest H2CData PDU we accept
};

// Parses the JSON text of a config file and opens its devices:
// {"listen": {"address": "127.0.0.1", "port": 4420},
//  "subsystems": [{"nqn": "...", "allow_any_host": false, "allowed_hosts": ["..."],
//                  "namespaces": [{"mem_mib": 64} | {"file": "path", "size_mib": 64,
//                                  "direct": true}]}]}
Result<TargetConfig> parse_target_config(const std::string& json_text);
Status validate_target_config(const TargetConfig& config);

}  // namespace kvtier::nvmf
