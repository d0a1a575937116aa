// BlockDaemon: its volumes, arrays and exports in Prometheus' text format.
#include <fmt/format.h>

#include <algorithm>

#include "blockd/daemon.h"

namespace kvtier::blockd {

namespace {

std::string prom_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}

// The HELP and TYPE lines of one family.
void add_family(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

void BlockDaemon::render_volume_metrics_locked(std::string& out) const {
  auto family = [&](const char* name, const char* type, const char* help) {
    add_family(out, name, type, help);
  };
  // A family of one sample per volume that has a device.
  auto each = [&](const char* name, const char* type, const char* help, auto value_of) {
    add_family(out, name, type, help);
    for (const auto& n : order_) {
      const Volume& v = *volumes_.at(n);
      if (!v.qos) continue;
      out += fmt::format("{}{{volume=\"{}\",kind=\"{}\"}} {}\n", name, prom_escape(n), v.cfg.kind,
                         value_of(v));
    }
  };
  family("kvtier_blockd_volume_up", "gauge", "1 when the volume is usable (online or degraded)");
  for (const auto& n : order_) {
    const Volume& v = *volumes_.at(n);
    refresh_remote_state(v);
    bool up = v.error.empty();
    if (up && v.raid) up = v.raid->status().state != blk::ArrayState::kFailed;
    if (up && !v.raid) {
      const auto hs = v.health->state();
      up = hs != blk::HealthState::kFailed && hs != blk::HealthState::kRemoved;
    }
    out += fmt::format("kvtier_blockd_volume_up{{volume=\"{}\",kind=\"{}\"}} {}\n", prom_escape(n),
                       v.cfg.kind, up ? 1 : 0);
  }
  auto each_remote = [&](const char* name, auto value_of) {
    for (const auto& n : order_) {
      const Volume& v = *volumes_.at(n);
      if (v.remote)
        out += fmt::format("{}{{volume=\"{}\"}} {}\n", name, prom_escape(n), value_of(v));
    }
  };
  family("kvtier_blockd_remote_connected", "gauge",
         "Remote volumes: 1 while the NVMe/TCP connection is up, 0 while reconnecting");
  each_remote("kvtier_blockd_remote_connected",
              [](const Volume& v) { return v.remote->connected() ? 1 : 0; });
  family("kvtier_blockd_remote_reconnects_total", "counter",
         "Remote volumes: connections re-established after a loss");
  each_remote("kvtier_blockd_remote_reconnects_total",
              [](const Volume& v) { return v.remote->reconnects(); });
  each("kvtier_blockd_volume_capacity_bytes", "gauge", "Usable bytes",
       [](const Volume& v) { return v.qos->capacity(); });
  struct StatCounter {
    const char* name;
    const char* help;
    uint64_t blk::DeviceStats::*field;
  };
  for (const StatCounter& c : {StatCounter{"kvtier_blockd_volume_reads_total", "Completed reads",
                                           &blk::DeviceStats::reads},
                               StatCounter{"kvtier_blockd_volume_writes_total", "Completed writes",
                                           &blk::DeviceStats::writes},
                               StatCounter{"kvtier_blockd_volume_read_bytes_total", "Bytes read",
                                           &blk::DeviceStats::bytes_read},
                               StatCounter{"kvtier_blockd_volume_written_bytes_total",
                                           "Bytes written", &blk::DeviceStats::bytes_written},
                               StatCounter{"kvtier_blockd_volume_errors_total", "Failed requests",
                                           &blk::DeviceStats::errors}}) {
    each(c.name, "counter", c.help, [&](const Volume& v) { return v.health->stats().*c.field; });
  }
  each("kvtier_blockd_volume_read_latency_p99_seconds", "gauge", "Read latency, 99th percentile",
       [](const Volume& v) { return v.health->read_latency().quantile(0.99) / 1e9; });
  each("kvtier_blockd_volume_write_latency_p99_seconds", "gauge", "Write latency, 99th percentile",
       [](const Volume& v) { return v.health->write_latency().quantile(0.99) / 1e9; });
}

void BlockDaemon::render_array_metrics_locked(std::string& out) const {
  add_family(out, "kvtier_blockd_array_members", "gauge", "Array members by state");
  add_family(out, "kvtier_blockd_array_rebuild_rows_done", "gauge",
             "Rows rebuilt by the current rebuild");
  for (const auto& n : order_) {
    const Volume& v = *volumes_.at(n);
    if (!v.raid) continue;
    const auto st = v.raid->status();
    for (auto s :
         {blk::MemberState::kActive, blk::MemberState::kFailed, blk::MemberState::kRebuilding}) {
      const auto c = std::count_if(st.members.begin(), st.members.end(),
                                   [&](const auto& m) { return m.state == s; });
      out += fmt::format("kvtier_blockd_array_members{{volume=\"{}\",state=\"{}\"}} {}\n",
                         prom_escape(n), blk::member_state_name(s), c);
    }
    out += fmt::format("kvtier_blockd_array_rebuild_rows_done{{volume=\"{}\"}} {}\n",
                       prom_escape(n), st.rebuild_rows_done);
  }
}

void BlockDaemon::render_export_metrics_locked(std::string& out) const {
  auto each_export = [&](const char* name, const char* type, const char* help, auto value_of) {
    add_family(out, name, type, help);
    for (const auto& n : export_order_) {
      const Export& e = *exports_.at(n);
      if (!e.target && std::string(name) != "kvtier_blockd_export_up") continue;
      out += fmt::format("{}{{nqn=\"{}\",volume=\"{}\"}} {}\n", name, prom_escape(n),
                         prom_escape(e.cfg.volume), value_of(e));
    }
  };
  each_export("kvtier_blockd_export_up", "gauge", "1 when the NVMe/TCP export is serving",
              [](const Export& e) { return e.target ? 1 : 0; });
  each_export("kvtier_blockd_export_connections_total", "counter",
              "NVMe/TCP queue connections accepted",
              [](const Export& e) { return e.target->connections_served(); });
  each_export("kvtier_blockd_export_reads_total", "counter", "Reads through the export",
              [](const Export& e) { return e.counted->stats().reads; });
  each_export("kvtier_blockd_export_writes_total", "counter", "Writes through the export",
              [](const Export& e) { return e.counted->stats().writes; });
  each_export("kvtier_blockd_export_read_bytes_total", "counter", "Bytes read through the export",
              [](const Export& e) { return e.counted->stats().bytes_read; });
  each_export("kvtier_blockd_export_written_bytes_total", "counter",
              "Bytes written through the export",
              [](const Export& e) { return e.counted->stats().bytes_written; });
  each_export("kvtier_blockd_export_errors_total", "counter", "Failed requests of the export",
              [](const Export& e) { return e.counted->stats().errors; });
  render_export_protection_metrics_locked(out);
}

void BlockDaemon::render_export_protection_metrics_locked(std::string& out) const {
  add_family(out, "kvtier_blockd_export_protections_total", "counter",
             "Connections, controllers and commands the NVMe/TCP export refused or cut off to "
             "protect itself from a host, by reason");
  for (const auto& n : export_order_) {
    const Export& e = *exports_.at(n);
    if (!e.target) continue;
    const nvmf::TargetCounters c = e.target->counters();
    const std::pair<const char*, uint64_t> reasons[] = {{"connection_limit", c.connections_refused},
                                                        {"controller_limit", c.controllers_refused},
                                                        {"handshake_timeout", c.handshake_timeouts},
                                                        {"r2t_timeout", c.r2t_timeouts},
                                                        {"send_stall", c.send_stalls},
                                                        {"r2t_budget", c.r2t_refused},
                                                        {"duplicate_queue", c.duplicate_queues},
                                                        {"kato_clamped", c.kato_clamped},
                                                        {"auth_failure", c.auth_failures}};
    for (const auto& [reason, value] : reasons) {
      out += fmt::format(
          "kvtier_blockd_export_protections_total{{nqn=\"{}\",volume=\"{}\",reason=\"{}\"}} {}\n",
          prom_escape(n), prom_escape(e.cfg.volume), reason, value);
    }
  }
}

std::string BlockDaemon::render_metrics() const {
  std::lock_guard lk(mu_);
  std::string out;
  render_volume_metrics_locked(out);
  render_array_metrics_locked(out);
  render_export_metrics_locked(out);
  return out;
}

}  // namespace kvtier::blockd
