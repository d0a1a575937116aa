// ServerConfig: the configuration of `kvtier store serve`, read from a JSON
// file (docs/store-service.md has the schema and an example). Parsing is
// strict: an unknown key, a value of the wrong type or out of range is an
// error that names the key, so a typo never silently falls back to a default.
//
// Security rule enforced here, before anything listens: a listener on an
// address that is not loopback needs a credential: an auth token, tenants,
// or mutual TLS (docs/security.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "kv/store.h"
#include "net/cluster/etcd_registration.h"
#include "net/wire/tls.h"

namespace kvtier::net {

struct VolumeConfig {
  std::string path;         // file or block device; a file is created if missing
  uint64_t size_bytes = 0;  // a file is created/extended to this size (0: use as is)
  bool direct = true;       // O_DIRECT (false for filesystems without it, e.g. tmpfs)
  unsigned queue_depth = 64;
};

struct StoreConfig {
  uint64_t ram_bytes = 1ull << 30;
  uint32_t max_object_bytes = 1536u << 10;
  std::optional<VolumeConfig> volume;  // none: RAM tier only
  uint64_t region_bytes = 64ull << 20;
  uint64_t io_timeout_ms = 2000;
  bool promote_on_disk_hit = true;
  uint64_t disk_write_budget_bytes_per_sec = 0;  // 0: unlimited
};

// A tenant of a shared store (docs/security.md): it authenticates with its
// own token, its namespaces are salted by the server with its name (so no
// other tenant can name its blocks, even with identical model fields), and
// it is held to quotas. Refusals are typed (out_of_space) and counted in
// kvtier_server_tenant_refused_total{tenant,quota}.
struct TenantConfig {
  std::string name;   // [A-Za-z0-9_.-]{1,64}
  std::string token;  // >= 16 bytes, unique among tenants (may be empty with client_cert_cn)
  // Under mutual TLS: a client whose verified certificate has this common
  // name is this tenant, token or not (a token of another tenant is refused).
  std::string client_cert_cn;
  uint32_t max_connections = 64;
  uint32_t max_namespaces = 64;       // namespaces registered at once
  uint64_t max_pinned_blocks = 4096;  // blocks pinned at once, all its connections
  // Payload bytes its namespaces may hold in RAM and on disk (0: no limit).
  // A put that would go past either is refused (RefuseReason::kQuota) until
  // eviction or remove() brings the tenant back under it.
  uint64_t max_ram_bytes = 0;
  uint64_t max_disk_bytes = 0;
  // An arena of its own (reads straight from RAM over the direct channel):
  // its blocks in RAM live in a sealed memfd of max_ram_bytes (required)
  // that holds no other tenant's, and its puts evict its own older blocks
  // there rather than being refused at max_ram_bytes. Other tenants' blocks
  // share the rest of the RAM tier, which is never mapped by any client.
  bool share_ram_arena = false;
};

struct ServerConfig {
  // Store protocol listener.
  std::string listen_address = "127.0.0.1";
  uint16_t listen_port = 7470;  // 0: pick a free port (printed at start)
  // HTTP /metrics and /health.
  bool metrics_enabled = true;
  std::string metrics_address = "127.0.0.1";
  uint16_t metrics_port = 7471;  // 0: pick a free port (printed at start)

  unsigned io_threads = 2;     // threads running the sockets
  unsigned store_threads = 4;  // threads running (possibly blocking) store calls
  std::string auth_token;      // empty: none (allowed on loopback only)
  // TLS on the store listener (docs/security.md, "TLS"): a server
  // certificate, and with client_ca_file mutual TLS (which also stands in
  // for a token off loopback: only clients holding a certificate get in).
  std::optional<ServerTlsConfig> tls;
  // Several tenants, each with its own token (then auth_token must be empty).
  std::vector<TenantConfig> tenants;
  uint32_t max_connections = 256;
  // Connections that have not said Hello yet, at most (within
  // max_connections): past it the oldest such connection is closed, so
  // silent connections cannot keep authenticated clients out.
  uint32_t max_pending_hello = 64;
  // Per-frame limits the server enforces and announces in Hello. 0 for
  // max_data_bytes means "derived": max(16 objects, 4 MiB), capped at the
  // protocol's 64 MiB; memory per connection is bounded by it.
  uint32_t max_data_bytes = 0;
  uint32_t max_batch = 1024;
  uint32_t max_match_keys = 65536;
  uint32_t hello_timeout_ms = 5000;  // a connection must say Hello within this
  // A connection with no request for this long is closed (its pins released).
  uint32_t idle_timeout_ms = 600000;
  // A response not fully written in this long (a client that stopped
  // reading) closes the connection, releasing the RAM slot it leased.
  uint32_t write_timeout_ms = 30000;
  std::string server_name = "kvtier";
  // Same-host shared-memory path (docs/store-service.md): offered to clients
  // that ask; each client's area is mapped only up to this size.
  bool shm_enabled = true;
  uint64_t shm_max_area_bytes = 256ull << 20;
  // The direct channel (a Unix socket and a server thread per client
  // connection that asks) and, over it, reads straight from the RAM arena,
  // which then lives in a sealed memfd every attached client maps read-only:
  // such a client can read every block in RAM, of every namespace. Turn
  // shm_share_ram_arena off where tenants on one host must not see each
  // other's blocks (the channel then copies, as ShmGet does).
  bool shm_direct_channel = true;
  bool shm_share_ram_arena = true;
  uint32_t shm_max_channels = 256;

  StoreConfig store;
  // Cluster membership (docs/store-service.md, "Several nodes"): when set,
  // `kvtier store serve` registers this node in etcd under a lease.
  std::optional<EtcdMembershipConfig> etcd;

  // Range checks and the loopback/token rule. parse_server_config() calls it.
  Status validate() const;
};

// Parses the JSON text of a config. Keys absent keep their defaults.
Result<ServerConfig> parse_server_config(std::string_view json_text);
// Reads and parses a config file (the error names the file).
Result<ServerConfig> load_server_config(const std::string& path);

// Sizes may be given as integers (bytes) or strings with a binary suffix:
// "512KiB", "64MiB", "1.5GiB", "2TiB" (also K, M, G, T and KB..TB, all
// binary). Exposed for tests.
Result<uint64_t> parse_size(std::string_view text);

// Whether `address` is an IP literal on the loopback network (127.0.0.0/8, ::1).
// An unparsable address gives an error.
Result<bool> is_loopback_address(const std::string& address);

// StoreOptions for `config`: opens (and creates) the volume when one is
// configured.
Result<kv::StoreOptions> make_store_options(const StoreConfig& config);

}  // namespace kvtier::net
