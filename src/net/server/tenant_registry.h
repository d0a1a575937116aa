// TenantRegistry: who is using a shared store service, and how much. The
// server asks it at Hello (whose token is this?), at namespace registration
// (the tenant's namespace, salted with its name) and before connections,
// namespaces and pins are taken; each refusal is typed (out_of_space) and
// counted in kvtier_server_tenant_refused_total{tenant,quota}.
//
// Key isolation. Block keys are chained by clients from the namespace's
// digest, so two tenants with identical model fields would send identical
// keys. The server therefore (1) registers a tenant's namespace with the
// tenant's name prepended to its tenant_salt, so the two get different
// namespace handles, and (2) turns every key a tenant sends into
// SHA-256(0x03 || salted namespace digest || key)[:16] before the store sees
// it (tenant_key()). A tenant can thus neither read, overwrite, remove, pin
// nor even probe (match_prefix, a put that collides) another tenant's
// blocks: reaching one would take a second preimage of SHA-256.
// docs/security.md has the threat model.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/mutex.h"
#include "common/status.h"
#include "kv/namespace.h"
#include "net/server/server_config.h"

namespace kvtier::net {

// The store key of `key` for a tenant's namespace whose (salted) digest is
// `ns_digest`.
kv::Key128 tenant_key(const kv::Key128& ns_digest, const kv::Key128& key);
void tenant_keys(const kv::Key128& ns_digest, std::span<kv::Key128> keys);
// The namespace the store registers for `tenant`.
kv::Namespace tenant_namespace(const std::string& tenant, const kv::Namespace& ns);

class TenantRegistry {
 public:
  TenantRegistry(const std::vector<TenantConfig>& tenants, MetricsRegistry& metrics);

  bool multi_tenant() const { return !tenants_.empty(); }
  // The tenant whose token this is (compared in constant time, every tenant
  // tried); nullptr if none.
  const TenantConfig* authenticate(std::string_view token) const;
  // The tenant whose client_cert_cn is `common_name` (a certificate the TLS
  // handshake verified); nullptr if none.
  const TenantConfig* by_certificate(std::string_view common_name) const;

  // Quotas. acquire_* returns out_of_space naming the quota, or takes one.
  Status acquire_connection(const TenantConfig& t);
  void release_connection(const TenantConfig& t);
  // Namespaces are counted once per tenant however many of its connections
  // registered them (reference-counted per handle), and so are namespaces it
  // no longer registers but still holds blocks in (see holdings()).
  // `digest`: the store's (salted) digest of the namespace; the tenant's
  // blocks under it count against its byte quotas, also after the tenant
  // released it, until the handle stands for another namespace.
  Status acquire_namespace(const TenantConfig& t, uint16_t handle, const kv::Key128& digest);
  void release_namespace(const TenantConfig& t, uint16_t handle);
  // Byte quotas. The handles whose blocks are the tenant's, with their
  // digest (a handle whose store digest differs was reused: forget it).
  std::vector<std::pair<uint16_t, kv::Key128>> holdings(const TenantConfig& t) const;
  // Forgets a holding that is no longer the tenant's (reused), or empty and
  // not registered.
  void forget_holding(const TenantConfig& t, uint16_t handle, bool only_if_unregistered);
  // How many of `sizes` (puts in order) fit under the tenant's RAM and disk
  // byte quotas given what it holds now; refusals are counted
  // (quota="ram_bytes" / "disk_bytes") and the usage gauges set.
  // `own_arena`: the tenant's RAM blocks live in an arena of max_ram_bytes
  // of its own, which bounds them by evicting its older blocks: only the
  // disk quota refuses.
  size_t admit_bytes(const TenantConfig& t, uint64_t ram_used, uint64_t disk_used,
                     std::span<const size_t> sizes, bool own_arena = false);
  Status acquire_pins(const TenantConfig& t, uint64_t blocks);
  void release_pins(const TenantConfig& t, uint64_t blocks);

  struct Usage {
    uint64_t connections = 0, namespaces = 0, pinned_blocks = 0;
  };
  Usage usage(const std::string& tenant) const;

 private:
  struct State {
    Usage used;
    Gauge* connections = nullptr;
    Gauge* namespaces = nullptr;
    Gauge* pinned = nullptr;
    Counter* refused_connections = nullptr;
    Counter* refused_namespaces = nullptr;
    Counter* refused_pins = nullptr;
    Gauge* ram_bytes = nullptr;
    Gauge* disk_bytes = nullptr;
    Counter* refused_ram = nullptr;
    Counter* refused_disk = nullptr;
    std::map<uint16_t, uint32_t> handles;     // registrations per namespace handle
    std::map<uint16_t, kv::Key128> holdings;  // handles whose blocks count (see holdings())
  };
  Status refuse(Counter* c, const TenantConfig& t, const char* quota, uint64_t limit) const;

  std::vector<TenantConfig> tenants_;
  mutable Mutex mu_;
  std::map<std::string, State> state_ KVTIER_GUARDED_BY(mu_);
};

}  // namespace kvtier::net
