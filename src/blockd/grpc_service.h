// BlockdServer: the gRPC management API of kvtier-blockd (blockd.proto) over
// a BlockDaemon. Management can create volumes, read and write them and
// export them, so it is served only where the caller is known:
//  - on a Unix socket (the default), created with mode 0600 (0660 with a
//    group) before it is bound, whose every connection is checked against
//    the peer's kernel credentials (SO_PEERCRED, SO_PEERGROUPS) before gRPC
//    sees it: root, the daemon's own user, the socket's owner and members of
//    its group are served, everyone else is disconnected and logged;
//  - on TCP only with mutual TLS (a server certificate and a CA that every
//    client certificate must chain to), and only when asked for.
// gRPC's own thread pool runs the handlers; BlockDaemon serialises them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "blockd/daemon.h"
#include "common/status.h"

namespace kvtier::blockd {

inline constexpr const char* kDefaultSocket = "/run/kvtier/blockd.sock";

struct ServerOptions {
  // Unix socket of the API ("" = none). Its folder is created (0755) if missing.
  std::string socket_path = kDefaultSocket;
  // Owner and group of the socket (-1: the daemon's user; no group). A group
  // makes the socket 0660 and lets its members manage the daemon.
  int64_t socket_uid = -1;
  int64_t socket_gid = -1;
  // TCP management ("" = none): host:port, port 0 picks a free one. Needs all
  // three TLS files; clients must present a certificate signed by the CA.
  std::string tcp_listen;
  std::string tls_cert_file, tls_key_file, tls_client_ca_file;
  // TLS clients must also come from one of these hosts (empty: any).
  std::vector<std::string> allowed_hosts;
};

// "ipv4:127.0.0.1:5000" -> "127.0.0.1"; "ipv6:[::1]:5000" -> "::1".
std::string peer_host(const std::string& peer);

// Who may use the Unix socket: root, `daemon_uid`, `socket_uid` and members
// of `socket_gid` (-1: none).
struct PeerCredentials {
  int64_t uid = -1;
  int64_t gid = -1;
  std::vector<int64_t> groups;  // supplementary groups
};
bool peer_may_manage(const PeerCredentials& peer, int64_t daemon_uid, int64_t socket_uid,
                     int64_t socket_gid);

class BlockdServer {
 public:
  static Result<std::unique_ptr<BlockdServer>> start(BlockDaemon& daemon, const ServerOptions& o);
  ~BlockdServer();
  // TCP port bound (0: no TCP listener).
  int port() const { return port_; }
  // Connections refused on the Unix socket so far (peer credentials).
  uint64_t refused_connections() const;
  // Blocks until shutdown() (from another thread or a signal handler thread).
  void wait();
  void shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace kvtier::blockd
