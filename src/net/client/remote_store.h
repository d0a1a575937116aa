// RemoteStore: the client of the store service, with the operations and
// result types of kv::Store, so that a prefill or decode replica can use a
// shared store on another process or host exactly like a local one.
//
// Connections: a pool of `connections` TCP connections, each pipelining any
// number of calls (matched to responses by request id); callers on many
// threads share them, round robin. Block bytes are never copied by the
// client: a put sends the caller's buffer with one gather write, a get
// receives the data section straight into the caller's buffer.
//
// Failures: an unreachable store is a cache miss, never an error, and never a
// wait longer than `call_timeout_ms`. While no connection is up, calls return
// at once: get and batch_get report misses (MissReason::kIoError; kTimeout
// when a call ran out of time), match_prefix matches 0 blocks, put and
// batch_put report refused blocks (RefuseReason::kDiskError: the tier could
// not take them), remove returns false and pin/unpin 0. Each connection
// reconnects by itself (at once after a connection that worked, else with
// exponential backoff, reconnect_min_ms .. reconnect_max_ms), also when two
// calls in a row time out without any frame arriving (a peer gone silent).
// Namespaces are registered per connection, lazily and again after every
// reconnect; the handles this class returns never change.
// A non-OK Status is, as with kv::Store, reserved for bad input (and for the
// server's answer to bad input), plus stats(), which cannot invent numbers.
//
// Thread-safety: every method may be called concurrently from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/status.h"
#include "kv/store.h"
#include "kvtier/kv_store.h"
#include "net/wire/protocol.h"
#include "net/wire/stat_fields.h"
#include "net/wire/tls.h"

namespace kvtier::net {

struct RemoteStoreOptions {
  std::string host = "127.0.0.1";  // IP literal or name
  uint16_t port = 7470;
  std::string auth_token;
  std::string client_name = "kvtier-client";
  unsigned connections = 2;  // pool size
  unsigned io_threads = 1;
  uint32_t call_timeout_ms = 1000;
  uint32_t connect_timeout_ms = 1000;
  uint32_t reconnect_min_ms = 20;
  uint32_t reconnect_max_ms = 1000;
  // Same-host fast path (docs/store-service.md, "Shared memory"): when the
  // server offers it and runs on this host (same boot id, reachable abstract
  // Unix socket), each connection passes the server a sealed memfd area of
  // `shm_slots` slots of the server's max_object_bytes, and put/get move
  // block bytes through it instead of TCP. Anything that fails falls back to
  // TCP; false turns the path off.
  bool shared_memory = true;
  unsigned shm_slots = 8;
  // With shared memory, also ask for the direct channel: gets go over a Unix
  // socket from the calling thread, and RAM hits are copied straight out of
  // the server's RAM arena (one copy; docs/store-service.md).
  bool direct_channel = true;
  // TLS (docs/security.md, "TLS"): with a CA file the connection is TLS and
  // the server's certificate must name `host`; a certificate and key add
  // mutual TLS.
  ClientTlsOptions tls;
};

// What the client itself saw (the server's view is stats()).
struct RemoteStoreClientStats {
  uint64_t calls = 0;
  uint64_t unavailable = 0;  // calls answered locally: no connection was up
  uint64_t timeouts = 0;     // calls that ran out of time
  uint64_t broken = 0;       // calls failed by a connection that broke under them
  uint64_t sessions = 0;     // successful connects (the first ones included)
  uint64_t connect_failures = 0;
  uint64_t shm_sessions = 0;       // sessions that attached a shared-memory area
  uint64_t shm_calls = 0;          // puts and gets served through shared memory
  uint64_t shm_retired_slots = 0;  // slots never reused: a call on them failed mid-way
  uint64_t direct_channels = 0;    // sessions that opened a direct channel
  uint64_t direct_gets = 0;        // gets answered over a direct channel
  uint64_t arena_reads = 0;        // of those, copied straight from the server's RAM arena
  uint64_t direct_matches = 0;     // match_prefix calls answered over a direct channel
};

class RemoteStore final : public KvStore {
 public:
  // Validates the options and starts connecting in the background; succeeds
  // even when the server is down (calls are then misses until it is up).
  static Result<std::unique_ptr<RemoteStore>> open(const RemoteStoreOptions& options);
  ~RemoteStore() override;
  RemoteStore(const RemoteStore&) = delete;
  RemoteStore& operator=(const RemoteStore&) = delete;

  // OK once at least one connection is up; otherwise, after `timeout_ms`, the
  // last connection error (connection refused, "authentication failed", ...).
  Status wait_connected(uint32_t timeout_ms);
  bool connected() const;
  Status last_error() const;
  // The limits the server announced (hard limits before the first Hello).
  ServerLimits server_limits() const;
  // Whether at least one connection's session has a shared-memory area.
  bool shared_memory_active() const;
  RemoteStoreClientStats client_stats() const;

  // Validates `ns` and returns a handle for the calls below. When the server
  // is reachable it is registered there at once, so that a namespace the
  // server rejects is reported here.
  Result<uint16_t> register_namespace(const kv::Namespace& ns) override;

  Result<kv::PutResult> put(uint16_t ns, const kv::Key128& key, ByteView data) override;
  Result<kv::GetResult> get(uint16_t ns, const kv::Key128& key, MutableByteView out) override;
  // Split into several requests when the server's batch or frame limits ask
  // for it. With a direct channel up and every buffer at least the server's
  // max_object_bytes, batch_get goes block by block over the channel (RAM
  // hits copied straight from the server's arena) instead of over TCP.
  Result<std::vector<kv::PutResult>> batch_put(uint16_t ns, std::span<const kv::Key128> keys,
                                               std::span<const ByteView> data) override;
  Result<std::vector<kv::GetResult>> batch_get(uint16_t ns,
                                               std::span<const kv::BatchGetItem> items) override;
  Result<kv::MatchResult> match_prefix(uint16_t ns, std::span<const kv::Key128> keys) override;
  Result<bool> remove(uint16_t ns, const kv::Key128& key) override;
  Result<size_t> pin(uint16_t ns, std::span<const kv::Key128> keys, uint64_t ttl_ms) override;
  Result<size_t> unpin(uint16_t ns, std::span<const kv::Key128> keys) override;

  // The server's store statistics (Unavailable when it cannot be reached).
  Result<kv::StoreStats> stats() override;
  // Every counter the server reports (store and server metrics).
  Result<std::vector<StatCounter>> stat_counters();
  // The server's statistics as one JSON object.
  Result<std::string> stats_json();

 private:
  struct Impl;
  explicit RemoteStore(std::unique_ptr<Impl> impl);
  std::optional<Result<std::vector<kv::GetResult>>> batch_get_direct(
      uint16_t ns, std::span<const kv::BatchGetItem> items, uint64_t max_object_bytes);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier::net
