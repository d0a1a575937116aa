// BlockDaemon: NVMe/TCP exports of its volumes (create, delete, list,
// restore after a restart).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "blockd/daemon.h"

namespace kvtier::blockd {

Status BlockDaemon::check_not_exported_locked(const std::string& volume) const {
  auto it = volumes_.find(volume);
  if (it != volumes_.end() && !it->second->exported_as.empty()) {
    return Status::failed_precondition(
        fmt::format("'{}' is exported as '{}'", volume, it->second->exported_as));
  }
  return Status::ok_status();
}

Status BlockDaemon::start_export_locked(ExportConfig cfg) {
  if (!valid_export_nqn(cfg.nqn)) {
    return Status::invalid_argument(fmt::format(
        "export NQN '{}' must start with 'nqn.' and be at most 223 bytes of printable ASCII",
        cfg.nqn));
  }
  if (exports_.count(cfg.nqn)) {
    return Status::already_exists(fmt::format("export '{}' exists", cfg.nqn));
  }
  for (const auto& h : cfg.allowed_hosts) {
    if (!valid_export_nqn(h)) {
      return Status::invalid_argument(fmt::format("allowed host '{}' is not an NQN", h));
    }
  }
  auto v = find_locked(cfg.volume);
  if (!v.ok()) return v.status();
  if (!(*v)->error.empty() || !(*v)->qos) {
    return Status::unavailable(fmt::format("'{}' is unavailable", cfg.volume));
  }
  if (!(*v)->used_by.empty()) {
    return Status::failed_precondition(
        fmt::format("'{}' is part of '{}'; export that volume", cfg.volume, (*v)->used_by));
  }
  if (!(*v)->exported_as.empty()) {
    return Status::already_exists(
        fmt::format("'{}' is already exported as '{}'", cfg.volume, (*v)->exported_as));
  }
  KVTIER_RETURN_IF_ERROR(paths_.check_export(cfg.address, cfg.allow_any_host));
  auto host_auth = export_host_auth(cfg);
  if (!host_auth.ok()) return host_auth.status();
  auto e = std::make_unique<Export>();
  // Errors of remote hosts must not fail the volume: count only.
  blk::HealthOptions ho;
  ho.degraded_after = 0;
  ho.error_budget = 0;
  e->counted = std::make_shared<blk::HealthDevice>((*v)->qos, ho);
  nvmf::TargetConfig tc;
  tc.address = cfg.address;
  tc.port = cfg.port;
  nvmf::SubsystemConfig sub;
  sub.nqn = cfg.nqn;
  sub.namespaces.push_back(e->counted);
  sub.allowed_hosts = cfg.allowed_hosts;
  sub.allow_any_host = cfg.allow_any_host;
  sub.host_keys = std::move(*host_auth);
  tc.subsystems.push_back(std::move(sub));
  auto t = nvmf::NvmfTarget::start(std::move(tc));
  if (!t.ok()) {
    return Status(t.status().code(), fmt::format("export '{}' on {}:{}: {}", cfg.nqn, cfg.address,
                                                 cfg.port, t.status().message()));
  }
  e->target = std::move(*t);
  cfg.port = e->target->port();  // a restart binds the same port again
  e->cfg = std::move(cfg);
  (*v)->exported_as = e->cfg.nqn;
  export_order_.push_back(e->cfg.nqn);
  exports_[e->cfg.nqn] = std::move(e);
  return Status::ok_status();
}

Result<v1::Export> BlockDaemon::create_export(const v1::CreateExportRequest& r) {
  std::lock_guard lk(mu_);
  if (r.port() > 65535) return Status::invalid_argument("port must be 1..65535 (0: 4420)");
  ExportConfig c;
  c.nqn = r.nqn();
  c.volume = r.volume();
  if (!r.address().empty()) c.address = r.address();
  c.port = r.port() ? static_cast<uint16_t>(r.port()) : 4420;
  c.allowed_hosts.assign(r.allowed_hosts().begin(), r.allowed_hosts().end());
  c.allow_any_host = r.allow_any_host();
  for (const auto& k : r.host_keys()) {
    ExportHostKey h;
    h.hostnqn = k.hostnqn();
    h.dhchap_secret = k.dhchap_secret();
    h.dhchap_ctrl_secret = k.dhchap_ctrl_secret();
    if (!k.hash().empty()) h.hash = k.hash();
    if (!k.dhgroup().empty()) h.dhgroup = k.dhgroup();
    c.host_keys.push_back(std::move(h));
  }
  KVTIER_RETURN_IF_ERROR(start_export_locked(c));
  Status st = persist_locked();
  if (!st.ok()) {
    // Not persisted: not created.
    exports_.at(c.nqn)->target->stop();
    exports_.erase(c.nqn);
    export_order_.pop_back();
    volumes_.at(c.volume)->exported_as.clear();
    return st;
  }
  return describe_export_locked(*exports_.at(c.nqn));
}

Result<v1::Export> BlockDaemon::delete_export(const std::string& nqn) {
  std::lock_guard lk(mu_);
  auto it = exports_.find(nqn);
  if (it == exports_.end()) return Status::not_found(fmt::format("no export '{}'", nqn));
  if (it->second->target) it->second->target->stop();  // closes every connection
  v1::Export out = describe_export_locked(*it->second);
  out.set_state("deleted");
  if (volumes_.count(it->second->cfg.volume)) volumes_[it->second->cfg.volume]->exported_as.clear();
  exports_.erase(it);
  export_order_.erase(std::find(export_order_.begin(), export_order_.end(), nqn));
  KVTIER_RETURN_IF_ERROR(persist_locked());
  return out;
}

v1::ExportList BlockDaemon::list_exports() const {
  std::lock_guard lk(mu_);
  v1::ExportList l;
  for (const auto& n : export_order_) *l.add_exports() = describe_export_locked(*exports_.at(n));
  return l;
}

v1::Export BlockDaemon::describe_export_locked(const Export& e) const {
  v1::Export o;
  o.set_nqn(e.cfg.nqn);
  o.set_volume(e.cfg.volume);
  o.set_address(e.cfg.address);
  o.set_port(e.cfg.port);
  for (const auto& h : e.cfg.allowed_hosts) o.add_allowed_hosts(h);
  o.set_allow_any_host(e.cfg.allow_any_host);
  for (const auto& k : e.cfg.host_keys) o.add_authenticated_hosts(k.hostnqn);
  if (!e.error.empty()) {
    o.set_state("unavailable: " + e.error);
    return o;
  }
  o.set_state("serving");
  o.set_connections(e.target->connections_served());
  stats_to_proto(*e.counted, o.mutable_stats());
  return o;
}

}  // namespace kvtier::blockd
