#include "net/cluster/etcd_client.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <array>
#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

// Local helper: assigns a Result's value or returns its Status.
#define ETCD_CAT2(a, b) a##b
#define ETCD_CAT(a, b) ETCD_CAT2(a, b)
#define KVTIER_ASSIGN_OR_RETURN(lhs, expr)                                        \
  auto ETCD_CAT(_res_, __LINE__) = (expr);                                        \
  if (!ETCD_CAT(_res_, __LINE__).ok()) return ETCD_CAT(_res_, __LINE__).status(); \
  lhs = std::move(*ETCD_CAT(_res_, __LINE__))

namespace kvtier::net {

namespace {

using nlohmann::json;

// etcd's gateway writes int64 fields as strings; accept numbers as well.
Result<int64_t> json_int64(const json& obj, const char* key, int64_t dflt) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return dflt;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return static_cast<int64_t>(v);
  }
  return Status::corruption(fmt::format("etcd answer: field '{}' is not an integer", key));
}

Result<json> parse_answer(std::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::corruption("etcd answer is not a JSON object");
  }
  if (j.contains("error") || (j.contains("code") && !j.contains("header"))) {
    std::string msg = j.value("message", j.contains("error") ? j["error"].dump() : "");
    return Status::io_error(fmt::format("etcd error: {}", msg));
  }
  return j;
}

// Decodes a chunked transfer body; an error for anything malformed.
Result<std::string> dechunk(std::string_view in, size_t max_bytes) {
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t eol = in.find("\r\n", pos);
    if (eol == std::string_view::npos) return Status::corruption("truncated chunked HTTP body");
    std::string size_text(in.substr(pos, eol - pos));
    size_t semi = size_text.find(';');
    if (semi != std::string::npos) size_text.resize(semi);
    char* end = nullptr;
    unsigned long long n = std::strtoull(size_text.c_str(), &end, 16);
    if (size_text.empty() || *end != '\0') return Status::corruption("bad HTTP chunk size");
    pos = eol + 2;
    if (n == 0) return out;
    if (n > max_bytes - out.size() || in.size() - pos < n + 2) {
      return Status::corruption("HTTP chunk larger than the body or the limit");
    }
    out.append(in.substr(pos, n));
    pos += n + 2;
  }
}

}  // namespace

std::string EtcdEndpoint::url() const {
  return fmt::format("{}://{}:{}", tls ? "https" : "http", host, port);
}

Result<EtcdEndpoint> parse_etcd_url(std::string_view url) {
  constexpr std::string_view kHttp = "http://", kHttps = "https://";
  EtcdEndpoint ep;
  std::string_view rest;
  if (url.substr(0, kHttp.size()) == kHttp) {
    rest = url.substr(kHttp.size());
  } else if (url.substr(0, kHttps.size()) == kHttps) {
    rest = url.substr(kHttps.size());
    ep.tls = true;
  } else {
    return Status::invalid_argument(
        fmt::format("etcd URL '{}' must start with http:// or https://", url));
  }
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || (rest.front() == '[' && rest.back() == ']')) {
    ep.host = std::string(rest);
  } else {
    ep.host = std::string(rest.substr(0, colon));
    std::string port(rest.substr(colon + 1));
    char* end = nullptr;
    unsigned long p = std::strtoul(port.c_str(), &end, 10);
    if (port.empty() || *end != '\0' || p == 0 || p > 65535) {
      return Status::invalid_argument(fmt::format("etcd URL '{}': bad port", url));
    }
    ep.port = static_cast<uint16_t>(p);
  }
  if (ep.host.size() >= 2 && ep.host.front() == '[' && ep.host.back() == ']') {
    ep.host = ep.host.substr(1, ep.host.size() - 2);
  }
  if (ep.host.empty() || ep.host.find('/') != std::string::npos) {
    return Status::invalid_argument(fmt::format("etcd URL '{}': bad host", url));
  }
  return ep;
}

std::string base64_encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()),
                          static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

Result<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return Status::corruption("base64 text length is not a multiple of 4");
  std::string out(text.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size()));
  if (n < 0) return Status::corruption("invalid base64 text");
  // EVP_DecodeBlock counts padding as zero bytes; drop them.
  size_t pad = 0;
  if (!text.empty() && text.back() == '=') ++pad;
  if (text.size() >= 2 && text[text.size() - 2] == '=') ++pad;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

std::string prefix_range_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    unsigned char c = static_cast<unsigned char>(end.back());
    if (c < 0xff) {
      end.back() = static_cast<char>(c + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

std::string etcd_put_request(std::string_view key, std::string_view value, int64_t lease) {
  json j = {{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) j["lease"] = std::to_string(lease);
  return j.dump();
}

std::string etcd_range_request(std::string_view key, std::string_view range_end) {
  return json{{"key", base64_encode(key)}, {"range_end", base64_encode(range_end)}}.dump();
}

std::string etcd_lease_grant_request(int64_t ttl_s) {
  return json{{"TTL", std::to_string(ttl_s)}}.dump();
}

std::string etcd_lease_id_request(int64_t lease) {
  return json{{"ID", std::to_string(lease)}}.dump();
}

Result<std::vector<EtcdKeyValue>> parse_etcd_range_response(std::string_view body) {
  KVTIER_ASSIGN_OR_RETURN(json j, parse_answer(body));
  std::vector<EtcdKeyValue> out;
  auto kvs = j.find("kvs");
  if (kvs == j.end() || kvs->is_null()) return out;  // no key: the gateway omits "kvs"
  if (!kvs->is_array()) return Status::corruption("etcd range answer: 'kvs' is not an array");
  for (const json& kv : *kvs) {
    if (!kv.is_object() || !kv.contains("key") || !kv["key"].is_string()) {
      return Status::corruption("etcd range answer: an entry has no key");
    }
    EtcdKeyValue e;
    KVTIER_ASSIGN_OR_RETURN(e.key, base64_decode(kv["key"].get<std::string>()));
    if (kv.contains("value")) {
      if (!kv["value"].is_string()) return Status::corruption("etcd range answer: bad value");
      KVTIER_ASSIGN_OR_RETURN(e.value, base64_decode(kv["value"].get<std::string>()));
    }
    KVTIER_ASSIGN_OR_RETURN(e.lease, json_int64(kv, "lease", 0));
    out.push_back(std::move(e));
  }
  return out;
}

Result<std::pair<int64_t, int64_t>> parse_etcd_lease_grant_response(std::string_view body) {
  KVTIER_ASSIGN_OR_RETURN(json j, parse_answer(body));
  KVTIER_ASSIGN_OR_RETURN(int64_t id, json_int64(j, "ID", 0));
  KVTIER_ASSIGN_OR_RETURN(int64_t ttl, json_int64(j, "TTL", 0));
  if (id == 0 || ttl <= 0) return Status::corruption("etcd lease grant answer has no lease");
  return std::make_pair(id, ttl);
}

Result<int64_t> parse_etcd_keepalive_response(std::string_view body) {
  // The streaming gateway wraps each message as {"result": {...}}.
  KVTIER_ASSIGN_OR_RETURN(json j, parse_answer(body));
  const json* msg = &j;
  if (j.contains("result") && j["result"].is_object()) msg = &j["result"];
  return json_int64(*msg, "TTL", 0);
}

namespace {

// The body of a complete HTTP/1.1 answer (chunked or not), or why it is not a 200.
Result<std::string> parse_http_answer(const std::string& response, const std::string& where,
                                      size_t max_response_bytes) {
  size_t head_end = response.find("\r\n\r\n");
  if (head_end == std::string::npos) {
    return Status::corruption(fmt::format("{}: answer has no HTTP header", where));
  }
  std::string head = response.substr(0, head_end);
  std::string payload = response.substr(head_end + 4);
  std::string lower = head;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("transfer-encoding: chunked") != std::string::npos) {
    auto d = dechunk(payload, max_response_bytes);
    if (!d.ok()) return Status::corruption(fmt::format("{}: {}", where, d.status().message()));
    payload = std::move(*d);
  }
  std::string status_line = head.substr(0, head.find("\r\n"));
  if (status_line.size() < 12 || status_line.compare(0, 5, "HTTP/") != 0) {
    return Status::corruption(fmt::format("{}: not an HTTP answer", where));
  }
  if (status_line.compare(9, 3, "200") != 0) {
    return Status::io_error(fmt::format("{}: {}: {}", where, status_line, payload.substr(0, 512)));
  }
  return payload;
}

}  // namespace

Result<std::string> http_call(const std::string& host, uint16_t port, const char* method,
                              const std::string& path, const std::string& body, uint32_t timeout_ms,
                              size_t max_response_bytes, const std::string& authorization,
                              asio::ssl::context* tls) {
  asio::io_context io;
  asio::ip::tcp::resolver resolver(io);
  NetStream sock(io.get_executor());
  const std::string auth_header =
      authorization.empty() ? "" : fmt::format("Authorization: {}\r\n", authorization);
  std::string request = fmt::format(
      "{} {} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/json\r\n{}"
      "Content-Length: {}\r\nConnection: close\r\n\r\n{}",
      method, path, host, port, auth_header, body.size(), body);
  std::string response;
  std::error_code result_ec;
  bool done = false;
  std::array<char, 16384> buf;
  std::function<void()> read_more = [&] {
    sock.async_read_some(asio::buffer(buf), [&](std::error_code ec, size_t n) {
      if (n > 0) response.append(buf.data(), n);
      if (response.size() > max_response_bytes) {
        result_ec = std::make_error_code(std::errc::message_size);
        done = true;
        return;
      }
      if (ec) {
        // A TLS peer that closes without close_notify: the body is checked
        // (lengths, JSON) like any other.
        if (ec != asio::error::eof && ec != asio::ssl::error::stream_truncated) result_ec = ec;
        done = true;
        return;
      }
      read_more();
    });
  };
  auto send_request = [&] {
    asio::async_write(sock, asio::buffer(request), [&](std::error_code ec3, size_t) {
      if (ec3) {
        result_ec = ec3;
        done = true;
        return;
      }
      read_more();
    });
  };
  resolver.async_resolve(host, std::to_string(port), [&](std::error_code ec, auto results) {
    if (ec) {
      result_ec = ec;
      done = true;
      return;
    }
    asio::async_connect(sock.socket(), results, [&](std::error_code ec2, const auto&) {
      if (ec2) {
        result_ec = ec2;
        done = true;
        return;
      }
      if (!tls) {
        send_request();
        return;
      }
      sock.start_tls(*tls);
      if (!sock.expect_server_name(host).ok()) {
        result_ec = std::make_error_code(std::errc::invalid_argument);
        done = true;
        return;
      }
      sock.async_handshake(asio::ssl::stream_base::client, [&](std::error_code ec4) {
        if (ec4) {
          result_ec = ec4;
          done = true;
          return;
        }
        send_request();
      });
    });
  });
  io.run_for(std::chrono::milliseconds(timeout_ms));
  std::string where = fmt::format("{}://{}:{}{}", tls ? "https" : "http", host, port, path);
  if (!done) {
    return Status::timeout(fmt::format("{}: no complete answer within {} ms", where, timeout_ms));
  }
  if (result_ec) {
    return Status::unavailable(fmt::format("{}: {}", where, result_ec.message()));
  }
  return parse_http_answer(response, where, max_response_bytes);
}

Result<EtcdCredentials> load_etcd_credentials(const std::string& user,
                                              const std::string& password_file) {
  EtcdCredentials c;
  if (user.empty()) {
    if (!password_file.empty()) return Status::invalid_argument("an etcd password needs a user");
    return c;
  }
  if (password_file.empty()) {
    return Status::invalid_argument(fmt::format("etcd user '{}' needs a password file", user));
  }
  std::ifstream in(password_file);
  if (!in) {
    return Status::invalid_argument(
        fmt::format("etcd password file '{}': cannot read", password_file));
  }
  std::getline(in, c.password);
  while (!c.password.empty() && (c.password.back() == '\r' || c.password.back() == '\n')) {
    c.password.pop_back();
  }
  if (c.password.empty()) {
    return Status::invalid_argument(fmt::format("etcd password file '{}' is empty", password_file));
  }
  c.user = user;
  return c;
}

Result<std::string> EtcdClient::authenticate() {
  json req = {{"name", credentials_.user}, {"password", credentials_.password}};
  KVTIER_ASSIGN_OR_RETURN(asio::ssl::context * tls, tls_context());
  auto body = http_call(endpoint_.host, endpoint_.port, "POST", "/v3/auth/authenticate", req.dump(),
                        timeout_ms_, kMaxEtcdResponseBytes, "", tls);
  if (!body.ok()) {
    // The message may quote etcd's answer, never the request (the password).
    return Status(body.status().code(), fmt::format("etcd authentication as '{}': {}",
                                                    credentials_.user, body.status().message()));
  }
  KVTIER_ASSIGN_OR_RETURN(json j, parse_answer(*body));
  if (!j.contains("token") || !j["token"].is_string() || j["token"].get<std::string>().empty()) {
    return Status::rejected(
        fmt::format("etcd authentication as '{}': no token in the answer", credentials_.user));
  }
  return j["token"].get<std::string>();
}

Result<asio::ssl::context*> EtcdClient::tls_context() {
  if (!endpoint_.tls) {
    if (credentials_.tls.enabled()) {
      return Status::invalid_argument(
          fmt::format("etcd {}: a TLS CA is configured but the URL is not https", endpoint_.url()));
    }
    return nullptr;
  }
  std::lock_guard lk(token_mu_);
  if (!tls_) {
    if (!credentials_.tls.enabled()) {
      return Status::invalid_argument(
          fmt::format("etcd {}: https needs the CA file of etcd's certificate", endpoint_.url()));
    }
    auto ctx = make_client_tls_context(credentials_.tls);
    if (!ctx.ok()) return Status(ctx.status().code(), "etcd: " + ctx.status().message());
    tls_ = std::move(*ctx);
  }
  return tls_.get();
}

Result<std::string> EtcdClient::call(const char* method, const std::string& path,
                                     const std::string& body) {
  KVTIER_ASSIGN_OR_RETURN(asio::ssl::context * tls, tls_context());
  if (credentials_.empty()) {
    return http_call(endpoint_.host, endpoint_.port, method, path, body, timeout_ms_,
                     kMaxEtcdResponseBytes, "", tls);
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::string token;
    {
      std::lock_guard lk(token_mu_);
      token = token_;
    }
    if (token.empty()) {
      KVTIER_ASSIGN_OR_RETURN(token, authenticate());
      std::lock_guard lk(token_mu_);
      token_ = token;
    }
    auto r = http_call(endpoint_.host, endpoint_.port, method, path, body, timeout_ms_,
                       kMaxEtcdResponseBytes, token, tls);
    // An expired or revoked token: authenticate again, once.
    const bool stale = (!r.ok() && r.status().message().find("token") != std::string::npos) ||
                       (r.ok() && r->find("invalid auth token") != std::string::npos);
    if (!stale || attempt == 1) return r;
    std::lock_guard lk(token_mu_);
    if (token_ == token) token_.clear();
  }
  return Status::internal("unreachable");
}

Status EtcdClient::put(std::string_view key, std::string_view value, int64_t lease) {
  KVTIER_ASSIGN_OR_RETURN(std::string body,
                          call("POST", "/v3/kv/put", etcd_put_request(key, value, lease)));
  return parse_answer(body).status();
}

Result<std::vector<EtcdKeyValue>> EtcdClient::range_prefix(std::string_view prefix) {
  KVTIER_ASSIGN_OR_RETURN(
      std::string body,
      call("POST", "/v3/kv/range", etcd_range_request(prefix, prefix_range_end(prefix))));
  return parse_etcd_range_response(body);
}

Result<std::pair<int64_t, int64_t>> EtcdClient::lease_grant(int64_t ttl_s) {
  KVTIER_ASSIGN_OR_RETURN(std::string body,
                          call("POST", "/v3/lease/grant", etcd_lease_grant_request(ttl_s)));
  return parse_etcd_lease_grant_response(body);
}

Result<int64_t> EtcdClient::lease_keepalive(int64_t lease) {
  KVTIER_ASSIGN_OR_RETURN(std::string body,
                          call("POST", "/v3/lease/keepalive", etcd_lease_id_request(lease)));
  return parse_etcd_keepalive_response(body);
}

Status EtcdClient::lease_revoke(int64_t lease) {
  KVTIER_ASSIGN_OR_RETURN(std::string body,
                          call("POST", "/v3/lease/revoke", etcd_lease_id_request(lease)));
  return parse_answer(body).status();
}

Status EtcdClient::health() {
  KVTIER_ASSIGN_OR_RETURN(std::string body, call("GET", "/health", ""));
  json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.value("health", "") == "true") return Status::ok_status();
  return Status::unavailable(fmt::format("{}/health: {}", endpoint_.url(), body.substr(0, 200)));
}

}  // namespace kvtier::net
