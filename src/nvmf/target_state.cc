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
  std::lock_guard lk(mu_);
  if (controllers_.size() >= 0xFFEF) return nullptr;
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

void TargetState::destroy_controller(uint16_t cntlid) {
  std::shared_ptr<Controller> c;
  {
    std::lock_guard lk(mu_);
    auto it = controllers_.find(cntlid);
    if (it == controllers_.end()) return;
    c = it->second;
    controllers_.erase(it);
  }
  std::lock_guard lk(c->mu);
  for (Closable* q : c->queues) q->close_now();
}

int TargetState::expire_keepalives(int64_t now_ns) {
  std::vector<uint16_t> expired;
  {
    std::lock_guard lk(mu_);
    for (auto& [id, c] : controllers_) {
      if (c->kato_ms == 0) continue;
      if (now_ns - c->last_keepalive_ns.load() > int64_t(c->kato_ms) * 1'000'000) {
        expired.push_back(id);
      }
    }
  }
  for (uint16_t id : expired) destroy_controller(id);
  return int(expired.size());
}

void TargetState::destroy_all() {
  std::vector<uint16_t> ids;
  {
    std::lock_guard lk(mu_);
    for (auto& [id, c] : controllers_) ids.push_back(id);
  }
  for (uint16_t id : ids) destroy_controller(id);
}

}  // namespace kvtier::nvmf
