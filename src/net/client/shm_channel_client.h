// The client's end of a direct channel (docs/protocol-store.md, "Direct
// channel"): the calling thread writes a ShmLeaseGet on the Unix socket and
// reads the answer itself (no I/O thread in between), then copies a leased
// block straight out of the server's RAM arena, which it maps read-only, and
// releases the lease with a one-way ShmRelease. One call at a time: a thread
// that finds the channel busy uses the connection's other paths.
//
// A channel that fails in any way (a timeout, a closed socket, an answer
// that breaks the protocol) is marked broken and never used again; the
// server releases the leases of a channel that closes. The session's next
// connection attaches a new one.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>

#include "common/buffer.h"
#include "common/status.h"
#include "kv/block_key.h"
#include "kv/store.h"
#include "net/wire/protocol.h"

namespace kvtier::net {

class ShmDirectChannel {
 public:
  // Takes ownership of both fds (closed on error too). `arena_fd` may be -1:
  // then every hit is copied into the client's area. `arena_reads` (may be
  // null, must outlive the channel) counts blocks copied from the arena.
  static Result<std::unique_ptr<ShmDirectChannel>> open(int channel_fd, int arena_fd,
                                                        uint64_t arena_bytes,
                                                        std::atomic<uint64_t>* arena_reads);
  ~ShmDirectChannel();
  ShmDirectChannel(const ShmDirectChannel&) = delete;
  ShmDirectChannel& operator=(const ShmDirectChannel&) = delete;

  // Where a hit the server copies (not in RAM) goes: the caller's slot of
  // its shared-memory area.
  struct AreaSlot {
    uint64_t offset = 0;              // in the area, as the server sees it
    const std::byte* data = nullptr;  // the same bytes here
    uint32_t room = 0;
  };
  // A get through the channel into `out`, or nullopt when the channel is
  // busy or broken (use another path). A transport failure gives a miss
  // (kTimeout or kIoError) and breaks the channel; an Error answer gives its
  // Status.
  std::optional<Result<kv::GetResult>> get(uint16_t server_ns, const kv::Key128& key,
                                           MutableByteView out, const AreaSlot& slot,
                                           std::chrono::steady_clock::time_point deadline);

  // A match_prefix of `keys` (at most the server's max_match_keys) through
  // the channel, or nullopt when the channel is busy or broken. A transport
  // failure gives an empty match and breaks the channel.
  std::optional<Result<kv::MatchResult>> match_prefix(
      uint16_t server_ns, std::span<const kv::Key128> keys,
      std::chrono::steady_clock::time_point deadline);

  bool broken() const;
  bool has_arena() const { return arena_ != nullptr; }

  // `arm` is called (under the channel's lock, so it must only post work)
  // when a lease becomes pending and no flush is scheduled; the owner then
  // calls flush_releases() after a short delay.
  void set_flush_scheduler(std::function<void()> arm);
  // Sends the pending releases if the channel is idle. True when the owner
  // should call again later (the channel was busy, or leases were pending).
  bool flush_releases();

 private:
  ShmDirectChannel(int fd, const std::byte* arena, uint64_t arena_bytes,
                   std::atomic<uint64_t>* arena_reads);
  struct State;
  int fd_;
  const std::byte* arena_;
  uint64_t arena_bytes_;
  std::atomic<uint64_t>* arena_reads_;
  // Marks the channel broken for good (logged); returns `why`.
  Status give_up(Status why);
  // Under the channel's lock: sends the pending releases as one ShmRelease.
  void send_pending_releases();
  // Under the channel's lock: sends `req` and reads its answer; any failure
  // breaks the channel (the stream is out of step).
  Result<Frame> exchange(const Message& req, std::chrono::steady_clock::time_point deadline);
  std::unique_ptr<State> st_;
};

}  // namespace kvtier::net
