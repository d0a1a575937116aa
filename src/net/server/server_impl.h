// StoreServer's inside, shared by its files (store_server.cc: lifecycle and
// connections; server_requests.cc; server_impl_send.cc; server_stats.cc;
// server_shm_attach.cc) and by nothing else.
#pragma once

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "common/clock.h"
#include "common/crc32c.h"
#include "common/http_endpoint.h"
#include "net/server/shm_channel_server.h"
#include "net/server/store_server.h"
#include "net/server/tenant_registry.h"
#include "net/shm/shm_area.h"
#include "net/wire/stat_fields.h"

namespace kvtier::net {

using asio::ip::tcp;

// Runs `f` (a blocking store call) on `pool` and resumes the calling
// coroutine on its own executor with the result.
template <typename F>
asio::awaitable<std::invoke_result_t<F&>> run_in_pool(asio::thread_pool& pool, F f) {
  using R = std::invoke_result_t<F&>;
  co_return co_await asio::async_initiate<const asio::use_awaitable_t<>&, void(R)>(
      [&pool](auto handler, F fn) {
        asio::post(pool, [h = std::move(handler), fn = std::move(fn)]() mutable {
          R r = fn();
          auto ex = asio::get_associated_executor(h);
          asio::post(
              ex, [h = std::move(h), r = std::move(r)]() mutable { std::move(h)(std::move(r)); });
        });
      },
      asio::use_awaitable, std::move(f));
}

inline const char* op_label(MessageType t) {
  switch (t) {
    case MessageType::kHelloRequest:
      return "hello";
    case MessageType::kRegisterNamespaceRequest:
      return "register_namespace";
    case MessageType::kPutRequest:
      return "put";
    case MessageType::kGetRequest:
      return "get";
    case MessageType::kBatchPutRequest:
      return "batch_put";
    case MessageType::kBatchGetRequest:
      return "batch_get";
    case MessageType::kMatchPrefixRequest:
      return "match_prefix";
    case MessageType::kRemoveRequest:
      return "remove";
    case MessageType::kPinRequest:
      return "pin";
    case MessageType::kUnpinRequest:
      return "unpin";
    case MessageType::kStatsRequest:
      return "stats";
    case MessageType::kShmOfferRequest:
      return "shm_offer";
    case MessageType::kShmPutRequest:
      return "shm_put";
    case MessageType::kShmGetRequest:
      return "shm_get";
    case MessageType::kShmLeaseGetRequest:
      return "shm_lease_get";
    case MessageType::kShmReleaseRequest:
      return "shm_release";
    default:
      return "other";
  }
}
inline constexpr size_t kOps = 17;  // request type codes 1..16, 0 = other
inline size_t op_index(MessageType t) {
  auto v = static_cast<uint16_t>(t);
  return v >= 1 && v < kOps ? v : 0;
}

// Names from clients go to the log; keep them printable.
inline std::string printable(std::string_view s) {
  std::string out(s.substr(0, 64));
  for (char& ch : out) {
    if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) > 0x7E) ch = '?';
  }
  return out;
}

inline constexpr size_t kMaxNamespacesPerConnection = 1024;
inline constexpr FrameLimits kPreHelloLimits{8192, 0};  // a Hello request fits; nothing larger

struct ServerMetrics {
  explicit ServerMetrics(MetricsRegistry& r)
      : connections(r.counter("kvtier_server_connections_total", "Connections accepted")),
        active(r.gauge("kvtier_server_connections_active", "Connections being served")),
        bytes_in(r.counter("kvtier_server_bytes_received_total", "Bytes read from clients")),
        bytes_out(r.counter("kvtier_server_bytes_sent_total", "Bytes written to clients")),
        frames_in(r.counter("kvtier_server_frames_received_total", "Complete frames received")),
        frames_out(r.counter("kvtier_server_frames_sent_total", "Frames sent")),
        shm_bytes(r.counter("kvtier_server_shm_bytes_total",
                            "Block bytes moved through clients' shared-memory areas")),
        shm_attached(r.counter("kvtier_server_shm_attached_total",
                               "Shared-memory areas mapped for clients")),
        shm_refused(r.counter("kvtier_server_shm_refused_total",
                              "Shared-memory areas refused (bad nonce, size or seals)")) {
    for (const char* reason :
         {"max_connections", "auth", "version", "no_hello", "hello_timeout", "stopping",
          "idle_timeout", "write_timeout", "tenant_quota", "tls", "hello_evicted"}) {
      refused[reason] = &r.counter("kvtier_server_connections_refused_total",
                                   "Connections refused or closed before serving, by reason",
                                   fmt::format("reason=\"{}\"", reason));
    }
    for (size_t i = 1; i < malformed.size(); ++i) {
      malformed[i] = &r.counter(
          "kvtier_server_malformed_frames_total",
          "Malformed frames (connection closed), by protocol error class",
          fmt::format("class=\"{}\"", protocol_error_name(static_cast<ProtocolError>(i))));
    }
    for (size_t i = 1; i < error_responses.size(); ++i) {
      error_responses[i] =
          &r.counter("kvtier_server_error_responses_total",
                     "Requests answered with an Error response, by status code",
                     fmt::format("code=\"{}\"", status_code_name(static_cast<StatusCode>(i))));
    }
    for (size_t i = 0; i < kOps; ++i) {
      const char* op = op_label(static_cast<MessageType>(i));
      requests[i] = &r.counter("kvtier_server_requests_total", "Requests served, by operation",
                               fmt::format("op=\"{}\"", op));
      latency[i] = &r.histogram("kvtier_server_request_seconds",
                                "Time from a request's last byte to its response's last byte",
                                fmt::format("op=\"{}\"", op));
    }
  }
  Counter& connections;
  Gauge& active;
  Counter &bytes_in, &bytes_out, &frames_in, &frames_out, &shm_bytes, &shm_attached, &shm_refused;
  std::map<std::string, Counter*> refused;
  std::array<Counter*, static_cast<size_t>(ProtocolError::kCount)> malformed{};
  std::array<Counter*, static_cast<size_t>(StatusCode::kInternal) + 1> error_responses{};
  std::array<Counter*, kOps> requests{};
  std::array<Histogram*, kOps> latency{};
};

// One client connection. Everything in it is used on its strand only
// (the socket's executor), except `id` and `peer`, which never change.
struct ServerConnection {
  ServerConnection(tcp::socket s, uint64_t id_)
      : sock(std::move(s)),
        hello_timer(sock.get_executor()),
        id(id_),
        reader(kPreHelloLimits),
        idle_timer(sock.get_executor()),
        write_deadline(sock.get_executor()),
        write_timer(sock.get_executor()) {}
  NetStream sock;
  asio::steady_timer hello_timer;
  uint64_t id;
  std::string peer;
  // Under mutual TLS: the common name of the client's verified certificate.
  std::string cert_name;
  // Counted in Impl::pending_hello until Hello (guarded by Impl::mu);
  // `evicted`: closed to make room before it said Hello.
  bool pending_hello = false;
  bool evicted = false;
  FrameStreamReader reader;
  bool hello_done = false;
  uint16_t version = kProtocolVersionMin;  // until Hello chose one
  std::vector<uint16_t> namespaces;        // store handles registered on this connection
  // Multi-tenant servers: the tenant this connection authenticated as, and
  // per handle above the salted namespace digest its keys are mapped with
  // (tenant_registry.h). nullptr: a single-tenant server, keys as sent.
  const TenantConfig* tenant = nullptr;
  std::vector<kv::Key128> ns_digests;
  // Blocks pinned through this connection: unpinned when it ends, so no pin
  // outlives its client, and counted against the tenant's quota.
  struct PinnedKey {
    uint16_t ns;
    kv::Key128 key;
    friend bool operator==(const PinnedKey&, const PinnedKey&) = default;
  };
  struct PinnedKeyHash {
    size_t operator()(const PinnedKey& p) const { return kv::Key128Hash{}(p.key) ^ p.ns; }
  };
  std::unordered_set<PinnedKey, PinnedKeyHash> pinned;
  // Closes a connection that sends no request for idle_timeout_ms, or whose
  // response is not written within write_timeout_ms.
  asio::steady_timer idle_timer;
  asio::steady_timer write_deadline;
  // A response is written while the next request is read and served (the
  // store's copy for one get overlaps the transfer of the one before), one
  // write at a time, in request order. Each request uses one of two buffer
  // sets; the set of the write in flight is left alone until it completes.
  struct BufferSet {
    AlignedBuffer buf;           // request data in, block bytes out
    size_t used = 0;             // bytes of `buf` the request uses
    std::vector<std::byte> out;  // header + descriptor (+ data that lives elsewhere)
    std::vector<asio::const_buffer> gather;
    // A RAM slot whose bytes the write in flight sends in place (a get's
    // block, leased from the store): released when the write completes.
    std::optional<uint32_t> leased_slot;
  };
  std::array<BufferSet, 2> sets;
  int cur = 0;           // the set of the request being served
  bool writing = false;  // a write of sets[write_set] is in flight
  int write_set = 0;
  bool write_failed = false;       // a write failed: the connection is done
  asio::steady_timer write_timer;  // woken when the write in flight completes
  BufferSet& set() { return sets[cur]; }
  // At the start of a request: a set that no write is using.
  void next_set() {
    if (writing && write_set == cur) cur ^= 1;
  }
  uint64_t bytes_in_counted = 0;
  // The shared-memory path: the nonce this connection was offered, and the
  // client's area once the Unix socket handed it over. `shm` is set by the
  // attach thread and read on the strand: guarded by shm_mu, as is the
  // direct channel. `namespaces` is written on the strand under shm_mu too,
  // since the channel's thread reads it.
  std::optional<kv::Key128> shm_nonce;
  std::mutex shm_mu;
  std::shared_ptr<ShmArea> shm;
  std::shared_ptr<ShmChannelServer> channel;

  std::shared_ptr<ShmArea> shm_area() {
    std::lock_guard lk(shm_mu);
    return shm;
  }

  MutableByteView data_buffer(size_t n) {
    BufferSet& s = set();
    s.used = n;
    if (s.buf.size() < n) {
      // Grow in 64 KiB steps; bounded by the server's data limit.
      s.buf = AlignedBuffer(align_up(n, 64u << 10), 4096);
    }
    return s.buf.subview(0, n);
  }
  void close() {
    hello_timer.cancel();
    idle_timer.cancel();
    write_deadline.cancel();
    sock.close();
  }
};

struct StoreServer::Impl {
  ~Impl() {
    if (shm_thread.joinable()) {
      char b = 1;
      [[maybe_unused]] ssize_t n = ::write(shm_stop_pipe[1], &b, 1);
      shm_thread.join();
    }
    for (int fd : shm_stop_pipe) {
      if (fd >= 0) ::close(fd);
    }
  }
  ServerConfig cfg;
  std::unique_ptr<kv::Store> store;
  ServerLimits limits;
  FrameLimits frame_limits;
  std::unique_ptr<ServerMetrics> m;
  std::unique_ptr<TenantRegistry> tenants;
  // The RAM arena of each tenant that opted in to one (store arena 1, 2,
  // ...; fixed at start). Other tenants' blocks live in arena 0, which a
  // multi-tenant server shares with no one.
  std::unordered_map<std::string, uint16_t> tenant_arena;  // by tenant name
  std::shared_ptr<asio::ssl::context> tls;                 // null: plain TCP
  mutable std::mutex mu;                                   // guards the fields below
  std::condition_variable cv;
  std::unordered_map<uint64_t, std::shared_ptr<ServerConnection>> conns;
  size_t active = 0;         // connections being served (not the refused ones)
  size_t pending_hello = 0;  // of which have not said Hello yet
  uint64_t next_id = 1;
  bool listening = false;
  bool stopping = false;
  bool stopped = false;
  Status stop_status;

  // Declared after everything a connection's coroutine uses, so that
  // destroying the io_context (and any coroutine frame in it) finds them alive.
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  tcp::acceptor acceptor{asio::make_strand(io)};
  std::optional<asio::thread_pool> pool;
  std::vector<std::thread> threads;
  std::unique_ptr<HttpEndpoint> http;
  // Shared-memory attach: the abstract Unix socket, its thread, and the
  // connections waiting for their area, by nonce (guarded by mu).
  std::unique_ptr<ShmListener> shm_listener;
  std::thread shm_thread;
  int shm_stop_pipe[2] = {-1, -1};
  std::string host_id;
  std::unordered_map<kv::Key128, std::weak_ptr<ServerConnection>, kv::Key128Hash> shm_waiting;
  // Direct channels (guarded by mu): closed when their connection ends,
  // joined when finished (at the next attach) or at stop.
  std::vector<std::shared_ptr<ShmChannelServer>> channels;
  // RAM leases held by all direct channels together (shm_channel_server.h).
  std::shared_ptr<std::atomic<uint64_t>> channel_leases =
      std::make_shared<std::atomic<uint64_t>>(0);
  std::string bound_address;
  uint16_t bound_port = 0;

  // Mirrors of StoreStats fields the store's registry lacks (for /metrics).
  std::mutex mirror_mu;
  std::vector<Gauge*> mirror_gauges;      // by store_stat_fields() index
  std::vector<Counter*> mirror_counters;  // by store_stat_fields() index
  std::vector<uint64_t> mirror_last;

  // The steps of StoreServer::start, in order.
  Status set_limits();
  Status assign_tenant_arenas();
  Status bind_listener();
  Status start_metrics_endpoint();
  Status start_shm_attach();

  void setup_mirrors();

  kv::StoreStats refresh_mirrors();

  std::string render_metrics();

  // ---- sending -------------------------------------------------------------------

  // Waits until no response is being written; false when a write failed.
  asio::awaitable<bool> wait_write(ServerConnection& c);

  // Starts writing a response and returns without waiting for it (see
  // ServerConnection::BufferSet); false when the connection is broken. Data
  // in the request's buffer set is sent from there; any other data (a
  // caller's local) is copied behind the descriptor first.
  //
  // `leased_slot`: `data` lies in that RAM slot, leased from the store; it is
  // sent in place and the lease released once the write is done (or at once
  // when nothing is sent).
  asio::awaitable<bool> send(ServerConnection& c, const Message& msg, uint64_t request_id,
                             std::span<const ByteView> data = {},
                             std::optional<uint32_t> data_crc = std::nullopt,
                             std::optional<uint32_t> leased_slot = std::nullopt);

  asio::awaitable<bool> send_error(ServerConnection& c, uint64_t request_id, const Status& st);

  // Logs a malformed frame, answers it with one Error frame (best effort)
  // and leaves the connection to be closed.
  asio::awaitable<void> malformed(ServerConnection& c, const Status& st, uint64_t request_id);

  Status check_ns(const ServerConnection& c, uint16_t ns) const;

  // The store's key for a key a client sent under handle `ns` (registered on
  // `c`): a tenant's keys are mapped into its own key space.
  static kv::Key128 store_key(const ServerConnection& c, uint16_t ns, const kv::Key128& key);
  static void store_keys(const ServerConnection& c, uint16_t ns, std::span<kv::Key128> keys);

  // Records the keys a pin or unpin names on the connection (so that its
  // pins end with it) and holds them against the tenant's quota.
  Status track_pins(ServerConnection& c, uint16_t ns, std::span<const kv::Key128> keys, bool pin);

  // ---- tenants' byte quotas -------------------------------------------------------

  // The store arena a tenant's blocks live in (0 without one of its own).
  uint16_t arena_of(const TenantConfig* t) const;

  static PutOutcome quota_refusal();

  // How many of `sizes` (puts in order) fit under the connection's tenant's
  // RAM and disk byte quotas; all of them without a tenant or quota. What a
  // tenant holds is summed, exactly, over the namespaces whose blocks are
  // its (tenant_registry.h).
  size_t quota_admits(ServerConnection& c, std::span<const size_t> sizes);

  // Walks tenant `t`'s holdings (at most max_namespaces): forgets those it no
  // longer registers and holds no block in (they then no longer count
  // against its max_namespaces), and returns the RAM and disk bytes the
  // rest hold now.
  std::pair<uint64_t, uint64_t> refresh_holdings(const TenantConfig& t);

  // ---- requests ------------------------------------------------------------------

  asio::awaitable<bool> handle_hello(ServerConnection& c, const Frame& f);

  // Answers one decoded request; false closes the connection.
  asio::awaitable<bool> handle(ServerConnection& c, const Frame& f);
  // One handler per request type, called by handle() with the decoded
  // request, its id, and (for puts) the request's data section, which lies in
  // the connection's buffer.
  asio::awaitable<bool> on_register_namespace(ServerConnection& c, RegisterNamespaceRequest& req,
                                              uint64_t rid);
  asio::awaitable<bool> on_put(ServerConnection& c, PutRequest& req, uint64_t rid, ByteView data);
  asio::awaitable<bool> on_get(ServerConnection& c, GetRequest& req, uint64_t rid);
  asio::awaitable<bool> on_batch_put(ServerConnection& c, BatchPutRequest& req, uint64_t rid,
                                     ByteView data);
  asio::awaitable<bool> on_batch_get(ServerConnection& c, BatchGetRequest& req, uint64_t rid);
  asio::awaitable<bool> on_match_prefix(ServerConnection& c, MatchPrefixRequest& req, uint64_t rid);
  asio::awaitable<bool> on_remove(ServerConnection& c, RemoveRequest& req, uint64_t rid);
  asio::awaitable<bool> on_pin(ServerConnection& c, PinRequest& req, uint64_t rid);
  asio::awaitable<bool> on_unpin(ServerConnection& c, UnpinRequest& req, uint64_t rid);
  asio::awaitable<bool> on_stats(ServerConnection& c, StatsRequest& req, uint64_t rid);
  asio::awaitable<bool> on_shm_offer(ServerConnection& c, ShmOfferRequest& req, uint64_t rid);
  asio::awaitable<bool> on_shm_put(ServerConnection& c, ShmPutRequest& req, uint64_t rid);
  asio::awaitable<bool> on_shm_get(ServerConnection& c, ShmGetRequest& req, uint64_t rid);
  // Pin (with a TTL) or unpin: checks, records the connection's pins, and
  // returns how many keys the store holds.
  Result<uint32_t> pin_or_unpin(ServerConnection& c, uint16_t ns, std::vector<kv::Key128>& keys,
                                std::optional<uint64_t> pin_ttl_ms);

  void build_stats(StatsFormat format, StatsResponse* resp, std::string* json_out);

  size_t active_count() const;

  // ---- connections -----------------------------------------------------------------

  // TLS servers: the handshake, before any frame (within the Hello
  // deadline the caller armed). False: the connection is done.
  asio::awaitable<bool> tls_handshake(ServerConnection& c);

  asio::awaitable<void> serve(std::shared_ptr<ServerConnection> c);

  // A request with data (a put) is decoded, and its namespace and sizes
  // checked, before the connection sizes a buffer for its data.
  Status check_before_data(ServerConnection& c) const;

  void count_bytes_in(ServerConnection& c);

  // A connection over the limit: one Error frame, then close once the
  // client has read it (or after a short grace period).
  asio::awaitable<void> refuse(std::shared_ptr<ServerConnection> c, Status why);

  void finish(ServerConnection& c, bool refused);

  // The attach thread: accepts on the abstract Unix socket, maps each area
  // received and hands it to the connection its nonce names. Clients that
  // connected but have not sent their message yet wait in `pending` (at most
  // kMaxPendingAttaches, each for at most kAttachTimeoutMs), polled
  // together: one that never sends holds up nobody else.
  static constexpr size_t kMaxPendingAttaches = 128;
  static constexpr uint32_t kAttachTimeoutMs = 1000;
  void shm_attach_loop();

  // One attach message, received: maps the client's area for the connection
  // whose nonce it carries.
  void attach(Result<ShmListener::Received> got);

  // Answers a version-2 attach, opening the direct channel on `sock` when the
  // client asked for it and there is room.
  void open_direct_channel(const std::shared_ptr<ServerConnection>& conn, int sock,
                           const ShmAttachMessage& msg, std::shared_ptr<ShmArea> area);

  // With mu held: closes the oldest connection still waiting to say Hello
  // (ids grow with time), making room for a new one.
  bool evict_oldest_pending_locked();

  asio::awaitable<void> listen();

  Status stop();
};

}  // namespace kvtier::net
