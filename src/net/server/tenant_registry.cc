#include "net/server/tenant_registry.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <cstring>

namespace kvtier::net {

kv::Key128 tenant_key(const kv::Key128& ns_digest, const kv::Key128& key) {
  unsigned char in[33];
  in[0] = 0x03;  // domain: tenant key (0x01 and 0x02 are the chaining's, docs/block-keys.md)
  std::memcpy(in + 1, &ns_digest.hi, 8);
  std::memcpy(in + 9, &ns_digest.lo, 8);
  std::memcpy(in + 17, &key.hi, 8);
  std::memcpy(in + 25, &key.lo, 8);
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(in, sizeof(in), md);
  kv::Key128 out;
  std::memcpy(&out.hi, md, 8);
  std::memcpy(&out.lo, md + 8, 8);
  return out;
}

void tenant_keys(const kv::Key128& ns_digest, std::span<kv::Key128> keys) {
  for (auto& k : keys) k = tenant_key(ns_digest, k);
}

kv::Namespace tenant_namespace(const std::string& tenant, const kv::Namespace& ns) {
  kv::Namespace out = ns;
  // Length-prefixed, so that no tenant name and salt can spell another's.
  out.tenant_salt = fmt::format("tenant:{}:{}|{}", tenant.size(), tenant, ns.tenant_salt);
  return out;
}

TenantRegistry::TenantRegistry(const std::vector<TenantConfig>& tenants, MetricsRegistry& metrics)
    : tenants_(tenants) {
  for (const auto& t : tenants_) {
    State& s = state_[t.name];
    const std::string l = fmt::format("tenant=\"{}\"", t.name);
    s.connections =
        &metrics.gauge("kvtier_server_tenant_connections", "Connections a tenant holds", l);
    s.namespaces = &metrics.gauge("kvtier_server_tenant_namespaces",
                                  "Namespaces a tenant holds registered", l);
    s.pinned =
        &metrics.gauge("kvtier_server_tenant_pinned_blocks", "Blocks a tenant holds pinned", l);
    const char* help = "Requests refused because a tenant's quota was reached";
    s.refused_connections =
        &metrics.counter("kvtier_server_tenant_refused_total", help, l + ",quota=\"connections\"");
    s.refused_namespaces =
        &metrics.counter("kvtier_server_tenant_refused_total", help, l + ",quota=\"namespaces\"");
    s.refused_pins = &metrics.counter("kvtier_server_tenant_refused_total", help,
                                      l + ",quota=\"pinned_blocks\"");
    s.refused_ram =
        &metrics.counter("kvtier_server_tenant_refused_total", help, l + ",quota=\"ram_bytes\"");
    s.refused_disk =
        &metrics.counter("kvtier_server_tenant_refused_total", help, l + ",quota=\"disk_bytes\"");
    s.ram_bytes =
        &metrics.gauge("kvtier_server_tenant_ram_bytes",
                       "Payload bytes a tenant's blocks hold in RAM (at its last put)", l);
    s.disk_bytes =
        &metrics.gauge("kvtier_server_tenant_disk_bytes",
                       "Payload bytes a tenant's blocks hold on disk (at its last put)", l);
  }
}

const TenantConfig* TenantRegistry::authenticate(std::string_view token) const {
  const TenantConfig* found = nullptr;
  unsigned char offered[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), offered);
  for (const auto& t : tenants_) {
    // Digests of both sides, compared in constant time; no early exit, so
    // the time taken says nothing about which tenant matched.
    unsigned char want[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(t.token.data()), t.token.size(), want);
    // A tenant without a token (certificate only) matches no token.
    if (CRYPTO_memcmp(offered, want, sizeof(want)) == 0 && !t.token.empty() && !found) found = &t;
  }
  return found;
}

const TenantConfig* TenantRegistry::by_certificate(std::string_view common_name) const {
  if (common_name.empty()) return nullptr;
  for (const auto& t : tenants_) {
    if (t.client_cert_cn == common_name) return &t;
  }
  return nullptr;
}

Status TenantRegistry::refuse(Counter* c, const TenantConfig& t, const char* quota,
                              uint64_t limit) const {
  c->add();
  return Status::out_of_space(
      fmt::format("tenant '{}' is at its quota of {} {}", t.name, limit, quota));
}

Status TenantRegistry::acquire_connection(const TenantConfig& t) {
  MutexLock lk(mu_);
  State& s = state_.at(t.name);
  if (s.used.connections >= t.max_connections) {
    return refuse(s.refused_connections, t, "connections", t.max_connections);
  }
  s.connections->set(static_cast<int64_t>(++s.used.connections));
  return Status::ok_status();
}

void TenantRegistry::release_connection(const TenantConfig& t) {
  MutexLock lk(mu_);
  State& s = state_.at(t.name);
  if (s.used.connections > 0) --s.used.connections;
  s.connections->set(static_cast<int64_t>(s.used.connections));
}

Status TenantRegistry::acquire_namespace(const TenantConfig& t, uint16_t handle,
                                         const kv::Key128& digest) {
  MutexLock lk(mu_);
  State& s = state_.at(t.name);
  auto it = s.handles.find(handle);
  if (it != s.handles.end()) {
    ++it->second;
    return Status::ok_status();
  }
  // Namespaces the tenant no longer registers but still holds blocks in
  // count too: each keeps a store handle taken, and the store's table is
  // shared by every tenant.
  const bool held = s.holdings.count(handle) > 0;
  if (s.handles.size() >= t.max_namespaces || (!held && s.holdings.size() >= t.max_namespaces)) {
    return refuse(s.refused_namespaces, t, "namespaces", t.max_namespaces);
  }
  s.holdings[handle] = digest;
  s.handles[handle] = 1;
  s.used.namespaces = s.handles.size();
  s.namespaces->set(static_cast<int64_t>(s.used.namespaces));
  return Status::ok_status();
}

void TenantRegistry::release_namespace(const TenantConfig& t, uint16_t handle) {
  MutexLock lk(mu_);
  State& s = state_.at(t.name);
  auto it = s.handles.find(handle);
  if (it == s.handles.end()) return;
  if (--it->second == 0) s.handles.erase(it);
  s.used.namespaces = s.handles.size();
  s.namespaces->set(static_cast<int64_t>(s.used.namespaces));
}

std::vector<std::pair<uint16_t, kv::Key128>> TenantRegistry::holdings(const TenantConfig& t) const {
  MutexLock lk(mu_);
  const State& s = state_.at(t.name);
  return {s.holdings.begin(), s.holdings.end()};
}

void TenantRegistry::forget_holding(const TenantConfig& t, uint16_t handle,
                                    bool only_if_unregistered) {
  MutexLock lk(mu_);
  State& s = state_.at(t.name);
  if (only_if_unregistered && s.handles.count(handle)) return;
  s.holdings.erase(handle);
}

size_t TenantRegistry::admit_bytes(const TenantConfig& t, uint64_t ram_used, uint64_t disk_used,
                                   std::span<const size_t> sizes, bool own_arena) {
  MutexLock lk(mu_);
  State& s = state_.at(t.name);
  s.ram_bytes->set(static_cast<int64_t>(ram_used));
  s.disk_bytes->set(static_cast<int64_t>(disk_used));
  size_t n = 0;
  for (size_t b : sizes) {
    // A put lands in RAM and may later be written to disk: it must fit both.
    if (t.max_ram_bytes && !own_arena && ram_used + b > t.max_ram_bytes) {
      s.refused_ram->add(sizes.size() - n);
      break;
    }
    if (t.max_disk_bytes && disk_used + b > t.max_disk_bytes) {
      s.refused_disk->add(sizes.size() - n);
      break;
    }
    ram_used += b;
    disk_used += b;
    ++n;
  }
  return n;
}

Status TenantRegistry::acquire_pins(const TenantConfig& t, uint64_t blocks) {
  MutexLock lk(mu_);
  State& s = state_.at(t.name);
  if (s.used.pinned_blocks + blocks > t.max_pinned_blocks) {
    return refuse(s.refused_pins, t, "pinned blocks", t.max_pinned_blocks);
  }
  s.used.pinned_blocks += blocks;
  s.pinned->set(static_cast<int64_t>(s.used.pinned_blocks));
  return Status::ok_status();
}

void TenantRegistry::release_pins(const TenantConfig& t, uint64_t blocks) {
  MutexLock lk(mu_);
  State& s = state_.at(t.name);
  s.used.pinned_blocks -= std::min(blocks, s.used.pinned_blocks);
  s.pinned->set(static_cast<int64_t>(s.used.pinned_blocks));
}

TenantRegistry::Usage TenantRegistry::usage(const std::string& tenant) const {
  MutexLock lk(mu_);
  auto it = state_.find(tenant);
  return it == state_.end() ? Usage{} : it->second.used;
}

}  // namespace kvtier::net
