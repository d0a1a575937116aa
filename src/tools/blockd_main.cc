// kvtier-blockd: the storage-engine daemon. Owns devices, RAID arrays,
// partitions and QoS limits (blockd/daemon.h), restores them from its config
// at start, serves the gRPC management API (src/blockd/blockd.proto) on
// loopback by default and Prometheus metrics on /metrics. SIGTERM or SIGINT
// stops it cleanly (arrays marked clean); SIGKILL is survived through the
// arrays' write-intent bitmaps.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "blockd/daemon.h"
#include "blockd/grpc_service.h"
#include "common/log.h"
#include "net/http_endpoint.h"

using namespace kvtier;  // NOLINT

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
  app.add_option("--listen", so.listen, "gRPC address host:port (port 0 picks a free one)")
      ->capture_default_str();
  app.add_option("--allow-host", so.allowed_hosts,
                 "Remote host allowed to call the API besides loopback (repeatable)");
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
  CLI11_PARSE(app, argc, argv);
  init_logging();

  // Signals go to a waiting thread, not to handlers.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  auto daemon = blockd::BlockDaemon::open(config, health);
  if (!daemon.ok()) {
    std::fprintf(stderr, "kvtier-blockd: %s\n", daemon.status().to_string().c_str());
    return 1;
  }
  auto server = blockd::BlockdServer::start(**daemon, so);
  if (!server.ok()) {
    std::fprintf(stderr, "kvtier-blockd: %s\n", server.status().to_string().c_str());
    return 1;
  }
  std::unique_ptr<net::HttpEndpoint> metrics;
  if (!no_metrics) {
    net::HttpEndpointOptions ho;
    ho.address = metrics_address;
    ho.port = static_cast<uint16_t>(metrics_port);
    blockd::BlockDaemon* d = daemon->get();
    auto ep = net::HttpEndpoint::start(ho, [d](const std::string& path) {
      net::HttpResponse r;
      if (path == "/metrics") {
        r.body = d->render_metrics();
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
