// BlockdServer: the gRPC management API of kvtier-blockd (blockd.proto) over
// a BlockDaemon. It listens on loopback unless told otherwise and refuses
// callers whose address is neither loopback nor in the allowed list. gRPC's
// own thread pool runs the handlers; BlockDaemon serialises them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "blockd/daemon.h"
#include "common/status.h"

namespace kvtier::blockd {

struct ServerOptions {
  std::string listen = "127.0.0.1:7450";   // host:port; port 0 picks a free one
  std::vector<std::string> allowed_hosts;  // besides loopback
};

// "ipv4:127.0.0.1:5000" -> "127.0.0.1"; "ipv6:[::1]:5000" -> "::1".
std::string peer_host(const std::string& peer);
bool peer_allowed(const std::string& peer, const std::vector<std::string>& allowed_hosts);

class BlockdServer {
 public:
  static Result<std::unique_ptr<BlockdServer>> start(BlockDaemon& daemon, const ServerOptions& o);
  ~BlockdServer();
  int port() const { return port_; }
  // Blocks until shutdown() (from another thread or a signal handler thread).
  void wait();
  void shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace kvtier::blockd
