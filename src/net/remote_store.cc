#include "net/remote_store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include "common/block_copy.h"
#include "net/shm_area.h"
#include "net/shm_channel_client.h"
#include "net/store_server.h"  // FrameStreamReader

namespace kvtier::net {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// ---- StoreStats on the wire ----------------------------------------------------------

const std::vector<StoreStatField>& store_stat_fields() {
  static const std::vector<StoreStatField> fields = [] {
    using K = StoreStatField::Kind;
    using S = kv::StoreStats;
    std::vector<StoreStatField> f;
    auto add = [&f](std::string name, std::string labels, std::string help, K kind,
                    std::function<uint64_t(const S&)> get, std::function<void(S&, uint64_t)> set) {
      f.push_back({std::move(name), std::move(labels), std::move(help), kind, std::move(get),
                   std::move(set)});
    };
#define KVTIER_FIELD(NAME, LABELS, HELP, KIND, MEMBER)                         \
  add(                                                                         \
      NAME, LABELS, HELP, KIND, [](const S& s) { return uint64_t(s.MEMBER); }, \
      [](S& s, uint64_t v) { s.MEMBER = static_cast<decltype(s.MEMBER)>(v); })
    KVTIER_FIELD("kvtier_store_puts_total", "", "", K::kStoreMetric, puts);
    KVTIER_FIELD("kvtier_store_dedup_total", "", "", K::kStoreMetric, dedups);
    KVTIER_FIELD("kvtier_store_put_bytes_total", "", "", K::kStoreMetric, put_bytes);
    KVTIER_FIELD("kvtier_store_hits_total", "tier=\"ram\"", "", K::kStoreMetric, hits_ram);
    KVTIER_FIELD("kvtier_store_hits_total", "tier=\"disk\"", "", K::kStoreMetric, hits_disk);
    KVTIER_FIELD("kvtier_store_get_bytes_total", "", "", K::kStoreMetric, get_bytes);
    for (size_t i = 1; i < static_cast<size_t>(kv::MissReason::kCount); ++i) {
      add(
          "kvtier_store_misses_total",
          fmt::format("reason=\"{}\"", kv::miss_reason_name(static_cast<kv::MissReason>(i))), "",
          K::kStoreMetric, [i](const S& s) { return s.misses[i]; },
          [i](S& s, uint64_t v) { s.misses[i] = v; });
    }
    for (size_t i = 1; i < static_cast<size_t>(kv::RefuseReason::kCount); ++i) {
      add(
          "kvtier_store_refusals_total",
          fmt::format("reason=\"{}\"", kv::refuse_reason_name(static_cast<kv::RefuseReason>(i))),
          "", K::kStoreMetric, [i](const S& s) { return s.refusals[i]; },
          [i](S& s, uint64_t v) { s.refusals[i] = v; });
    }
    KVTIER_FIELD("kvtier_store_ram_evictions_total", "", "", K::kStoreMetric, evictions);
    KVTIER_FIELD("kvtier_store_demotions_total", "", "", K::kStoreMetric, demotions);
    KVTIER_FIELD("kvtier_store_demotion_bytes_total", "", "", K::kStoreMetric, demotion_bytes);
    KVTIER_FIELD("kvtier_store_eviction_drops_total", "", "", K::kStoreMetric, eviction_drops);
    KVTIER_FIELD("kvtier_store_promotions_total", "", "", K::kStoreMetric, promotions);
    KVTIER_FIELD("kvtier_store_disk_direct_puts_total", "", "", K::kStoreMetric, disk_direct_puts);
    KVTIER_FIELD("kvtier_store_demotions_rejected_total", "", "", K::kStoreMetric,
                 demotions_rejected);
    KVTIER_FIELD("kvtier_store_ram_slots", "", "RAM tier slots", K::kGauge, ram_slots);
    KVTIER_FIELD("kvtier_store_ram_used_slots", "", "RAM tier slots holding a block", K::kGauge,
                 ram_used);
    KVTIER_FIELD("kvtier_store_ram_leased_slots", "", "RAM slots under a read lease right now",
                 K::kGauge, ram_leased);
    KVTIER_FIELD("kvtier_store_index_entries", "", "Blocks in the index", K::kGauge, index_entries);
    KVTIER_FIELD("kvtier_store_index_capacity", "", "Index capacity in blocks", K::kGauge,
                 index_capacity);
    KVTIER_FIELD("kvtier_store_index_bytes", "", "Memory used by the index", K::kGauge,
                 index_bytes);
    KVTIER_FIELD("kvtier_store_disk_enabled", "", "1 when the store has a disk tier", K::kGauge,
                 has_disk);
    KVTIER_FIELD("kvtier_disk_regions", "", "Disk tier regions", K::kGauge, disk.region_count);
    KVTIER_FIELD("kvtier_disk_regions_in_use", "", "Disk tier regions holding entries", K::kGauge,
                 disk.regions_in_use);
    KVTIER_FIELD("kvtier_disk_recovered_from_checkpoint", "",
                 "1 when the last open loaded a checkpoint (clean restart)", K::kGauge,
                 disk.recovered_from_checkpoint);
    KVTIER_FIELD("kvtier_disk_recovered_entries", "", "Entries found on the volume at open",
                 K::kGauge, disk.recovered_entries);
    KVTIER_FIELD("kvtier_disk_recovery_dropped", "",
                 "Entries dropped at open (checksum or header mismatch)", K::kGauge,
                 disk.recovery_dropped);
    KVTIER_FIELD("kvtier_disk_appends_total", "", "Entries appended to the disk tier", K::kCounter,
                 disk.appends);
    KVTIER_FIELD("kvtier_disk_appended_bytes_total", "", "Bytes appended to the disk tier",
                 K::kCounter, disk.bytes_appended);
    KVTIER_FIELD("kvtier_disk_region_writes_total", "", "Region writes issued", K::kCounter,
                 disk.region_writes);
    KVTIER_FIELD("kvtier_disk_written_bytes_total", "", "Bytes written to the volume", K::kCounter,
                 disk.bytes_written);
    KVTIER_FIELD("kvtier_disk_write_errors_total", "", "Failed volume writes", K::kCounter,
                 disk.write_errors);
    KVTIER_FIELD("kvtier_disk_reads_total", "", "Disk tier reads", K::kCounter, disk.reads);
    KVTIER_FIELD("kvtier_disk_read_bytes_total", "", "Bytes read from the volume", K::kCounter,
                 disk.bytes_read);
    KVTIER_FIELD("kvtier_disk_buffer_reads_total", "",
                 "Reads served from a region buffer not yet written", K::kCounter,
                 disk.buffer_reads);
    KVTIER_FIELD("kvtier_disk_read_corrupt_total", "", "Reads that failed verification",
                 K::kCounter, disk.read_corrupt);
    KVTIER_FIELD("kvtier_disk_read_io_errors_total", "", "Reads the device failed", K::kCounter,
                 disk.read_io_errors);
    KVTIER_FIELD("kvtier_disk_regions_reclaimed_total", "", "Regions reclaimed (FIFO eviction)",
                 K::kCounter, disk.regions_reclaimed);
    KVTIER_FIELD("kvtier_disk_entries_evicted_total", "", "Entries evicted with their region",
                 K::kCounter, disk.entries_evicted);
    KVTIER_FIELD("kvtier_disk_entries_reinserted_total", "", "Hot entries reinserted on reclaim",
                 K::kCounter, disk.entries_reinserted);
#undef KVTIER_FIELD
    return f;
  }();
  return fields;
}

std::vector<StatCounter> store_stats_to_counters(const kv::StoreStats& stats) {
  std::vector<StatCounter> out;
  for (const auto& f : store_stat_fields()) out.push_back({f.full_name(), f.get(stats)});
  return out;
}

kv::StoreStats store_stats_from_counters(std::span<const StatCounter> counters) {
  std::unordered_map<std::string, uint64_t> by_name;
  for (const auto& c : counters) by_name[c.name] = c.value;
  kv::StoreStats s;
  for (const auto& f : store_stat_fields()) {
    auto it = by_name.find(f.full_name());
    if (it != by_name.end()) f.set(s, it->second);
  }
  return s;
}

// ---- Connections ----------------------------------------------------------------------

namespace {

// One request in flight. The caller's thread owns it until it is queued;
// then the fields marked "guarded" belong to the connection's mutex.
struct Call {
  uint64_t id = 0;
  uint64_t gen = 0;                   // the session it was sent on
  std::vector<std::byte> prefix;      // header + descriptor
  std::vector<ByteView> data;         // the caller's bytes to send (put)
  std::vector<MutableByteView> outs;  // the caller's buffers (get: 1, batch_get: one per item)
  std::condition_variable cv;
  // guarded:
  bool done = false;           // response received, or failed
  Status failure;              // why it failed without a response
  bool writing = false;        // the writer may still read `data`
  bool write_started = false;  // the writer took it (it can no longer be withdrawn)
  bool cancelled = false;      // withdrawn before the writer took it
  bool reading = false;        // the reader may still write into `outs`
  FrameHeader header;
  std::vector<std::byte> descriptor;
  std::vector<std::byte> data_in;  // data section the decoder kept (stats JSON)
};

enum class CallError { kNone, kUnavailable, kTimeout, kBroken };

}  // namespace

struct RemoteStoreShared {
  RemoteStoreOptions opts;
  std::shared_ptr<asio::ssl::context> tls;  // null: plain TCP
  std::atomic<uint64_t> calls{0}, unavailable{0}, timeouts{0}, broken{0}, sessions{0},
      connect_failures{0}, shm_sessions{0}, shm_calls{0}, shm_retired{0}, shm_up{0},
      direct_channels{0}, direct_gets{0}, arena_reads{0}, direct_matches{0};
  mutable std::mutex mu;  // guards the fields below
  std::condition_variable up_cv;
  Status last_error = Status::unavailable("not connected yet");
  ServerLimits limits;
  unsigned up_count = 0;

  ServerLimits server_limits() const {
    std::lock_guard lk(mu);
    return limits;
  }
  void session_up(const ServerLimits& l) {
    std::lock_guard lk(mu);
    limits = l;
    ++up_count;
    up_cv.notify_all();
  }
  void session_down() {
    std::lock_guard lk(mu);
    if (up_count > 0) --up_count;
  }
  void record_error(const Status& st) {
    std::lock_guard lk(mu);
    last_error = st;
  }
};

namespace {

// The shared-memory area of one session of one connection, cut into equal
// slots. A slot belongs to one call from acquire() until release(); a call
// that failed without a response may still have the server writing into its
// slot, so that slot is retired instead (never handed out again). A new
// session gets a new area, so the old server side can never touch the bytes
// of later calls. Thread-safety: any thread.
class ClientShm {
 public:
  ClientShm(std::shared_ptr<ShmArea> area, size_t slot_bytes, size_t slots,
            std::shared_ptr<ShmDirectChannel> channel)
      : area_(std::move(area)), slot_bytes_(slot_bytes), channel_(std::move(channel)) {
    for (size_t i = slots; i > 0; --i) free_.push_back(static_cast<uint32_t>(i - 1));
  }
  // The session's direct channel, or null.
  ShmDirectChannel* channel() const { return channel_.get(); }
  size_t slot_bytes() const { return slot_bytes_; }
  std::optional<uint32_t> acquire() {
    std::lock_guard lk(mu_);
    if (free_.empty()) return std::nullopt;
    uint32_t s = free_.back();
    free_.pop_back();
    return s;
  }
  void release(uint32_t slot) {
    std::lock_guard lk(mu_);
    free_.push_back(slot);
  }
  uint64_t offset(uint32_t slot) const { return uint64_t{slot} * slot_bytes_; }
  std::byte* slot_data(uint32_t slot) const { return area_->data() + offset(slot); }

 private:
  std::shared_ptr<ShmArea> area_;
  size_t slot_bytes_;
  std::shared_ptr<ShmDirectChannel> channel_;
  std::mutex mu_;
  std::vector<uint32_t> free_;
};

// One pooled connection: a coroutine on its strand connects, says Hello,
// reads responses until the connection breaks, and starts over with backoff.
// Callers (any thread) queue calls; a writer coroutine sends them.
class ClientConn : public std::enable_shared_from_this<ClientConn> {
 public:
  ClientConn(RemoteStoreShared& shared, asio::io_context& io, unsigned index)
      : shared_(shared),
        index_(index),
        strand_(asio::make_strand(io)),
        sock_(strand_),
        resolver_(strand_),
        backoff_timer_(strand_),
        deadline_(strand_),
        release_timer_(strand_) {}

  void start() { asio::co_spawn(strand_, run(shared_from_this()), asio::detached); }

  void shutdown() {
    {
      std::lock_guard lk(mu_);
      closing_ = true;
    }
    asio::post(strand_, [self = shared_from_this()] {
      std::error_code ec;
      self->resolver_.cancel();
      self->backoff_timer_.cancel();
      self->deadline_.cancel();
      self->sock_.close();
    });
  }

  // The generation of the current session, or nullopt when down.
  std::optional<uint64_t> up_generation() const {
    std::lock_guard lk(mu_);
    if (!up_ || closing_) return std::nullopt;
    return gen_;
  }
  uint16_t version() const {
    std::lock_guard lk(mu_);
    return version_;
  }
  uint64_t reserve_id() { return next_id_.fetch_add(1, std::memory_order_relaxed); }
  // The shared-memory area of session `gen` (null: none, or another session).
  std::shared_ptr<ClientShm> shm_session(uint64_t gen) const {
    std::lock_guard lk(mu_);
    if (gen != gen_ || !up_) return nullptr;
    return shm_;
  }

  std::optional<uint16_t> server_ns(uint16_t client_ns, uint64_t gen) const {
    std::lock_guard lk(mu_);
    if (gen != gen_ || client_ns >= ns_map_.size() || ns_map_[client_ns] < 0) return std::nullopt;
    return static_cast<uint16_t>(ns_map_[client_ns]);
  }
  void set_server_ns(uint16_t client_ns, uint16_t server_ns, uint64_t gen) {
    std::lock_guard lk(mu_);
    if (gen != gen_) return;
    if (ns_map_.size() <= client_ns) ns_map_.resize(client_ns + 1, -1);
    ns_map_[client_ns] = server_ns;
  }

  // Queues `c` on session `gen`; false when that session is gone. Calls
  // queued on one connection are pipelined: written back to back, answered
  // in any order.
  bool submit(const std::shared_ptr<Call>& c, uint64_t gen) {
    std::lock_guard lk(mu_);
    if (!up_ || closing_ || gen != gen_) return false;
    c->gen = gen;
    pending_[c->id] = c;
    c->writing = true;
    queue_.push_back(c);
    if (!writer_active_) {
      writer_active_ = true;
      // co_spawn only posts to the strand: nothing runs under this lock.
      asio::co_spawn(strand_, write_loop(shared_from_this()), asio::detached);
    }
    return true;
  }

  // Waits for the response to a submitted call until `deadline`. The
  // caller's buffers are free again whenever this returns.
  CallError wait(const std::shared_ptr<Call>& c, Clock::time_point deadline) {
    std::unique_lock lk(mu_);
    auto finished = [&] { return c->done && !c->writing && !c->reading; };
    if (c->cv.wait_until(lk, deadline, finished)) {
      return c->failure.ok() ? CallError::kNone : CallError::kBroken;
    }
    if (c->done && !c->reading) {
      // The response is in, so the server had the whole request: the write's
      // completion is on its way.
      c->cv.wait(lk, [&] { return !c->writing; });
      return c->failure.ok() ? CallError::kNone : CallError::kBroken;
    }
    // Out of time. Withdraw the call; if the connection may still touch the
    // caller's buffers, break the connection (that aborts its socket
    // operations at once) and wait until it lets go.
    pending_.erase(c->id);
    if (c->writing && !c->write_started) {
      c->cancelled = true;
      c->writing = false;
    }
    bool reset = c->writing || c->reading;
    // A peer that stopped answering altogether (a host gone without a reset,
    // a hung server) would cost every later call its full timeout: after a
    // few timeouts with no frame in between, reconnect instead (a dead host
    // then fails fast, at connect).
    if (++silent_timeouts_ >= kResetAfterSilentTimeouts && c->gen == gen_) {
      spdlog::warn(
          "store client: connection {} answered none of the last {} calls in time; "
          "reconnecting",
          index_, silent_timeouts_);
      silent_timeouts_ = 0;
      reset = true;
    }
    if (reset) {
      if (c->writing || c->reading) {
        spdlog::warn("store client: call {} timed out mid-transfer; resetting connection {}", c->id,
                     index_);
      }
      asio::post(strand_, [self = shared_from_this(), gen = c->gen] { self->abort_session(gen); });
      c->cv.wait(lk, [&] { return !c->writing && !c->reading; });
    }
    return CallError::kTimeout;
  }

 private:
  void abort_socket() { sock_.close(); }
  // On the strand: breaks session `gen` if it is still the current one (a
  // later session's socket is left alone).
  void abort_session(uint64_t gen) {
    {
      std::lock_guard lk(mu_);
      if (gen != gen_) return;
    }
    abort_socket();
  }

  bool closing() const {
    std::lock_guard lk(mu_);
    return closing_;
  }
  bool writer_busy() const {
    std::lock_guard lk(mu_);
    return writer_active_;
  }

  static asio::awaitable<void> run(std::shared_ptr<ClientConn> self) {
    const auto& o = self->shared_.opts;
    uint32_t backoff = o.reconnect_min_ms;
    bool warned = false;
    while (!self->closing()) {
      Status st = co_await self->open_session();
      if (st.ok()) {
        warned = false;
        self->shared_.sessions.fetch_add(1, std::memory_order_relaxed);
        spdlog::info("store client: connection {} to {}:{} up", self->index_, o.host, o.port);
        const auto started = Clock::now();
        Status why = co_await self->read_loop();
        self->end_session(why);
        if (self->closing()) break;
        spdlog::warn("store client: connection {} to {}:{} lost: {}", self->index_, o.host, o.port,
                     why.message());
        self->shared_.record_error(why);
        if (Clock::now() - started >= std::chrono::seconds(1)) {
          backoff = o.reconnect_min_ms;
          continue;  // reconnect at once after a session that worked
        }
        // A session that died young (a server that accepts and drops) is
        // retried with backoff, like a failed connect.
      } else {
        self->abort_socket();
        if (self->closing()) break;
        self->shared_.connect_failures.fetch_add(1, std::memory_order_relaxed);
        self->shared_.record_error(st);
        if (!warned) {
          spdlog::debug("store client: connection {} to {}:{}: {} (retrying with backoff)",
                        self->index_, o.host, o.port, st.to_string());
          warned = true;
        }
      }
      self->backoff_timer_.expires_after(std::chrono::milliseconds(backoff));
      std::error_code ec;
      co_await self->backoff_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      backoff = std::min(backoff * 2, std::max(o.reconnect_max_ms, o.reconnect_min_ms));
    }
    self->abort_socket();
  }

  // Connects and says Hello within connect_timeout_ms.
  asio::awaitable<Status> open_session() {
    const auto& o = shared_.opts;
    // Shared with the timer's handler, which may run after this frame is gone.
    struct Attempt {
      bool expired = false;
      bool finished = false;
    };
    auto attempt = std::make_shared<Attempt>();
    deadline_.expires_after(std::chrono::milliseconds(o.connect_timeout_ms));
    deadline_.async_wait([self = shared_from_this(), attempt](std::error_code ec) {
      if (ec || attempt->finished) return;
      attempt->expired = true;
      self->resolver_.cancel();
      self->abort_socket();
    });
    Status st = co_await handshake();
    attempt->finished = true;  // on the strand, like the handler: no race
    deadline_.cancel();
    if (!st.ok() && attempt->expired) {
      st = Status::timeout(fmt::format("connect to {}:{}: no answer within {} ms", o.host, o.port,
                                       o.connect_timeout_ms));
    }
    co_return st;
  }

  asio::awaitable<Status> handshake() {
    const auto& o = shared_.opts;
    std::error_code ec;
    auto endpoints = co_await resolver_.async_resolve(
        o.host, std::to_string(o.port), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return Status::unavailable(fmt::format("resolve {}: {}", o.host, ec.message()));
    // shutdown() may have closed the old socket while the resolver was
    // finishing; a new one must not outlive it.
    if (closing()) co_return Status::unavailable("client closing");
    // A writer still unwinding from the last session holds references into
    // the old stream (its TLS state above all): let it finish first.
    while (writer_busy()) {
      if (closing()) co_return Status::unavailable("client closing");
      backoff_timer_.expires_after(std::chrono::milliseconds(1));
      co_await backoff_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    sock_.reset(strand_);
    co_await asio::async_connect(sock_.socket(), endpoints,
                                 asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      co_return Status::unavailable(
          fmt::format("connect to {}:{}: {}", o.host, o.port, ec.message()));
    }
    sock_.socket().set_option(tcp::no_delay(true), ec);
    if (shared_.tls) {
      sock_.start_tls(*shared_.tls);
      if (Status st = sock_.expect_server_name(o.host); !st.ok()) co_return st;
      co_await sock_.async_handshake(asio::ssl::stream_base::client,
                                     asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        co_return Status::unavailable(
            fmt::format("TLS handshake with {}:{}: {}", o.host, o.port, ec.message()));
      }
    }

    HelloRequest hello;
    hello.client_name = o.client_name.substr(0, kMaxNameBytes);
    hello.auth_token = o.auth_token;
    auto frame = encode_message_frame(hello, reserve_id(), {}, kProtocolVersionMin);
    if (!frame.ok()) co_return frame.status();
    co_await asio::async_write(sock_, asio::buffer(*frame),
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return Status::unavailable("sending Hello: " + ec.message());

    reader_ = std::make_unique<FrameStreamReader>(FrameLimits{});
    Status st = co_await reader_->read_head(sock_, ec);
    if (st.ok() && reader_->decoder().state() == FrameDecoder::State::kData) {
      st = co_await reader_->read_data(sock_, ec);
    }
    if (ec) co_return Status::unavailable("waiting for Hello: " + ec.message());
    if (!st.ok()) co_return Status(st.code(), "Hello response: " + st.message());
    Frame f = reader_->decoder().take_frame();
    if (f.header.type == MessageType::kErrorResponse) {
      auto err = decode_message_as<ErrorResponse>(f.header, f.descriptor);
      if (!err.ok()) co_return err.status();
      co_return Status(err->code, "server refused the connection: " + err->message);
    }
    auto resp = decode_message_as<HelloResponse>(f.header, f.descriptor);
    if (!resp.ok()) co_return resp.status();
    if (resp->version < kProtocolVersionMin || resp->version > kProtocolVersionMax) {
      co_return Status::failed_precondition(
          fmt::format("server chose protocol version {}", resp->version));
    }
    reader_->reset(FrameLimits{}, resp->version);
    std::shared_ptr<ClientShm> shm;
    if (o.shared_memory) {
      auto attached = co_await attach_shm(resp->version, resp->limits);
      if (!attached.ok()) co_return attached.status();
      shm = std::move(*attached);
    }
    {
      std::lock_guard lk(mu_);
      if (closing_) co_return Status::unavailable("client closing");
      up_ = true;
      ++gen_;
      silent_timeouts_ = 0;
      version_ = resp->version;
      ns_map_.clear();
      shm_ = shm;
    }
    if (shm) {
      shared_.shm_sessions.fetch_add(1, std::memory_order_relaxed);
      shared_.shm_up.fetch_add(1, std::memory_order_relaxed);
    }
    shared_.session_up(resp->limits);
    co_return Status::ok_status();
  }

  // Asks for the shared-memory path right after Hello. A server that
  // declines, or one on another host, leaves the session on TCP (null); only
  // a broken connection is an error.
  asio::awaitable<Result<std::shared_ptr<ClientShm>>> attach_shm(uint16_t version,
                                                                 const ServerLimits& limits) {
    const auto& o = shared_.opts;
    std::shared_ptr<ClientShm> none;
    std::error_code ec;
    auto frame = encode_message_frame(ShmOfferRequest{}, reserve_id(), {}, version);
    if (!frame.ok()) co_return frame.status();
    co_await asio::async_write(sock_, asio::buffer(*frame),
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return Status::unavailable("sending ShmOffer: " + ec.message());
    Status st = co_await reader_->read_head(sock_, ec);
    if (st.ok() && reader_->decoder().state() == FrameDecoder::State::kData) {
      st = co_await reader_->read_data(sock_, ec);
    }
    if (ec) co_return Status::unavailable("waiting for the ShmOffer answer: " + ec.message());
    if (!st.ok()) co_return st;
    Frame f = reader_->decoder().take_frame();
    if (f.header.type == MessageType::kErrorResponse) {
      spdlog::debug("store client: connection {}: server declined shared memory", index_);
      co_return none;
    }
    auto offer = decode_message_as<ShmOfferResponse>(f.header, f.descriptor);
    if (!offer.ok()) co_return offer.status();
    const std::string here = host_boot_id();
    if (here.empty() || offer->host_id != here) co_return none;  // another host: TCP
    // Slots hold the largest object, page-aligned; as many as the server maps.
    const size_t slot =
        std::max<size_t>(4096, (size_t{limits.max_object_bytes} + 4095) & ~size_t{4095});
    size_t slots = std::max<unsigned>(1, o.shm_slots);
    if (offer->max_area_bytes < slot) co_return none;
    slots = std::min<size_t>(slots, offer->max_area_bytes / slot);
    auto area = ShmArea::create(slot * slots);
    if (!area.ok()) {
      spdlog::warn("store client: shared memory unavailable: {}", area.status().message());
      co_return none;
    }
    // Blocking, but on a local socket the server answers at once, and every
    // step is bounded by the connect timeout.
    ShmAttachMessage msg{offer->nonce, slot * slots};
    if (o.direct_channel) msg.flags |= kShmAttachWantChannel;
    auto grant = shm_attach_send(offer->socket_name, msg, (*area)->fd(), o.connect_timeout_ms);
    if (!grant.ok()) {
      spdlog::info("store client: connection {}: shared memory not attached ({}); using TCP",
                   index_, grant.status().message());
      co_return none;
    }
    std::shared_ptr<ShmDirectChannel> channel;
    if (grant->channel >= 0) {
      auto ch = ShmDirectChannel::open(grant->channel, grant->arena, grant->arena_bytes,
                                       &shared_.arena_reads);
      if (ch.ok()) {
        channel = std::move(*ch);
        channel->set_flush_scheduler(
            [weak_self = weak_from_this(), weak_ch = std::weak_ptr<ShmDirectChannel>(channel)] {
              if (auto self = weak_self.lock()) self->schedule_release_flush(weak_ch);
            });
        shared_.direct_channels.fetch_add(1, std::memory_order_relaxed);
      } else {
        spdlog::info("store client: connection {}: no direct channel: {}", index_,
                     ch.status().message());
      }
    } else if (grant->arena >= 0) {
      ::close(grant->arena);
    }
    co_return std::make_shared<ClientShm>(std::move(*area), slot, slots, std::move(channel));
  }

  // A direct channel holds leases its caller is done with until its next
  // get; when none comes within kReleaseFlushDelay, they are sent from here.
  static constexpr auto kReleaseFlushDelay = std::chrono::milliseconds(5);
  void schedule_release_flush(std::weak_ptr<ShmDirectChannel> weak_ch) {
    asio::post(strand_, [self = shared_from_this(), weak_ch] {
      self->release_timer_.expires_after(kReleaseFlushDelay);
      self->release_timer_.async_wait([self, weak_ch](std::error_code ec) {
        auto ch = weak_ch.lock();
        if (ec || !ch) return;
        if (ch->flush_releases()) self->schedule_release_flush(weak_ch);
      });
    });
  }

  // Where the data section of a response for `c` goes: the caller's buffers.
  // False when the response does not fit them (the decoder then keeps the
  // bytes and the caller sees a bad response).
  static bool route(const Call& c, const FrameHeader& h, ByteView descriptor,
                    std::vector<MutableByteView>& parts) {
    if (h.type == MessageType::kGetResponse) {
      auto r = GetResponse::decode(descriptor);
      if (!r.ok() || !r->result.hit || c.outs.size() != 1 || r->result.length > c.outs[0].size()) {
        return false;
      }
      parts.push_back(c.outs[0].first(r->result.length));
      return true;
    }
    if (h.type == MessageType::kBatchGetResponse) {
      auto r = BatchGetResponse::decode(descriptor);
      if (!r.ok() || r->results.size() != c.outs.size()) return false;
      for (size_t i = 0; i < r->results.size(); ++i) {
        const GetOutcome& o = r->results[i];
        if (!o.hit) continue;
        if (o.length > c.outs[i].size()) return false;
        parts.push_back(c.outs[i].first(o.length));
      }
      return true;
    }
    return false;
  }

  void finish_call(const std::shared_ptr<Call>& c, Frame* f, Status failure) {
    std::lock_guard lk(mu_);
    if (f) {
      c->header = f->header;
      c->descriptor = std::move(f->descriptor);
      c->data_in = std::move(f->data);
    }
    c->failure = std::move(failure);
    c->done = true;
    c->reading = false;
    c->cv.notify_all();
  }

  asio::awaitable<Status> read_loop() {
    std::vector<MutableByteView> parts;
    for (;;) {
      std::error_code ec;
      Status st = co_await reader_->read_head(sock_, ec);
      if (ec) co_return Status::unavailable("connection closed: " + ec.message());
      if (!st.ok()) {
        spdlog::warn("store client: malformed frame from {}:{}: {}", shared_.opts.host,
                     shared_.opts.port, st.message());
        co_return st;
      }
      const FrameHeader h = reader_->decoder().header();
      std::shared_ptr<Call> call;
      {
        std::lock_guard lk(mu_);
        silent_timeouts_ = 0;
        auto it = pending_.find(h.request_id);
        if (it != pending_.end()) {
          call = it->second;
          pending_.erase(it);
          call->reading = true;
        }
      }
      if (reader_->decoder().state() == FrameDecoder::State::kData) {
        parts.clear();
        if (call && route(*call, h, reader_->decoder().descriptor(), parts)) {
          st = reader_->set_data_destination(parts);
        }
        if (st.ok()) st = co_await reader_->read_data(sock_, ec);
        if (ec || !st.ok()) {
          Status why = ec ? Status::unavailable("connection closed: " + ec.message()) : st;
          if (call) finish_call(call, nullptr, why);
          co_return why;
        }
      }
      Frame f = reader_->decoder().take_frame();
      if (call) finish_call(call, &f, Status::ok_status());
      // A response nobody waits for (its caller timed out) is dropped.
    }
  }

  static asio::awaitable<void> write_loop(std::shared_ptr<ClientConn> self) {
    std::vector<std::shared_ptr<Call>> batch;
    std::vector<asio::const_buffer> bufs;
    for (;;) {
      batch.clear();
      {
        std::lock_guard lk(self->mu_);
        while (!self->queue_.empty() && batch.size() < 64) {
          auto c = std::move(self->queue_.front());
          self->queue_.pop_front();
          if (c->cancelled) continue;
          c->write_started = true;
          batch.push_back(std::move(c));
        }
        if (batch.empty()) {
          self->writer_active_ = false;
          co_return;
        }
      }
      bufs.clear();
      for (const auto& c : batch) {
        bufs.push_back(asio::buffer(c->prefix));
        for (ByteView d : c->data) {
          if (!d.empty()) bufs.push_back(asio::buffer(d.data(), d.size()));
        }
      }
      const uint64_t gen = batch.front()->gen;
      std::error_code ec;
      co_await asio::async_write(self->sock_, bufs, asio::redirect_error(asio::use_awaitable, ec));
      {
        std::lock_guard lk(self->mu_);
        for (const auto& c : batch) {
          c->writing = false;
          c->cv.notify_all();
        }
      }
      if (ec) {
        // The reader sees the broken socket and ends the session, which fails
        // every call still waiting.
        self->abort_session(gen);
      }
    }
  }

  void end_session(const Status& why) {
    bool was_up = false;
    {
      std::lock_guard lk(mu_);
      was_up = up_;
      up_ = false;
      if (shm_) shared_.shm_up.fetch_sub(1, std::memory_order_relaxed);
      shm_.reset();  // calls still holding it keep the mapping alive
      for (auto& [id, c] : pending_) {
        c->failure = why;
        c->done = true;
        c->cv.notify_all();
      }
      pending_.clear();
      for (auto& c : queue_) {
        if (!c->write_started) c->writing = false;
        c->cv.notify_all();
      }
      queue_.clear();
    }
    if (was_up) shared_.session_down();
    abort_socket();
  }

  RemoteStoreShared& shared_;
  const unsigned index_;
  asio::strand<asio::io_context::executor_type> strand_;
  // Used on the strand only:
  NetStream sock_;
  tcp::resolver resolver_;
  asio::steady_timer backoff_timer_;
  asio::steady_timer deadline_;
  asio::steady_timer release_timer_;  // direct channel: flushes idle leases
  std::unique_ptr<FrameStreamReader> reader_;

  std::atomic<uint64_t> next_id_{1};
  mutable std::mutex mu_;  // guards the fields below and every Call's guarded fields
  bool up_ = false;
  bool closing_ = false;
  uint64_t gen_ = 0;
  uint16_t version_ = kProtocolVersion;
  std::unordered_map<uint64_t, std::shared_ptr<Call>> pending_;
  std::deque<std::shared_ptr<Call>> queue_;
  bool writer_active_ = false;
  std::vector<int32_t> ns_map_;     // client handle -> server handle (-1: not yet)
  std::shared_ptr<ClientShm> shm_;  // this session's shared-memory area, if any
  uint32_t silent_timeouts_ = 0;    // calls timed out since the last frame arrived
  static constexpr uint32_t kResetAfterSilentTimeouts = 2;
};

}  // namespace

// ---- RemoteStore -----------------------------------------------------------------------

namespace {
Status unreachable_status(CallError e, const Status& last) {
  switch (e) {
    case CallError::kTimeout:
      return Status::timeout("the store did not answer in time");
    case CallError::kBroken:
      return Status::unavailable("the connection to the store broke");
    default:
      return Status::unavailable("the store cannot be reached: " + last.message());
  }
}
}  // namespace

struct RemoteStore::Impl {
  RemoteStoreShared shared;
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  std::vector<std::shared_ptr<ClientConn>> conns;
  std::atomic<uint64_t> rr{0};

  mutable std::shared_mutex ns_mu;
  std::vector<kv::Namespace> namespaces;  // by client handle
  std::vector<kv::Key128> ns_digests;

  // The outcome of one request.
  struct Reply {
    CallError error = CallError::kNone;
    Status status;  // an Error response from the server, or bad input found here
    std::shared_ptr<Call> call;
    bool ok() const { return error == CallError::kNone && status.ok(); }
  };

  // Where requests of one operation go: a connection's session, and the
  // handle its server gave the caller's namespace.
  struct Target {
    ClientConn* conn = nullptr;
    uint64_t gen = 0;
    uint16_t server_ns = 0;
  };

  const RemoteStoreOptions& opts() const { return shared.opts; }

  Clock::time_point deadline() const {
    return Clock::now() + std::chrono::milliseconds(opts().call_timeout_ms);
  }

  // Round robin over the connections that are up.
  std::optional<Target> pick() {
    size_t n = conns.size();
    size_t start = rr.fetch_add(1, std::memory_order_relaxed);
    for (size_t i = 0; i < n; ++i) {
      ClientConn* c = conns[(start + i) % n].get();
      if (auto gen = c->up_generation()) return Target{c, *gen, 0};
    }
    return std::nullopt;
  }

  Result<kv::Namespace> namespace_of(uint16_t handle) const {
    std::shared_lock lk(ns_mu);
    if (handle >= namespaces.size()) {
      return Status::invalid_argument(fmt::format("unknown namespace handle {}", handle));
    }
    return namespaces[handle];
  }

  void count(CallError e) {
    switch (e) {
      case CallError::kNone:
        break;
      case CallError::kUnavailable:
        shared.unavailable.fetch_add(1, std::memory_order_relaxed);
        break;
      case CallError::kTimeout:
        shared.timeouts.fetch_add(1, std::memory_order_relaxed);
        break;
      case CallError::kBroken:
        shared.broken.fetch_add(1, std::memory_order_relaxed);
        break;
    }
  }

  // Encodes `msg` and queues it on `t`'s session. A call that could not be
  // queued has `failure` set and `done` true.
  Result<std::shared_ptr<Call>> send(const Target& t, const Message& msg,
                                     std::span<const ByteView> data,
                                     std::span<const MutableByteView> outs) {
    auto c = std::make_shared<Call>();
    c->id = t.conn->reserve_id();
    Status st = encode_message_prefix(msg, c->id, data, c->prefix, t.conn->version());
    if (!st.ok()) return Status::invalid_argument(st.message());
    c->data.assign(data.begin(), data.end());
    c->outs.assign(outs.begin(), outs.end());
    if (!t.conn->submit(c, t.gen)) {
      c->done = true;
      c->failure = Status::unavailable("session gone");
    }
    return c;
  }

  // Waits for a call sent with send() and checks the response's type.
  Reply collect(const Target& t, const std::shared_ptr<Call>& c, MessageType expect,
                Clock::time_point dl) {
    Reply r;
    // A call that never got queued belongs to no connection: nothing to wait for.
    r.error = c->gen == 0 && c->done ? CallError::kUnavailable : t.conn->wait(c, dl);
    count(r.error);
    if (r.error != CallError::kNone) return r;
    if (c->header.type == MessageType::kErrorResponse) {
      auto e = decode_message_as<ErrorResponse>(c->header, c->descriptor);
      r.status = e.ok() ? e->to_status() : e.status();
      return r;
    }
    if (c->header.type != expect) {
      spdlog::warn("store client: server answered a request expecting {} with {}",
                   message_type_name(expect), message_type_name(c->header.type));
      r.error = CallError::kBroken;
      count(r.error);
      return r;
    }
    r.call = c;
    return r;
  }

  Reply exchange(const Target& t, const Message& msg, std::span<const ByteView> data,
                 std::span<const MutableByteView> outs, MessageType expect, Clock::time_point dl) {
    auto c = send(t, msg, data, outs);
    if (!c.ok()) return Reply{CallError::kNone, c.status(), nullptr};
    return collect(t, *c, expect, dl);
  }

  // Picks a connection and registers namespace `ns` on its session when that
  // was not done yet. A Reply that is not ok() says why there is no target.
  Reply target(uint16_t ns, Clock::time_point dl, Target* out) {
    shared.calls.fetch_add(1, std::memory_order_relaxed);
    auto t = pick();
    if (!t) {
      count(CallError::kUnavailable);
      return Reply{CallError::kUnavailable, {}, nullptr};
    }
    auto sns = t->conn->server_ns(ns, t->gen);
    if (!sns) {
      auto nsdef = namespace_of(ns);
      if (!nsdef.ok()) return Reply{CallError::kNone, nsdef.status(), nullptr};
      Reply reg = exchange(*t, RegisterNamespaceRequest{*nsdef}, {}, {},
                           MessageType::kRegisterNamespaceResponse, dl);
      if (!reg.ok()) return reg;
      auto resp = RegisterNamespaceResponse::decode(reg.call->descriptor);
      if (!resp.ok()) {
        count(CallError::kBroken);
        return Reply{CallError::kBroken, {}, nullptr};
      }
      t->conn->set_server_ns(ns, resp->handle, t->gen);
      sns = resp->handle;
    }
    t->server_ns = *sns;
    *out = *t;
    return Reply{};
  }

  // One request of namespace `ns`: the message `make(server_handle)` builds.
  template <typename Make>
  Reply request(uint16_t ns, Make&& make, std::span<const ByteView> data,
                std::span<const MutableByteView> outs, MessageType expect) {
    Clock::time_point dl = deadline();
    Target t;
    Reply r = target(ns, dl, &t);
    if (!r.ok()) return r;
    return exchange(t, make(t.server_ns), data, outs, expect, dl);
  }

  // Several requests of namespace `ns` pipelined on one connection: all are
  // sent, then all collected. `make(i, server_handle)`, `data_of(i)` and
  // `outs_of(i)` describe request i. The first bad-input Status (an encode
  // error here, or an Error response) is returned in `status`.
  template <typename Make, typename DataOf, typename OutsOf>
  std::vector<Reply> request_pipelined(uint16_t ns, size_t n, Make&& make, DataOf&& data_of,
                                       OutsOf&& outs_of, MessageType expect, Status* status) {
    std::vector<Reply> replies(n);
    Clock::time_point dl = deadline();
    Target t;
    Reply r = target(ns, dl, &t);
    if (!r.ok()) {
      if (!r.status.ok()) *status = r.status;
      for (auto& x : replies) x = r;
      return replies;
    }
    std::vector<std::shared_ptr<Call>> calls(n);
    for (size_t i = 0; i < n; ++i) {
      auto c = send(t, make(i, t.server_ns), data_of(i), outs_of(i));
      if (!c.ok()) {
        replies[i].status = c.status();
        continue;
      }
      calls[i] = std::move(*c);
    }
    for (size_t i = 0; i < n; ++i) {
      if (calls[i]) replies[i] = collect(t, calls[i], expect, dl);
      if (!replies[i].status.ok() && status->ok()) *status = replies[i].status;
    }
    return replies;
  }

  Status check_ns(uint16_t ns) const {
    std::shared_lock lk(ns_mu);
    if (ns >= namespaces.size()) {
      return Status::invalid_argument(fmt::format("unknown namespace handle {}", ns));
    }
    return Status::ok_status();
  }

  // A Stats request; it needs no namespace, any connection will do.
  Result<std::shared_ptr<Call>> stats_call(StatsFormat format) {
    shared.calls.fetch_add(1, std::memory_order_relaxed);
    Status last;
    {
      std::lock_guard lk(shared.mu);
      last = shared.last_error;
    }
    auto t = pick();
    if (!t) {
      count(CallError::kUnavailable);
      return unreachable_status(CallError::kUnavailable, last);
    }
    auto r = exchange(*t, StatsRequest{format}, {}, {}, MessageType::kStatsResponse, deadline());
    if (!r.status.ok()) return r.status;
    if (r.error != CallError::kNone) return unreachable_status(r.error, last);
    return r.call;
  }

  // ---- shared-memory path ----
  //
  // A put or get through `t`'s session area, or nullopt when that session
  // has none, no slot is free or the object does not fit a slot (the caller
  // then uses TCP). The slot is released once the response is in; a call
  // that failed without one retires its slot (the server may still write it).

  std::optional<Result<kv::PutResult>> shm_put(const Target& t, const kv::Key128& key,
                                               ByteView data, Clock::time_point dl) {
    auto shm = t.conn->shm_session(t.gen);
    if (!shm || data.size() > shm->slot_bytes()) return std::nullopt;
    auto slot = shm->acquire();
    if (!slot) return std::nullopt;
    copy_block(shm->slot_data(*slot), data.data(), data.size());
    Reply r = exchange(
        t, ShmPutRequest{t.server_ns, key, shm->offset(*slot), static_cast<uint32_t>(data.size())},
        {}, {}, MessageType::kShmPutResponse, dl);
    if (r.error != CallError::kNone) {
      shared.shm_retired.fetch_add(1, std::memory_order_relaxed);
      return Result<kv::PutResult>(refused());
    }
    shm->release(*slot);
    if (!r.status.ok()) return Result<kv::PutResult>(r.status);
    shared.shm_calls.fetch_add(1, std::memory_order_relaxed);
    auto resp = ShmPutResponse::decode(r.call->descriptor);
    if (!resp.ok()) return Result<kv::PutResult>(refused());
    return Result<kv::PutResult>(resp->result.to_result());
  }

  std::optional<Result<kv::GetResult>> shm_get(const Target& t, const kv::Key128& key,
                                               MutableByteView out, Clock::time_point dl) {
    auto shm = t.conn->shm_session(t.gen);
    if (!shm) return std::nullopt;
    auto slot = shm->acquire();
    if (!slot) return std::nullopt;
    // The slot holds the largest object the server takes, so it is all the
    // room a caller's buffer could need.
    const auto room = static_cast<uint32_t>(std::min(out.size(), shm->slot_bytes()));
    if (ShmDirectChannel* ch = shm->channel()) {
      auto direct =
          ch->get(t.server_ns, key, out, {shm->offset(*slot), shm->slot_data(*slot), room}, dl);
      if (direct) {
        if (ch->broken()) {
          // The server may still write the slot for the call that failed.
          shared.shm_retired.fetch_add(1, std::memory_order_relaxed);
        } else {
          shm->release(*slot);
          shared.shm_calls.fetch_add(1, std::memory_order_relaxed);
          shared.direct_gets.fetch_add(1, std::memory_order_relaxed);
        }
        return direct;
      }
    }
    Reply r = exchange(t, ShmGetRequest{t.server_ns, key, shm->offset(*slot), room}, {}, {},
                       MessageType::kShmGetResponse, dl);
    kv::GetResult miss;
    if (r.error != CallError::kNone) {
      shared.shm_retired.fetch_add(1, std::memory_order_relaxed);
      miss.miss = miss_of(r.error);
      return Result<kv::GetResult>(miss);
    }
    if (!r.status.ok()) {
      shm->release(*slot);
      return Result<kv::GetResult>(r.status);
    }
    auto resp = ShmGetResponse::decode(r.call->descriptor);
    miss.miss = kv::MissReason::kIoError;
    if (!resp.ok() || resp->result.length > room) {
      shm->release(*slot);
      return Result<kv::GetResult>(miss);  // the server broke the protocol: never wrong bytes
    }
    if (resp->result.hit) copy_block(out.data(), shm->slot_data(*slot), resp->result.length);
    shm->release(*slot);
    shared.shm_calls.fetch_add(1, std::memory_order_relaxed);
    return Result<kv::GetResult>(resp->result.to_result());
  }

  // Whether the session a request would use has a working direct channel.
  bool direct_channel_up() {
    auto up = pick();
    if (!up) return false;
    auto shm = up->conn->shm_session(up->gen);
    return shm && shm->channel() && !shm->channel()->broken();
  }

  // A match through the direct channel of the session a request would use,
  // or nullopt (no channel, or it is busy): then TCP.
  std::optional<Result<kv::MatchResult>> channel_match(uint16_t ns,
                                                       std::span<const kv::Key128> keys) {
    // Look first, so a client without a channel counts its call once.
    auto up = pick();
    if (!up) return std::nullopt;
    auto any = up->conn->shm_session(up->gen);
    if (!any || !any->channel() || any->channel()->broken()) return std::nullopt;
    Clock::time_point dl = deadline();
    Target t;
    if (!target(ns, dl, &t).ok()) return std::nullopt;
    auto shm = t.conn->shm_session(t.gen);
    if (!shm || !shm->channel()) return std::nullopt;
    return shm->channel()->match_prefix(t.server_ns, keys, dl);
  }

  static kv::MissReason miss_of(CallError e) {
    return e == CallError::kTimeout ? kv::MissReason::kTimeout : kv::MissReason::kIoError;
  }
  static kv::PutResult refused() {
    return {kv::PutResult::Outcome::kRefused, kv::Tier::kNone, kv::RefuseReason::kDiskError};
  }
};

RemoteStore::RemoteStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RemoteStore::~RemoteStore() {
  for (auto& c : impl_->conns) c->shutdown();
  impl_->work.reset();
  for (auto& t : impl_->threads) t.join();
}

Result<std::unique_ptr<RemoteStore>> RemoteStore::open(const RemoteStoreOptions& options) {
  if (options.host.empty()) return Status::invalid_argument("RemoteStore: empty host");
  if (options.port == 0) return Status::invalid_argument("RemoteStore: port 0");
  if (options.connections == 0 || options.connections > 1024) {
    return Status::invalid_argument("RemoteStore: connections must be in [1, 1024]");
  }
  if (options.io_threads == 0 || options.io_threads > 64) {
    return Status::invalid_argument("RemoteStore: io_threads must be in [1, 64]");
  }
  if (options.call_timeout_ms == 0 || options.connect_timeout_ms == 0) {
    return Status::invalid_argument("RemoteStore: timeouts must be > 0");
  }
  if (options.auth_token.size() > kMaxStringBytes) {
    return Status::invalid_argument("RemoteStore: auth token too long");
  }
  auto impl = std::make_unique<Impl>();
  impl->shared.opts = options;
  if (options.tls.enabled()) {
    auto ctx = make_client_tls_context(options.tls);
    if (!ctx.ok()) return Status(ctx.status().code(), "RemoteStore: " + ctx.status().message());
    impl->shared.tls = std::move(*ctx);
  } else if (!options.tls.cert_file.empty() || !options.tls.key_file.empty()) {
    return Status::invalid_argument("RemoteStore: a TLS client certificate needs the CA file too");
  }
  if (impl->shared.opts.reconnect_min_ms == 0) impl->shared.opts.reconnect_min_ms = 1;
  impl->work.emplace(impl->io.get_executor());
  for (unsigned i = 0; i < options.connections; ++i) {
    impl->conns.push_back(std::make_shared<ClientConn>(impl->shared, impl->io, i));
  }
  for (auto& c : impl->conns) c->start();
  Impl* raw = impl.get();
  for (unsigned i = 0; i < options.io_threads; ++i) {
    impl->threads.emplace_back([raw] { raw->io.run(); });
  }
  return std::unique_ptr<RemoteStore>(new RemoteStore(std::move(impl)));
}

Status RemoteStore::wait_connected(uint32_t timeout_ms) {
  auto& s = impl_->shared;
  std::unique_lock lk(s.mu);
  if (s.up_cv.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return s.up_count > 0; })) {
    return Status::ok_status();
  }
  return s.last_error;
}

bool RemoteStore::connected() const {
  std::lock_guard lk(impl_->shared.mu);
  return impl_->shared.up_count > 0;
}

Status RemoteStore::last_error() const {
  std::lock_guard lk(impl_->shared.mu);
  return impl_->shared.last_error;
}

ServerLimits RemoteStore::server_limits() const { return impl_->shared.server_limits(); }

bool RemoteStore::shared_memory_active() const { return impl_->shared.shm_up.load() > 0; }

RemoteStoreClientStats RemoteStore::client_stats() const {
  const auto& s = impl_->shared;
  RemoteStoreClientStats r;
  r.calls = s.calls.load();
  r.unavailable = s.unavailable.load();
  r.timeouts = s.timeouts.load();
  r.broken = s.broken.load();
  r.sessions = s.sessions.load();
  r.connect_failures = s.connect_failures.load();
  r.shm_sessions = s.shm_sessions.load();
  r.shm_calls = s.shm_calls.load();
  r.shm_retired_slots = s.shm_retired.load();
  r.direct_channels = s.direct_channels.load();
  r.direct_gets = s.direct_gets.load();
  r.arena_reads = s.arena_reads.load();
  r.direct_matches = s.direct_matches.load();
  return r;
}

Result<uint16_t> RemoteStore::register_namespace(const kv::Namespace& ns) {
  KVTIER_RETURN_IF_ERROR(ns.validate());
  const kv::Key128 digest = ns.digest();
  {
    std::shared_lock lk(impl_->ns_mu);
    for (size_t i = 0; i < impl_->ns_digests.size(); ++i) {
      if (impl_->ns_digests[i] == digest) return static_cast<uint16_t>(i);
    }
  }
  // Let a reachable server judge it first, so that its refusal reaches the
  // caller and the table stays unchanged.
  auto t = impl_->pick();
  std::optional<uint16_t> server_handle;
  if (t) {
    Impl::Reply r = impl_->exchange(*t, RegisterNamespaceRequest{ns}, {}, {},
                                    MessageType::kRegisterNamespaceResponse, impl_->deadline());
    if (!r.status.ok()) return r.status;
    if (r.ok()) {
      auto resp = RegisterNamespaceResponse::decode(r.call->descriptor);
      if (resp.ok()) server_handle = resp->handle;
    }
  }
  uint16_t handle;
  {
    std::unique_lock lk(impl_->ns_mu);
    for (size_t i = 0; i < impl_->ns_digests.size(); ++i) {
      if (impl_->ns_digests[i] == digest) return static_cast<uint16_t>(i);
    }
    if (impl_->namespaces.size() >= 65535) {
      return Status::out_of_space("RemoteStore: too many namespaces");
    }
    handle = static_cast<uint16_t>(impl_->namespaces.size());
    impl_->namespaces.push_back(ns);
    impl_->ns_digests.push_back(digest);
  }
  if (t && server_handle) t->conn->set_server_ns(handle, *server_handle, t->gen);
  return handle;
}

Result<kv::PutResult> RemoteStore::put(uint16_t ns, const kv::Key128& key, ByteView data) {
  KVTIER_RETURN_IF_ERROR(impl_->check_ns(ns));
  if (key.is_zero()) return Status::invalid_argument("the all-zero key is reserved");
  if (data.empty()) return Status::invalid_argument("put of an empty object");
  const ServerLimits lim = server_limits();
  if (lim.max_object_bytes != 0 && data.size() > lim.max_object_bytes) {
    return Status::invalid_argument(fmt::format("object of {} bytes exceeds max_object_bytes {}",
                                                data.size(), lim.max_object_bytes));
  }
  if (data.size() > kMaxDataBytes) {
    return Status::invalid_argument(
        fmt::format("object of {} bytes exceeds the protocol's {}", data.size(), kMaxDataBytes));
  }
  Clock::time_point dl = impl_->deadline();
  Impl::Target t;
  Impl::Reply r = impl_->target(ns, dl, &t);
  if (!r.status.ok()) return r.status;
  if (r.error != CallError::kNone) return Impl::refused();
  if (auto via_shm = impl_->shm_put(t, key, data, dl)) return std::move(*via_shm);
  r = impl_->exchange(t, PutRequest{t.server_ns, key, static_cast<uint32_t>(data.size())},
                      std::span<const ByteView>(&data, 1), {}, MessageType::kPutResponse, dl);
  if (!r.status.ok()) return r.status;
  if (r.error != CallError::kNone) return Impl::refused();
  auto resp = PutResponse::decode(r.call->descriptor);
  if (!resp.ok()) return Impl::refused();
  return resp->result.to_result();
}

Result<kv::GetResult> RemoteStore::get(uint16_t ns, const kv::Key128& key, MutableByteView out) {
  KVTIER_RETURN_IF_ERROR(impl_->check_ns(ns));
  if (key.is_zero()) return Status::invalid_argument("the all-zero key is reserved");
  if (out.empty()) return Status::invalid_argument("get into an empty buffer");
  // No object exceeds the protocol's data limit, so a larger buffer is
  // announced as that limit.
  const uint32_t announce = static_cast<uint32_t>(std::min<size_t>(out.size(), kMaxDataBytes));
  MutableByteView dst = out.first(announce);
  Clock::time_point dl = impl_->deadline();
  Impl::Target t;
  Impl::Reply r = impl_->target(ns, dl, &t);
  if (!r.status.ok()) return r.status;
  kv::GetResult miss;
  miss.miss = Impl::miss_of(r.error);
  if (r.error != CallError::kNone) return miss;
  if (auto via_shm = impl_->shm_get(t, key, out, dl)) return std::move(*via_shm);
  r = impl_->exchange(t, GetRequest{t.server_ns, key, announce}, {},
                      std::span<const MutableByteView>(&dst, 1), MessageType::kGetResponse, dl);
  if (!r.status.ok()) return r.status;
  miss.miss = Impl::miss_of(r.error);
  if (r.error != CallError::kNone) return miss;
  auto resp = GetResponse::decode(r.call->descriptor);
  // A hit whose bytes did not land in `out` (the server broke the protocol)
  // is a miss, never wrong bytes.
  if (!resp.ok() || (resp->result.hit && !r.call->data_in.empty())) return miss;
  return resp->result.to_result();
}

namespace {
// Splits [0, n) into consecutive chunks of at most `max_items` items and at
// most `max_bytes` bytes (a single item may exceed it alone), by item sizes.
template <typename SizeOf>
std::vector<std::pair<size_t, size_t>> chunks(size_t n, uint64_t max_items, uint64_t max_bytes,
                                              SizeOf&& size_of) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    uint64_t bytes = 0;
    while (j < n && j - i < max_items) {
      uint64_t len = size_of(j);
      if (j > i && bytes + len > max_bytes) break;
      bytes += len;
      ++j;
    }
    out.emplace_back(i, j);
    i = j;
  }
  return out;
}
}  // namespace

Result<std::vector<kv::PutResult>> RemoteStore::batch_put(uint16_t ns,
                                                          std::span<const kv::Key128> keys,
                                                          std::span<const ByteView> data) {
  KVTIER_RETURN_IF_ERROR(impl_->check_ns(ns));
  if (keys.size() != data.size()) {
    return Status::invalid_argument(
        fmt::format("batch_put: {} keys but {} objects", keys.size(), data.size()));
  }
  const ServerLimits lim = server_limits();
  const uint64_t max_obj = lim.max_object_bytes ? lim.max_object_bytes : kMaxDataBytes;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].is_zero()) return Status::invalid_argument("the all-zero key is reserved");
    if (data[i].empty()) return Status::invalid_argument("put of an empty object");
    if (data[i].size() > max_obj) {
      return Status::invalid_argument(
          fmt::format("object of {} bytes exceeds max_object_bytes {}", data[i].size(), max_obj));
    }
  }
  if (keys.empty()) return std::vector<kv::PutResult>{};
  // Chunks within the server's batch and frame limits, pipelined.
  auto parts = chunks(keys.size(), std::max<uint32_t>(1, lim.max_batch),
                      std::max<uint64_t>(lim.max_data_bytes, max_obj),
                      [&](size_t i) { return data[i].size(); });
  Status bad;
  auto replies = impl_->request_pipelined(
      ns, parts.size(),
      [&](size_t p, uint16_t sns) {
        BatchPutRequest req;
        req.ns = sns;
        for (size_t k = parts[p].first; k < parts[p].second; ++k) {
          req.items.push_back({keys[k], static_cast<uint32_t>(data[k].size())});
        }
        return Message(std::move(req));
      },
      [&](size_t p) { return data.subspan(parts[p].first, parts[p].second - parts[p].first); },
      [](size_t) { return std::span<const MutableByteView>(); }, MessageType::kBatchPutResponse,
      &bad);
  if (!bad.ok()) return bad;
  std::vector<kv::PutResult> results;
  results.reserve(keys.size());
  for (size_t p = 0; p < parts.size(); ++p) {
    const size_t n = parts[p].second - parts[p].first;
    std::optional<BatchPutResponse> resp;
    if (replies[p].ok()) {
      auto d = BatchPutResponse::decode(replies[p].call->descriptor);
      if (d.ok() && d->results.size() == n) resp = std::move(*d);
    }
    for (size_t k = 0; k < n; ++k) {
      results.push_back(resp ? resp->results[k].to_result() : Impl::refused());
    }
  }
  return results;
}

Result<std::vector<kv::GetResult>> RemoteStore::batch_get(uint16_t ns,
                                                          std::span<const kv::BatchGetItem> items) {
  KVTIER_RETURN_IF_ERROR(impl_->check_ns(ns));
  for (const auto& it : items) {
    if (it.key.is_zero()) return Status::invalid_argument("the all-zero key is reserved");
    if (it.out.empty()) return Status::invalid_argument("get into an empty buffer");
  }
  if (items.empty()) return std::vector<kv::GetResult>{};
  const ServerLimits lim = server_limits();
  const uint64_t max_obj = lim.max_object_bytes ? lim.max_object_bytes : kMaxDataBytes;
  if (auto direct = batch_get_direct(ns, items, max_obj)) return std::move(*direct);
  // A buffer larger than any object is announced as max_object_bytes (the
  // server sizes its staging area by the announced lengths).
  std::vector<MutableByteView> outs;
  outs.reserve(items.size());
  for (const auto& it : items)
    outs.push_back(it.out.first(std::min<uint64_t>(it.out.size(), max_obj)));
  auto parts = chunks(items.size(), std::max<uint32_t>(1, lim.max_batch),
                      std::max<uint64_t>(lim.max_data_bytes, max_obj),
                      [&](size_t i) { return outs[i].size(); });
  Status bad;
  auto replies = impl_->request_pipelined(
      ns, parts.size(),
      [&](size_t p, uint16_t sns) {
        BatchGetRequest req;
        req.ns = sns;
        for (size_t k = parts[p].first; k < parts[p].second; ++k) {
          req.items.push_back({items[k].key, static_cast<uint32_t>(outs[k].size())});
        }
        return Message(std::move(req));
      },
      [](size_t) { return std::span<const ByteView>(); },
      [&](size_t p) {
        return std::span<const MutableByteView>(outs).subspan(parts[p].first,
                                                              parts[p].second - parts[p].first);
      },
      MessageType::kBatchGetResponse, &bad);
  if (!bad.ok()) return bad;
  std::vector<kv::GetResult> results;
  results.reserve(items.size());
  for (size_t p = 0; p < parts.size(); ++p) {
    const size_t n = parts[p].second - parts[p].first;
    std::optional<BatchGetResponse> resp;
    // Hits whose bytes did not land in the caller's buffers are misses.
    if (replies[p].ok() && replies[p].call->data_in.empty()) {
      auto d = BatchGetResponse::decode(replies[p].call->descriptor);
      if (d.ok() && d->results.size() == n) resp = std::move(*d);
    }
    for (size_t k = 0; k < n; ++k) {
      if (resp) {
        results.push_back(resp->results[k].to_result());
      } else {
        kv::GetResult miss;
        miss.miss = Impl::miss_of(replies[p].error);
        results.push_back(miss);
      }
    }
  }
  return results;
}

// Same-host batches: each block through the direct channel (a RAM hit is
// one copy, by this thread, out of the server's arena), instead of one TCP
// request whose bytes cross the socket. Taken only when no item can be
// refused half-way through the batch: every buffer holds the largest object
// the server takes (so none is too small) and no two overlap; the server
// validated the rest above. Otherwise nullopt, and the batch goes over TCP.
std::optional<Result<std::vector<kv::GetResult>>> RemoteStore::batch_get_direct(
    uint16_t ns, std::span<const kv::BatchGetItem> items, uint64_t max_object_bytes) {
  if (!impl_->direct_channel_up()) return std::nullopt;
  std::vector<std::pair<const std::byte*, const std::byte*>> ranges;
  ranges.reserve(items.size());
  for (const auto& it : items) {
    if (it.out.size() < max_object_bytes) return std::nullopt;
    ranges.emplace_back(it.out.data(), it.out.data() + it.out.size());
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      return Result<std::vector<kv::GetResult>>(
          Status::invalid_argument("batch_get: output buffers overlap"));
    }
  }
  std::vector<kv::GetResult> results;
  results.reserve(items.size());
  for (const auto& it : items) {
    auto r = get(ns, it.key, it.out);
    if (!r.ok()) return Result<std::vector<kv::GetResult>>(r.status());
    results.push_back(*r);
  }
  return Result<std::vector<kv::GetResult>>(std::move(results));
}

Result<kv::MatchResult> RemoteStore::match_prefix(uint16_t ns, std::span<const kv::Key128> keys) {
  KVTIER_RETURN_IF_ERROR(impl_->check_ns(ns));
  const size_t chunk = std::max<uint32_t>(1, server_limits().max_match_keys);
  kv::MatchResult total;
  // Chunks in sequence: a chunk that does not match to its end ends the prefix.
  for (size_t i = 0; i < keys.size(); i += chunk) {
    auto part = keys.subspan(i, std::min(chunk, keys.size() - i));
    if (auto direct = impl_->channel_match(ns, part)) {
      if (!direct->ok()) return direct->status();
      impl_->shared.direct_matches.fetch_add(1, std::memory_order_relaxed);
      const kv::MatchResult& m = **direct;
      total.blocks += m.blocks;
      total.ram_blocks += m.ram_blocks;
      total.disk_blocks += m.disk_blocks;
      total.tiers.insert(total.tiers.end(), m.tiers.begin(), m.tiers.end());
      if (m.blocks < part.size()) break;
      continue;
    }
    auto r = impl_->request(
        ns,
        [&](uint16_t sns) {
          return Message(
              MatchPrefixRequest{sns, std::vector<kv::Key128>(part.begin(), part.end())});
        },
        {}, {}, MessageType::kMatchPrefixResponse);
    if (!r.status.ok()) return r.status;
    if (r.error != CallError::kNone) break;  // what matched so far is still a prefix
    auto resp = MatchPrefixResponse::decode(r.call->descriptor);
    if (!resp.ok() || resp->tiers.size() > part.size()) break;
    kv::MatchResult m = resp->to_result();
    total.blocks += m.blocks;
    total.ram_blocks += m.ram_blocks;
    total.disk_blocks += m.disk_blocks;
    total.tiers.insert(total.tiers.end(), m.tiers.begin(), m.tiers.end());
    if (m.blocks < part.size()) break;
  }
  return total;
}

Result<bool> RemoteStore::remove(uint16_t ns, const kv::Key128& key) {
  KVTIER_RETURN_IF_ERROR(impl_->check_ns(ns));
  if (key.is_zero()) return Status::invalid_argument("the all-zero key is reserved");
  auto r = impl_->request(
      ns,
      [&](uint16_t sns) {
        return Message(RemoveRequest{sns, key});
      },
      {}, {}, MessageType::kRemoveResponse);
  if (!r.status.ok()) return r.status;
  if (r.error != CallError::kNone) return false;
  auto resp = RemoveResponse::decode(r.call->descriptor);
  return resp.ok() && resp->removed;
}

namespace {
template <typename Impl, typename Make>
Result<size_t> pin_like(Impl& impl, uint16_t ns, std::span<const kv::Key128> keys, size_t chunk,
                        Make&& make, MessageType expect) {
  if (keys.empty()) return size_t{0};
  auto parts = chunks(keys.size(), chunk, UINT64_MAX, [](size_t) { return uint64_t{0}; });
  Status bad;
  auto replies = impl.request_pipelined(
      ns, parts.size(),
      [&](size_t p, uint16_t sns) {
        return make(sns, std::vector<kv::Key128>(keys.begin() + parts[p].first,
                                                 keys.begin() + parts[p].second));
      },
      [](size_t) { return std::span<const ByteView>(); },
      [](size_t) { return std::span<const MutableByteView>(); }, expect, &bad);
  if (!bad.ok()) return bad;
  size_t n = 0;
  for (const auto& r : replies) {
    if (!r.ok()) continue;
    if (expect == MessageType::kPinResponse) {
      auto d = PinResponse::decode(r.call->descriptor);
      if (d.ok()) n += d->pinned;
    } else {
      auto d = UnpinResponse::decode(r.call->descriptor);
      if (d.ok()) n += d->unpinned;
    }
  }
  return n;
}
}  // namespace

Result<size_t> RemoteStore::pin(uint16_t ns, std::span<const kv::Key128> keys, uint64_t ttl_ms) {
  KVTIER_RETURN_IF_ERROR(impl_->check_ns(ns));
  return pin_like(
      *impl_, ns, keys, std::max<uint32_t>(1, server_limits().max_match_keys),
      [&](uint16_t sns, std::vector<kv::Key128> k) {
        return Message(PinRequest{sns, ttl_ms, std::move(k)});
      },
      MessageType::kPinResponse);
}

Result<size_t> RemoteStore::unpin(uint16_t ns, std::span<const kv::Key128> keys) {
  KVTIER_RETURN_IF_ERROR(impl_->check_ns(ns));
  return pin_like(
      *impl_, ns, keys, std::max<uint32_t>(1, server_limits().max_match_keys),
      [&](uint16_t sns, std::vector<kv::Key128> k) {
        return Message(UnpinRequest{sns, std::move(k)});
      },
      MessageType::kUnpinResponse);
}

Result<std::vector<StatCounter>> RemoteStore::stat_counters() {
  auto c = impl_->stats_call(StatsFormat::kCounters);
  if (!c.ok()) return c.status();
  auto resp = StatsResponse::decode((*c)->descriptor);
  if (!resp.ok()) return resp.status();
  return std::move(resp->counters);
}

Result<kv::StoreStats> RemoteStore::stats() {
  auto c = stat_counters();
  if (!c.ok()) return c.status();
  return store_stats_from_counters(*c);
}

Result<std::string> RemoteStore::stats_json() {
  auto c = impl_->stats_call(StatsFormat::kJson);
  if (!c.ok()) return c.status();
  const auto& d = (*c)->data_in;
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

}  // namespace kvtier::net
