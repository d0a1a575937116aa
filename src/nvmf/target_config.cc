// JSON loading and validation of the target configuration.
#include "nvmf/target_config.h"

#include <algorithm>
#include <iterator>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "blk/dev/mem_device.h"
#include "blk/dev/uring_device.h"

namespace kvtier::nvmf {
namespace {

bool valid_nqn(const std::string& nqn) {
  return nqn.size() >= 5 && nqn.size() <= 223 && nqn.rfind("nqn.", 0) == 0;
}

Result<std::shared_ptr<blk::BlockDevice>> open_namespace(const nlohmann::json& ns) {
  if (ns.contains("mem_mib")) {
    const uint64_t mib = ns.at("mem_mib").get<uint64_t>();
    if (mib == 0) return Status::invalid_argument("namespace mem_mib must be > 0");
    return std::shared_ptr<blk::BlockDevice>(std::make_shared<blk::MemDevice>(mib << 20, 4096, 1));
  }
  if (ns.contains("file")) {
    blk::UringOptions o;
    o.path = ns.at("file").get<std::string>();
    o.create_size = ns.value("size_mib", uint64_t{0}) << 20;
    o.direct = ns.value("direct", true);
    auto dev = blk::UringDevice::open(o);
    if (!dev.ok()) return dev.status();
    return std::shared_ptr<blk::BlockDevice>(std::move(dev.value()));
  }
  return Status::invalid_argument("namespace needs \"mem_mib\" or \"file\"");
}

// The "limits" object: every key optional, unknown keys refused (a typo
// must not leave a bound at its default unnoticed).
void parse_limits(const nlohmann::json& l, TargetConfig& c) {
  static const char* const kKeys[] = {"max_connections", "max_controllers", "handshake_timeout_ms",
                                      "r2t_timeout_ms",  "send_timeout_ms", "tcp_user_timeout_ms",
                                      "min_kato_ms",     "max_kato_ms",     "max_r2t_mib"};
  for (const auto& [key, value] : l.items()) {
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys)) {
      throw std::invalid_argument("unknown key in \"limits\": " + key);
    }
  }
  c.max_connections = l.value("max_connections", c.max_connections);
  c.max_controllers = l.value("max_controllers", c.max_controllers);
  c.handshake_timeout_ms = l.value("handshake_timeout_ms", c.handshake_timeout_ms);
  c.r2t_timeout_ms = l.value("r2t_timeout_ms", c.r2t_timeout_ms);
  c.send_timeout_ms = l.value("send_timeout_ms", c.send_timeout_ms);
  c.tcp_user_timeout_ms = l.value("tcp_user_timeout_ms", c.tcp_user_timeout_ms);
  c.min_kato_ms = l.value("min_kato_ms", c.min_kato_ms);
  c.max_kato_ms = l.value("max_kato_ms", c.max_kato_ms);
  c.max_r2t_bytes = l.value("max_r2t_mib", c.max_r2t_bytes >> 20) << 20;
}

// One "host_keys" entry: the host's secret (and the controller's) from
// files only its owner may read, and the hash and group to use.
Status parse_host_key(const nlohmann::json& hj, SubsystemConfig& s) {
  static const char* const kKeys[] = {"hostnqn", "dhchap_key_file", "dhchap_ctrl_key_file", "hash",
                                      "dhgroup"};
  for (const auto& [key, value] : hj.items()) {
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys)) {
      return Status::invalid_argument("unknown key in \"host_keys\": " + key);
    }
  }
  const std::string hostnqn = hj.at("hostnqn").get<std::string>();
  if (!valid_nqn(hostnqn)) return Status::invalid_argument("host_keys: bad host NQN " + hostnqn);
  if (s.host_keys.count(hostnqn)) return Status::invalid_argument("host_keys: two for " + hostnqn);
  HostAuthConfig a;
  auto key = dhchap::read_secret_file(hj.at("dhchap_key_file").get<std::string>());
  if (!key.ok()) return key.status();
  a.host_key = std::move(*key);
  if (hj.contains("dhchap_ctrl_key_file")) {
    auto ctrl = dhchap::read_secret_file(hj.at("dhchap_ctrl_key_file").get<std::string>());
    if (!ctrl.ok()) return ctrl.status();
    a.ctrl_key = std::move(*ctrl);
  }
  if (hj.contains("hash")) {
    auto h = dhchap::parse_hash(hj.at("hash").get<std::string>());
    if (!h.ok()) return h.status();
    a.hash = *h;
  }
  if (hj.contains("dhgroup")) {
    auto g = dhchap::parse_group(hj.at("dhgroup").get<std::string>());
    if (!g.ok()) return g.status();
    a.group = *g;
  }
  s.host_keys.emplace(hostnqn, std::move(a));
  return Status::ok_status();
}

// Every timeout of the limits must be set (0 would mean "wait forever").
Status validate_limits(const TargetConfig& c) {
  if (c.max_connections < 2 || c.max_connections > 65536) {
    return Status::invalid_argument("max_connections must be 2..65536");
  }
  if (c.max_controllers == 0 || c.max_controllers > 0xFFEF) {
    return Status::invalid_argument("max_controllers must be 1..65519");
  }
  for (uint32_t ms :
       {c.handshake_timeout_ms, c.r2t_timeout_ms, c.send_timeout_ms, c.tcp_user_timeout_ms}) {
    if (ms == 0 || ms > 3'600'000) {
      return Status::invalid_argument("limits: every timeout must be 1 ms..1 h");
    }
  }
  if (c.min_kato_ms == 0 || c.min_kato_ms > c.max_kato_ms || c.max_kato_ms > 3'600'000) {
    return Status::invalid_argument("limits: need 0 < min_kato_ms <= max_kato_ms <= 1 h");
  }
  if (c.max_r2t_bytes < c.max_transfer) {
    return Status::invalid_argument("limits: max_r2t_mib must hold one max_transfer");
  }
  return Status::ok_status();
}

}  // namespace

Status validate_target_config(const TargetConfig& c) {
  if (c.subsystems.empty()) return Status::invalid_argument("no subsystems configured");
  for (const auto& s : c.subsystems) {
    if (!valid_nqn(s.nqn)) return Status::invalid_argument("bad subsystem NQN: " + s.nqn);
    if (s.nqn == kDiscoveryNqn) return Status::invalid_argument("the discovery NQN is reserved");
    if (s.namespaces.empty()) return Status::invalid_argument(s.nqn + ": no namespaces");
    for (const auto& [hostnqn, key] : s.host_keys) {
      // A key for a host the subsystem refuses anyway is a mistake to report.
      if (!s.allow_any_host && std::find(s.allowed_hosts.begin(), s.allowed_hosts.end(), hostnqn) ==
                                   s.allowed_hosts.end()) {
        return Status::invalid_argument(s.nqn + ": host_keys names " + hostnqn +
                                        ", which allowed_hosts does not allow");
      }
    }
    for (const auto& d : s.namespaces) {
      if (!d || (d->block_size() != 512 && d->block_size() != 4096)) {
        return Status::invalid_argument(s.nqn + ": namespace block size must be 512 or 4096");
      }
    }
  }
  if (c.max_io_queues == 0 || c.max_io_queues > 64) {
    return Status::invalid_argument("max_io_queues must be 1..64");
  }
  if (c.queue_depth < 32 || c.queue_depth > 1024) {
    return Status::invalid_argument("queue_depth must be 32..1024");
  }
  if (c.max_transfer < 4096 || (c.max_transfer & (c.max_transfer - 1)) ||
      c.max_transfer > (8u << 20)) {
    return Status::invalid_argument("max_transfer must be a power of two in 4 KiB..8 MiB");
  }
  if (c.maxh2cdata < 4096 || c.maxh2cdata % 4 || c.maxh2cdata > c.max_transfer) {
    return Status::invalid_argument("maxh2cdata must be a multiple of 4 in 4096..max_transfer");
  }
  if (c.in_capsule_data < 1024 || c.in_capsule_data > 131072 || c.in_capsule_data % 16) {
    return Status::invalid_argument("in_capsule_data must be a multiple of 16 in 1024..131072");
  }
  return validate_limits(c);
}

Result<TargetConfig> parse_target_config(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::invalid_argument("config is not JSON");
  TargetConfig c;
  try {
    if (j.contains("listen")) {
      c.address = j["listen"].value("address", c.address);
      c.port = j["listen"].value("port", c.port);
    }
    c.max_io_queues = j.value("max_io_queues", c.max_io_queues);
    c.queue_depth = j.value("queue_depth", c.queue_depth);
    if (j.contains("limits")) parse_limits(j["limits"], c);
    for (const auto& sj : j.at("subsystems")) {
      SubsystemConfig s;
      s.nqn = sj.at("nqn").get<std::string>();
      s.serial = sj.value("serial", std::string());
      s.allow_any_host = sj.value("allow_any_host", false);
      s.allowed_hosts = sj.value("allowed_hosts", std::vector<std::string>{});
      for (const auto& hj : sj.value("host_keys", nlohmann::json::array())) {
        KVTIER_RETURN_IF_ERROR(parse_host_key(hj, s));
      }
      for (const auto& nj : sj.at("namespaces")) {
        auto dev = open_namespace(nj);
        if (!dev.ok()) return dev.status();
        s.namespaces.push_back(std::move(dev.value()));
      }
      c.subsystems.push_back(std::move(s));
    }
  } catch (const std::exception& e) {
    return Status::invalid_argument(std::string("config: ") + e.what());
  }
  KVTIER_RETURN_IF_ERROR(validate_target_config(c));
  return c;
}

}  // namespace kvtier::nvmf
