// Shared memory for the same-host fast path (docs/protocol-store.md,
// "Shared-memory path"): a sealed memfd area that a client creates and maps,
// and passes to the store server over an abstract Unix socket (SCM_RIGHTS), so
// that block bytes of put and get move through memory both processes map
// instead of through TCP.
//
// Safety rules this file enforces:
// - the client seals the memfd against shrinking and growing (F_SEAL_SHRINK,
//   F_SEAL_GROW, F_SEAL_SEAL) before passing it; the server refuses an fd
//   without those seals, so a client can never truncate the file under the
//   server's mapping (which would raise SIGBUS in the server);
// - the server checks the fd's real size (fstat) against the size announced
//   and its own limit before mapping;
// - the Unix socket only hands an area to the TCP connection that asked for
//   it, named by a 128-bit random nonce sent on that (authenticated)
//   connection.
//
// Thread-safety: ShmArea is immutable after creation (the bytes are shared by
// design: who may touch which range is the protocol's business).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/buffer.h"
#include "common/status.h"
#include "kv/block_key.h"

namespace kvtier::net {

class ShmArea {
 public:
  // A new sealed memfd of `bytes`, mapped read/write (client side).
  static Result<std::shared_ptr<ShmArea>> create(size_t bytes);
  // Maps a received fd (server side). Takes ownership of `fd` (closed on
  // error too). Refuses an fd that is not sealed against shrinking and
  // growing, whose size differs from `announced_bytes`, or exceeds `max_bytes`.
  static Result<std::shared_ptr<ShmArea>> map_received(int fd, uint64_t announced_bytes,
                                                       uint64_t max_bytes);
  ~ShmArea();
  ShmArea(const ShmArea&) = delete;
  ShmArea& operator=(const ShmArea&) = delete;

  int fd() const { return fd_; }
  size_t size() const { return size_; }
  std::byte* data() const { return base_; }
  // The byte range [offset, offset + length) when it lies inside the area;
  // nullopt for any range that does not (overflow included).
  std::optional<MutableByteView> range(uint64_t offset, uint64_t length) const;

 private:
  ShmArea(int fd, std::byte* base, size_t size) : fd_(fd), base_(base), size_(size) {}
  int fd_;
  std::byte* base_;
  size_t size_;
};

// This machine's boot id (/proc/sys/kernel/random/boot_id): two processes
// with the same boot id run on the same kernel. Empty when unreadable.
std::string host_boot_id();

// 16 random bytes (OpenSSL's RAND_bytes).
Result<kv::Key128> random_nonce();

// The attach handshake on the abstract Unix socket (docs/protocol-store.md,
// "Attach"). Version 1: the client sends the nonce, the area size and the
// memfd in one 24-byte message; the server answers one byte (0: mapped, else
// refused) and closes. Version 2 (32 bytes: the same, then u32 flags, u32
// zero) may ask for the direct channel: the server answers 17 bytes, with
// the RAM arena's memfd attached when it shares it, and keeps the socket
// open as the connection's direct channel when it granted one.
constexpr uint32_t kShmAttachWantChannel = 1u << 0;
struct ShmAttachMessage {
  kv::Key128 nonce;
  uint64_t area_bytes = 0;
  uint16_t version = 2;  // 1: the 24-byte message, no flags
  uint32_t flags = 0;    // kShmAttachWantChannel
};
// The grant of a version-2 attach.
struct ShmAttachGrant {
  int channel = -1;  // the open direct channel (owned by the caller), or -1
  int arena = -1;    // the server's RAM arena memfd (owned), or -1
  uint64_t arena_bytes = 0;
};
// Client side: connects to abstract socket `name`, sends `msg` with `fd`,
// waits for the answer; every step bounded by `timeout_ms`. A channel
// returned has no socket timeouts left on it.
Result<ShmAttachGrant> shm_attach_send(const std::string& name, const ShmAttachMessage& msg, int fd,
                                       uint32_t timeout_ms);

// Server side: a listening abstract Unix socket.
class ShmListener {
 public:
  // Binds abstract socket `name` (no file on disk; visible to this network
  // namespace only).
  static Result<std::unique_ptr<ShmListener>> listen(const std::string& name);
  ~ShmListener();
  int fd() const { return fd_; }
  const std::string& name() const { return name_; }
  // Accepts one client and reads its message and fd (bounded by
  // `timeout_ms`); the connected socket is returned for the answer.
  struct Received {
    int conn = -1;  // owned by the caller: answer with shm_attach_answer
    ShmAttachMessage msg;
    int fd = -1;  // owned by the caller
  };
  Result<Received> accept_one(uint32_t timeout_ms);
  // The same in two steps, for a server that waits on many clients at once
  // (one that never sends must not hold up the others): accept without
  // blocking (-1: nobody waiting), then, once poll says the connection is
  // readable, receive() the message. The connection's send and receive
  // timeouts are set to `timeout_ms`.
  int accept_pending(uint32_t timeout_ms);
  static Result<Received> receive(int conn);

 private:
  ShmListener(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  int fd_;
  std::string name_;
};
// Sends the one-byte answer and closes `conn` (any refusal; a version-1 grant).
void shm_attach_answer(int conn, bool ok);
// A version-2 grant: sends the 17-byte answer with `arena_fd` (unless -1)
// attached. When `keep_channel`, `conn` stays open (its timeouts cleared) and
// becomes the direct channel; else it is closed. False if the send failed
// (`conn` is then closed).
bool shm_attach_grant(int conn, bool keep_channel, int arena_fd, uint64_t arena_bytes);

}  // namespace kvtier::net
