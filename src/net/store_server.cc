#include "net/store_server.h"

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
#include "net/http_endpoint.h"
#include "net/remote_store.h"
#include "net/shm_area.h"
#include "net/shm_channel_server.h"
#include "net/tenant_registry.h"

namespace kvtier::net {

using asio::ip::tcp;

bool token_equal(std::string_view offered, std::string_view expected) {
  // Hashing first makes the comparison independent of both lengths; the
  // digests are then compared in constant time.
  unsigned char a[EVP_MAX_MD_SIZE], b[EVP_MAX_MD_SIZE];
  unsigned int la = 0, lb = 0;
  if (EVP_Digest(offered.data(), offered.size(), a, &la, EVP_sha256(), nullptr) != 1 ||
      EVP_Digest(expected.data(), expected.size(), b, &lb, EVP_sha256(), nullptr) != 1 ||
      la != lb) {
    return false;
  }
  return CRYPTO_memcmp(a, b, la) == 0;
}

// ---- FrameStreamReader ------------------------------------------------------------

FrameStreamReader::FrameStreamReader(FrameLimits limits)
    : decoder_(std::make_unique<FrameDecoder>(limits)) {}

void FrameStreamReader::reset(FrameLimits limits, uint16_t version) {
  decoder_ = std::make_unique<FrameDecoder>(limits);
  decoder_->set_required_version(version);
  parts_.clear();
  data_done_ = 0;
}

Status FrameStreamReader::pump(bool data) {
  while (ahead_pos_ < ahead_len_) {
    auto st = decoder_->state();
    bool wants = st == FrameDecoder::State::kHeader || st == FrameDecoder::State::kDescriptor ||
                 (data && st == FrameDecoder::State::kData);
    if (!wants) break;
    MutableByteView w = decoder_->wanted();
    if (w.empty()) break;
    size_t n = std::min(w.size(), ahead_len_ - ahead_pos_);
    std::memcpy(w.data(), ahead_.data() + ahead_pos_, n);
    ahead_pos_ += n;
    if (st == FrameDecoder::State::kData) data_done_ += n;
    KVTIER_RETURN_IF_ERROR(decoder_->advance(n));
  }
  if (ahead_pos_ == ahead_len_) ahead_pos_ = ahead_len_ = 0;
  return Status::ok_status();
}

asio::awaitable<Status> FrameStreamReader::read_head(Socket& socket, std::error_code& ec) {
  ec = {};
  parts_.clear();
  data_done_ = 0;
  for (;;) {
    Status st = pump(false);
    if (!st.ok()) co_return st;
    auto state = decoder_->state();
    if (state == FrameDecoder::State::kData || state == FrameDecoder::State::kReady) {
      co_return Status::ok_status();
    }
    if (state == FrameDecoder::State::kFailed) co_return decoder_->error();
    // The read-ahead buffer is empty here. Header or descriptor bytes go
    // straight where the decoder wants them; whatever follows lands in the
    // read-ahead buffer.
    MutableByteView w = decoder_->wanted();
    std::array<asio::mutable_buffer, 2> bufs{asio::buffer(w.data(), w.size()),
                                             asio::buffer(ahead_.data(), ahead_.size())};
    size_t n = co_await socket.async_read_some(bufs, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return Status::unavailable("connection: " + ec.message());
    bytes_read_ += n;
    size_t k = std::min(n, w.size());
    ahead_pos_ = 0;
    ahead_len_ = n - k;
    st = decoder_->advance(k);
    if (!st.ok()) co_return st;
  }
}

Status FrameStreamReader::set_data_destination(std::span<const MutableByteView> parts) {
  KVTIER_RETURN_IF_ERROR(decoder_->set_data_destination(parts));
  parts_.assign(parts.begin(), parts.end());
  data_done_ = 0;
  return Status::ok_status();
}

asio::awaitable<Status> FrameStreamReader::read_data(Socket& socket, std::error_code& ec) {
  ec = {};
  // Data bytes that arrived with the header (at most kReadAhead) are copied
  // once; everything after them is read in place.
  Status st = pump(true);
  if (!st.ok()) co_return st;
  std::vector<asio::mutable_buffer> bufs;
  while (decoder_->state() == FrameDecoder::State::kData) {
    bufs.clear();
    size_t want = 0;
    bool all = true;  // the list reaches the end of the data section
    if (parts_.empty()) {
      MutableByteView w = decoder_->wanted();  // the decoder's own buffer
      bufs.push_back(asio::buffer(w.data(), w.size()));
      want = w.size();
    } else {
      size_t skip = data_done_;
      for (MutableByteView p : parts_) {
        if (skip >= p.size()) {
          skip -= p.size();
          continue;
        }
        if (bufs.size() == kMaxReadParts) {  // one readv; the loop continues with the rest
          all = false;
          break;
        }
        bufs.push_back(asio::buffer(p.data() + skip, p.size() - skip));
        want += p.size() - skip;
        skip = 0;
      }
    }
    // Bytes past the data section (the next frame) go to the read-ahead
    // buffer; only when the list covers the whole rest of the section, or
    // data bytes would land there.
    if (all) bufs.push_back(asio::buffer(ahead_.data(), ahead_.size()));
    size_t n = co_await socket.async_read_some(bufs, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return Status::unavailable("connection: " + ec.message());
    bytes_read_ += n;
    size_t k = std::min(n, want);
    ahead_pos_ = 0;
    ahead_len_ = n - k;
    data_done_ += k;
    // The bytes are where the decoder wants them; advance it part by part
    // (it computes the data CRC over them while they are still in cache).
    while (k > 0) {
      MutableByteView w = decoder_->wanted();
      size_t m = std::min(k, w.size());
      if (m == 0) co_return Status::internal("FrameStreamReader: data destination out of step");
      st = decoder_->advance(m);
      if (!st.ok()) co_return st;
      k -= m;
    }
  }
  if (decoder_->state() == FrameDecoder::State::kFailed) co_return decoder_->error();
  co_return Status::ok_status();
}

// ---- StoreServer ---------------------------------------------------------------------

namespace {

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

const char* op_label(MessageType t) {
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
constexpr size_t kOps = 17;  // request type codes 1..16, 0 = other
size_t op_index(MessageType t) {
  auto v = static_cast<uint16_t>(t);
  return v >= 1 && v < kOps ? v : 0;
}

// Names from clients go to the log; keep them printable.
std::string printable(std::string_view s) {
  std::string out(s.substr(0, 64));
  for (char& ch : out) {
    if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) > 0x7E) ch = '?';
  }
  return out;
}

constexpr size_t kMaxNamespacesPerConnection = 1024;
constexpr FrameLimits kPreHelloLimits{8192, 0};  // a Hello request fits; nothing larger

}  // namespace

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
        idle_timer(sock.get_executor()),
        write_deadline(sock.get_executor()),
        write_timer(sock.get_executor()),
        id(id_),
        reader(kPreHelloLimits) {}
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

  void setup_mirrors() {
    const auto& fields = store_stat_fields();
    mirror_gauges.assign(fields.size(), nullptr);
    mirror_counters.assign(fields.size(), nullptr);
    mirror_last.assign(fields.size(), 0);
    MetricsRegistry& r = store->metrics();
    for (size_t i = 0; i < fields.size(); ++i) {
      const auto& f = fields[i];
      if (f.kind == StoreStatField::Kind::kGauge) {
        mirror_gauges[i] = &r.gauge(f.name, f.help, f.labels);
      } else if (f.kind == StoreStatField::Kind::kCounter) {
        mirror_counters[i] = &r.counter(f.name, f.help, f.labels);
      }
    }
  }

  kv::StoreStats refresh_mirrors() {
    kv::StoreStats s = store->local_stats();
    const auto& fields = store_stat_fields();
    std::lock_guard lk(mirror_mu);
    for (size_t i = 0; i < fields.size(); ++i) {
      uint64_t v = fields[i].get(s);
      if (mirror_gauges[i]) mirror_gauges[i]->set(static_cast<int64_t>(v));
      if (mirror_counters[i]) {
        if (v > mirror_last[i]) mirror_counters[i]->add(v - mirror_last[i]);
        mirror_last[i] = std::max(v, mirror_last[i]);
      }
    }
    return s;
  }

  std::string render_metrics() {
    refresh_mirrors();
    return store->metrics().render_prometheus();
  }

  // ---- sending -------------------------------------------------------------------

  // Waits until no response is being written; false when a write failed.
  asio::awaitable<bool> wait_write(ServerConnection& c) {
    while (c.writing) {
      c.write_timer.expires_at(asio::steady_timer::time_point::max());
      std::error_code ec;
      co_await c.write_timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    co_return !c.write_failed;
  }

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
                             std::optional<uint32_t> leased_slot = std::nullopt) {
    if (!co_await wait_write(c)) {
      if (leased_slot) store->release_ram_lease(*leased_slot);
      co_return false;
    }
    ServerConnection::BufferSet& set = c.set();
    std::vector<std::byte>& out = set.out;
    out.clear();
    const uint16_t version = c.version;
    Status st = data_crc ? encode_message_prefix_with_data_crc(msg, request_id, data, *data_crc,
                                                               out, version)
                         : encode_message_prefix(msg, request_id, data, out, version);
    if (!st.ok()) {
      // A response this server built broke a protocol rule: a bug, but the
      // client still gets an answer.
      spdlog::error("store server: cannot encode {} for {}: {}",
                    message_type_name(message_type_of(msg)), c.peer, st.to_string());
      out.clear();
      data = {};
      Status enc = encode_message_prefix(
          ErrorResponse::from_status(Status::internal("response encoding failed")), request_id, {},
          out, version);
      if (!enc.ok()) co_return false;
    }
    const std::byte* lo = set.buf.data();
    const std::byte* hi = lo + set.buf.size();
    bool in_set = true;
    if (leased_slot) {
      set.leased_slot = leased_slot;  // pinned by the lease: no copy
      if (data.empty()) {             // the encoding failed: nothing will read it
        store->release_ram_lease(*set.leased_slot);
        set.leased_slot.reset();
      }
    }
    for (ByteView d : data) {
      if (set.leased_slot) break;
      if (!d.empty() && (set.buf.empty() || d.data() < lo || d.data() + d.size() > hi)) {
        in_set = false;
      }
    }
    if (!in_set) {
      for (ByteView d : data) out.insert(out.end(), d.begin(), d.end());
      data = {};
    }
    set.gather.clear();
    set.gather.push_back(asio::buffer(out));
    for (ByteView d : data) {
      if (!d.empty()) set.gather.push_back(asio::buffer(d.data(), d.size()));
    }
    c.writing = true;
    c.write_set = c.cur;
    // A client that stops reading must not keep its RAM slot leased: past
    // the deadline the socket is closed, the write fails, the lease goes.
    c.write_deadline.expires_after(std::chrono::milliseconds(cfg.write_timeout_ms));
    c.write_deadline.async_wait([this, &c](std::error_code ec) {
      if (ec) return;  // cancelled: written in time (or the connection is gone)
      m->refused.at("write_timeout")->add();
      spdlog::warn("store server: {} did not read its response within {} ms; closing", c.peer,
                   cfg.write_timeout_ms);
      c.close();
    });
    // The handler runs on the connection's strand; the connection outlives
    // it (serve() and refuse() wait for the last write before they end).
    asio::async_write(c.sock, set.gather, [this, &c, &set](std::error_code ec, size_t n) {
      if (set.leased_slot) {
        store->release_ram_lease(*set.leased_slot);
        set.leased_slot.reset();
      }
      m->bytes_out.add(n);
      if (ec) {
        c.write_failed = true;
      } else {
        m->frames_out.add();
      }
      c.writing = false;
      c.write_deadline.cancel();
      c.write_timer.cancel();
    });
    co_return true;
  }

  asio::awaitable<bool> send_error(ServerConnection& c, uint64_t request_id, const Status& st) {
    auto code = static_cast<size_t>(st.code());
    if (code > 0 && code < m->error_responses.size()) m->error_responses[code]->add();
    co_return co_await send(c, ErrorResponse::from_status(st), request_id);
  }

  // Logs a malformed frame, answers it with one Error frame (best effort)
  // and leaves the connection to be closed.
  asio::awaitable<void> malformed(ServerConnection& c, const Status& st, uint64_t request_id) {
    ProtocolError pe = protocol_error_of(st);
    if (pe != ProtocolError::kNone) m->malformed[static_cast<size_t>(pe)]->add();
    spdlog::warn("store server: malformed frame from {}: {}; closing that connection", c.peer,
                 st.message());
    co_await send_error(c, request_id, st);
  }

  Status check_ns(const ServerConnection& c, uint16_t ns) const {
    for (uint16_t h : c.namespaces) {
      if (h == ns) return Status::ok_status();
    }
    return Status::invalid_argument(
        fmt::format("namespace handle {} was not registered on this connection", ns));
  }

  // The store's key for a key a client sent under handle `ns` (registered on
  // `c`): a tenant's keys are mapped into its own key space.
  static kv::Key128 store_key(const ServerConnection& c, uint16_t ns, const kv::Key128& key) {
    if (!c.tenant) return key;
    for (size_t i = 0; i < c.namespaces.size(); ++i) {
      if (c.namespaces[i] == ns) return tenant_key(c.ns_digests[i], key);
    }
    return key;  // unreachable: check_ns ran first
  }
  static void store_keys(const ServerConnection& c, uint16_t ns, std::span<kv::Key128> keys) {
    if (!c.tenant) return;
    for (size_t i = 0; i < c.namespaces.size(); ++i) {
      if (c.namespaces[i] == ns) return tenant_keys(c.ns_digests[i], keys);
    }
  }

  // Records the keys a pin or unpin names on the connection (so that its
  // pins end with it) and holds them against the tenant's quota.
  Status track_pins(ServerConnection& c, uint16_t ns, std::span<const kv::Key128> keys, bool pin) {
    if (!pin) {
      uint64_t gone = 0;
      for (const auto& k : keys) gone += c.pinned.erase({ns, k});
      if (c.tenant) tenants->release_pins(*c.tenant, gone);
      return Status::ok_status();
    }
    std::vector<ServerConnection::PinnedKey> fresh;
    for (const auto& k : keys) {
      if (!c.pinned.count({ns, k})) fresh.push_back({ns, k});
    }
    if (c.tenant) KVTIER_RETURN_IF_ERROR(tenants->acquire_pins(*c.tenant, fresh.size()));
    c.pinned.insert(fresh.begin(), fresh.end());
    return Status::ok_status();
  }

  // ---- tenants' byte quotas -------------------------------------------------------

  // The store arena a tenant's blocks live in (0 without one of its own).
  uint16_t arena_of(const TenantConfig* t) const {
    if (!t) return 0;
    auto it = tenant_arena.find(t->name);
    return it == tenant_arena.end() ? 0 : it->second;
  }

  static PutOutcome quota_refusal() {
    return {kv::PutResult::Outcome::kRefused, kv::Tier::kNone, kv::RefuseReason::kQuota};
  }

  // How many of `sizes` (puts in order) fit under the connection's tenant's
  // RAM and disk byte quotas; all of them without a tenant or quota. What a
  // tenant holds is summed, exactly, over the namespaces whose blocks are
  // its (tenant_registry.h).
  size_t quota_admits(ServerConnection& c, std::span<const size_t> sizes) {
    const TenantConfig* t = c.tenant;
    if (!t || (t->max_ram_bytes == 0 && t->max_disk_bytes == 0)) return sizes.size();
    const auto [ram, disk] = refresh_holdings(*t);
    return tenants->admit_bytes(*t, ram, disk, sizes, arena_of(c.tenant) != 0);
  }

  // Walks tenant `t`'s holdings (at most max_namespaces): forgets those it no
  // longer registers and holds no block in (they then no longer count
  // against its max_namespaces), and returns the RAM and disk bytes the
  // rest hold now.
  std::pair<uint64_t, uint64_t> refresh_holdings(const TenantConfig& t) {
    uint64_t ram = 0, disk = 0;
    for (const auto& [handle, digest] : tenants->holdings(t)) {
      if (store->namespace_digest(handle) != digest) {
        tenants->forget_holding(t, handle, false);  // the handle went to another namespace
        continue;
      }
      const kv::NamespaceUsage u = store->namespace_usage(handle);
      if (u.blocks == 0) tenants->forget_holding(t, handle, true);
      ram += u.ram_bytes;
      disk += u.disk_bytes;
    }
    return {ram, disk};
  }

  // ---- requests ------------------------------------------------------------------

  asio::awaitable<bool> handle_hello(ServerConnection& c, const Frame& f) {
    const FrameHeader& h = f.header;
    if (h.type != MessageType::kHelloRequest) {
      m->refused.at("no_hello")->add();
      spdlog::warn("store server: {} sent {} before Hello; closing the connection", c.peer,
                   message_type_name(h.type));
      co_await send_error(
          c, h.request_id,
          Status::failed_precondition("the first request on a connection must be a Hello"));
      co_return false;
    }
    auto req = decode_message_as<HelloRequest>(h, f.descriptor);
    if (!req.ok()) {
      co_await malformed(c, req.status(), h.request_id);
      co_return false;
    }
    auto version = negotiate_version(req->min_version, req->max_version);
    if (!version.ok()) {
      m->refused.at("version")->add();
      spdlog::warn("store server: {} (client '{}'): {}; closing the connection", c.peer,
                   printable(req->client_name), version.status().message());
      co_await send_error(c, h.request_id, version.status());
      co_return false;
    }
    // The token is never logged, whatever happens.
    if (tenants->multi_tenant()) {
      // A verified client certificate names its tenant; a token, if also
      // given, must name the same one.
      const TenantConfig* by_cert = tenants->by_certificate(c.cert_name);
      const TenantConfig* t =
          req->auth_token.empty() ? nullptr : tenants->authenticate(req->auth_token);
      if (by_cert && t && t != by_cert)
        t = nullptr;
      else if (by_cert)
        t = by_cert;
      if (!t) {
        m->refused.at("auth")->add();
        spdlog::warn("store server: {} (client '{}'): no tenant has that token; closing", c.peer,
                     printable(req->client_name));
        co_await send_error(c, h.request_id,
                            Status::rejected("authentication failed: wrong or missing auth token"));
        co_return false;
      }
      if (Status st = tenants->acquire_connection(*t); !st.ok()) {
        m->refused.at("tenant_quota")->add();
        co_await send_error(c, h.request_id, st);
        co_return false;
      }
      c.tenant = t;
    } else if (!cfg.auth_token.empty() && !token_equal(req->auth_token, cfg.auth_token)) {
      m->refused.at("auth")->add();
      spdlog::warn("store server: {} (client '{}'): authentication failed; closing the connection",
                   c.peer, printable(req->client_name));
      co_await send_error(c, h.request_id,
                          Status::rejected("authentication failed: wrong or missing auth token"));
      co_return false;
    }
    {
      // Evicted while its Hello was on the way: it is being closed.
      std::lock_guard lk(mu);
      if (c.evicted) co_return false;
      if (c.pending_hello) {
        c.pending_hello = false;
        --pending_hello;
      }
    }
    c.hello_done = true;
    c.hello_timer.cancel();
    HelloResponse resp;
    resp.version = *version;
    resp.server_name = cfg.server_name;
    resp.limits = limits;
    // The Hello response is a version-1 frame (c.version is still 1) whatever
    // was chosen; every later frame carries the chosen version.
    bool ok = co_await send(c, resp, h.request_id);
    c.version = *version;
    c.reader.reset(frame_limits, *version);
    spdlog::debug("store server: {} (client '{}') connected, protocol {}", c.peer,
                  printable(req->client_name), *version);
    co_return ok;
  }

  // Answers one decoded request; false closes the connection.
  asio::awaitable<bool> handle(ServerConnection& c, const Frame& f) {
    const FrameHeader& h = f.header;
    const uint64_t rid = h.request_id;
    if (!c.hello_done) co_return co_await handle_hello(c, f);
    auto msg = decode_message(h, f.descriptor);
    if (!msg.ok()) {
      co_await malformed(c, msg.status(), rid);
      co_return false;
    }
    kv::Store& s = *store;
    const AlignedBuffer& in = c.set().buf;
    ByteView data = in.empty() ? ByteView{} : ByteView(in.data(), h.data_len);
    switch (h.type) {
      case MessageType::kRegisterNamespaceRequest: {
        auto& req = std::get<RegisterNamespaceRequest>(*msg);
        if (c.namespaces.size() >= kMaxNamespacesPerConnection) {
          co_return co_await send_error(
              c, rid,
              Status::out_of_space(fmt::format("at most {} namespaces per connection",
                                               kMaxNamespacesPerConnection)));
        }
        const kv::Namespace ns = c.tenant ? tenant_namespace(c.tenant->name, req.ns) : req.ns;
        if (c.tenant) refresh_holdings(*c.tenant);
        // On a store thread: with the table full, registering may wait for
        // puts in flight (bounded, kv/namespace_table.h).
        const uint16_t arena = arena_of(c.tenant);
        auto r = co_await run_in_pool(*pool,
                                      [&s, &ns, arena] { return s.register_namespace(ns, arena); });
        if (!r.ok()) co_return co_await send_error(c, rid, r.status());
        // The connection holds one registration of each namespace it
        // registered (released when it ends): a second one is given back.
        if (check_ns(c, *r).ok()) {
          s.release_namespace(*r);
        } else {
          if (c.tenant) {
            if (Status st = tenants->acquire_namespace(*c.tenant, *r, ns.digest()); !st.ok()) {
              s.release_namespace(*r);
              co_return co_await send_error(c, rid, st);
            }
          }
          std::lock_guard lk(c.shm_mu);
          c.namespaces.push_back(*r);
          c.ns_digests.push_back(ns.digest());
        }
        co_return co_await send(c, RegisterNamespaceResponse{*r}, rid);
      }
      case MessageType::kPutRequest: {
        auto& req = std::get<PutRequest>(*msg);
        if (Status st = check_ns(c, req.ns); !st.ok()) co_return co_await send_error(c, rid, st);
        req.key = store_key(c, req.ns, req.key);
        if (quota_admits(c, std::array<size_t, 1>{data.size()}) == 0) {
          co_return co_await send(c, PutResponse{quota_refusal()}, rid);
        }
        auto r =
            co_await run_in_pool(*pool, [&s, &req, data] { return s.put(req.ns, req.key, data); });
        if (!r.ok()) co_return co_await send_error(c, rid, r.status());
        co_return co_await send(c, PutResponse{PutOutcome::from(*r)}, rid);
      }
      case MessageType::kGetRequest: {
        auto& req = std::get<GetRequest>(*msg);
        if (Status st = check_ns(c, req.ns); !st.ok()) co_return co_await send_error(c, rid, st);
        req.key = store_key(c, req.ns, req.key);
        // A RAM hit is sent from its slot, leased until the write is done,
        // with the CRC the store keeps: no copy and no checksum pass here,
        // and no hop to a store thread (a lease is an index lookup).
        if (auto lease = s.lease_ram(req.ns, req.key); lease.ok() && *lease) {
          const kv::RamLease& l = **lease;
          if (l.length <= req.buffer_bytes) {
            GetResponse resp{GetOutcome{true, kv::Tier::kRam, kv::MissReason::kNone, l.length}};
            ByteView part(l.data, l.length);
            co_return co_await send(c, resp, rid, std::span<const ByteView>(&part, 1), l.crc,
                                    l.slot);
          }
          s.release_ram_lease(l.slot);  // too small a buffer: get() says so below
        }
        // No object is larger than max_object_bytes, so a larger client
        // buffer needs no more room here.
        MutableByteView out =
            c.data_buffer(std::min<uint32_t>(req.buffer_bytes, limits.max_object_bytes));
        // The store thread also checksums the block for the frame while it
        // is in cache, so the I/O thread only writes it.
        struct Copied {
          Result<kv::GetResult> r;
          uint32_t crc;
        };
        auto got = co_await run_in_pool(*pool, [&s, &req, out] {
          Copied c{s.get(req.ns, req.key, out), 0};
          if (c.r.ok() && c.r->hit) c.crc = crc32c(out.data(), c.r->length);
          return c;
        });
        if (!got.r.ok()) co_return co_await send_error(c, rid, got.r.status());
        GetResponse resp{GetOutcome::from(*got.r)};
        ByteView part(out.data(), resp.result.length);
        co_return co_await send(c, resp, rid, std::span<const ByteView>(&part, 1), got.crc);
      }
      case MessageType::kBatchPutRequest: {
        auto& req = std::get<BatchPutRequest>(*msg);
        if (Status st = check_ns(c, req.ns); !st.ok()) co_return co_await send_error(c, rid, st);
        if (req.items.size() > limits.max_batch) {
          co_return co_await send_error(
              c, rid,
              Status::invalid_argument(fmt::format("batch of {} items exceeds the server's {}",
                                                   req.items.size(), limits.max_batch)));
        }
        std::vector<kv::Key128> keys;
        std::vector<ByteView> parts;
        keys.reserve(req.items.size());
        parts.reserve(req.items.size());
        size_t off = 0;
        std::vector<size_t> sizes;
        for (const KeyLength& kl : req.items) {
          keys.push_back(store_key(c, req.ns, kl.key));
          parts.push_back(data.subspan(off, kl.length));
          sizes.push_back(kl.length);
          off += kl.length;
        }
        // Items past the tenant's byte quota are refused; the rest are put.
        const size_t admitted = quota_admits(c, sizes);
        keys.resize(admitted);
        parts.resize(admitted);
        auto r = co_await run_in_pool(
            *pool, [&s, &req, &keys, &parts] { return s.batch_put(req.ns, keys, parts); });
        if (!r.ok()) co_return co_await send_error(c, rid, r.status());
        BatchPutResponse resp;
        resp.results.reserve(req.items.size());
        for (const kv::PutResult& pr : *r) resp.results.push_back(PutOutcome::from(pr));
        resp.results.resize(req.items.size(), quota_refusal());
        co_return co_await send(c, resp, rid);
      }
      case MessageType::kBatchGetRequest: {
        auto& req = std::get<BatchGetRequest>(*msg);
        if (Status st = check_ns(c, req.ns); !st.ok()) co_return co_await send_error(c, rid, st);
        if (req.items.size() > limits.max_batch) {
          co_return co_await send_error(
              c, rid,
              Status::invalid_argument(fmt::format("batch of {} items exceeds the server's {}",
                                                   req.items.size(), limits.max_batch)));
        }
        uint64_t need = 0;
        for (const KeyLength& kl : req.items) {
          need += std::min<uint32_t>(kl.length, limits.max_object_bytes);
        }
        if (need > limits.max_data_bytes) {
          co_return co_await send_error(
              c, rid,
              Status::invalid_argument(fmt::format(
                  "batch buffers of {} bytes exceed the server's max_data_bytes {}; split it", need,
                  limits.max_data_bytes)));
        }
        MutableByteView area = c.data_buffer(need);
        std::vector<kv::BatchGetItem> items;
        items.reserve(req.items.size());
        size_t off = 0;
        for (const KeyLength& kl : req.items) {
          size_t len = std::min<uint32_t>(kl.length, limits.max_object_bytes);
          items.push_back({store_key(c, req.ns, kl.key), area.subspan(off, len)});
          off += len;
        }
        auto r =
            co_await run_in_pool(*pool, [&s, &req, &items] { return s.batch_get(req.ns, items); });
        if (!r.ok()) co_return co_await send_error(c, rid, r.status());
        BatchGetResponse resp;
        std::vector<ByteView> parts;
        resp.results.reserve(r->size());
        for (size_t i = 0; i < r->size(); ++i) {
          resp.results.push_back(GetOutcome::from((*r)[i]));
          if (resp.results.back().hit) {
            parts.push_back(ByteView(items[i].out.data(), resp.results.back().length));
          }
        }
        co_return co_await send(c, resp, rid, parts);
      }
      case MessageType::kMatchPrefixRequest: {
        auto& req = std::get<MatchPrefixRequest>(*msg);
        if (Status st = check_ns(c, req.ns); !st.ok()) co_return co_await send_error(c, rid, st);
        if (req.keys.size() > limits.max_match_keys) {
          co_return co_await send_error(
              c, rid,
              Status::invalid_argument(fmt::format("{} keys exceed the server's max_match_keys {}",
                                                   req.keys.size(), limits.max_match_keys)));
        }
        store_keys(c, req.ns, req.keys);
        // match_prefix never touches the disk: run it here.
        auto r = s.match_prefix(req.ns, req.keys);
        if (!r.ok()) co_return co_await send_error(c, rid, r.status());
        co_return co_await send(c, MatchPrefixResponse::from(*r), rid);
      }
      case MessageType::kRemoveRequest: {
        auto& req = std::get<RemoveRequest>(*msg);
        if (Status st = check_ns(c, req.ns); !st.ok()) co_return co_await send_error(c, rid, st);
        req.key = store_key(c, req.ns, req.key);
        auto r = co_await run_in_pool(*pool, [&s, &req] { return s.remove(req.ns, req.key); });
        if (!r.ok()) co_return co_await send_error(c, rid, r.status());
        co_return co_await send(c, RemoveResponse{*r}, rid);
      }
      case MessageType::kPinRequest:
      case MessageType::kUnpinRequest: {
        bool pin = h.type == MessageType::kPinRequest;
        uint16_t ns = pin ? std::get<PinRequest>(*msg).ns : std::get<UnpinRequest>(*msg).ns;
        std::vector<kv::Key128>& keys =
            pin ? std::get<PinRequest>(*msg).keys : std::get<UnpinRequest>(*msg).keys;
        if (Status st = check_ns(c, ns); !st.ok()) co_return co_await send_error(c, rid, st);
        if (keys.size() > limits.max_match_keys) {
          co_return co_await send_error(
              c, rid,
              Status::invalid_argument(fmt::format("{} keys exceed the server's max_match_keys {}",
                                                   keys.size(), limits.max_match_keys)));
        }
        store_keys(c, ns, keys);
        if (Status st = track_pins(c, ns, keys, pin); !st.ok()) {
          co_return co_await send_error(c, rid, st);
        }
        Result<size_t> r =
            pin ? s.pin(ns, keys, std::get<PinRequest>(*msg).ttl_ms) : s.unpin(ns, keys);
        if (!r.ok()) co_return co_await send_error(c, rid, r.status());
        auto n = static_cast<uint32_t>(*r);
        if (pin) co_return co_await send(c, PinResponse{n}, rid);
        co_return co_await send(c, UnpinResponse{n}, rid);
      }
      case MessageType::kStatsRequest: {
        auto& req = std::get<StatsRequest>(*msg);
        StatsResponse resp;
        std::string json;
        build_stats(req.format, &resp, &json);
        ByteView part(reinterpret_cast<const std::byte*>(json.data()), json.size());
        co_return co_await send(c, resp, rid, std::span<const ByteView>(&part, 1));
      }
      case MessageType::kShmOfferRequest: {
        if (!shm_listener) {
          co_return co_await send_error(
              c, rid, Status::unavailable("the shared-memory path is disabled on this server"));
        }
        auto nonce = random_nonce();
        if (!nonce.ok()) co_return co_await send_error(c, rid, nonce.status());
        {
          std::lock_guard lk(mu);
          if (c.shm_nonce) shm_waiting.erase(*c.shm_nonce);
          c.shm_nonce = *nonce;
          if (auto it = conns.find(c.id); it != conns.end()) shm_waiting[*nonce] = it->second;
        }
        ShmOfferResponse resp;
        resp.socket_name = shm_listener->name();
        resp.host_id = host_id;
        resp.nonce = *nonce;
        resp.max_area_bytes = cfg.shm_max_area_bytes;
        co_return co_await send(c, resp, rid);
      }
      case MessageType::kShmPutRequest: {
        auto& req = std::get<ShmPutRequest>(*msg);
        if (Status st = check_ns(c, req.ns); !st.ok()) co_return co_await send_error(c, rid, st);
        req.key = store_key(c, req.ns, req.key);
        auto area = c.shm_area();
        if (!area) {
          co_return co_await send_error(
              c, rid, Status::failed_precondition("no shared-memory area attached"));
        }
        auto range = area->range(req.offset, req.length);
        if (!range) {
          co_return co_await send_error(
              c, rid, Status::invalid_argument("ShmPut range outside the shared-memory area"));
        }
        ByteView in = *range;
        if (quota_admits(c, std::array<size_t, 1>{in.size()}) == 0) {
          co_return co_await send(c, ShmPutResponse{quota_refusal()}, rid);
        }
        // `area` stays alive (mapped) until the store has copied the bytes.
        auto r = co_await run_in_pool(*pool, [&s, &req, in] { return s.put(req.ns, req.key, in); });
        if (!r.ok()) co_return co_await send_error(c, rid, r.status());
        m->shm_bytes.add(req.length);
        co_return co_await send(c, ShmPutResponse{PutOutcome::from(*r)}, rid);
      }
      case MessageType::kShmGetRequest: {
        auto& req = std::get<ShmGetRequest>(*msg);
        if (Status st = check_ns(c, req.ns); !st.ok()) co_return co_await send_error(c, rid, st);
        req.key = store_key(c, req.ns, req.key);
        auto area = c.shm_area();
        if (!area) {
          co_return co_await send_error(
              c, rid, Status::failed_precondition("no shared-memory area attached"));
        }
        auto range =
            area->range(req.offset, std::min<uint32_t>(req.buffer_bytes, limits.max_object_bytes));
        if (!range || range->empty()) {
          co_return co_await send_error(
              c, rid, Status::invalid_argument("ShmGet range outside the shared-memory area"));
        }
        MutableByteView out = *range;
        auto r = co_await run_in_pool(
            *pool, [&s, &req, out] { return s.get_into_shared(req.ns, req.key, out); });
        if (!r.ok()) co_return co_await send_error(c, rid, r.status());
        if (r->hit) m->shm_bytes.add(r->length);
        co_return co_await send(c, ShmGetResponse{GetOutcome::from(*r)}, rid);
      }
      case MessageType::kHelloRequest:
        co_return co_await send_error(
            c, rid, Status::failed_precondition("Hello was already done on this connection"));
      default:
        co_return co_await send_error(c, rid,
                                      Status::invalid_argument(fmt::format(
                                          "{} is not a request", message_type_name(h.type))));
    }
  }

  void build_stats(StatsFormat format, StatsResponse* resp, std::string* json_out) {
    kv::StoreStats s = refresh_mirrors();
    std::vector<StatCounter> counters = store_stats_to_counters(s);
    // Server metrics (counters and gauges) from the shared registry.
    nlohmann::json reg = nlohmann::json::parse(store->metrics().render_json(), nullptr, false);
    if (reg.is_object()) {
      for (auto it = reg.begin(); it != reg.end(); ++it) {
        if (it.key().rfind("kvtier_server_", 0) != 0) continue;
        if (it.value().is_number_unsigned()) {
          counters.push_back({it.key(), it.value().get<uint64_t>()});
        } else if (it.value().is_number_integer()) {
          counters.push_back(
              {it.key(), static_cast<uint64_t>(std::max<int64_t>(0, it.value().get<int64_t>()))});
        } else if (it.value().is_object() && it.value().contains("count")) {
          std::string key = it.key();
          size_t brace = key.find('{');
          std::string name = brace == std::string::npos
                                 ? key + "_count"
                                 : key.substr(0, brace) + "_count" + key.substr(brace);
          counters.push_back({name, it.value()["count"].get<uint64_t>()});
        }
      }
    }
    if (format == StatsFormat::kCounters) {
      for (StatCounter& sc : counters) {
        if (resp->counters.size() == kMaxStatsCounters) break;
        if (sc.name.size() <= kMaxNameBytes) resp->counters.push_back(std::move(sc));
      }
      return;
    }
    nlohmann::json j;
    j["server"] = {{"name", cfg.server_name},
                   {"address", bound_address},
                   {"port", bound_port},
                   {"active_connections", active_count()}};
    nlohmann::json cj = nlohmann::json::object();
    for (const StatCounter& sc : counters) cj[sc.name] = sc.value;
    j["counters"] = std::move(cj);
    if (reg.is_object()) j["metrics"] = std::move(reg);
    *json_out = j.dump();
    if (json_out->size() > limits.max_data_bytes) *json_out = "{}";
    resp->json_bytes = static_cast<uint32_t>(json_out->size());
  }

  size_t active_count() const {
    std::lock_guard lk(mu);
    return active;
  }

  // ---- connections -----------------------------------------------------------------

  // TLS servers: the handshake, before any frame (within the Hello
  // deadline the caller armed). False: the connection is done.
  asio::awaitable<bool> tls_handshake(ServerConnection& c) {
    if (!c.sock.is_tls()) co_return true;
    std::error_code ec;
    co_await c.sock.async_handshake(asio::ssl::stream_base::server,
                                    asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      m->refused.at("tls")->add();
      spdlog::warn("store server: {}: TLS handshake failed: {}", c.peer, ec.message());
      co_return false;
    }
    c.cert_name = c.sock.peer_common_name();
    co_return true;
  }

  asio::awaitable<void> serve(std::shared_ptr<ServerConnection> c) {
    struct Done {
      Impl* impl;
      std::shared_ptr<ServerConnection> c;
      ~Done() { impl->finish(*c, false); }
    } done{this, c};
    std::weak_ptr<ServerConnection> weak = c;
    c->hello_timer.expires_after(std::chrono::milliseconds(cfg.hello_timeout_ms));
    c->hello_timer.async_wait([this, weak](std::error_code ec) {
      auto conn = weak.lock();
      if (ec || !conn || conn->hello_done) return;
      m->refused.at("hello_timeout")->add();
      spdlog::warn("store server: {} sent no Hello within {} ms; closing the connection",
                   conn->peer, cfg.hello_timeout_ms);
      conn->close();
    });
    if (!co_await tls_handshake(*c)) {
      c->close();
      co_return;
    }

    for (;;) {
      c->next_set();
      {
        // A big buffer is kept while big requests keep coming (no allocation
        // and page faults per batch), and given back when they stop.
        ServerConnection::BufferSet& set = c->set();
        if (set.buf.size() > std::max<size_t>(4ull * limits.max_object_bytes, 1u << 20) &&
            set.used < set.buf.size() / 4) {
          set.buf = AlignedBuffer();
        }
        set.used = 0;
      }
      std::error_code ec;
      if (c->hello_done) {
        // A client may think between requests, not forever: one request
        // (head and data) must arrive within the idle timeout.
        c->idle_timer.expires_after(std::chrono::milliseconds(cfg.idle_timeout_ms));
        c->idle_timer.async_wait([this, weak](std::error_code e) {
          auto conn = weak.lock();
          if (e || !conn) return;
          m->refused.at("idle_timeout")->add();
          spdlog::info("store server: {} idle for {} ms; closing", conn->peer, cfg.idle_timeout_ms);
          conn->close();
        });
      }
      Status st = co_await c->reader.read_head(c->sock, ec);
      if (st.ok() && c->reader.decoder().state() == FrameDecoder::State::kData) {
        // The descriptor is decoded and checked before any buffer is sized
        // for the data that follows it.
        st = check_before_data(*c);
        // Every data section goes into the connection's buffer (bounded by
        // the frame limits, checked with the header): the store copies it
        // into its RAM slot from there.
        if (st.ok()) {
          MutableByteView dst = c->data_buffer(c->reader.decoder().header().data_len);
          st = c->reader.set_data_destination(std::span<const MutableByteView>(&dst, 1));
        }
        if (st.ok()) st = co_await c->reader.read_data(c->sock, ec);
      }
      c->idle_timer.cancel();
      count_bytes_in(*c);
      if (ec) {
        spdlog::debug("store server: {} closed: {}", c->peer, ec.message());
        break;
      }
      if (!st.ok()) {
        co_await malformed(*c, st, c->reader.decoder().header().request_id);
        break;
      }
      Frame f = c->reader.decoder().take_frame();
      m->frames_in.add();
      const uint64_t t0 = now_ns();
      bool keep = co_await handle(*c, f);
      size_t op = op_index(f.header.type);
      m->requests[op]->add();
      m->latency[op]->record(now_ns() - t0);
      if (!keep) break;
    }
    // The last response (an Error frame before a close, say) goes out first.
    co_await wait_write(*c);
    c->close();
  }

  // A request with data (a put) is decoded, and its namespace and sizes
  // checked, before the connection sizes a buffer for its data.
  Status check_before_data(ServerConnection& c) const {
    const FrameDecoder& d = c.reader.decoder();
    auto msg = decode_message(d.header(), d.descriptor());
    if (!msg.ok()) return msg.status();
    if (const auto* p = std::get_if<PutRequest>(&*msg)) {
      if (p->length > limits.max_object_bytes) {
        return Status::invalid_argument(fmt::format("put of {} bytes exceeds max_object_bytes {}",
                                                    p->length, limits.max_object_bytes));
      }
      return check_ns(c, p->ns);
    }
    if (const auto* b = std::get_if<BatchPutRequest>(&*msg)) {
      if (b->items.size() > limits.max_batch) {
        return Status::invalid_argument(fmt::format("batch of {} items exceeds the server's {}",
                                                    b->items.size(), limits.max_batch));
      }
      return check_ns(c, b->ns);
    }
    return Status::ok_status();
  }

  void count_bytes_in(ServerConnection& c) {
    uint64_t total = c.reader.bytes_read();
    m->bytes_in.add(total - c.bytes_in_counted);
    c.bytes_in_counted = total;
  }

  // A connection over the limit: one Error frame, then close once the
  // client has read it (or after a short grace period).
  asio::awaitable<void> refuse(std::shared_ptr<ServerConnection> c, Status why) {
    struct Done {
      Impl* impl;
      std::shared_ptr<ServerConnection> c;
      ~Done() { impl->finish(*c, true); }
    } done{this, c};
    // Plain TCP only: over TLS, listen() closes such a connection unanswered.
    co_await send_error(*c, 0, why);
    co_await wait_write(*c);
    std::error_code ec;
    c->sock.socket().shutdown(tcp::socket::shutdown_send, ec);
    c->hello_timer.expires_after(std::chrono::milliseconds(500));
    c->hello_timer.async_wait([c](std::error_code e) {
      if (!e) c->close();
    });
    std::array<std::byte, 512> sink;
    for (;;) {
      co_await c->sock.async_read_some(asio::buffer(sink),
                                       asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
    }
    c->close();
  }

  void finish(ServerConnection& c, bool refused) {
    {
      std::lock_guard lk(c.shm_mu);
      if (c.channel) c.channel->close();
    }
    // Pins end with their connection.
    std::unordered_map<uint16_t, std::vector<kv::Key128>> by_ns;
    for (const auto& p : c.pinned) by_ns[p.ns].push_back(p.key);
    for (auto& [ns, keys] : by_ns) (void)store->unpin(ns, keys);
    if (c.tenant) {
      tenants->release_pins(*c.tenant, c.pinned.size());
      for (uint16_t h : c.namespaces) tenants->release_namespace(*c.tenant, h);
      tenants->release_connection(*c.tenant);
    }
    // The connection's registrations: a namespace no one holds any more is
    // closed, and its handle reused once its blocks are gone.
    for (uint16_t h : c.namespaces) store->release_namespace(h);
    c.pinned.clear();
    std::lock_guard lk(mu);
    conns.erase(c.id);
    if (c.shm_nonce) shm_waiting.erase(*c.shm_nonce);
    if (!refused) {
      --active;
      m->active.set(static_cast<int64_t>(active));
    }
    if (c.pending_hello) {
      c.pending_hello = false;
      --pending_hello;
    }
    cv.notify_all();
  }

  // The attach thread: accepts on the abstract Unix socket, maps each area
  // received and hands it to the connection its nonce names. Clients that
  // connected but have not sent their message yet wait in `pending` (at most
  // kMaxPendingAttaches, each for at most kAttachTimeoutMs), polled
  // together: one that never sends holds up nobody else.
  static constexpr size_t kMaxPendingAttaches = 128;
  static constexpr uint32_t kAttachTimeoutMs = 1000;
  void shm_attach_loop() {
    struct Pending {
      int fd;
      uint64_t deadline_ns;
    };
    std::vector<Pending> pending;
    auto refuse_pending = [&](const Pending& p, const char* why) {
      shm_attach_answer(p.fd, false);
      m->shm_refused.add();
      spdlog::debug("store server: shared-memory attach refused: {}", why);
    };
    for (;;) {
      std::vector<pollfd> fds = {{shm_listener->fd(), POLLIN, 0}, {shm_stop_pipe[0], POLLIN, 0}};
      uint64_t next = UINT64_MAX;
      for (const Pending& p : pending) {
        fds.push_back({p.fd, POLLIN, 0});
        next = std::min(next, p.deadline_ns);
      }
      const uint64_t now = now_ns();
      const int wait_ms =
          next == UINT64_MAX ? -1 : static_cast<int>(next > now ? (next - now) / 1000000 + 1 : 0);
      if (::poll(fds.data(), fds.size(), wait_ms) < 0) {
        if (errno == EINTR) continue;
        for (const Pending& p : pending) ::close(p.fd);
        return;
      }
      if (fds[1].revents != 0) {
        for (const Pending& p : pending) ::close(p.fd);
        return;
      }
      // Readable (or closed) connections first, then the overdue ones.
      std::vector<Pending> still;
      const uint64_t t = now_ns();
      for (size_t i = 0; i < pending.size(); ++i) {
        if (fds[i + 2].revents != 0) {
          attach(ShmListener::receive(pending[i].fd));
        } else if (t >= pending[i].deadline_ns) {
          refuse_pending(pending[i], "no attach message in time");
        } else {
          still.push_back(pending[i]);
        }
      }
      pending = std::move(still);
      if (fds[0].revents & POLLIN) {
        for (;;) {
          const int c = shm_listener->accept_pending(kAttachTimeoutMs);
          if (c < 0) break;
          if (pending.size() >= kMaxPendingAttaches) {
            refuse_pending(pending.front(), "too many attaches waiting");
            pending.erase(pending.begin());
          }
          pending.push_back({c, now_ns() + uint64_t{kAttachTimeoutMs} * 1000000});
        }
      }
    }
  }

  // One attach message, received: maps the client's area for the connection
  // whose nonce it carries.
  void attach(Result<ShmListener::Received> got) {
    if (!got.ok()) {
      m->shm_refused.add();
      spdlog::warn("store server: shared-memory attach refused: {}", got.status().message());
      return;
    }
    std::shared_ptr<ServerConnection> conn;
    {
      std::lock_guard lk(mu);
      auto it = shm_waiting.find(got->msg.nonce);
      if (it != shm_waiting.end()) {
        conn = it->second.lock();
        shm_waiting.erase(it);  // a nonce is good for one attach
      }
    }
    if (!conn) {
      ::close(got->fd);
      shm_attach_answer(got->conn, false);
      m->shm_refused.add();
      spdlog::warn("store server: shared-memory attach with an unknown nonce refused");
      return;
    }
    auto area = ShmArea::map_received(got->fd, got->msg.area_bytes, cfg.shm_max_area_bytes);
    if (!area.ok()) {
      shm_attach_answer(got->conn, false);
      m->shm_refused.add();
      spdlog::warn("store server: {}: shared-memory area refused: {}", conn->peer,
                   area.status().message());
      return;
    }
    std::shared_ptr<ShmArea> mapped = std::move(*area);
    {
      std::lock_guard lk(conn->shm_mu);
      conn->shm = mapped;
    }
    m->shm_attached.add();
    if (got->msg.version == 1) {
      shm_attach_answer(got->conn, true);
      return;
    }
    open_direct_channel(conn, got->conn, got->msg, std::move(mapped));
  }

  // Answers a version-2 attach, opening the direct channel on `sock` when the
  // client asked for it and there is room.
  void open_direct_channel(const std::shared_ptr<ServerConnection>& conn, int sock,
                           const ShmAttachMessage& msg, std::shared_ptr<ShmArea> area) {
    std::vector<std::shared_ptr<ShmChannelServer>> done;
    bool room = false;
    {
      std::lock_guard lk(mu);
      auto finished = std::partition(channels.begin(), channels.end(),
                                     [](const auto& ch) { return !ch->finished(); });
      done.assign(std::make_move_iterator(finished), std::make_move_iterator(channels.end()));
      channels.erase(finished, channels.end());
      room = channels.size() < cfg.shm_max_channels;
    }
    done.clear();  // joins them, outside mu
    const bool keep = (msg.flags & kShmAttachWantChannel) != 0 && cfg.shm_direct_channel && room;
    // An arena shows every block in it: a single-tenant server shares its
    // one arena; a multi-tenant server gives a tenant that opted in its own
    // arena, which holds only that tenant's blocks, and other tenants none.
    const uint16_t arena_id = arena_of(conn->tenant);
    const bool arena_allowed = cfg.shm_share_ram_arena && (!conn->tenant || arena_id != 0);
    const int arena = keep && arena_allowed ? store->ram_arena_fd(arena_id) : -1;
    if (!shm_attach_grant(sock, keep, arena, arena >= 0 ? store->ram_arena_bytes(arena_id) : 0) ||
        !keep) {
      return;
    }
    ShmChannelContext ctx;
    ctx.store = store.get();
    ctx.area = std::move(area);
    ctx.lease_from_arena = arena >= 0;
    ctx.arena = arena_id;
    ctx.max_object_bytes = limits.max_object_bytes;
    ctx.max_match_keys = limits.max_match_keys;
    ctx.max_descriptor_bytes = limits.max_descriptor_bytes;
    // Channels together may lease at most half of the RAM tier's slots.
    ctx.server_leases = channel_leases;
    ctx.max_server_leases = std::max<uint64_t>(1, store->local_stats().ram_slots / 2);
    ctx.peer = conn->peer;
    // Weak: the connection holds its channel, not the other way round.
    ctx.check_ns = [this, weak = std::weak_ptr<ServerConnection>(conn)](uint16_t ns) {
      auto c = weak.lock();
      if (!c) return Status::failed_precondition("the channel's connection has ended");
      std::lock_guard lk(c->shm_mu);
      return check_ns(*c, ns);
    };
    ctx.map_keys = [weak = std::weak_ptr<ServerConnection>(conn)](uint16_t ns,
                                                                  std::span<kv::Key128> keys) {
      auto c = weak.lock();
      if (!c) return;
      std::lock_guard lk(c->shm_mu);
      store_keys(*c, ns, keys);
    };
    ctx.count_request = [this](MessageType t, uint64_t ns) {
      const size_t i = op_index(t);
      m->requests[i]->add();
      m->latency[i]->record(ns);
    };
    ctx.count_bytes = [this](uint64_t n) { m->shm_bytes.add(n); };
    auto ch = ShmChannelServer::start(sock, std::move(ctx));
    {
      std::lock_guard lk(conn->shm_mu);
      conn->channel = ch;
    }
    std::lock_guard lk(mu);
    channels.push_back(ch);
    // The connection may have ended meanwhile; finish() then found no channel.
    if (conns.find(conn->id) == conns.end()) ch->close();
  }

  // With mu held: closes the oldest connection still waiting to say Hello
  // (ids grow with time), making room for a new one.
  bool evict_oldest_pending_locked() {
    std::shared_ptr<ServerConnection> oldest;
    for (auto& [id, conn] : conns) {
      if (conn->pending_hello && (!oldest || id < oldest->id)) oldest = conn;
    }
    if (!oldest) return false;
    oldest->pending_hello = false;
    oldest->evicted = true;
    --pending_hello;
    m->refused.at("hello_evicted")->add();
    asio::post(oldest->sock.get_executor(), [oldest] { oldest->close(); });
    return true;
  }

  asio::awaitable<void> listen() {
    for (;;) {
      tcp::socket sock(asio::make_strand(io));
      std::error_code ec;
      co_await acceptor.async_accept(sock, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (ec == asio::error::operation_aborted || !acceptor.is_open()) break;
        spdlog::warn("store server: accept failed: {}", ec.message());
        // Out of descriptors and the like: do not spin.
        asio::steady_timer t(acceptor.get_executor(), std::chrono::milliseconds(50));
        co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        continue;
      }
      sock.set_option(tcp::no_delay(true), ec);
      std::string peer = "?";
      auto ep = sock.remote_endpoint(ec);
      if (!ec) peer = fmt::format("{}:{}", ep.address().to_string(), ep.port());
      std::shared_ptr<ServerConnection> c;
      bool over = false;
      {
        std::lock_guard lk(mu);
        if (stopping) {
          sock.close(ec);
          m->refused.at("stopping")->add();
          continue;
        }
        c = std::make_shared<ServerConnection>(std::move(sock), next_id++);
        c->peer = peer;
        if (tls) c->sock.start_tls(*tls);
        // Past max_pending_hello, or with every slot taken, the oldest
        // connection still waiting for Hello makes room; its slot is on its
        // way out, so the new connection takes it.
        const bool full = active >= cfg.max_connections;
        const bool evicted =
            (full || pending_hello >= cfg.max_pending_hello) && evict_oldest_pending_locked();
        over = full && !evicted;
        if (over && tls) {
          // No TLS handshake for a connection that would only be refused.
          c->sock.close();
          m->connections.add();
          m->refused.at("max_connections")->add();
          continue;
        }
        if (!over) {
          ++active;
          m->active.set(static_cast<int64_t>(active));
          ++pending_hello;
          c->pending_hello = true;
        }
        conns[c->id] = c;
      }
      m->connections.add();
      if (over) {
        m->refused.at("max_connections")->add();
        spdlog::warn("store server: refusing {}: {} connections already (max_connections)", peer,
                     cfg.max_connections);
        asio::co_spawn(c->sock.get_executor(),
                       refuse(c, Status::unavailable(fmt::format(
                                     "server at its connection limit ({})", cfg.max_connections))),
                       asio::detached);
      } else {
        asio::co_spawn(c->sock.get_executor(), serve(c), asio::detached);
      }
    }
    std::lock_guard lk(mu);
    listening = false;
    cv.notify_all();
  }

  Status stop() {
    std::vector<std::shared_ptr<ServerConnection>> to_close;
    {
      std::lock_guard lk(mu);
      if (stopped) return stop_status;
      if (stopping) return Status::failed_precondition("stop already in progress");
      stopping = true;
      for (auto& [id, c] : conns) to_close.push_back(c);
    }
    http.reset();
    if (shm_thread.joinable()) {
      char b = 1;
      [[maybe_unused]] ssize_t n = ::write(shm_stop_pipe[1], &b, 1);
      shm_thread.join();
    }
    asio::post(acceptor.get_executor(), [this] {
      std::error_code ec;
      acceptor.close(ec);
    });
    for (auto& c : to_close) {
      asio::post(c->sock.get_executor(), [c] { c->close(); });
    }
    to_close.clear();
    {
      std::unique_lock lk(mu);
      // Store calls in progress finish first (bounded by the store's I/O timeout).
      cv.wait(lk, [&] { return conns.empty() && !listening; });
    }
    // Direct channels use the store: they end before it closes.
    std::vector<std::shared_ptr<ShmChannelServer>> chans;
    {
      std::lock_guard lk(mu);
      chans.swap(channels);
    }
    for (auto& ch : chans) ch->join();
    chans.clear();
    work.reset();
    io.stop();
    for (auto& t : threads) t.join();
    threads.clear();
    pool->join();
    Status st = store->close();
    if (!st.ok()) spdlog::error("store server: closing the store failed: {}", st.to_string());
    std::lock_guard lk(mu);
    stopped = true;
    stop_status = st;
    return st;
  }
};

StoreServer::StoreServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StoreServer::~StoreServer() {
  if (impl_) (void)stop();
}

Result<std::unique_ptr<StoreServer>> StoreServer::start(const ServerConfig& config,
                                                        std::unique_ptr<kv::Store> store) {
  KVTIER_RETURN_IF_ERROR(config.validate());
  auto impl = std::make_unique<Impl>();
  impl->cfg = config;
  if (!store) {
    auto opts = make_store_options(config.store);
    if (!opts.ok()) return opts.status();
    const bool sharing =
        config.shm_enabled && config.shm_direct_channel && config.shm_share_ram_arena;
    // Multi-tenant: arena 0 holds every tenant's blocks, so it is never
    // shared; each tenant that opts in gets an arena of its own instead.
    opts->share_ram_arena = sharing && config.tenants.empty();
    for (const TenantConfig& t : config.tenants) {
      if (sharing && t.share_ram_arena) opts->private_arena_bytes.push_back(t.max_ram_bytes);
    }
    auto s = kv::Store::open(*opts);
    if (!s.ok()) return Status(s.status().code(), "opening the store: " + s.status().message());
    store = std::move(*s);
  }
  impl->store = std::move(store);
  Impl& I = *impl;

  // Limits: announced in Hello and enforced on every frame.
  const uint32_t max_object = I.store->options().max_object_bytes;
  if (max_object > kMaxDataBytes) {
    return Status::invalid_argument(
        fmt::format("max_object_bytes {} exceeds the protocol's {}", max_object, kMaxDataBytes));
  }
  uint64_t max_data = config.max_data_bytes;
  if (max_data == 0) {
    max_data = std::max<uint64_t>(16ull * max_object, 4u << 20);
  }
  max_data = std::clamp<uint64_t>(max_data, max_object, kMaxDataBytes);
  uint64_t max_desc = std::max<uint64_t>(
      {64u << 10, 6 + 16ull * config.max_match_keys + 16, 6 + 20ull * config.max_batch + 16});
  max_desc = std::min<uint64_t>(max_desc, kMaxDescriptorBytes);
  I.limits.max_object_bytes = max_object;
  I.limits.max_batch = config.max_batch;
  I.limits.max_match_keys = config.max_match_keys;
  I.limits.max_descriptor_bytes = static_cast<uint32_t>(max_desc);
  I.limits.max_data_bytes = static_cast<uint32_t>(max_data);
  I.frame_limits = {I.limits.max_descriptor_bytes, I.limits.max_data_bytes};

  I.m = std::make_unique<ServerMetrics>(I.store->metrics());
  I.tenants = std::make_unique<TenantRegistry>(I.cfg.tenants, I.store->metrics());
  if (config.shm_enabled && config.shm_direct_channel && config.shm_share_ram_arena) {
    uint16_t next_arena = 1;
    for (const TenantConfig& t : I.cfg.tenants) {
      if (!t.share_ram_arena) continue;
      if (next_arena >= I.store->ram_arena_count()) {
        return Status::invalid_argument(fmt::format(
            "tenant '{}' sets share_ram_arena but the store has no private RAM arena for it "
            "(StoreOptions::private_arena_bytes)",
            t.name));
      }
      I.tenant_arena[t.name] = next_arena++;
    }
  }
  if (config.tls) {
    auto ctx = make_server_tls_context(*config.tls);
    if (!ctx.ok()) return ctx.status();
    I.tls = std::move(*ctx);
  }
  I.setup_mirrors();

  std::error_code ec;
  auto addr = asio::ip::make_address(config.listen_address, ec);
  if (ec)
    return Status::invalid_argument(fmt::format("bad listen address '{}'", config.listen_address));
  tcp::endpoint ep(addr, config.listen_port);
  I.acceptor.open(ep.protocol(), ec);
  if (!ec) I.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) I.acceptor.bind(ep, ec);
  if (!ec) I.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status::unavailable(fmt::format("cannot listen on {}:{}: {}", config.listen_address,
                                           config.listen_port, ec.message()));
  }
  I.bound_address = config.listen_address;
  I.bound_port = I.acceptor.local_endpoint().port();

  if (config.metrics_enabled) {
    HttpEndpointOptions ho;
    ho.address = config.metrics_address;
    ho.port = config.metrics_port;
    Impl* raw = &I;
    auto http = HttpEndpoint::start(ho, [raw](const std::string& path) -> HttpResponse {
      if (path == "/metrics") {
        return {200, "text/plain; version=0.0.4; charset=utf-8", raw->render_metrics()};
      }
      if (path == "/health") {
        bool stopping;
        {
          std::lock_guard lk(raw->mu);
          stopping = raw->stopping;
        }
        if (stopping) return {503, "text/plain", "stopping\n"};
        return {200, "text/plain", "ok\n"};
      }
      return {404, "text/plain", "not found (try /metrics or /health)\n"};
    });
    if (!http.ok())
      return Status(http.status().code(), "metrics endpoint: " + http.status().message());
    I.http = std::move(*http);
  }

  if (config.shm_enabled) {
    // The name is random so that several servers on one host never collide;
    // clients learn it from the ShmOffer response only.
    auto tag = random_nonce();
    if (!tag.ok()) return tag.status();
    auto l = ShmListener::listen(fmt::format("kvtier-store-{}-{}", getpid(), tag->to_hex()));
    if (!l.ok()) {
      spdlog::warn("store server: shared-memory path off: {}", l.status().message());
    } else if (::pipe2(I.shm_stop_pipe, O_CLOEXEC) != 0) {
      spdlog::warn("store server: shared-memory path off: pipe failed");
    } else {
      I.shm_listener = std::move(*l);
      I.host_id = host_boot_id();
      I.shm_thread = std::thread([&I] { I.shm_attach_loop(); });
    }
  }

  I.pool.emplace(config.store_threads);
  I.work.emplace(I.io.get_executor());
  I.listening = true;
  asio::co_spawn(I.acceptor.get_executor(), I.listen(), asio::detached);
  for (unsigned i = 0; i < config.io_threads; ++i) {
    I.threads.emplace_back([&I] { I.io.run(); });
  }
  spdlog::info("store server: listening on {}:{} ({} I/O threads, {} store threads, {})",
               I.bound_address, I.bound_port, config.io_threads, config.store_threads,
               !config.tls                          ? "plain TCP"
               : config.tls->client_ca_file.empty() ? "TLS"
                                                    : "mutual TLS");
  return std::unique_ptr<StoreServer>(new StoreServer(std::move(impl)));
}

Status StoreServer::stop() { return impl_->stop(); }
std::string StoreServer::address() const { return impl_->bound_address; }
uint16_t StoreServer::port() const { return impl_->bound_port; }
uint16_t StoreServer::metrics_port() const { return impl_->http ? impl_->http->port() : 0; }
const ServerLimits& StoreServer::limits() const { return impl_->limits; }
size_t StoreServer::active_connections() const { return impl_->active_count(); }
kv::Store& StoreServer::store() { return *impl_->store; }
std::string StoreServer::render_metrics() { return impl_->render_metrics(); }

}  // namespace kvtier::net
