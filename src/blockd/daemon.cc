#include "blockd/daemon.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "blk/dev/mem_device.h"
#include "blk/dev/uring_device.h"
#include "blk/stack/partition.h"

namespace kvtier::blockd {

void stats_to_proto(const blk::HealthDevice& dev, v1::Stats* out) {
  const auto s = dev.stats();
  out->set_reads(s.reads);
  out->set_writes(s.writes);
  out->set_bytes_read(s.bytes_read);
  out->set_bytes_written(s.bytes_written);
  out->set_errors(s.errors);
  out->set_read_p50_us(dev.read_latency().quantile(0.5) / 1e3);
  out->set_read_p99_us(dev.read_latency().quantile(0.99) / 1e3);
  out->set_write_p50_us(dev.write_latency().quantile(0.5) / 1e3);
  out->set_write_p99_us(dev.write_latency().quantile(0.99) / 1e3);
}

namespace {

blk::QosLimits qos_from_proto(const v1::Qos& q) {
  blk::QosLimits l;
  l.read_iops = q.read_iops();
  l.write_iops = q.write_iops();
  l.total_iops = q.total_iops();
  l.read_bps = q.read_bps();
  l.write_bps = q.write_bps();
  l.total_bps = q.total_bps();
  l.burst_seconds = q.burst_seconds() > 0 ? q.burst_seconds() : 0.1;
  return l;
}

void qos_to_proto(const blk::QosLimits& l, v1::Qos* q) {
  q->set_read_iops(l.read_iops);
  q->set_write_iops(l.write_iops);
  q->set_total_iops(l.total_iops);
  q->set_read_bps(l.read_bps);
  q->set_write_bps(l.write_bps);
  q->set_total_bps(l.total_bps);
  q->set_burst_seconds(l.burst_seconds);
}

bool is_array(const std::string& kind) { return kind.rfind("raid", 0) == 0; }

}  // namespace

Result<std::unique_ptr<BlockDaemon>> BlockDaemon::open(const std::string& config_path,
                                                       VolumePaths paths, blk::HealthOptions health,
                                                       blk::RaidRuntimeOptions raid) {
  auto cfg = load_config(config_path);
  if (!cfg.ok()) return cfg.status();
  std::unique_ptr<BlockDaemon> d(new BlockDaemon(config_path, std::move(paths), health, raid));
  std::lock_guard lk(d->mu_);
  for (const auto& v : cfg->volumes) d->add_restored_locked(v);
  for (const auto& e : cfg->exports) {
    Status st = d->start_export_locked(e);
    if (st.ok()) {
      spdlog::info("blockd: export '{}' of '{}' restored on {}:{}", e.nqn, e.volume, e.address,
                   e.port);
      continue;
    }
    // Kept (and persisted) with its error, so the operator sees it and its
    // volume stays protected from deletion.
    spdlog::error("blockd: export '{}' not restored: {}", e.nqn, st.message());
    auto x = std::make_unique<Export>();
    x->cfg = e;
    x->error = st.message();
    if (d->volumes_.count(e.volume)) d->volumes_[e.volume]->exported_as = e.nqn;
    d->exports_[e.nqn] = std::move(x);
    d->export_order_.push_back(e.nqn);
  }
  return d;
}

BlockDaemon::~BlockDaemon() {
  // Tear down top-down: exports (their connections end), then arrays and
  // partitions before the volumes they use.
  std::lock_guard lk(mu_);
  for (auto& [nqn, e] : exports_) {
    if (e->target) e->target->stop();
  }
  exports_.clear();
  for (auto it = order_.rbegin(); it != order_.rend(); ++it) volumes_.erase(*it);
}

void BlockDaemon::add_restored_locked(const VolumeConfig& cfg) {
  Status st = instantiate_locked(cfg, /*format=*/false);
  if (!st.ok()) {
    spdlog::error("blockd: volume '{}' not restored: {}", cfg.name, st.message());
    auto v = std::make_unique<Volume>();
    v->cfg = cfg;
    v->error = st.message();
    volumes_[cfg.name] = std::move(v);
    order_.push_back(cfg.name);
    for (const auto& m : cfg.members) {
      if (volumes_.count(m)) volumes_[m]->used_by = cfg.name;
    }
    if (!cfg.parent.empty() && volumes_.count(cfg.parent)) volumes_[cfg.parent]->used_by = cfg.name;
  } else {
    spdlog::info("blockd: volume '{}' ({}) restored", cfg.name, cfg.kind);
  }
}

namespace {

Result<std::unique_ptr<nvmf::NvmeTcpDevice>> connect_remote_volume(const VolumeConfig& cfg) {
  KVTIER_RETURN_IF_ERROR(validate_remote(cfg.name, cfg.remote));
  nvmf::HostOptions o;
  o.address = cfg.remote.address;
  o.port = cfg.remote.port;
  o.subnqn = cfg.remote.nqn;
  o.hostnqn = cfg.remote.hostnqn;
  o.nsid = cfg.remote.nsid;
  o.io_queues = cfg.remote.io_queues;
  o.hdgst = cfg.remote.hdgst;
  o.ddgst = cfg.remote.ddgst;
  o.reconnect_delay = std::chrono::milliseconds(cfg.remote.reconnect_delay_ms);
  o.ctrl_loss_tmo = std::chrono::milliseconds(cfg.remote.ctrl_loss_tmo_ms);
  o.fast_io_fail_tmo = std::chrono::milliseconds(cfg.remote.fast_io_fail_tmo_ms);
  o.dhchap_secret = cfg.remote.dhchap_secret;
  o.dhchap_ctrl_secret = cfg.remote.dhchap_ctrl_secret;
  auto d = nvmf::NvmeTcpDevice::connect(o);
  if (!d.ok()) {
    return Status(d.status().code(),
                  fmt::format("{}:{} {}: {}", cfg.remote.address, cfg.remote.port, cfg.remote.nqn,
                              d.status().message()));
  }
  return d;
}

}  // namespace

Result<std::shared_ptr<blk::BlockDevice>> BlockDaemon::open_file_volume(const VolumeConfig& cfg) {
  auto file = paths_.open(cfg.path, cfg.size_bytes, !cfg.buffered);
  if (!file.ok()) return file.status();
  blk::UringOptions o;
  o.path = cfg.path;
  o.adopt_fd = file->fd;
  o.create_size = cfg.size_bytes;
  o.direct = !cfg.buffered;
  auto d = blk::UringDevice::open(o);
  if (!d.ok()) {
    return Status(d.status().code(), fmt::format("{}: {}", cfg.path, d.status().message()));
  }
  return std::shared_ptr<blk::BlockDevice>(std::move(*d));
}

Result<std::shared_ptr<blk::BlockDevice>> BlockDaemon::open_partition_locked(
    const VolumeConfig& cfg) {
  auto parent = find_locked(cfg.parent);
  if (!parent.ok()) return parent.status();
  if (!(*parent)->error.empty()) {
    return Status::unavailable(fmt::format("parent '{}' is unavailable", cfg.parent));
  }
  if (!(*parent)->used_by.empty()) {
    return Status::failed_precondition(
        fmt::format("'{}' is already used by '{}'", cfg.parent, (*parent)->used_by));
  }
  KVTIER_RETURN_IF_ERROR(check_not_exported_locked(cfg.parent));
  auto p = blk::Partition::create((*parent)->qos, cfg.offset_bytes, cfg.length_bytes, cfg.name);
  if (!p.ok()) return p.status();
  return std::shared_ptr<blk::BlockDevice>(std::move(*p));
}

// A RAID0 or a redundant array over the members' QoS devices: formatted when
// `format`, else assembled from what the members hold (then `v->raid`).
Result<std::shared_ptr<blk::BlockDevice>> BlockDaemon::open_array_locked(const VolumeConfig& cfg,
                                                                         bool format, Volume* v) {
  std::vector<std::shared_ptr<blk::BlockDevice>> members;
  for (const auto& m : cfg.members) {
    auto mv = find_locked(m);
    if (!mv.ok()) return mv.status();
    if (!(*mv)->used_by.empty()) {
      return Status::failed_precondition(
          fmt::format("'{}' is already used by '{}'", m, (*mv)->used_by));
    }
    KVTIER_RETURN_IF_ERROR(check_not_exported_locked(m));
    if (std::count(cfg.members.begin(), cfg.members.end(), m) > 1) {
      return Status::invalid_argument(fmt::format("'{}' is listed twice", m));
    }
    // An unavailable member is a missing one: a redundant array assembles
    // degraded without it.
    if ((*mv)->error.empty()) members.push_back((*mv)->qos);
  }
  if (cfg.kind == "raid0") {
    if (members.size() != cfg.members.size()) {
      return Status::unavailable("a raid0 member is unavailable");
    }
    auto a = blk::Raid0::create(members, cfg.strip_bytes ? cfg.strip_bytes : (64 << 10));
    if (!a.ok()) return a.status();
    return std::shared_ptr<blk::BlockDevice>(std::move(*a));
  }
  auto level = blk::parse_raid_level(cfg.kind);
  if (!level.ok()) return level.status();
  Result<std::unique_ptr<blk::RaidArray>> a = Status::internal("unset");
  if (format) {
    blk::RaidOptions o;
    o.level = *level;
    o.strip_bytes = cfg.strip_bytes ? cfg.strip_bytes : (64 << 10);
    o.copies = cfg.copies ? cfg.copies : 2;
    o.name = cfg.name;
    a = blk::RaidArray::create(members, o);
  } else {
    a = blk::RaidArray::assemble(members, raid_options_);
  }
  if (!a.ok()) return a.status();
  if ((*a)->level() != *level) {
    return Status::corruption(fmt::format("members hold a {}, the config says {}",
                                          blk::raid_level_name((*a)->level()), cfg.kind));
  }
  v->raid = std::shared_ptr<blk::RaidArray>(std::move(*a));
  return std::shared_ptr<blk::BlockDevice>(v->raid);
}

Status BlockDaemon::instantiate_locked(const VolumeConfig& cfg, bool format) {
  auto v = std::make_unique<Volume>();
  v->cfg = cfg;
  Result<std::shared_ptr<blk::BlockDevice>> base = Status::internal("unset");
  if (cfg.kind == "file") {
    base = open_file_volume(cfg);
  } else if (cfg.kind == "remote") {
    auto remote = connect_remote_volume(cfg);
    if (!remote.ok()) return remote.status();
    v->remote = std::shared_ptr<nvmf::NvmeTcpDevice>(std::move(*remote));
    base = std::shared_ptr<blk::BlockDevice>(v->remote);
  } else if (cfg.kind == "mem") {
    if (cfg.size_bytes < 4096 || cfg.size_bytes > (64ull << 30)) {
      return Status::invalid_argument("a RAM volume holds 4 KiB to 64 GiB");
    }
    base = std::shared_ptr<blk::BlockDevice>(
        std::make_shared<blk::MemDevice>(cfg.size_bytes, 4096, 4096));
  } else if (cfg.kind == "partition") {
    base = open_partition_locked(cfg);
  } else if (is_array(cfg.kind)) {
    base = open_array_locked(cfg, format, v.get());
  } else {
    return Status::invalid_argument(fmt::format("unknown kind '{}'", cfg.kind));
  }
  if (!base.ok()) return base.status();
  v->base = *base;
  v->health = std::make_shared<blk::HealthDevice>(*base, health_options_);
  v->qos = std::make_shared<blk::QosDevice>(v->health, cfg.qos);
  for (const auto& m : cfg.members) volumes_[m]->used_by = cfg.name;
  if (cfg.kind == "partition") volumes_[cfg.parent]->used_by = cfg.name;
  volumes_[cfg.name] = std::move(v);
  order_.push_back(cfg.name);
  return Status::ok_status();
}

Status BlockDaemon::persist_locked() {
  DaemonConfig c;
  for (const auto& n : order_) c.volumes.push_back(volumes_.at(n)->cfg);
  for (const auto& n : export_order_) c.exports.push_back(exports_.at(n)->cfg);
  return save_config_atomic(config_path_, c);
}

Result<VolumeConfig> BlockDaemon::new_volume_locked(const std::string& name,
                                                    const std::string& kind) const {
  if (!valid_volume_name(name)) {
    return Status::invalid_argument(fmt::format(
        "volume name '{}' must be 1-63 characters of letters, digits, '-', '_' or '.'", name));
  }
  if (volumes_.count(name)) return Status::already_exists(fmt::format("volume '{}' exists", name));
  VolumeConfig c;
  c.name = name;
  c.kind = kind;
  return c;
}

Result<BlockDaemon::Volume*> BlockDaemon::find_locked(const std::string& name) {
  auto it = volumes_.find(name);
  if (it == volumes_.end()) return Status::not_found(fmt::format("no volume '{}'", name));
  return it->second.get();
}

Result<const BlockDaemon::Volume*> BlockDaemon::find_locked(const std::string& name) const {
  auto it = volumes_.find(name);
  if (it == volumes_.end()) return Status::not_found(fmt::format("no volume '{}'", name));
  return static_cast<const Volume*>(it->second.get());
}

Result<v1::Volume> BlockDaemon::add_volume_locked(const VolumeConfig& c) {
  KVTIER_RETURN_IF_ERROR(instantiate_locked(c, /*format=*/true));
  KVTIER_RETURN_IF_ERROR(persist_locked());
  return describe_locked(*volumes_.at(c.name));
}

Result<v1::Volume> BlockDaemon::create_file(const v1::CreateFileRequest& r) {
  std::lock_guard lk(mu_);
  KVTIER_ASSIGN_OR_RETURN(VolumeConfig c, new_volume_locked(r.name(), "file"));
  if (r.path().empty()) return Status::invalid_argument("a file volume needs --path");
  c.path = r.path();
  c.size_bytes = r.size_bytes();
  c.buffered = r.buffered();
  for (const auto& [n, v] : volumes_) {
    if (v->cfg.kind == "file" && v->cfg.path == c.path) {
      return Status::already_exists(fmt::format("'{}' is already volume '{}'", c.path, n));
    }
  }
  return add_volume_locked(c);
}

Result<v1::Volume> BlockDaemon::create_mem(const v1::CreateMemRequest& r) {
  std::lock_guard lk(mu_);
  KVTIER_ASSIGN_OR_RETURN(VolumeConfig c, new_volume_locked(r.name(), "mem"));
  c.size_bytes = r.size_bytes() / 4096 * 4096;
  return add_volume_locked(c);
}

Result<v1::Volume> BlockDaemon::create_remote(const v1::CreateRemoteRequest& r) {
  std::lock_guard lk(mu_);
  KVTIER_ASSIGN_OR_RETURN(VolumeConfig c, new_volume_locked(r.name(), "remote"));
  c.remote.address = r.address();
  c.remote.port = static_cast<uint16_t>(r.port() ? r.port() : 4420);
  if (r.port() > 65535) return Status::invalid_argument("port must be 1..65535");
  c.remote.nqn = r.nqn();
  if (!r.hostnqn().empty()) c.remote.hostnqn = r.hostnqn();
  if (r.nsid()) c.remote.nsid = r.nsid();
  if (r.io_queues()) c.remote.io_queues = r.io_queues();
  c.remote.hdgst = r.hdgst();
  c.remote.ddgst = r.ddgst();
  if (r.reconnect_delay_ms()) c.remote.reconnect_delay_ms = r.reconnect_delay_ms();
  if (r.ctrl_loss_tmo_ms()) c.remote.ctrl_loss_tmo_ms = r.ctrl_loss_tmo_ms();
  if (r.fast_io_fail_tmo_ms()) c.remote.fast_io_fail_tmo_ms = r.fast_io_fail_tmo_ms();
  c.remote.dhchap_secret = r.dhchap_secret();
  c.remote.dhchap_ctrl_secret = r.dhchap_ctrl_secret();
  for (const auto& [n, v] : volumes_) {
    if (v->cfg.kind == "remote" && v->cfg.remote.address == c.remote.address &&
        v->cfg.remote.port == c.remote.port && v->cfg.remote.nqn == c.remote.nqn &&
        v->cfg.remote.nsid == c.remote.nsid) {
      return Status::already_exists(fmt::format("that namespace is already volume '{}'", n));
    }
  }
  return add_volume_locked(c);
}

void BlockDaemon::refresh_remote_state(const Volume& v) {
  if (!v.remote || !v.health) return;
  const bool down = !v.remote->connected();
  const bool marked = v.health->state() == blk::HealthState::kReconnecting;
  if (down != marked) v.health->set_reconnecting(down);
}

Result<v1::Volume> BlockDaemon::create_array(const v1::CreateArrayRequest& r) {
  std::lock_guard lk(mu_);
  KVTIER_ASSIGN_OR_RETURN(VolumeConfig c, new_volume_locked(r.name(), ""));
  std::string level = r.level();
  if (level.rfind("raid", 0) != 0) level = "raid" + level;
  if (level != "raid0") {
    auto l = blk::parse_raid_level(level);
    if (!l.ok()) return l.status();
  }
  c.kind = level;
  c.members.assign(r.members().begin(), r.members().end());
  if (c.members.empty()) return Status::invalid_argument("an array needs --member volumes");
  c.strip_bytes = r.strip_bytes() ? r.strip_bytes() : (64 << 10);
  c.copies = r.copies() ? r.copies() : 2;
  for (const auto& m : c.members) {
    auto mv = find_locked(m);
    if (!mv.ok()) return mv.status();
    if (!(*mv)->error.empty()) return Status::unavailable(fmt::format("'{}' is unavailable", m));
  }
  return add_volume_locked(c);
}

Result<v1::Volume> BlockDaemon::create_partition(const v1::CreatePartitionRequest& r) {
  std::lock_guard lk(mu_);
  KVTIER_ASSIGN_OR_RETURN(VolumeConfig c, new_volume_locked(r.name(), "partition"));
  c.parent = r.parent();
  c.offset_bytes = r.offset_bytes();
  c.length_bytes = r.length_bytes();
  return add_volume_locked(c);
}

Result<v1::Volume> BlockDaemon::remove(const std::string& name) {
  std::lock_guard lk(mu_);
  auto v = find_locked(name);
  if (!v.ok()) return v.status();
  if (!(*v)->used_by.empty()) {
    return Status::failed_precondition(
        fmt::format("'{}' is used by '{}'; delete that first", name, (*v)->used_by));
  }
  if (!(*v)->exported_as.empty()) {
    return Status::failed_precondition(fmt::format(
        "'{}' is exported as '{}'; delete the export first (kvtier blk export delete {})", name,
        (*v)->exported_as, (*v)->exported_as));
  }
  v1::Volume out = describe_locked(**v);
  VolumeConfig cfg = (*v)->cfg;
  volumes_.erase(name);
  order_.erase(std::find(order_.begin(), order_.end(), name));
  for (const auto& m : cfg.members) {
    if (volumes_.count(m)) volumes_[m]->used_by.clear();
  }
  if (!cfg.parent.empty() && volumes_.count(cfg.parent)) volumes_[cfg.parent]->used_by.clear();
  KVTIER_RETURN_IF_ERROR(persist_locked());
  return out;
}

Result<v1::Volume> BlockDaemon::replace_member(const v1::ReplaceMemberRequest& r) {
  std::lock_guard lk(mu_);
  auto a = find_locked(r.array());
  if (!a.ok()) return a.status();
  if (!(*a)->raid) {
    return Status::failed_precondition(
        fmt::format("'{}' is not a redundant array (available)", r.array()));
  }
  auto d = find_locked(r.device());
  if (!d.ok()) return d.status();
  if (!(*d)->used_by.empty()) {
    return Status::failed_precondition(
        fmt::format("'{}' is already used by '{}'", r.device(), (*d)->used_by));
  }
  if (r.device() == r.array()) return Status::invalid_argument("an array cannot be its own member");
  KVTIER_RETURN_IF_ERROR(check_not_exported_locked(r.device()));
  if (!(*d)->error.empty())
    return Status::unavailable(fmt::format("'{}' is unavailable", r.device()));
  if (r.slot() >= (*a)->cfg.members.size()) {
    return Status::invalid_argument(
        fmt::format("'{}' has slots 0..{}", r.array(), (*a)->cfg.members.size() - 1));
  }
  KVTIER_RETURN_IF_ERROR((*a)->raid->replace_member(r.slot(), (*d)->qos));
  const std::string old = (*a)->cfg.members[r.slot()];
  if (volumes_.count(old)) volumes_[old]->used_by.clear();
  (*a)->cfg.members[r.slot()] = r.device();
  (*d)->used_by = r.array();
  // The replacement must come after the array's other references in the
  // config order only for validation of references; arrays refer to members,
  // so move the array after its new member.
  auto ai = std::find(order_.begin(), order_.end(), r.array());
  auto di = std::find(order_.begin(), order_.end(), r.device());
  if (di > ai) {
    order_.erase(ai);
    di = std::find(order_.begin(), order_.end(), r.device());
    order_.insert(di + 1, r.array());
    // Anything built on the array must still follow it.
    std::string user = (*a)->used_by;
    while (!user.empty()) {
      auto ui = std::find(order_.begin(), order_.end(), user);
      auto ai2 = std::find(order_.begin(), order_.end(), r.array());
      if (ui < ai2) {
        order_.erase(ui);
        ai2 = std::find(order_.begin(), order_.end(), r.array());
        order_.insert(ai2 + 1, user);
      }
      user = volumes_.count(user) ? volumes_[user]->used_by : "";
    }
  }
  KVTIER_RETURN_IF_ERROR(persist_locked());
  return describe_locked(**a);
}

Result<v1::Volume> BlockDaemon::fail_member(const v1::FailMemberRequest& r) {
  std::lock_guard lk(mu_);
  auto a = find_locked(r.array());
  if (!a.ok()) return a.status();
  if (!(*a)->raid)
    return Status::failed_precondition(fmt::format("'{}' is not a redundant array", r.array()));
  KVTIER_RETURN_IF_ERROR((*a)->raid->fail_member(r.slot()));
  return describe_locked(**a);
}

Result<v1::Volume> BlockDaemon::set_qos(const v1::SetQosRequest& r) {
  std::lock_guard lk(mu_);
  auto v = find_locked(r.name());
  if (!v.ok()) return v.status();
  if (!(*v)->qos) return Status::unavailable(fmt::format("'{}' is unavailable", r.name()));
  if (r.qos().burst_seconds() < 0 || r.qos().burst_seconds() > 60) {
    return Status::invalid_argument("burst must be 0..60 seconds");
  }
  const blk::QosLimits l = qos_from_proto(r.qos());
  (*v)->qos->set_limits(l);
  (*v)->cfg.qos = l;
  KVTIER_RETURN_IF_ERROR(persist_locked());
  return describe_locked(**v);
}

v1::Volume BlockDaemon::describe_locked(const Volume& v) const {
  v1::Volume o;
  o.set_name(v.cfg.name);
  o.set_kind(v.cfg.kind);
  o.set_path(v.cfg.path);
  o.set_parent(v.cfg.parent);
  o.set_offset_bytes(v.cfg.offset_bytes);
  o.set_used_by(v.used_by);
  qos_to_proto(v.cfg.qos, o.mutable_qos());
  if (v.cfg.kind == "remote") {
    o.set_remote(fmt::format("{}:{} {} nsid {}", v.cfg.remote.address, v.cfg.remote.port,
                             v.cfg.remote.nqn, v.cfg.remote.nsid));
    if (v.remote) o.set_reconnects(v.remote->reconnects());
    refresh_remote_state(v);
  }
  if (!v.error.empty()) {
    o.set_state("unavailable: " + v.error);
    for (size_t i = 0; i < v.cfg.members.size(); ++i) {
      auto* m = o.add_members();
      m->set_slot(static_cast<uint32_t>(i));
      m->set_device(v.cfg.members[i]);
      m->set_state("unknown");
    }
    return o;
  }
  o.set_capacity_bytes(v.qos->capacity());
  o.set_block_size(v.qos->block_size());
  std::string state = blk::health_state_name(v.health->state());
  if (v.raid) {
    const auto st = v.raid->status();
    state = st.rebuilding ? "rebuilding" : blk::array_state_name(st.state);
    o.set_strip_bytes(v.raid->strip_bytes());
    o.set_uuid(v.raid->uuid_string());
    o.set_rebuild_rows_done(st.rebuild_rows_done);
    o.set_rows(st.rows);
    for (size_t i = 0; i < st.members.size(); ++i) {
      auto* m = o.add_members();
      m->set_slot(static_cast<uint32_t>(i));
      m->set_device(i < v.cfg.members.size() ? v.cfg.members[i] : st.members[i].device);
      m->set_state(blk::member_state_name(st.members[i].state));
      m->set_read_errors(st.members[i].read_errors);
      m->set_write_errors(st.members[i].write_errors);
    }
  } else if (v.cfg.kind == "raid0") {
    o.set_strip_bytes(v.cfg.strip_bytes);
    for (size_t i = 0; i < v.cfg.members.size(); ++i) {
      auto* m = o.add_members();
      m->set_slot(static_cast<uint32_t>(i));
      m->set_device(v.cfg.members[i]);
      m->set_state("active");
    }
  }
  o.set_state(state);
  stats_to_proto(*v.health, o.mutable_stats());
  return o;
}

Result<v1::Volume> BlockDaemon::show(const std::string& name) const {
  std::lock_guard lk(mu_);
  auto v = find_locked(name);
  if (!v.ok()) return v.status();
  return describe_locked(**v);
}

v1::ListReply BlockDaemon::list() const {
  std::lock_guard lk(mu_);
  v1::ListReply r;
  for (const auto& n : order_) *r.add_volumes() = describe_locked(*volumes_.at(n));
  return r;
}

Result<std::shared_ptr<blk::BlockDevice>> BlockDaemon::data_device(const std::string& name) const {
  std::lock_guard lk(mu_);
  auto v = find_locked(name);
  if (!v.ok()) return v.status();
  if (!(*v)->qos) return Status::unavailable(fmt::format("'{}' is unavailable", name));
  if (!(*v)->used_by.empty()) {
    return Status::failed_precondition(
        fmt::format("'{}' is part of '{}'; use that volume", name, (*v)->used_by));
  }
  return std::static_pointer_cast<blk::BlockDevice>((*v)->qos);
}

Status BlockDaemon::write(const v1::WriteRequest& r) {
  if (r.data().size() > kMaxDataBytes) {
    return Status::invalid_argument(fmt::format("at most {} bytes per write", kMaxDataBytes));
  }
  auto dev = data_device(r.name());
  if (!dev.ok()) return dev.status();
  AlignedBuffer buf(std::max<size_t>(r.data().size(), 1), 4096);
  std::memcpy(buf.data(), r.data().data(), r.data().size());
  return (*dev)->write_sync(r.offset(), buf.subview(0, r.data().size()));
}

Result<std::string> BlockDaemon::read(const v1::ReadRequest& r) {
  if (r.length() > kMaxDataBytes) {
    return Status::invalid_argument(fmt::format("at most {} bytes per read", kMaxDataBytes));
  }
  auto dev = data_device(r.name());
  if (!dev.ok()) return dev.status();
  AlignedBuffer buf(std::max<size_t>(r.length(), 1), 4096);
  KVTIER_RETURN_IF_ERROR((*dev)->read_sync(r.offset(), buf.subview(0, r.length())));
  return std::string(reinterpret_cast<const char*>(buf.data()), r.length());
}

}  // namespace kvtier::blockd
