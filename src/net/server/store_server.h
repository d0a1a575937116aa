// StoreServer: the store service. It hosts one kv::Store and serves it over
// the wire protocol of docs/protocol-store.md to any number of clients
// (RemoteStore, other implementations), with an HTTP side port for
// Prometheus' /metrics and a /health probe. docs/store-service.md describes
// running it (`kvtier store serve --config FILE`) and its configuration.
//
// Structure: one asio::io_context run by `io_threads` threads; one coroutine
// per connection on its own strand, so a connection's state is only ever
// touched by one thread at a time. A connection reads a frame (header checked
// before anything is allocated, descriptor into a small buffer, data section
// straight into the connection's data buffer), runs the store call on a
// separate pool of `store_threads` (store calls may wait for the disk, and an
// I/O thread must never block), and answers with one gather write: header and
// descriptor from one small buffer, block bytes from where the store put them.
// Requests of one connection are answered in order; a client pipelines by
// sending many requests before reading, and uses several connections for
// parallelism.
//
// A malformed frame (docs/protocol-store.md, "Error handling") is logged with
// the peer's address and the reason, answered with one Error frame when
// possible, and closes that connection only; nothing of the frame is applied.
#pragma once

#include <array>
#include <asio.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/buffer.h"
#include "common/status.h"
#include "kv/store.h"
#include "net/server/server_config.h"
#include "net/wire/frame_stream_reader.h"
#include "net/wire/protocol.h"
#include "net/wire/tls.h"

namespace kvtier::net {

// Compares an offered token with the configured one in time that depends on
// neither's content nor length (both are hashed first, then compared with
// CRYPTO_memcmp).
bool token_equal(std::string_view offered, std::string_view expected);

class StoreServer {
 public:
  // Validates `config` (the loopback/token rule included), opens the store
  // from config.store unless `store` is given (then config.store is
  // ignored), starts listening and returns. The server owns the store.
  static Result<std::unique_ptr<StoreServer>> start(const ServerConfig& config,
                                                    std::unique_ptr<kv::Store> store = nullptr);
  // stop().
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // Graceful stop: closes the listener and every connection, waits for the
  // store calls in progress, then closes the store (checkpoint). Returns the
  // store's close status. Idempotent.
  Status stop();

  std::string address() const;
  uint16_t port() const;
  // 0 when the metrics endpoint is disabled.
  uint16_t metrics_port() const;
  // Limits announced in Hello.
  const ServerLimits& limits() const;
  // Connections being served now (refused ones not included).
  size_t active_connections() const;
  kv::Store& store();
  // Prometheus text of the store's registry, server metrics included.
  std::string render_metrics();

 private:
  struct Impl;
  explicit StoreServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::net
