// DaemonConfig: what kvtier-blockd persists so that a restart comes back with
// the same volumes: every file, RAM volume, array and partition in creation
// order (a volume only refers to volumes before it) and the QoS limits of
// each. Stored as versioned JSON, written atomically (temp file, fsync,
// rename, fsync of the folder), so a crash leaves either the old or the new
// file, never a torn one. Version 2 adds NVMe/TCP exports (version 1 files,
// which have none, are still read). See docs/storage-engine.md for the format.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "blk/stack/qos_device.h"
#include "common/status.h"
#include "nvmf/auth_target.h"

namespace kvtier::blockd {

inline constexpr int kConfigVersion = 4;  // 4: DH-HMAC-CHAP secrets
inline constexpr int kOldestConfigVersion = 1;

// Where a remote volume lives and how its connection behaves when lost (the
// Linux host's options: nvme connect --reconnect-delay, --ctrl-loss-tmo,
// --fast_io_fail_tmo; negative = forever / never).
struct RemoteConfig {
  std::string address;
  uint16_t port = 4420;
  std::string nqn;
  std::string hostnqn = "nqn.2024-01.io.kvtier:blockd";
  uint32_t nsid = 1;
  uint32_t io_queues = 4;  // nvmf::HostOptions' default (sized for the store)
  bool hdgst = false;
  bool ddgst = false;
  int64_t reconnect_delay_ms = 1000;
  int64_t ctrl_loss_tmo_ms = 600000;
  int64_t fast_io_fail_tmo_ms = 5000;
  // DH-HMAC-CHAP secrets ("DHHC-1:..."; empty: none): nvmf::HostOptions'.
  std::string dhchap_secret;
  std::string dhchap_ctrl_secret;
};

// A host of an export that must authenticate on every queue.
struct ExportHostKey {
  std::string hostnqn;
  std::string dhchap_secret;
  std::string dhchap_ctrl_secret;  // empty: none
  std::string hash = "sha256";
  std::string dhgroup = "ffdhe2048";
};

struct VolumeConfig {
  std::string name;
  std::string kind;  // file, mem, remote, raid0, raid1, raid5, raid6, raid10, partition
  // file
  std::string path;
  uint64_t size_bytes = 0;  // file: size to create/extend to; mem: size
  bool buffered = false;
  // arrays
  std::vector<std::string> members;
  uint64_t strip_bytes = 0;
  uint32_t copies = 0;
  // partition
  std::string parent;
  uint64_t offset_bytes = 0;
  uint64_t length_bytes = 0;
  // remote: namespace `nsid` of subsystem `nqn` at address:port
  RemoteConfig remote;
  // any
  blk::QosLimits qos;
};

// An NVMe/TCP export: one NVM subsystem whose namespace 1 is a volume,
// served on its own listen address (loopback unless configured) to the host
// NQNs listed (deny by default).
struct ExportConfig {
  std::string nqn;
  std::string volume;
  std::string address = "127.0.0.1";
  uint16_t port = 4420;  // the port actually bound is what is persisted
  std::vector<std::string> allowed_hosts;
  bool allow_any_host = false;
  std::vector<ExportHostKey> host_keys;
};

// The nvmf target's form of an export's host keys; refuses malformed secrets,
// unknown hashes and groups, and keys for hosts the export does not allow.
Result<std::map<std::string, nvmf::HostAuthConfig>> export_host_auth(const ExportConfig& e);

struct DaemonConfig {
  std::vector<VolumeConfig> volumes;
  std::vector<ExportConfig> exports;  // after the volumes they name
};

// Validates names, kinds, references (to earlier volumes only), fields and
// exports (known volume, one export per NQN and per volume).
Status validate_config(const DaemonConfig& config);
// The fields of a remote volume `name` (address, port, NQNs, nsid, queues).
Status validate_remote(const std::string& name, const RemoteConfig& r);
std::string config_to_json(const DaemonConfig& config);
Result<DaemonConfig> config_from_json(const std::string& text);
// A missing file is an empty config.
Result<DaemonConfig> load_config(const std::string& path);
Status save_config_atomic(const std::string& path, const DaemonConfig& config);
bool valid_volume_name(const std::string& name);
// "nqn." followed by printable ASCII, at most 223 bytes (NVMe base spec).
bool valid_export_nqn(const std::string& nqn);

}  // namespace kvtier::blockd
