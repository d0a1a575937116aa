// The client's connections to a store server, shared by RemoteStore's
// files (remote_store.cc, client_connection.cc) and by nothing else: a call
// in flight, the state every connection of one RemoteStore shares, a
// session's shared-memory slots, and one pooled connection.
#pragma once

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
#include "net/client/remote_store.h"
#include "net/client/shm_channel_client.h"
#include "net/shm/shm_area.h"
#include "net/wire/frame_stream_reader.h"

namespace kvtier::net {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

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

  void shutdown();

  // The generation of the current session, or nullopt when down.
  std::optional<uint64_t> up_generation() const;
  uint16_t version() const;
  uint64_t reserve_id() { return next_id_.fetch_add(1, std::memory_order_relaxed); }
  // The shared-memory area of session `gen` (null: none, or another session).
  std::shared_ptr<ClientShm> shm_session(uint64_t gen) const;

  std::optional<uint16_t> server_ns(uint16_t client_ns, uint64_t gen) const;
  void set_server_ns(uint16_t client_ns, uint16_t server_ns, uint64_t gen);

  // Queues `c` on session `gen`; false when that session is gone. Calls
  // queued on one connection are pipelined: written back to back, answered
  // in any order.
  bool submit(const std::shared_ptr<Call>& c, uint64_t gen);

  // Waits for the response to a submitted call until `deadline`. The
  // caller's buffers are free again whenever this returns.
  CallError wait(const std::shared_ptr<Call>& c, Clock::time_point deadline);

 private:
  void abort_socket() { sock_.close(); }
  // On the strand: breaks session `gen` if it is still the current one (a
  // later session's socket is left alone).
  void abort_session(uint64_t gen);

  bool closing() const;
  bool writer_busy() const;

  static asio::awaitable<void> run(std::shared_ptr<ClientConn> self);

  // Connects and says Hello within connect_timeout_ms.
  asio::awaitable<Status> open_session();

  asio::awaitable<Status> handshake();
  // The two halves of handshake(): resolve, connect and (with TLS) the TLS
  // handshake; then Hello out and the server's answer checked.
  asio::awaitable<Status> open_stream();
  asio::awaitable<Result<HelloResponse>> exchange_hello();

  // Asks for the shared-memory path right after Hello. A server that
  // declines, or one on another host, leaves the session on TCP (null); only
  // a broken connection is an error.
  asio::awaitable<Result<std::shared_ptr<ClientShm>>> attach_shm(uint16_t version,
                                                                 const ServerLimits& limits);

  // A direct channel holds leases its caller is done with until its next
  // get; when none comes within kReleaseFlushDelay, they are sent from here.
  static constexpr auto kReleaseFlushDelay = std::chrono::milliseconds(5);
  void schedule_release_flush(std::weak_ptr<ShmDirectChannel> weak_ch);

  // Where the data section of a response for `c` goes: the caller's buffers.
  // False when the response does not fit them (the decoder then keeps the
  // bytes and the caller sees a bad response).
  static bool route(const Call& c, const FrameHeader& h, ByteView descriptor,
                    std::vector<MutableByteView>& parts);

  void finish_call(const std::shared_ptr<Call>& c, Frame* f, Status failure);

  asio::awaitable<Status> read_loop();

  static asio::awaitable<void> write_loop(std::shared_ptr<ClientConn> self);

  void end_session(const Status& why);

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

}  // namespace kvtier::net
