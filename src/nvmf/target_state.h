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
  // The host's DH-HMAC-CHAP configuration; null: the host need not
  // authenticate.
  const HostAuthConfig* auth_for(const std::string& hostnqn) const;
};

struct Controller {
  uint16_t cntlid = 0;
  const Subsystem* subsystem = nullptr;  // null for a discovery controller
  std::string hostnqn;
  std::array<uint8_t, 16> hostid{};
  std::mutex mu;  // guards the registers and the queue table below
  uint32_t cc = 0;
  uint32_t csts = 0;
  std::atomic<uint32_t> kato_ms{0};  // as served: clamped by TargetState::clamp_kato
  uint32_t async_event_config = 0;
  uint16_t io_queues_granted = 0;        // 1's based; 0 until Set Features (then config max)
  std::map<uint16_t, Closable*> queues;  // every connection of this controller, by queue id
  std::atomic<int64_t> last_keepalive_ns{0};
  bool is_discovery() const { return subsystem == nullptr; }
};

// What the target refused or cut off to protect itself (NvmfTarget::counters).
struct TargetCounters {
  uint64_t connections_refused = 0;  // over max_connections, closed at accept
  uint64_t controllers_refused = 0;  // admin Connect over max_controllers
  uint64_t handshake_timeouts = 0;   // no ICReq or Connect in time
  uint64_t r2t_timeouts = 0;         // an R2T's data not in time
  uint64_t send_stalls = 0;          // a host stopped reading: connection dropped
  uint64_t r2t_refused = 0;          // writes refused over max_r2t_bytes
  uint64_t duplicate_queues = 0;     // a second Connect for a queue id in use
  uint64_t kato_clamped = 0;         // KATO raised, lowered or 0 replaced
  uint64_t auth_failures = 0;        // DH-HMAC-CHAP transactions that failed (queue dropped)
  uint64_t auth_successes = 0;       // queues authenticated
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
  // Removes this controller (not whichever holds its id now: ids are reused
  // after they wrap) and cuts off all its connections.
  void destroy_controller(const std::shared_ptr<Controller>& c);
  // The KATO the target serves for one asked for (config min/max; 0 = max).
  uint32_t clamp_kato(uint32_t asked_ms);
  // Destroys controllers whose keep-alive timer expired; returns how many.
  int expire_keepalives(int64_t now_ns);
  void destroy_all();
  uint64_t discovery_generation() const { return 1; }  // exports are fixed for a run

  // R2T data owed by hosts, over all connections (config max_r2t_bytes).
  bool reserve_r2t(uint64_t bytes);
  void release_r2t(uint64_t bytes);

  // Counting what was refused or cut off; counters() reads a snapshot.
  enum class Event {
    kConnectionRefused,
    kControllerRefused,
    kHandshakeTimeout,
    kR2tTimeout,
    kSendStall,
    kR2tRefused,
    kDuplicateQueue,
    kKatoClamped,
    kAuthFailure,
    kAuthSuccess,
    kCount
  };
  void count(Event e);
  TargetCounters counters() const;

 private:
  TargetConfig config_;
  std::vector<Subsystem> subsystems_;
  std::mutex mu_;
  std::map<uint16_t, std::shared_ptr<Controller>> controllers_;
  uint16_t next_cntlid_ = 1;
  std::atomic<uint64_t> r2t_bytes_{0};
  std::array<std::atomic<uint64_t>, static_cast<size_t>(Event::kCount)> events_{};
};

int64_t monotonic_ns();

}  // namespace kvtier::nvmf
