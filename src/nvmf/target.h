// NvmfTarget: the NVMe/TCP target. Listens on one TCP address (loopback by
// default), serves the discovery subsystem and the configured NVM subsystems,
// one thread per queue connection (plus a sender thread per I/O queue), and
// expires controllers whose host stops sending Keep Alive. Connections over
// TargetConfig::max_connections are closed as they are accepted. stop() (or the destructor) closes
// every connection and joins every thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <thread>

#include "nvmf/target_config.h"
#include "nvmf/target_state.h"

namespace kvtier::nvmf {

class NvmfTarget {
 public:
  static Result<std::unique_ptr<NvmfTarget>> start(TargetConfig config);
  ~NvmfTarget();
  NvmfTarget(const NvmfTarget&) = delete;
  NvmfTarget& operator=(const NvmfTarget&) = delete;

  uint16_t port() const { return port_; }
  void stop();
  uint64_t connections_served() const { return served_; }
  // Connections whose thread has not ended yet.
  size_t live_connections();
  // What the target refused or cut off to protect itself.
  TargetCounters counters() const { return state_->counters(); }

 private:
  struct Conn;
  NvmfTarget() = default;
  void accept_loop();
  void keepalive_loop();
  void reap(bool all);

  std::unique_ptr<TargetState> state_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::thread keepalive_;
  std::mutex conns_mu_;
  std::list<std::unique_ptr<Conn>> conns_;
  std::atomic<uint64_t> served_{0};
};

}  // namespace kvtier::nvmf
