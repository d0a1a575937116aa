// The built-in simulator profiles: the JSON files of src/sim/profiles/,
// compiled in by CMake (builtin_profile_data.cc in the build tree) and parsed
// like any profile file on first use.
#include <cstdio>
#include <cstdlib>

#include "sim/builtin_profile_data.h"
#include "sim/sim_profile.h"

namespace kvtier::sim {

const std::vector<SimProfile>& builtin_sim_profiles() {
  static const std::vector<SimProfile> profiles = [] {
    std::vector<SimProfile> v;
    for (const char* text : builtin_profile_json()) {
      auto p = parse_sim_profile(text);
      if (!p.ok()) {
        // A committed profile that does not parse is a build defect.
        std::fprintf(stderr, "built-in sim profile: %s\n", p.status().to_string().c_str());
        std::abort();
      }
      v.push_back(std::move(*p));
    }
    return v;
  }();
  return profiles;
}

}  // namespace kvtier::sim
