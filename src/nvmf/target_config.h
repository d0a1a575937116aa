// Configuration of the NVMe/TCP target: where it listens, which NVM
// subsystems it exports, their namespaces (any BlockDevice) and which host
// NQNs may connect to each (deny by default; `allow_any_host` opens it).
// Loaded from JSON by `kvtier nvmf serve --config FILE`.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "blk/block_device.h"
#include "common/status.h"
#include "nvmf/auth_target.h"

namespace kvtier::nvmf {

constexpr const char* kDiscoveryNqn = "nqn.2014-08.org.nvmexpress.discovery";

struct SubsystemConfig {
  std::string nqn;
  std::string serial;  // derived from the NQN when empty
  // Namespace i+1 is namespaces[i]. Shared: a device may outlive the target.
  std::vector<std::shared_ptr<blk::BlockDevice>> namespaces;
  std::vector<std::string> allowed_hosts;
  bool allow_any_host = false;
  // Hosts that must authenticate (DH-HMAC-CHAP) on every queue, by host NQN.
  std::map<std::string, HostAuthConfig> host_keys;
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

  // Bounds no host can pass (docs/nvme-tcp.md, "Hostile hosts"). Each one
  // keeps a host that misbehaves, by design or by a bug, from holding the
  // target's threads, memory or device completions.
  uint32_t max_connections = 512;  // live TCP connections; more are closed at accept
  uint32_t max_controllers = 128;  // live controllers; an admin Connect beyond is refused
  // ICReq must arrive this long after accept, and Connect this long after ICResp.
  uint32_t handshake_timeout_ms = 10000;
  // The H2CData of an R2T must be in this long after the R2T was sent.
  uint32_t r2t_timeout_ms = 10000;
  // A PDU (at most max_transfer bytes of data) that the host has not taken
  // this long after the target began to send it (a host that stopped reading
  // its socket, or reads a few bytes now and then) drops that connection:
  // keep max_transfer / send_timeout far below any healthy host's rate. A
  // send cut short by a signal may add one more timeout, so the drop comes
  // within twice this. TCP_USER_TIMEOUT bounds unacknowledged data.
  uint32_t send_timeout_ms = 10000;
  uint32_t tcp_user_timeout_ms = 30000;
  // Keep Alive timeout a host may ask for: smaller values are raised to the
  // minimum, larger ones and 0 (keep-alive off) are served as the maximum.
  uint32_t min_kato_ms = 1000;
  uint32_t max_kato_ms = 120000;
  // Write data asked for by R2T and not yet received, over all connections.
  // A write that would pass it completes with Command Interrupted (retryable).
  uint64_t max_r2t_bytes = 256ull << 20;
};

// Parses the JSON text of a config file and opens its devices:
// {"listen": {"address": "127.0.0.1", "port": 4420},
//  "subsystems": [{"nqn": "...", "allow_any_host": false, "allowed_hosts": ["..."],
//                  "host_keys": [{"hostnqn": "...", "dhchap_key_file": "path",
//                                 "dhchap_ctrl_key_file": "path", "hash": "sha256",
//                                 "dhgroup": "ffdhe2048"}],
//                  "namespaces": [{"mem_mib": 64} | {"file": "path", "size_mib": 64,
//                                  "direct": true}]}],
//  "limits": {"max_connections": 512, "max_controllers": 128, "handshake_timeout_ms": 10000,
//             "r2t_timeout_ms": 10000, "send_timeout_ms": 10000, "tcp_user_timeout_ms": 30000,
//             "min_kato_ms": 1000, "max_kato_ms": 120000, "max_r2t_mib": 256}}
Result<TargetConfig> parse_target_config(const std::string& json_text);
Status validate_target_config(const TargetConfig& config);

}  // namespace kvtier::nvmf
