// State the target's connections share: the exported subsystems and the live
// controllers (one per admin Connect). Each connection thread touches its own
// controller's registers under that controller's mutex; the controller table
// is guarded by TargetState::mu. The keep-alive sweeper runs on its own thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nvmf/target_config.h"

namespace kvtier::nvmf {

// A connection as the state sees it: something that can be cut off (keep-alive
// expiry, controller teardown, target stop).
class Closable {
 public:
  virtual ~Closable() = default;
  virtual void close_now() = 0;
};

struct Subsystem {
  SubsystemConfig config;
  std::vector<std::array<uint8_t, 16>> nguids;  // per namespace, unique per subsystem+nsid
  bool host_allowed(const std::string& hostnqn) const;
};

struct Controller {
  uint16_t cntlid = 0;
  const Subsystem* subsystem = nullptr;  // null for a discovery controller
  std::string hostnqn;
  std::array<uint8_t, 16> hostid{};
  std::mutex mu;  // guards the registers and the queue list below
  uint32_t cc = 0;
  uint32_t csts = 0;
  uint32_t kato_ms = 0;
  uint32_t async_event_config = 0;
  uint16_t io_queues_granted = 0;  // 1's based; 0 until Set Features (then config max)
  std::vector<Closable*> queues;   // every connection of this controller
  std::atomic<int64_t> last_keepalive_ns{0};
  bool is_discovery() const { return subsystem == nullptr; }
};

class TargetState {
 public:
  explicit TargetState(TargetConfig config);

  const TargetConfig& config() const { return config_; }
  const Subsystem* find_subsystem(const std::string& nqn) const;
  const std::vector<Subsystem>& subsystems() const { return subsystems_; }

  // A new controller for an admin Connect; null subsystem = discovery.
  std::shared_ptr<Controller> create_controller(const Subsystem* s, const std::string& hostnqn,
                                                const std::array<uint8_t, 16>& hostid,
                                                uint32_t kato_ms);
  std::shared_ptr<Controller> find_controller(uint16_t cntlid);
  // Removes the controller and cuts off all its connections.
  void destroy_controller(uint16_t cntlid);
  // Destroys controllers whose keep-alive timer expired; returns how many.
  int expire_keepalives(int64_t now_ns);
  void destroy_all();
  uint64_t discovery_generation() const { return 1; }  // exports are fixed for a run

 private:
  TargetConfig config_;
  std::vector<Subsystem> subsystems_;
  std::mutex mu_;
  std::map<uint16_t, std::shared_ptr<Controller>> controllers_;
  uint16_t next_cntlid_ = 1;
};

int64_t monotonic_ns();

}  // namespace kvtier::nvmf
