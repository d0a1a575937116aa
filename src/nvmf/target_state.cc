// Subsystems, controllers and keep-alive expiry of the target.
#include "nvmf/target_state.h"

#include <algorithm>

#include "common/crc32c.h"

namespace kvtier::nvmf {

int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool Subsystem::host_allowed(const std::string& hostnqn) const {
  if (config.allow_any_host) return true;
  return std::find(config.allowed_hosts.begin(), config.allowed_hosts.end(), hostnqn) !=
         config.allowed_hosts.end();
}

const HostAuthConfig* Subsystem::auth_for(const std::string& hostnqn) const {
  auto it = config.host_keys.find(hostnqn);
  return it == config.host_keys.end() ? nullptr : &it->second;
}

TargetState::TargetState(TargetConfig config) : config_(std::move(config)) {
  for (const auto& sc : config_.subsystems) {
    Subsystem s;
    s.config = sc;
    if (s.config.serial.empty()) {
      char buf[21];
      snprintf(buf, sizeof buf, "KVT%08X", crc32c(sc.nqn.data(), sc.nqn.size()));
      s.config.serial = buf;
    }
    // NGUID: CRC32C of the NQN, of the NQN reversed, the nsid and a tag, so that
    // namespaces of different subsystems never share an id.
    const std::string rev(sc.nqn.rbegin(), sc.nqn.rend());
    for (uint32_t i = 0; i < sc.namespaces.size(); ++i) {
      std::array<uint8_t, 16> g{};
      const uint32_t parts[4] = {crc32c(sc.nqn.data(), sc.nqn.size()),
                                 crc32c(rev.data(), rev.size()), i + 1, 0x6b767469};
      for (int k = 0; k < 4; ++k)
        for (int b = 0; b < 4; ++b) g[k * 4 + b] = uint8_t(parts[k] >> (24 - 8 * b));
      s.nguids.push_back(g);
    }
    subsystems_.push_back(std::move(s));
  }
}

const Subsystem* TargetState::find_subsystem(const std::string& nqn) const {
  for (const auto& s : subsystems_)
    if (s.config.nqn == nqn) return &s;
  return nullptr;
}

std::shared_ptr<Controller> TargetState::create_controller(const Subsystem* s,
                                                           const std::string& hostnqn,
                                                           const std::array<uint8_t, 16>& hostid,
                                                           uint32_t kato_ms) {
  kato_ms = clamp_kato(kato_ms);
  std::lock_guard lk(mu_);
  if (controllers_.size() >= config_.max_controllers) {
    count(Event::kControllerRefused);
    return nullptr;
  }
  while (controllers_.count(next_cntlid_) || next_cntlid_ == 0 || next_cntlid_ >= 0xFFF0) {
    next_cntlid_ = next_cntlid_ >= 0xFFEF ? 1 : next_cntlid_ + 1;
  }
  auto c = std::make_shared<Controller>();
  c->cntlid = next_cntlid_++;
  c->subsystem = s;
  c->hostnqn = hostnqn;
  c->hostid = hostid;
  c->kato_ms = kato_ms;
  c->last_keepalive_ns = monotonic_ns();
  controllers_[c->cntlid] = c;
  return c;
}

std::shared_ptr<Controller> TargetState::find_controller(uint16_t cntlid) {
  std::lock_guard lk(mu_);
  auto it = controllers_.find(cntlid);
  return it == controllers_.end() ? nullptr : it->second;
}

void TargetState::destroy_controller(const std::shared_ptr<Controller>& c) {
  {
    std::lock_guard lk(mu_);
    auto it = controllers_.find(c->cntlid);
    if (it == controllers_.end() || it->second != c) return;  // already gone
    controllers_.erase(it);
  }
  std::lock_guard lk(c->mu);
  for (auto& [qid, q] : c->queues) q->close_now();
}

uint32_t TargetState::clamp_kato(uint32_t asked_ms) {
  const uint32_t served = asked_ms == 0
                              ? config_.max_kato_ms
                              : std::clamp(asked_ms, config_.min_kato_ms, config_.max_kato_ms);
  if (served != asked_ms) count(Event::kKatoClamped);
  return served;
}

int TargetState::expire_keepalives(int64_t now_ns) {
  std::vector<std::shared_ptr<Controller>> expired;
  {
    std::lock_guard lk(mu_);
    for (auto& [id, c] : controllers_) {
      const int64_t kato_ns = int64_t(c->kato_ms) * 1'000'000;
      if (now_ns - c->last_keepalive_ns.load() > kato_ns) expired.push_back(c);
    }
  }
  for (const auto& c : expired) destroy_controller(c);
  return int(expired.size());
}

void TargetState::destroy_all() {
  std::vector<std::shared_ptr<Controller>> all;
  {
    std::lock_guard lk(mu_);
    for (auto& [id, c] : controllers_) all.push_back(c);
  }
  for (const auto& c : all) destroy_controller(c);
}

bool TargetState::reserve_r2t(uint64_t bytes) {
  uint64_t held = r2t_bytes_.load(std::memory_order_relaxed);
  do {
    if (held + bytes > config_.max_r2t_bytes) {
      count(Event::kR2tRefused);
      return false;
    }
  } while (!r2t_bytes_.compare_exchange_weak(held, held + bytes, std::memory_order_relaxed));
  return true;
}

void TargetState::release_r2t(uint64_t bytes) {
  r2t_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
}

void TargetState::count(Event e) {
  events_[static_cast<size_t>(e)].fetch_add(1, std::memory_order_relaxed);
}

TargetCounters TargetState::counters() const {
  auto get = [&](Event e) {
    return events_[static_cast<size_t>(e)].load(std::memory_order_relaxed);
  };
  TargetCounters t;
  t.connections_refused = get(Event::kConnectionRefused);
  t.controllers_refused = get(Event::kControllerRefused);
  t.handshake_timeouts = get(Event::kHandshakeTimeout);
  t.r2t_timeouts = get(Event::kR2tTimeout);
  t.send_stalls = get(Event::kSendStall);
  t.r2t_refused = get(Event::kR2tRefused);
  t.duplicate_queues = get(Event::kDuplicateQueue);
  t.kato_clamped = get(Event::kKatoClamped);
  t.auth_failures = get(Event::kAuthFailure);
  t.auth_successes = get(Event::kAuthSuccess);
  return t;
}

}  // namespace kvtier::nvmf
