// EtcdClient: the few etcd v3 calls the store cluster needs (put, range over
// a prefix, lease grant/keep-alive/revoke), spoken as JSON to etcd's gRPC
// gateway over HTTP/1.1, plain or TLS (POST /v3/kv/put, /v3/kv/range,
// /v3/lease/grant, /v3/lease/keepalive, /v3/lease/revoke). Keys and values
// travel base64-encoded; 64-bit integers come back as JSON strings.
//
// With credentials (etcd's user/password auth), the client authenticates at
// the first call (POST /v3/auth/authenticate), sends the token etcd returns
// in the Authorization header, and authenticates again once when etcd says
// the token is invalid or expired. The password is never logged.
//
// Each call opens one connection (Connection: close), is bounded by
// `timeout_ms` end to end, and bounds the response it reads by
// kMaxEtcdResponseBytes; failures are Status errors that name etcd's URL.
// The request/response encoders are free functions so they can be tested
// without an etcd.
//
// Thread-safety: calls are independent; any thread may call any method.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "net/wire/tls.h"

namespace kvtier::net {

constexpr size_t kMaxEtcdResponseBytes = 16u << 20;

// "http://host:port", or "https://host:port" for etcd behind TLS (then the
// credentials carry the CA that signed etcd's certificate).
struct EtcdEndpoint {
  std::string host;
  uint16_t port = 2379;
  bool tls = false;
  std::string url() const;
};
Result<EtcdEndpoint> parse_etcd_url(std::string_view url);

std::string base64_encode(std::string_view bytes);
Result<std::string> base64_decode(std::string_view text);
// The key just past every key that starts with `prefix` (etcd's range_end
// for a prefix scan); "\0" when no such key exists (all bytes 0xff).
std::string prefix_range_end(std::string_view prefix);

struct EtcdKeyValue {
  std::string key;
  std::string value;
  int64_t lease = 0;
};

// JSON request bodies.
std::string etcd_put_request(std::string_view key, std::string_view value, int64_t lease);
std::string etcd_range_request(std::string_view key, std::string_view range_end);
std::string etcd_lease_grant_request(int64_t ttl_s);
std::string etcd_lease_id_request(int64_t lease);  // keepalive and revoke
// Response parsers: an etcd error object ({"error":..., "code":...}) becomes
// a Status naming it.
Result<std::vector<EtcdKeyValue>> parse_etcd_range_response(std::string_view body);
// Lease id and granted TTL.
Result<std::pair<int64_t, int64_t>> parse_etcd_lease_grant_response(std::string_view body);
// Remaining TTL; 0 or less means the lease is gone.
Result<int64_t> parse_etcd_keepalive_response(std::string_view body);

// etcd user and password (empty user: no auth). `password_file` holds the
// password (first line) so it never sits in a config or a command line.
// With TLS (an https URL): the CA of etcd's certificate, and a client
// certificate and key when etcd asks for one (--client-cert-auth; etcd then
// takes the certificate's common name as the user, docs/security.md).
struct EtcdCredentials {
  std::string user;
  std::string password;
  ClientTlsOptions tls;
  bool empty() const { return user.empty(); }
};
// Reads the password of `user` from `password_file` (empty user: none).
Result<EtcdCredentials> load_etcd_credentials(const std::string& user,
                                              const std::string& password_file);

class EtcdClient {
 public:
  EtcdClient(EtcdEndpoint endpoint, uint32_t timeout_ms, EtcdCredentials credentials = {})
      : endpoint_(std::move(endpoint)),
        timeout_ms_(timeout_ms),
        credentials_(std::move(credentials)) {}

  Status put(std::string_view key, std::string_view value, int64_t lease = 0);
  Result<std::vector<EtcdKeyValue>> range_prefix(std::string_view prefix);
  Result<std::pair<int64_t, int64_t>> lease_grant(int64_t ttl_s);
  Result<int64_t> lease_keepalive(int64_t lease);
  Status lease_revoke(int64_t lease);
  // Succeeds when GET /health answers {"health":"true"}.
  Status health();

  const EtcdEndpoint& endpoint() const { return endpoint_; }

 private:
  Result<std::string> call(const char* method, const std::string& path, const std::string& body);
  Result<std::string> authenticate();
  Result<asio::ssl::context*> tls_context();
  EtcdEndpoint endpoint_;
  uint32_t timeout_ms_;
  EtcdCredentials credentials_;
  std::mutex token_mu_;
  std::string token_;                        // guarded by token_mu_
  std::shared_ptr<asio::ssl::context> tls_;  // made at the first call; guarded by token_mu_
};

// One HTTP/1.1 exchange with Connection: close; returns the body of a 200
// answer (chunked or not), else an error with the status line and body.
// `authorization`, when set, is sent as the Authorization header. With
// `tls`, the exchange is HTTPS and the certificate must name `host`.
// Exposed for the CLI and tests.
Result<std::string> http_call(const std::string& host, uint16_t port, const char* method,
                              const std::string& path, const std::string& body, uint32_t timeout_ms,
                              size_t max_response_bytes, const std::string& authorization = "",
                              asio::ssl::context* tls = nullptr);

}  // namespace kvtier::net
