#include "net/cluster/etcd_registration.h"

#include <fmt/format.h>

#include <cstdio>

#include "net/cluster/cluster_store.h"

namespace kvtier::net {

EtcdRegistration::EtcdRegistration(const EtcdMembershipConfig& config, EtcdEndpoint ep,
                                   EtcdCredentials credentials, std::string address)
    : config_(config),
      etcd_(std::move(ep), config.timeout_ms, std::move(credentials)),
      address_(std::move(address)),
      key_(etcd_nodes_key_prefix(config.prefix) + config.node_id) {}

Result<std::unique_ptr<EtcdRegistration>> EtcdRegistration::start(
    const EtcdMembershipConfig& config, const std::string& address) {
  auto ep = parse_etcd_url(config.url);
  if (!ep.ok()) return ep.status();
  if (config.node_id.empty() || config.node_id.find('/') != std::string::npos) {
    return Status::invalid_argument("etcd.node_id must be non-empty and have no '/'");
  }
  if (config.ttl_s < 2) return Status::invalid_argument("etcd.ttl_s must be >= 2");
  auto credentials = load_etcd_credentials(config.user, config.password_file);
  if (!credentials.ok()) return credentials.status();
  credentials->tls = config.tls;
  if (!config.tls.cert_file.empty()) {
    auto cn = certificate_common_name(config.tls.cert_file);
    if (!cn.ok()) return cn.status();
    if (*cn != config.node_id) {
      return Status::permission_denied(fmt::format(
          "etcd.node_id '{}' is not the common name of its certificate '{}' ('{}'): a node "
          "registers only as the node its certificate names",
          config.node_id, config.tls.cert_file, *cn));
    }
  }
  std::unique_ptr<EtcdRegistration> r(
      new EtcdRegistration(config, *ep, std::move(*credentials), address));
  KVTIER_RETURN_IF_ERROR(r->register_once());
  EtcdRegistration* p = r.get();
  r->renewer_ = std::thread([p] { p->renew_loop(); });
  return r;
}

Status EtcdRegistration::register_once() {
  auto lease = etcd_.lease_grant(config_.ttl_s);
  if (!lease.ok()) return lease.status();
  KVTIER_RETURN_IF_ERROR(etcd_.put(key_, address_, lease->first));
  lease_ = lease->first;
  return Status::ok_status();
}

void EtcdRegistration::renew_loop() {
  const auto period = std::chrono::milliseconds(config_.ttl_s * 1000 / 3);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, period);
    if (stopping_) break;
    lock.unlock();
    auto ttl = etcd_.lease_keepalive(lease_.load());
    if (!ttl.ok() || *ttl <= 0) {
      // Lease lost (expired while etcd was unreachable, or etcd restarted
      // empty): register again; if that fails too, try on the next tick.
      if (ttl.ok()) {
        std::fprintf(stderr, "kvtier store serve: etcd lease expired, registering again\n");
      }
      if (ttl.ok() || ttl.status().code() != StatusCode::kTimeout) {
        Status st = register_once();
        if (!st.ok()) {
          std::fprintf(stderr, "kvtier store serve: etcd registration: %s\n",
                       st.to_string().c_str());
        }
      }
    }
    lock.lock();
  }
}

Status EtcdRegistration::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return Status::ok_status();
    stopping_ = true;
    stopped_ = true;
  }
  cv_.notify_all();
  if (renewer_.joinable()) renewer_.join();
  return etcd_.lease_revoke(lease_.load());
}

EtcdRegistration::~EtcdRegistration() { (void)stop(); }

}  // namespace kvtier::net
