#include "net/wire/tls.h"

#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <fmt/format.h>

#include <cstdio>

namespace kvtier::net {

namespace {

using asio::ssl::context;

// TLS 1.2 or newer, no compression, no renegotiation: what a store
// connection needs and nothing that has broken TLS before.
std::shared_ptr<context> base_context(context::method method) {
  auto ctx = std::make_shared<context>(method);
  ctx->set_options(context::default_workarounds | context::no_sslv2 | context::no_sslv3 |
                   context::no_tlsv1 | context::no_tlsv1_1 | context::no_compression);
  SSL_CTX_set_options(ctx->native_handle(), SSL_OP_NO_RENEGOTIATION);
  return ctx;
}

// Loads a PEM file into the context, naming the file and the key when it fails.
template <typename F>
Status load(const std::string& what, const std::string& path, F f) {
  if (path.empty()) return Status::invalid_argument("TLS: " + what + " file not given");
  std::error_code ec;
  f(ec);
  if (ec) {
    return Status::invalid_argument(
        fmt::format("TLS: cannot load the {} from '{}': {}", what, path, ec.message()));
  }
  return Status::ok_status();
}

// The subject's common name; empty if it has none.
std::string common_name_of(X509* cert) {
  char cn[256] = {};
  const int n =
      X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
  return n > 0 ? std::string(cn, static_cast<size_t>(n)) : std::string();
}

}  // namespace

Result<std::shared_ptr<asio::ssl::context>> make_server_tls_context(const ServerTlsConfig& c) {
  auto ctx = base_context(context::tls_server);
  KVTIER_RETURN_IF_ERROR(load("certificate chain", c.cert_file, [&](std::error_code& ec) {
    ctx->use_certificate_chain_file(c.cert_file, ec);
  }));
  KVTIER_RETURN_IF_ERROR(load("private key", c.key_file, [&](std::error_code& ec) {
    ctx->use_private_key_file(c.key_file, context::pem, ec);
  }));
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    return Status::invalid_argument(
        fmt::format("TLS: the key in '{}' does not match '{}'", c.key_file, c.cert_file));
  }
  if (!c.client_ca_file.empty()) {
    KVTIER_RETURN_IF_ERROR(load("client CA", c.client_ca_file, [&](std::error_code& ec) {
      ctx->load_verify_file(c.client_ca_file, ec);
    }));
    ctx->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
  }
  return ctx;
}

Result<std::shared_ptr<asio::ssl::context>> make_client_tls_context(const ClientTlsOptions& o) {
  auto ctx = base_context(context::tls_client);
  KVTIER_RETURN_IF_ERROR(
      load("CA", o.ca_file, [&](std::error_code& ec) { ctx->load_verify_file(o.ca_file, ec); }));
  ctx->set_verify_mode(asio::ssl::verify_peer);
  if (o.cert_file.empty() != o.key_file.empty()) {
    return Status::invalid_argument(
        "TLS: a client certificate needs its key, and a key its "
        "certificate");
  }
  if (!o.cert_file.empty()) {
    KVTIER_RETURN_IF_ERROR(load("client certificate", o.cert_file, [&](std::error_code& ec) {
      ctx->use_certificate_chain_file(o.cert_file, ec);
    }));
    KVTIER_RETURN_IF_ERROR(load("client key", o.key_file, [&](std::error_code& ec) {
      ctx->use_private_key_file(o.key_file, context::pem, ec);
    }));
  }
  return ctx;
}

Result<std::string> certificate_common_name(const std::string& pem_file) {
  FILE* f = std::fopen(pem_file.c_str(), "r");
  if (!f) return Status::invalid_argument(fmt::format("cannot read certificate '{}'", pem_file));
  X509* cert = PEM_read_X509(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  if (!cert) return Status::invalid_argument(fmt::format("'{}' holds no certificate", pem_file));
  std::string cn = common_name_of(cert);
  X509_free(cert);
  if (cn.empty()) return Status::invalid_argument(fmt::format("'{}' has no common name", pem_file));
  return cn;
}

Status NetStream::expect_server_name(const std::string& host) {
  if (!tls_) return Status::failed_precondition("expect_server_name before start_tls");
  SSL* ssl = tls_->native_handle();
  std::error_code ec;
  asio::ip::make_address(host, ec);
  const bool is_ip = !ec;
  if (!is_ip && SSL_set_tlsext_host_name(ssl, host.c_str()) != 1) {
    return Status::invalid_argument("TLS: bad server name '" + host + "'");
  }
  // host_name_verification matches DNS names and IP literals (against the
  // certificate's subjectAltName entries of the matching kind).
  tls_->set_verify_callback(asio::ssl::host_name_verification(host));
  return Status::ok_status();
}

std::string NetStream::peer_common_name() {
  if (!tls_) return {};
  SSL* ssl = tls_->native_handle();
  if (SSL_get_verify_result(ssl) != X509_V_OK) return {};
  X509* cert = SSL_get1_peer_certificate(ssl);
  if (!cert) return {};
  std::string cn = common_name_of(cert);
  X509_free(cert);
  return cn;
}

void NetStream::close() {
  std::error_code ec;
  socket().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  socket().close(ec);
}

}  // namespace kvtier::net
