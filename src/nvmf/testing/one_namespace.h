// The set-up most nvmf tests start from: a target with one subsystem of one
// namespace that admits one host, and host options that reach it. Tests
// change what they exercise on top (timeouts, queues, limits).
#pragma once

#include <memory>
#include <utility>

#include "nvmf/host_device.h"
#include "nvmf/target_config.h"

namespace kvtier::nvmf::testing {

inline TargetConfig one_namespace_target(std::shared_ptr<blk::BlockDevice> dev, const char* subnqn,
                                         const char* hostnqn, uint16_t port = 0) {
  TargetConfig c;
  c.port = port;
  SubsystemConfig s;
  s.nqn = subnqn;
  s.allowed_hosts = {hostnqn};
  s.namespaces.push_back(std::move(dev));
  c.subsystems.push_back(s);
  return c;
}

inline HostOptions host_options_for(uint16_t port, const char* subnqn, const char* hostnqn) {
  HostOptions o;
  o.port = port;
  o.subnqn = subnqn;
  o.hostnqn = hostnqn;
  return o;
}

}  // namespace kvtier::nvmf::testing
