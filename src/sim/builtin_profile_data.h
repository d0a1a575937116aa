// The text of each file of src/sim/profiles/, in name order. Defined in the
// build tree by src/sim/CMakeLists.txt (builtin_profile_data.cc).
#pragma once

#include <vector>

namespace kvtier::sim {

const std::vector<const char*>& builtin_profile_json();

}  // namespace kvtier::sim
