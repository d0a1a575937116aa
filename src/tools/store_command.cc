// `kvtier store serve` and `kvtier store stats`: run the store service, and
// ask a running one (or every node of a cluster) for its statistics.
// docs/store-service.md describes both.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/stop_signals.h"
#include "net/client/remote_store.h"
#include "net/cluster/cluster_config.h"
#include "net/cluster/cluster_store.h"
#include "net/cluster/etcd_registration.h"
#include "net/server/server_config.h"
#include "net/server/store_server.h"
#include "tools/commands.h"

namespace kvtier::tools {

namespace {

std::string host_port(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

int run_serve(const std::string& config_path) {
  auto cfg = net::load_server_config(config_path);
  if (!cfg.ok()) {
    std::fprintf(stderr, "kvtier store serve: %s\n", cfg.status().message().c_str());
    return 2;
  }
  // Before the server's threads start, so a stop is always the graceful one:
  // connections closed, store checkpointed.
  const StopSignals stop_signals(/*ignore_sigpipe=*/true);

  auto server = net::StoreServer::start(*cfg);
  if (!server.ok()) {
    std::fprintf(stderr, "kvtier store serve: %s\n", server.status().to_string().c_str());
    return 1;
  }
  std::string metrics = "metrics disabled";
  if ((*server)->metrics_port() != 0) {
    metrics = "metrics on http://" + host_port(cfg->metrics_address, (*server)->metrics_port()) +
              "/metrics";
  }
  std::fprintf(stderr, "kvtier store serve: listening on %s, %s (pid %d)\n",
               host_port((*server)->address(), (*server)->port()).c_str(), metrics.c_str(),
               static_cast<int>(getpid()));
  if (!cfg->tenants.empty()) {
    std::fprintf(stderr,
                 "kvtier store serve: %zu tenants, each with its own token, namespaces and "
                 "quotas\n",
                 cfg->tenants.size());
  } else if (cfg->auth_token.empty()) {
    std::fprintf(stderr,
                 "kvtier store serve: single tenant, no auth token: any process on this host "
                 "may read and write every block (docs/security.md)\n");
  } else {
    std::fprintf(stderr, "kvtier store serve: single tenant, one shared auth token\n");
  }
  std::fflush(stderr);

  // Cluster membership: registered only once the listener is up, so that a
  // client never finds an address that refuses connections.
  std::unique_ptr<net::EtcdRegistration> registration;
  if (cfg->etcd) {
    std::string host =
        cfg->etcd->advertise_address.empty() ? (*server)->address() : cfg->etcd->advertise_address;
    auto reg = net::EtcdRegistration::start(*cfg->etcd, host_port(host, (*server)->port()));
    if (!reg.ok()) {
      std::fprintf(stderr, "kvtier store serve: etcd registration at %s failed: %s\n",
                   cfg->etcd->url.c_str(), reg.status().to_string().c_str());
      (void)(*server)->stop();
      return 1;
    }
    registration = std::move(*reg);
    std::fprintf(stderr, "kvtier store serve: registered as %s in etcd %s (lease ttl %u s)\n",
                 registration->key().c_str(), cfg->etcd->url.c_str(), cfg->etcd->ttl_s);
    std::fflush(stderr);
  }

  const int sig = stop_signals.wait();
  std::fprintf(stderr, "kvtier store serve: %s, stopping\n", strsignal(sig));
  std::fflush(stderr);
  if (registration) {
    // Leave the node set first, so clients stop sending here before we close.
    Status rs = registration->stop();
    if (!rs.ok()) {
      std::fprintf(stderr, "kvtier store serve: etcd lease revoke: %s\n", rs.to_string().c_str());
    }
  }
  Status st = (*server)->stop();
  if (!st.ok()) {
    std::fprintf(stderr, "kvtier store serve: stop: %s\n", st.to_string().c_str());
    return 1;
  }
  std::fprintf(stderr, "kvtier store serve: stopped\n");
  return 0;
}

struct StatsCli {
  std::string address = "127.0.0.1:7470";
  std::vector<std::string> nodes;  // several nodes: the cluster's sum
  std::string etcd_url;            // or the nodes registered in etcd
  std::string prefix = "kvtier";
  std::string cluster_config;  // or a cluster client config file
  std::string token;
  std::string token_file;
  uint32_t timeout_ms = 3000;
  bool json = false;
};

// "host:port", "[v6]:port".
bool split_address(const std::string& a, std::string* host, uint16_t* port) {
  size_t colon = a.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == a.size()) return false;
  std::string h = a.substr(0, colon);
  if (h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  unsigned long p = 0;
  try {
    size_t used = 0;
    p = std::stoul(a.substr(colon + 1), &used);
    if (used != a.size() - colon - 1) return false;
  } catch (...) {
    return false;
  }
  if (p == 0 || p > 65535 || h.empty()) return false;
  *host = h;
  *port = static_cast<uint16_t>(p);
  return true;
}

// The auth token from --token or --token-file; false (after a message) when
// the file cannot be read.
bool read_token(const StatsCli& cli, std::string* token) {
  *token = cli.token;
  if (cli.token_file.empty()) return true;
  std::ifstream in(cli.token_file);
  if (!in) {
    std::fprintf(stderr, "kvtier store stats: cannot read %s\n", cli.token_file.c_str());
    return false;
  }
  std::getline(in, *token);
  return true;
}

int stats_failed(const Status& st, int rc) {
  std::fprintf(stderr, "kvtier store stats: %s\n", st.to_string().c_str());
  return rc;
}

// One connection per node, bounded by --timeout.
void set_stats_client(const StatsCli& cli, net::RemoteStoreOptions* o) {
  o->client_name = "kvtier-store-stats";
  o->connections = 1;
  o->call_timeout_ms = cli.timeout_ms;
  o->connect_timeout_ms = cli.timeout_ms;
}

// One counter a line, values in a column.
template <typename Counters>
void print_counters(const Counters& counters, std::ostream& out) {
  size_t width = 0;
  for (const auto& c : counters) width = std::max(width, c.name.size());
  for (const auto& c : counters) {
    out << c.name << std::string(width + 2 - c.name.size(), ' ') << c.value << "\n";
  }
}

// Several nodes: each node's answer and the sum over those that answered.
// Exit 0 when every node answered, 3 when only some did, 1 when none did.
int run_cluster_stats(const StatsCli& cli) {
  net::ClusterStoreOptions co;
  if (!cli.cluster_config.empty()) {
    auto loaded = net::load_cluster_client_config(cli.cluster_config);
    if (!loaded.ok()) {
      std::fprintf(stderr, "kvtier store stats: %s\n", loaded.status().message().c_str());
      return 2;
    }
    co = std::move(*loaded);
  } else if (!cli.etcd_url.empty()) {
    co.etcd_url = cli.etcd_url;
    co.etcd_prefix = cli.prefix;
    co.etcd_timeout_ms = cli.timeout_ms;
  } else {
    for (const auto& a : cli.nodes) {
      auto n = net::parse_node_address(a, a);
      if (!n.ok()) {
        std::fprintf(stderr, "kvtier store stats: --node: %s\n", n.status().message().c_str());
        return 2;
      }
      co.nodes.push_back(std::move(*n));
    }
  }
  net::RemoteStoreOptions& o = co.node_options;
  if (cli.cluster_config.empty() && !read_token(cli, &o.auth_token)) return 2;
  set_stats_client(cli, &o);
  o.shared_memory = false;
  auto cs = net::ClusterStore::open(co);
  if (!cs.ok()) return stats_failed(cs.status(), 1);
  auto st = (*cs)->cluster_stats();
  if (!st.ok()) return stats_failed(st.status(), 1);
  const int rc = st->answered == st->nodes ? 0 : st->answered == 0 ? 1 : 3;
  const auto counters = net::store_stats_to_counters(st->total);
  if (cli.json) {
    nlohmann::json nodes = nlohmann::json::array();
    for (const auto& n : st->per_node) {
      nlohmann::json j = {{"id", n.node.id},
                          {"address", host_port(n.node.host, n.node.port)},
                          {"answered", n.status.ok()}};
      if (!n.status.ok()) j["error"] = n.status.to_string();
      nodes.push_back(std::move(j));
    }
    nlohmann::json total = nlohmann::json::object();
    for (const auto& c : counters) total[c.name] = c.value;
    std::cout << nlohmann::json{{"nodes", st->nodes},
                                {"answered", st->answered},
                                {"per_node", nodes},
                                {"total", total}}
                     .dump(2)
              << std::endl;
    return rc;
  }
  std::ostringstream out;
  out << st->answered << " of " << st->nodes << " node(s) answered\n";
  for (const auto& n : st->per_node) {
    const std::string address = host_port(n.node.host, n.node.port);
    out << "  " << (n.node.id == address ? address : n.node.id + "  " + address) << "  "
        << (n.status.ok() ? std::string("ok") : n.status.to_string()) << "\n";
  }
  out << "sum over the nodes that answered:\n";
  print_counters(counters, out);
  std::cout << out.str() << std::flush;
  return rc;
}

int run_stats(const StatsCli& cli) {
  const int sources = !cli.nodes.empty() + !cli.etcd_url.empty() + !cli.cluster_config.empty();
  if (sources > 1) {
    std::fprintf(stderr, "kvtier store stats: give one of --node, --etcd and --cluster-config\n");
    return 2;
  }
  if (sources == 1) return run_cluster_stats(cli);
  net::RemoteStoreOptions o;
  if (!split_address(cli.address, &o.host, &o.port)) {
    std::fprintf(stderr, "kvtier store stats: --address must be HOST:PORT, got '%s'\n",
                 cli.address.c_str());
    return 2;
  }
  if (!read_token(cli, &o.auth_token)) return 2;
  set_stats_client(cli, &o);
  auto client = net::RemoteStore::open(o);
  if (!client.ok()) return stats_failed(client.status(), 2);
  Status up = (*client)->wait_connected(cli.timeout_ms);
  if (!up.ok()) {
    std::fprintf(stderr, "kvtier store stats: %s: %s\n", cli.address.c_str(),
                 up.to_string().c_str());
    return 1;
  }
  if (cli.json) {
    auto j = (*client)->stats_json();
    if (!j.ok()) return stats_failed(j.status(), 1);
    auto parsed = nlohmann::json::parse(*j, nullptr, false);
    std::cout << (parsed.is_discarded() ? *j : parsed.dump(2)) << std::endl;
    return 0;
  }
  auto counters = (*client)->stat_counters();
  if (!counters.ok()) return stats_failed(counters.status(), 1);
  std::ostringstream out;
  out << "store at " << cli.address << "\n";
  print_counters(*counters, out);
  std::cout << out.str() << std::flush;
  return 0;
}

struct NodesCli {
  std::string etcd_url = "http://127.0.0.1:2379";
  std::string prefix = "kvtier";
  uint32_t timeout_ms = 2000;
  bool json = false;
  std::string user, password_file;
  net::ClientTlsOptions tls;
};

int run_nodes(const NodesCli& cli) {
  auto credentials = net::load_etcd_credentials(cli.user, cli.password_file);
  if (!credentials.ok()) {
    std::fprintf(stderr, "kvtier store nodes: %s\n", credentials.status().to_string().c_str());
    return 2;
  }
  credentials->tls = cli.tls;
  auto nodes = net::read_etcd_nodes(cli.etcd_url, cli.prefix, cli.timeout_ms, *credentials);
  if (!nodes.ok()) {
    std::fprintf(stderr, "kvtier store nodes: %s\n", nodes.status().to_string().c_str());
    return 1;
  }
  if (cli.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& n : *nodes)
      arr.push_back({{"id", n.id}, {"address", host_port(n.host, n.port)}});
    std::cout
        << nlohmann::json{{"etcd", cli.etcd_url}, {"prefix", cli.prefix}, {"nodes", arr}}.dump()
        << std::endl;
    return 0;
  }
  std::ostringstream out;
  out << nodes->size() << " live node(s) under " << net::etcd_nodes_key_prefix(cli.prefix) << " in "
      << cli.etcd_url << "\n";
  for (const auto& n : *nodes) out << n.id << "  " << host_port(n.host, n.port) << "\n";
  std::cout << out.str() << std::flush;
  return 0;
}

}  // namespace

void add_store_commands(CLI::App& app) {
  auto* store = app.add_subcommand("store", "Run the store service, or query a running one");
  store->require_subcommand(1);

  auto config = std::make_shared<std::string>();
  auto* serve = store->add_subcommand(
      "serve",
      "Serve a store (RAM tier, optional disk tier) over TCP until SIGINT/SIGTERM; "
      "/metrics and /health on a separate HTTP port. With an \"etcd\" section in the config "
      "({\"url\": \"http://127.0.0.1:2379\", \"node_id\": \"a\", \"prefix\": \"kvtier\", "
      "\"ttl_s\": 10, \"advertise_address\": \"...\"}) the node registers "
      "/<prefix>/nodes/<node_id> = host:port under a lease of ttl_s seconds, renews it, and "
      "revokes it on SIGTERM/SIGINT. See docs/store-service.md");
  serve->add_option("--config", *config, "JSON configuration file (docs/store-service.md)")
      ->required()
      ->check(CLI::ExistingFile);
  serve->callback([config] { std::exit(run_serve(*config)); });

  auto cli = std::make_shared<StatsCli>();
  auto* stats = store->add_subcommand(
      "stats",
      "Print the statistics of a running store, or of several nodes (--node ..., --etcd or "
      "--cluster-config): each node's state and the sum over the nodes that answered. Exit "
      "status with several nodes: 0 all answered, 3 some, 1 none");
  stats->add_option("--address", cli->address, "HOST:PORT of the store service")
      ->capture_default_str();
  stats->add_option("--node", cli->nodes, "HOST:PORT of one node of a cluster (repeat it)");
  stats->add_option("--etcd", cli->etcd_url,
                    "etcd client URL (http://HOST:PORT): ask every node registered there");
  stats->add_option("--prefix", cli->prefix, "Key prefix the nodes register under in etcd")
      ->capture_default_str();
  stats->add_option("--cluster-config", cli->cluster_config,
                    "Cluster client config file (JSON: \"nodes\" or \"etcd_url\"; "
                    "docs/store-service.md)");
  stats->add_option("--token", cli->token,
                    "Auth token (visible to other users in the process list: prefer --token-file)");
  stats->add_option("--token-file", cli->token_file, "File whose first line is the auth token");
  add_ranged_option(stats, "--timeout-ms", cli->timeout_ms, "Connect and call timeout", 1u,
                    600000u);
  stats->add_flag("--json", cli->json, "Print one JSON object instead of a table");
  stats->callback([cli] { std::exit(run_stats(*cli)); });

  auto ncli = std::make_shared<NodesCli>();
  auto* nodes = store->add_subcommand(
      "nodes", "List the live store nodes registered in etcd (a read of /<prefix>/nodes/)");
  nodes->add_option("--etcd", ncli->etcd_url, "etcd client URL (http://HOST:PORT or https://...)")
      ->capture_default_str();
  nodes->add_option("--etcd-user", ncli->user, "etcd user (user/password auth)");
  nodes->add_option("--etcd-password-file", ncli->password_file,
                    "File whose first line is the etcd user's password");
  nodes->add_option("--etcd-ca", ncli->tls.ca_file, "CA of etcd's certificate (https URLs)");
  nodes->add_option("--etcd-cert", ncli->tls.cert_file,
                    "Client certificate, when etcd asks for one");
  nodes->add_option("--etcd-key", ncli->tls.key_file, "Key of --etcd-cert");
  nodes->add_option("--prefix", ncli->prefix, "Key prefix the nodes register under")
      ->capture_default_str();
  add_ranged_option(nodes, "--timeout-ms", ncli->timeout_ms, "etcd call timeout", 1u, 600000u);
  nodes->add_flag("--json", ncli->json, "Print one JSON object instead of a table");
  nodes->callback([ncli] { std::exit(run_nodes(*ncli)); });
}

namespace {
const RegisterCommands kRegisterStore{10, add_store_commands};
}  // namespace

}  // namespace kvtier::tools
