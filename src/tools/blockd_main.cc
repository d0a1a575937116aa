// kvtier-blockd: the storage-engine daemon. Owns devices, RAID arrays,
// partitions and QoS limits (blockd/daemon.h), restores them from its config
// at start, serves the gRPC management API (src/blockd/blockd.proto) on a
// Unix socket checked against each caller's credentials (TCP only with
// mutual TLS) and Prometheus metrics on /metrics. File volumes only beneath
// --volume-dir or from --device (docs/security.md). SIGTERM or SIGINT
// stops it cleanly (arrays marked clean); SIGKILL is survived through the
// arrays' write-intent bitmaps.
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/resource.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "blockd/daemon.h"
#include "blockd/grpc_service.h"
#include "common/http_endpoint.h"
#include "common/log.h"
#include "common/stop_signals.h"

using namespace kvtier;  // NOLINT

namespace {

// A user or group by name or number (-1 when `s` is empty).
int64_t resolve_id(const std::string& s, bool is_group) {
  if (s.empty()) return -1;
  if (s.find_first_not_of("0123456789") == std::string::npos) return std::stoll(s);
  if (is_group) {
    const struct group* g = getgrnam(s.c_str());
    return g ? static_cast<int64_t>(g->gr_gid) : -2;
  }
  const struct passwd* p = getpwnam(s.c_str());
  return p ? static_cast<int64_t>(p->pw_uid) : -2;
}

// Everything the command line sets.
struct BlockdArgs {
  std::string config;
  blockd::ServerOptions server;
  std::string socket_user, socket_group;
  blockd::VolumePolicy policy;
  std::string metrics_address = "127.0.0.1";
  int metrics_port = 0;
  bool no_metrics = false;
  blk::HealthOptions health;
  blk::RaidRuntimeOptions raid;
};

void add_management_options(CLI::App& app, BlockdArgs& a) {
  app.add_option("--config", a.config,
                 "Config file (versioned JSON, rewritten atomically on every change; created if "
                 "missing)")
      ->required();
  app.add_option("--socket", a.server.socket_path,
                 "Unix socket of the management API, mode 0600 (0660 with --socket-group); "
                 "callers are checked by their kernel credentials (\"\" = none)")
      ->capture_default_str();
  app.add_option("--socket-user", a.socket_user,
                 "Owner of the socket, who may manage the daemon besides root (name or uid)");
  app.add_option("--socket-group", a.socket_group,
                 "Group of the socket, whose members may manage the daemon (name or gid)");
  app.add_option("--tcp-listen", a.server.tcp_listen,
                 "Also serve the API on TCP host:port, only with mutual TLS (--tls-*)");
  app.add_option("--tls-cert", a.server.tls_cert_file, "TLS: the daemon's certificate (PEM)");
  app.add_option("--tls-key", a.server.tls_key_file, "TLS: the daemon's private key (PEM)");
  app.add_option("--tls-client-ca", a.server.tls_client_ca_file,
                 "TLS: CA (PEM) that every client certificate must chain to");
  app.add_option("--allow-host", a.server.allowed_hosts,
                 "TCP: also require TLS clients to come from these addresses (repeatable)");
}

void add_volume_options(CLI::App& app, BlockdArgs& a) {
  app.add_option("--volume-dir", a.policy.volume_dirs,
                 "Folder where file volumes may be created and opened (repeatable; not "
                 "writable by group or others). Nothing else is opened.");
  app.add_option("--device", a.policy.devices,
                 "Block device that may be used as a volume, by this exact path (repeatable)");
  app.add_option("--export-address", a.policy.export_addresses,
                 "Address other than loopback that NVMe/TCP exports may listen on (repeatable)");
  app.add_flag("--allow-any-host-exports", a.policy.allow_any_host_exports,
               "Let exports set allow_any_host (any host NQN may connect)");
}

// How the daemon judges its devices: when a volume is degraded or failed, and
// whether a parity array with a write hole may come back.
void add_health_options(CLI::App& app, BlockdArgs& a) {
  app.add_option("--degraded-after", a.health.degraded_after,
                 "I/O errors after which a volume's state says degraded (0: never)")
      ->capture_default_str();
  app.add_option("--error-budget", a.health.error_budget,
                 "I/O errors after which a volume is failed: every request then fails at once, so "
                 "an array takes the member out instead of waiting on it (0: never)")
      ->capture_default_str();
  app.add_flag("--assemble-dirty-degraded", a.raid.force_dirty_degraded,
               "Assemble parity arrays that come back degraded with rows that were being "
               "written (the write hole) instead of refusing them; those rows stay marked dirty");
}

void add_metrics_options(CLI::App& app, BlockdArgs& a) {
  app.add_option("--metrics-address", a.metrics_address, "Address of the /metrics endpoint")
      ->capture_default_str();
  app.add_option("--metrics-port", a.metrics_port, "Port of /metrics (0 picks a free one)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_flag("--no-metrics", a.no_metrics, "Do not serve /metrics");
}

// Every management connection and volume is a descriptor: use all the hard
// limit allows, so that many clients exhaust a bound the operator set, not
// the 1,024 a shell's soft limit often is.
void raise_descriptor_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
  }
}

// /metrics (the daemon's families plus the management refusals) and /health.
Result<std::unique_ptr<HttpEndpoint>> start_metrics(const BlockdArgs& a,
                                                    blockd::BlockDaemon* daemon,
                                                    blockd::BlockdServer* mgmt) {
  HttpEndpointOptions ho;
  ho.address = a.metrics_address;
  ho.port = static_cast<uint16_t>(a.metrics_port);
  return HttpEndpoint::start(ho, [daemon, mgmt](const std::string& path) {
    HttpResponse r;
    if (path == "/metrics") {
      r.body = daemon->render_metrics();
      r.body += fmt::format(
          "# HELP kvtier_blockd_management_refused_total Management connections refused by "
          "peer credentials\n# TYPE kvtier_blockd_management_refused_total counter\n"
          "kvtier_blockd_management_refused_total {}\n",
          mgmt->refused_connections());
    } else if (path == "/health") {
      r.body = "ok\n";
    } else {
      r.status = 404;
      r.body = "not found\n";
    }
    return r;
  });
}

// Checks what the daemon will be allowed to touch; exit code 2 on bad input.
int resolve_policy(BlockdArgs& a, std::optional<blockd::VolumePaths>* paths) {
  a.server.socket_uid = resolve_id(a.socket_user, false);
  a.server.socket_gid = resolve_id(a.socket_group, true);
  if (a.server.socket_uid == -2 || a.server.socket_gid == -2) {
    std::fprintf(stderr, "kvtier-blockd: unknown --socket-user or --socket-group\n");
    return 2;
  }
  auto created = blockd::VolumePaths::create(a.policy);
  if (!created.ok()) {
    std::fprintf(stderr, "kvtier-blockd: %s\n", created.status().message().c_str());
    return 2;
  }
  paths->emplace(std::move(*created));
  if (a.policy.volume_dirs.empty() && a.policy.devices.empty()) {
    std::fprintf(stderr,
                 "kvtier-blockd: note: no --volume-dir or --device, so only RAM and remote "
                 "volumes can be created\n");
  }
  return 0;
}

int run_daemon(BlockdArgs& a) {
  init_logging();
  raise_descriptor_limit();
  std::optional<blockd::VolumePaths> paths;
  if (int rc = resolve_policy(a, &paths); rc != 0) return rc;

  // Signals go to a waiting thread, not to handlers.
  const StopSignals stop_signals(/*ignore_sigpipe=*/false);  // gRPC sends with MSG_NOSIGNAL

  auto daemon = blockd::BlockDaemon::open(a.config, std::move(*paths), a.health, a.raid);
  if (!daemon.ok()) {
    std::fprintf(stderr, "kvtier-blockd: %s\n", daemon.status().to_string().c_str());
    return 1;
  }
  auto server = blockd::BlockdServer::start(**daemon, a.server);
  if (!server.ok()) {
    std::fprintf(stderr, "kvtier-blockd: %s\n", server.status().to_string().c_str());
    return 1;
  }
  std::unique_ptr<HttpEndpoint> metrics;
  if (!a.no_metrics) {
    auto ep = start_metrics(a, daemon->get(), server->get());
    if (!ep.ok()) {
      std::fprintf(stderr, "kvtier-blockd: metrics: %s\n", ep.status().to_string().c_str());
      return 1;
    }
    metrics = std::move(*ep);
  }
  if (!a.server.socket_path.empty()) {
    std::fprintf(stderr, "kvtier-blockd: management on unix:%s\n", a.server.socket_path.c_str());
  }
  std::printf("listening grpc %d metrics %d\n", (*server)->port(), metrics ? metrics->port() : 0);
  std::fflush(stdout);

  std::thread waiter([&] {
    stop_signals.wait();
    (*server)->shutdown();
  });
  (*server)->wait();
  waiter.join();
  metrics.reset();
  server->reset();
  daemon->reset();  // arrays flushed and marked clean
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "kvtier-blockd: storage-engine daemon (volumes, RAID, partitions, QoS) managed over gRPC; "
      "use `kvtier blk ...` to talk to it"};
  BlockdArgs args;
  add_management_options(app, args);
  add_volume_options(app, args);
  add_metrics_options(app, args);
  add_health_options(app, args);
  CLI11_PARSE(app, argc, argv);
  return run_daemon(args);
}
