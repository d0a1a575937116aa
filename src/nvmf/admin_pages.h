// Builders of the data that admin commands return: Identify Controller,
// Identify Namespace, active namespace list, namespace identification
// descriptors, the discovery log page and the controller properties.
// Pure functions over the target's state; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nvmf/target_state.h"

namespace kvtier::nvmf {

constexpr uint32_t kIdentifySize = 4096;
constexpr uint32_t kNvmeVersion = 0x00010300;  // 1.3: the classic namespace scan path

std::vector<uint8_t> identify_controller(const TargetConfig& cfg, const Controller& c);
// nsid is 1-based and must exist.
std::vector<uint8_t> identify_namespace(const Subsystem& s, uint32_t nsid);
std::vector<uint8_t> active_namespace_list(const Subsystem& s, uint32_t above_nsid);
std::vector<uint8_t> namespace_descriptors(const Subsystem& s, uint32_t nsid);
// The whole discovery log (1024-byte header + one 1024-byte entry per
// subsystem this host may connect to).
std::vector<uint8_t> discovery_log(const TargetState& st, const std::string& hostnqn,
                                   uint64_t generation);
uint64_t capabilities(const TargetConfig& cfg);  // CAP

}  // namespace kvtier::nvmf
