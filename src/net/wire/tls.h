// TLS for the store protocol (docs/security.md, "TLS"): Asio's SSL stream
// over OpenSSL, TLS 1.2 or newer, peers verified against a CA file.
//
// NetStream is the one socket type the server and the client read and write
// frames through: a TCP socket, with a TLS layer on top once start_tls() has
// been called. Reads and writes take the same path either way, so the frame
// code (FrameStreamReader, the gather writes) has no TLS branch of its own.
// Like the socket under it, a NetStream is used from one strand only; one
// read and one write may be in flight at once.
#pragma once

#include <asio.hpp>
#include <asio/ssl.hpp>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "common/status.h"

namespace kvtier::net {

// The server's side: its certificate chain and key (PEM files), and, for
// mutual TLS, the CA whose client certificates it accepts (then a client
// without one is refused during the handshake).
struct ServerTlsConfig {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;  // empty: clients are not asked for a certificate
};

// The client's side: the CA that signed the server's certificate (the
// server's name, or IP literal, is checked against it), and optionally the
// client's own certificate and key for mutual TLS.
struct ClientTlsOptions {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  bool enabled() const { return !ca_file.empty(); }
};

Result<std::shared_ptr<asio::ssl::context>> make_server_tls_context(const ServerTlsConfig& config);
Result<std::shared_ptr<asio::ssl::context>> make_client_tls_context(
    const ClientTlsOptions& options);
// The subject common name of the first certificate in a PEM file.
Result<std::string> certificate_common_name(const std::string& pem_file);

class NetStream {
 public:
  using executor_type = asio::ip::tcp::socket::executor_type;

  explicit NetStream(asio::ip::tcp::socket socket) : plain_(std::move(socket)) {}
  template <typename Executor>
  explicit NetStream(const Executor& ex) : plain_(ex) {}

  executor_type get_executor() { return socket().get_executor(); }
  // The TCP socket underneath (options, endpoints, shutdown).
  asio::ip::tcp::socket& socket() { return tls_ ? tls_->next_layer() : plain_; }
  bool is_tls() const { return tls_.has_value(); }

  // Puts a TLS layer over the connected socket; the caller then runs
  // async_handshake() before anything else.
  void start_tls(asio::ssl::context& context) { tls_.emplace(std::move(plain_), context); }
  // A fresh, closed plain socket (a client starting a new session).
  void reset(const executor_type& ex) {
    tls_.reset();
    plain_ = asio::ip::tcp::socket(ex);
  }
  // The client checks the server's certificate names `host` (DNS name or IP
  // literal) and sends it as SNI when it is a name.
  Status expect_server_name(const std::string& host);

  template <typename Token>
  auto async_handshake(asio::ssl::stream_base::handshake_type type, Token&& token) {
    return tls_->async_handshake(type, std::forward<Token>(token));
  }
  template <typename Buffers, typename Token>
  auto async_read_some(const Buffers& buffers, Token&& token) {
    if (tls_) return tls_->async_read_some(buffers, std::forward<Token>(token));
    return plain_.async_read_some(buffers, std::forward<Token>(token));
  }
  template <typename Buffers, typename Token>
  auto async_write_some(const Buffers& buffers, Token&& token) {
    if (tls_) return tls_->async_write_some(buffers, std::forward<Token>(token));
    return plain_.async_write_some(buffers, std::forward<Token>(token));
  }

  // The common name of the peer's certificate once a handshake that
  // verified it is done; empty without TLS or without a client certificate.
  std::string peer_common_name();
  // Shuts the connection down and closes the socket (no TLS close_notify:
  // frames carry their own lengths and checksums, a cut is never mistaken
  // for an end).
  void close();

 private:
  asio::ip::tcp::socket plain_;
  std::optional<asio::ssl::stream<asio::ip::tcp::socket>> tls_;
};

}  // namespace kvtier::net
