#include "blockd/config.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "nvmf/dhchap.h"

namespace kvtier::blockd {

namespace {

using nlohmann::json;

const std::set<std::string>& kinds() {
  static const std::set<std::string> k{"file",  "mem",   "remote", "raid0",    "raid1",
                                       "raid5", "raid6", "raid10", "partition"};
  return k;
}

json qos_to_json(const blk::QosLimits& q) {
  return json{{"read_iops", q.read_iops},        {"write_iops", q.write_iops},
              {"total_iops", q.total_iops},      {"read_bps", q.read_bps},
              {"write_bps", q.write_bps},        {"total_bps", q.total_bps},
              {"burst_seconds", q.burst_seconds}};
}

blk::QosLimits qos_from_json(const json& j) {
  blk::QosLimits q;
  q.read_iops = j.value("read_iops", uint64_t{0});
  q.write_iops = j.value("write_iops", uint64_t{0});
  q.total_iops = j.value("total_iops", uint64_t{0});
  q.read_bps = j.value("read_bps", uint64_t{0});
  q.write_bps = j.value("write_bps", uint64_t{0});
  q.total_bps = j.value("total_bps", uint64_t{0});
  q.burst_seconds = j.value("burst_seconds", 0.1);
  return q;
}

Status sys_error(const std::string& what, const std::string& path) {
  return Status::io_error(fmt::format("{} {}: {}", what, path, std::strerror(errno)));
}

json remote_to_json(const RemoteConfig& r) {
  return json{{"address", r.address},
              {"port", r.port},
              {"nqn", r.nqn},
              {"hostnqn", r.hostnqn},
              {"nsid", r.nsid},
              {"io_queues", r.io_queues},
              {"hdgst", r.hdgst},
              {"ddgst", r.ddgst},
              {"reconnect_delay_ms", r.reconnect_delay_ms},
              {"ctrl_loss_tmo_ms", r.ctrl_loss_tmo_ms},
              {"fast_io_fail_tmo_ms", r.fast_io_fail_tmo_ms},
              {"dhchap_secret", r.dhchap_secret},
              {"dhchap_ctrl_secret", r.dhchap_ctrl_secret}};
}

Result<RemoteConfig> remote_from_json(const json& j) {
  RemoteConfig r;
  r.address = j.at("address").get<std::string>();
  const int64_t port = j.value("port", int64_t{4420});
  if (port < 1 || port > 65535) {
    return Status::invalid_argument(fmt::format("remote port {} is not 1..65535", port));
  }
  r.port = static_cast<uint16_t>(port);
  r.nqn = j.at("nqn").get<std::string>();
  r.hostnqn = j.value("hostnqn", r.hostnqn);
  r.nsid = j.value("nsid", r.nsid);
  r.io_queues = j.value("io_queues", r.io_queues);
  r.hdgst = j.value("hdgst", false);
  r.ddgst = j.value("ddgst", false);
  r.reconnect_delay_ms = j.value("reconnect_delay_ms", r.reconnect_delay_ms);
  r.ctrl_loss_tmo_ms = j.value("ctrl_loss_tmo_ms", r.ctrl_loss_tmo_ms);
  r.fast_io_fail_tmo_ms = j.value("fast_io_fail_tmo_ms", r.fast_io_fail_tmo_ms);
  r.dhchap_secret = j.value("dhchap_secret", std::string());
  r.dhchap_ctrl_secret = j.value("dhchap_ctrl_secret", std::string());
  return r;
}

json host_keys_to_json(const std::vector<ExportHostKey>& keys) {
  json a = json::array();
  for (const auto& k : keys) {
    a.push_back(json{{"hostnqn", k.hostnqn},
                     {"dhchap_secret", k.dhchap_secret},
                     {"dhchap_ctrl_secret", k.dhchap_ctrl_secret},
                     {"hash", k.hash},
                     {"dhgroup", k.dhgroup}});
  }
  return a;
}

std::vector<ExportHostKey> host_keys_from_json(const json& a) {
  std::vector<ExportHostKey> keys;
  for (const auto& j : a) {
    ExportHostKey k;
    k.hostnqn = j.at("hostnqn").get<std::string>();
    k.dhchap_secret = j.at("dhchap_secret").get<std::string>();
    k.dhchap_ctrl_secret = j.value("dhchap_ctrl_secret", std::string());
    k.hash = j.value("hash", k.hash);
    k.dhgroup = j.value("dhgroup", k.dhgroup);
    keys.push_back(std::move(k));
  }
  return keys;
}

}  // namespace

Status validate_remote(const std::string& name, const RemoteConfig& r) {
  auto bad = [&](const std::string& why) {
    return Status::invalid_argument(fmt::format("volume '{}': {}", name, why));
  };
  if (r.address.empty()) return bad("a remote volume needs an address");
  if (r.port == 0) return bad("a remote volume needs a port");
  if (!valid_export_nqn(r.nqn)) return bad(fmt::format("'{}' is not a subsystem NQN", r.nqn));
  if (!valid_export_nqn(r.hostnqn)) return bad(fmt::format("'{}' is not a host NQN", r.hostnqn));
  if (r.nsid == 0 || r.nsid == 0xffffffffu) return bad("nsid must be 1..4294967294");
  if (r.io_queues < 1 || r.io_queues > 64) return bad("io_queues must be 1..64");
  if (r.reconnect_delay_ms < 1) return bad("reconnect_delay_ms must be at least 1");
  if (r.dhchap_ctrl_secret.size() && r.dhchap_secret.empty()) {
    return bad("a controller secret needs the host's own secret too");
  }
  for (const std::string* s : {&r.dhchap_secret, &r.dhchap_ctrl_secret}) {
    if (s->empty()) continue;
    auto parsed = nvmf::dhchap::parse_secret(*s);
    if (!parsed.ok()) return bad(parsed.status().message());
  }
  return Status::ok_status();
}

Result<std::map<std::string, nvmf::HostAuthConfig>> export_host_auth(const ExportConfig& e) {
  std::map<std::string, nvmf::HostAuthConfig> out;
  for (const auto& k : e.host_keys) {
    auto bad = [&](const std::string& why) {
      return Status::invalid_argument(
          fmt::format("export '{}': host key of '{}': {}", e.nqn, k.hostnqn, why));
    };
    if (!valid_export_nqn(k.hostnqn)) return bad("not a host NQN");
    if (!e.allow_any_host && std::find(e.allowed_hosts.begin(), e.allowed_hosts.end(), k.hostnqn) ==
                                 e.allowed_hosts.end()) {
      return bad("the export does not allow this host");
    }
    if (out.count(k.hostnqn)) return bad("given twice");
    nvmf::HostAuthConfig a;
    auto host = nvmf::dhchap::parse_secret(k.dhchap_secret);
    if (!host.ok()) return bad(host.status().message());
    a.host_key = std::move(*host);
    if (!k.dhchap_ctrl_secret.empty()) {
      auto ctrl = nvmf::dhchap::parse_secret(k.dhchap_ctrl_secret);
      if (!ctrl.ok()) return bad(ctrl.status().message());
      a.ctrl_key = std::move(*ctrl);
    }
    auto hash = nvmf::dhchap::parse_hash(k.hash);
    if (!hash.ok()) return bad(hash.status().message());
    a.hash = *hash;
    auto group = nvmf::dhchap::parse_group(k.dhgroup);
    if (!group.ok()) return bad(group.status().message());
    a.group = *group;
    out.emplace(k.hostnqn, std::move(a));
  }
  return out;
}

bool valid_volume_name(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return false;
    }
  }
  return true;
}

Status validate_config(const DaemonConfig& config) {
  std::set<std::string> seen;
  for (const auto& v : config.volumes) {
    if (!valid_volume_name(v.name)) {
      return Status::invalid_argument(fmt::format(
          "volume name '{}' must be 1-63 characters of letters, digits, '-', '_' or '.'", v.name));
    }
    if (seen.count(v.name)) return Status::already_exists(fmt::format("volume '{}' twice", v.name));
    if (!kinds().count(v.kind)) {
      return Status::invalid_argument(
          fmt::format("volume '{}': unknown kind '{}'", v.name, v.kind));
    }
    if (v.kind == "file" && v.path.empty()) {
      return Status::invalid_argument(fmt::format("volume '{}': a file needs a path", v.name));
    }
    if (v.kind == "remote") KVTIER_RETURN_IF_ERROR(validate_remote(v.name, v.remote));
    if (v.kind == "mem" && v.size_bytes == 0) {
      return Status::invalid_argument(
          fmt::format("volume '{}': a RAM volume needs a size", v.name));
    }
    std::vector<std::string> refs = v.members;
    if (v.kind == "partition") refs.push_back(v.parent);
    if (v.kind.rfind("raid", 0) == 0 && v.members.empty()) {
      return Status::invalid_argument(fmt::format("volume '{}': an array needs members", v.name));
    }
    for (const auto& r : refs) {
      if (!seen.count(r)) {
        return Status::invalid_argument(
            fmt::format("volume '{}' refers to '{}', which is not defined before it", v.name, r));
      }
    }
    seen.insert(v.name);
  }
  std::set<std::string> nqns, exported;
  for (const auto& e : config.exports) {
    if (!valid_export_nqn(e.nqn)) {
      return Status::invalid_argument(fmt::format(
          "export NQN '{}' must start with 'nqn.' and be at most 223 bytes of printable ASCII",
          e.nqn));
    }
    if (!nqns.insert(e.nqn).second) {
      return Status::already_exists(fmt::format("export '{}' twice", e.nqn));
    }
    if (!seen.count(e.volume)) {
      return Status::invalid_argument(
          fmt::format("export '{}' names volume '{}', which is not defined", e.nqn, e.volume));
    }
    if (!exported.insert(e.volume).second) {
      return Status::already_exists(fmt::format("volume '{}' is exported twice", e.volume));
    }
    if (e.address.empty()) {
      return Status::invalid_argument(fmt::format("export '{}' has no address", e.nqn));
    }
    if (auto keys = export_host_auth(e); !keys.ok()) return keys.status();
    for (const auto& h : e.allowed_hosts) {
      if (!valid_export_nqn(h)) {
        return Status::invalid_argument(
            fmt::format("export '{}': allowed host '{}' is not an NQN", e.nqn, h));
      }
    }
  }
  return Status::ok_status();
}

bool valid_export_nqn(const std::string& nqn) {
  if (nqn.size() < 5 || nqn.size() > 223 || nqn.rfind("nqn.", 0) != 0) return false;
  for (char c : nqn) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

std::string config_to_json(const DaemonConfig& config) {
  json vols = json::array();
  for (const auto& v : config.volumes) {
    json j{{"name", v.name}, {"kind", v.kind}};
    if (v.kind == "file") {
      j["path"] = v.path;
      j["size_bytes"] = v.size_bytes;
      j["buffered"] = v.buffered;
    } else if (v.kind == "mem") {
      j["size_bytes"] = v.size_bytes;
    } else if (v.kind == "remote") {
      j["remote"] = remote_to_json(v.remote);
    } else if (v.kind == "partition") {
      j["parent"] = v.parent;
      j["offset_bytes"] = v.offset_bytes;
      j["length_bytes"] = v.length_bytes;
    } else {
      j["members"] = v.members;
      j["strip_bytes"] = v.strip_bytes;
      j["copies"] = v.copies;
    }
    if (!v.qos.unlimited()) j["qos"] = qos_to_json(v.qos);
    vols.push_back(std::move(j));
  }
  json exps = json::array();
  for (const auto& e : config.exports) {
    exps.push_back(json{{"nqn", e.nqn},
                        {"volume", e.volume},
                        {"address", e.address},
                        {"port", e.port},
                        {"allowed_hosts", e.allowed_hosts},
                        {"allow_any_host", e.allow_any_host},
                        {"host_keys", host_keys_to_json(e.host_keys)}});
  }
  return json{{"format", "kvtier-blockd-config"},
              {"version", kConfigVersion},
              {"volumes", vols},
              {"exports", exps}}
      .dump(2);
}

Result<DaemonConfig> config_from_json(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::invalid_argument("config: not a JSON object");
  if (j.value("format", std::string()) != "kvtier-blockd-config") {
    return Status::invalid_argument("config: not a kvtier-blockd config (format field)");
  }
  if (!j.contains("version") || !j["version"].is_number_integer()) {
    return Status::invalid_argument("config: no version");
  }
  const int version = j["version"].get<int>();
  if (version < kOldestConfigVersion || version > kConfigVersion) {
    return Status::invalid_argument(
        fmt::format("config: version {} is not supported (this build reads {} to {})", version,
                    kOldestConfigVersion, kConfigVersion));
  }
  if (j.contains("exports") && (version < 2 || !j["exports"].is_array())) {
    return Status::invalid_argument("config: exports must be an array (version 2 and later)");
  }
  if (!j.contains("volumes") || !j["volumes"].is_array()) {
    return Status::invalid_argument("config: volumes must be an array");
  }
  DaemonConfig c;
  try {
    for (const auto& jv : j["volumes"]) {
      VolumeConfig v;
      v.name = jv.at("name").get<std::string>();
      v.kind = jv.at("kind").get<std::string>();
      v.path = jv.value("path", std::string());
      v.size_bytes = jv.value("size_bytes", uint64_t{0});
      v.buffered = jv.value("buffered", false);
      if (jv.contains("members")) v.members = jv["members"].get<std::vector<std::string>>();
      v.strip_bytes = jv.value("strip_bytes", uint64_t{0});
      v.copies = jv.value("copies", uint32_t{0});
      v.parent = jv.value("parent", std::string());
      v.offset_bytes = jv.value("offset_bytes", uint64_t{0});
      v.length_bytes = jv.value("length_bytes", uint64_t{0});
      if (jv.contains("qos")) v.qos = qos_from_json(jv["qos"]);
      if (v.kind == "remote") {
        if (version < 3 || !jv.contains("remote") || !jv["remote"].is_object()) {
          return Status::invalid_argument(fmt::format(
              "config: volume '{}': a remote volume needs a remote object (version 3 and later)",
              v.name));
        }
        auto r = remote_from_json(jv["remote"]);
        if (!r.ok()) return r.status();
        v.remote = std::move(*r);
      }
      c.volumes.push_back(std::move(v));
    }
    if (j.contains("exports")) {
      for (const auto& je : j["exports"]) {
        ExportConfig e;
        e.nqn = je.at("nqn").get<std::string>();
        e.volume = je.at("volume").get<std::string>();
        e.address = je.value("address", e.address);
        const int64_t port = je.value("port", int64_t{4420});
        if (port < 0 || port > 65535) {
          return Status::invalid_argument(
              fmt::format("config: export port {} is not 0..65535", port));
        }
        e.port = static_cast<uint16_t>(port);
        if (je.contains("allowed_hosts")) {
          e.allowed_hosts = je["allowed_hosts"].get<std::vector<std::string>>();
        }
        e.allow_any_host = je.value("allow_any_host", false);
        if (je.contains("host_keys")) e.host_keys = host_keys_from_json(je["host_keys"]);
        c.exports.push_back(std::move(e));
      }
    }
  } catch (const json::exception& e) {
    return Status::invalid_argument(fmt::format("config: bad volume entry: {}", e.what()));
  }
  KVTIER_RETURN_IF_ERROR(validate_config(c));
  return c;
}

Result<DaemonConfig> load_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    if (!std::filesystem::exists(path)) return DaemonConfig{};
    return sys_error("open", path);
  }
  std::stringstream ss;
  ss << in.rdbuf();
  auto c = config_from_json(ss.str());
  if (!c.ok()) return Status(c.status().code(), fmt::format("{}: {}", path, c.status().message()));
  return c;
}

Status save_config_atomic(const std::string& path, const DaemonConfig& config) {
  const std::string text = config_to_json(config) + "\n";
  const std::string tmp = path + ".tmp";
  // Owner only: the config holds DH-HMAC-CHAP secrets.
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd >= 0 && ::fchmod(fd, 0600) != 0) {  // a leftover temporary file kept its old mode
    ::close(fd);
    return sys_error("chmod", tmp);
  }
  if (fd < 0) return sys_error("create", tmp);
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      Status st = sys_error("write", tmp);
      ::close(fd);
      return st;
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    Status st = sys_error("fsync", tmp);
    ::close(fd);
    return st;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return sys_error("rename", tmp);
  // The rename itself must survive a power cut: sync the folder.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::ok_status();
}

}  // namespace kvtier::blockd
