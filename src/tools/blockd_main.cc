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
#include <string>
#include <thread>
#include <vector>

#include "blockd/daemon.h"
#include "blockd/grpc_service.h"
#include "common/http_endpoint.h"
#include "common/log.h"

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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "kvtier-blockd: storage-engine daemon (volumes, RAID, partitions, QoS) managed over gRPC; "
      "use `kvtier blk ...` to talk to it"};
  std::string config;
  blockd::ServerOptions so;
  std::string metrics_address = "127.0.0.1";
  int metrics_port = 0;
  bool no_metrics = false;
  blk::HealthOptions health;
  app.add_option("--config", config,
                 "Config file (versioned JSON, rewritten atomically on every change; created if "
                 "missing)")
      ->required();
  std::string socket_user, socket_group;
  blockd::VolumePolicy policy;
  app.add_option("--socket", so.socket_path,
                 "Unix socket of the management API, mode 0600 (0660 with --socket-group); "
                 "callers are checked by their kernel credentials (\"\" = none)")
      ->capture_default_str();
  app.add_option("--socket-user", socket_user,
                 "Owner of the socket, who may manage the daemon besides root (name or uid)");
  app.add_option("--socket-group", socket_group,
                 "Group of the socket, whose members may manage the daemon (name or gid)");
  app.add_option("--tcp-listen", so.tcp_listen,
                 "Also serve the API on TCP host:port, only with mutual TLS (--tls-*)");
  app.add_option("--tls-cert", so.tls_cert_file, "TLS: the daemon's certificate (PEM)");
  app.add_option("--tls-key", so.tls_key_file, "TLS: the daemon's private key (PEM)");
  app.add_option("--tls-client-ca", so.tls_client_ca_file,
                 "TLS: CA (PEM) that every client certificate must chain to");
  app.add_option("--allow-host", so.allowed_hosts,
                 "TCP: also require TLS clients to come from these addresses (repeatable)");
  app.add_option("--volume-dir", policy.volume_dirs,
                 "Folder where file volumes may be created and opened (repeatable; not "
                 "writable by group or others). Nothing else is opened.");
  app.add_option("--device", policy.devices,
                 "Block device that may be used as a volume, by this exact path (repeatable)");
  app.add_option("--export-address", policy.export_addresses,
                 "Address other than loopback that NVMe/TCP exports may listen on (repeatable)");
  app.add_flag("--allow-any-host-exports", policy.allow_any_host_exports,
               "Let exports set allow_any_host (any host NQN may connect)");
  app.add_option("--metrics-address", metrics_address, "Address of the /metrics endpoint")
      ->capture_default_str();
  app.add_option("--metrics-port", metrics_port, "Port of /metrics (0 picks a free one)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_flag("--no-metrics", no_metrics, "Do not serve /metrics");
  app.add_option("--degraded-after", health.degraded_after,
                 "I/O errors after which a volume's state says degraded (0: never)")
      ->capture_default_str();
  app.add_option("--error-budget", health.error_budget,
                 "I/O errors after which a volume is failed: every request then fails at once, so "
                 "an array takes the member out instead of waiting on it (0: never)")
      ->capture_default_str();
  blk::RaidRuntimeOptions raid;
  app.add_flag("--assemble-dirty-degraded", raid.force_dirty_degraded,
               "Assemble parity arrays that come back degraded with rows that were being "
               "written (the write hole) instead of refusing them; those rows stay marked dirty");
  CLI11_PARSE(app, argc, argv);
  init_logging();
  {
    // Every management connection and volume is a descriptor: use all the
    // hard limit allows, so that many clients exhaust a bound the operator set,
    // not the 1,024 a shell's soft limit often is.
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
      rl.rlim_cur = rl.rlim_max;
      (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
  }
  so.socket_uid = resolve_id(socket_user, false);
  so.socket_gid = resolve_id(socket_group, true);
  if (so.socket_uid == -2 || so.socket_gid == -2) {
    std::fprintf(stderr, "kvtier-blockd: unknown --socket-user or --socket-group\n");
    return 2;
  }
  auto paths = blockd::VolumePaths::create(policy);
  if (!paths.ok()) {
    std::fprintf(stderr, "kvtier-blockd: %s\n", paths.status().message().c_str());
    return 2;
  }
  if (policy.volume_dirs.empty() && policy.devices.empty()) {
    std::fprintf(stderr,
                 "kvtier-blockd: note: no --volume-dir or --device, so only RAM and remote "
                 "volumes can be created\n");
  }

  // Signals go to a waiting thread, not to handlers.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  auto daemon = blockd::BlockDaemon::open(config, std::move(*paths), health, raid);
  if (!daemon.ok()) {
    std::fprintf(stderr, "kvtier-blockd: %s\n", daemon.status().to_string().c_str());
    return 1;
  }
  auto server = blockd::BlockdServer::start(**daemon, so);
  if (!server.ok()) {
    std::fprintf(stderr, "kvtier-blockd: %s\n", server.status().to_string().c_str());
    return 1;
  }
  std::unique_ptr<HttpEndpoint> metrics;
  if (!no_metrics) {
    HttpEndpointOptions ho;
    ho.address = metrics_address;
    ho.port = static_cast<uint16_t>(metrics_port);
    blockd::BlockDaemon* d = daemon->get();
    blockd::BlockdServer* mgmt = server->get();
    auto ep = HttpEndpoint::start(ho, [d, mgmt](const std::string& path) {
      HttpResponse r;
      if (path == "/metrics") {
        r.body = d->render_metrics();
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
    if (!ep.ok()) {
      std::fprintf(stderr, "kvtier-blockd: metrics: %s\n", ep.status().to_string().c_str());
      return 1;
    }
    metrics = std::move(*ep);
  }
  if (!so.socket_path.empty()) {
    std::fprintf(stderr, "kvtier-blockd: management on unix:%s\n", so.socket_path.c_str());
  }
  std::printf("listening grpc %d metrics %d\n", (*server)->port(), metrics ? metrics->port() : 0);
  std::fflush(stdout);

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&set, &sig);
    (*server)->shutdown();
  });
  (*server)->wait();
  waiter.join();
  metrics.reset();
  server->reset();
  daemon->reset();  // arrays flushed and marked clean
  return 0;
}
