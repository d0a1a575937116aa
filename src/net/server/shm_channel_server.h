// The server's end of a direct channel (docs/protocol-store.md, "Direct
// channel"): a thread of its own that reads ShmLeaseGet, ShmRelease and
// MatchPrefix frames from one client's Unix socket and answers them. A RAM hit is not
// copied: the block's RAM slot is leased and the answer names where it lies
// in the RAM arena the client mapped read-only. The channel holds every
// lease it hands out and releases those the client has not released when it
// closes, so a client that dies cannot pin RAM slots.
//
// The channel belongs to one TCP connection (it was attached with that
// connection's nonce) and uses that connection's namespace handles; the
// server closes it when the connection ends.
//
// Thread-safety: start() and close() may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>

#include "common/status.h"
#include "kv/store.h"
#include "net/shm/shm_area.h"
#include "net/wire/protocol.h"

namespace kvtier::net {

struct ShmChannelContext {
  kv::Store* store = nullptr;
  std::shared_ptr<ShmArea> area;  // the client's area (misses of the arena path land here)
  bool lease_from_arena = false;  // the store's RAM arena `arena` is shared with this client
  uint16_t arena = 0;
  uint32_t max_object_bytes = 0;
  uint32_t max_match_keys = kMaxMatchKeys;
  uint32_t max_descriptor_bytes = kMaxDescriptorBytes;  // a MatchPrefix key list
  uint32_t max_leases = 64;  // held at once; beyond, hits are copied into the area
  // Leases held by every channel of the server together, and their bound
  // (a share of the RAM tier's slots), so that channels cannot lease all of
  // RAM between them: past it, hits are copied as well. Unset: no bound.
  std::shared_ptr<std::atomic<uint64_t>> server_leases;
  uint64_t max_server_leases = 0;
  std::string peer;  // for the log
  // The connection's namespace handle check.
  std::function<Status(uint16_t ns)> check_ns;
  // Maps keys sent under `ns` to the store's keys (a tenant's key space;
  // tenant_registry.h). Unset: keys as sent.
  std::function<void(uint16_t ns, std::span<kv::Key128> keys)> map_keys;
  // Counts one served request of `type` that took `ns` nanoseconds.
  std::function<void(MessageType type, uint64_t ns)> count_request;
  // Counts block bytes moved (leased or copied into the area).
  std::function<void(uint64_t bytes)> count_bytes;
};

class ShmChannelServer {
 public:
  // Takes ownership of `fd` and serves it on a new thread.
  static std::shared_ptr<ShmChannelServer> start(int fd, ShmChannelContext ctx);
  ~ShmChannelServer();
  ShmChannelServer(const ShmChannelServer&) = delete;
  ShmChannelServer& operator=(const ShmChannelServer&) = delete;

  // Wakes the thread (shutdown of the socket); it releases its leases and ends.
  void close();
  // close(), then waits for the thread.
  void join();
  bool finished() const { return finished_.load(std::memory_order_acquire); }

 private:
  ShmChannelServer(int fd, ShmChannelContext ctx) : fd_(fd), ctx_(std::move(ctx)) {}
  void serve();
  // One request; false when the channel must close (a reply could not be sent).
  bool handle(const Frame& f);
  Result<ShmLeaseGetResponse> lease_get(const ShmLeaseGetRequest& req);
  void release(uint32_t lease);
  void release_all();

  int fd_;
  ShmChannelContext ctx_;
  std::thread thread_;
  std::atomic<bool> finished_{false};
  std::unordered_map<uint32_t, uint32_t> leases_;  // RAM slot -> leases held (thread only)
  uint32_t held_ = 0;
};

}  // namespace kvtier::net
