// EtcdRegistration: a store node's membership in etcd. start() grants a
// lease of `ttl_s` seconds and puts `/<prefix>/nodes/<node-id>` =
// "host:port" under it; a thread renews the lease every ttl_s / 3 (and
// re-grants and re-puts if etcd lost it, e.g. after an etcd restart or a
// long pause). stop() revokes the lease, so a cleanly stopped node leaves
// the set at once; a killed one leaves when its lease expires.
//
// Thread-safety: start/stop from one thread (the server's main thread); the
// renewal thread is owned by this object.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"
#include "net/cluster/etcd_client.h"

namespace kvtier::net {

struct EtcdMembershipConfig {
  std::string url;  // "http://127.0.0.1:2379"
  std::string prefix = "kvtier";
  std::string node_id;
  std::string advertise_address;  // host clients connect to; empty: the listen address
  uint32_t ttl_s = 10;
  uint32_t timeout_ms = 2000;
  // etcd user/password auth (docs/security.md): the user, and a file whose
  // first line is the password. Empty user: no auth.
  std::string user;
  std::string password_file;
  // etcd behind TLS (an https url): its CA and this node's certificate.
  // With a certificate, node_id must be its common name: the node's
  // identity is what its certificate says (and, under etcd's
  // --client-cert-auth, its etcd user; docs/security.md).
  ClientTlsOptions tls;
};

class EtcdRegistration {
 public:
  // Registers `address` ("host:port"); fails if etcd cannot be reached.
  static Result<std::unique_ptr<EtcdRegistration>> start(const EtcdMembershipConfig& config,
                                                         const std::string& address);
  ~EtcdRegistration();  // stop()
  Status stop();
  const std::string& key() const { return key_; }
  int64_t lease() const { return lease_.load(); }

 private:
  EtcdRegistration(const EtcdMembershipConfig& config, EtcdEndpoint ep, EtcdCredentials credentials,
                   std::string address);
  Status register_once();
  void renew_loop();

  EtcdMembershipConfig config_;
  EtcdClient etcd_;
  std::string address_;
  std::string key_;
  std::atomic<int64_t> lease_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool stopped_ = false;
  std::thread renewer_;
};

}  // namespace kvtier::net
