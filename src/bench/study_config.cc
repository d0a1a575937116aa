#include "bench/study_config.h"

#include <algorithm>
#include <cctype>

namespace kvtier::bench {

StudyOptions::StudyOptions()
    : profile(*engine::find_engine_profile("h100-qwen3-coder-30b-scaled")) {}

double StudyOptions::ModeledStoreRates::OpCosts::fixed_seconds(uint64_t blocks,
                                                               uint32_t nodes) const {
  if (blocks == 0) return 0;
  const double in_flight = std::max(queue_depth, 1.0) * std::max<uint32_t>(nodes, 1);
  return latency_s + static_cast<double>(blocks) * op_s / in_flight;
}

double StudyOptions::ModeledStoreRates::OpCosts::seconds(double bytes, uint64_t blocks, double rate,
                                                         uint32_t nodes) const {
  return bytes / rate + fixed_seconds(blocks, nodes);
}

const char* load_policy_name(LoadPolicy p) { return p == LoadPolicy::kRace ? "race" : "load"; }

const std::vector<CaseSpec>& study_cases() {
  static const std::vector<CaseSpec> cases = {
      {StudyCase::kA, "A", "recompute", false, false, false, false, false},
      {StudyCase::kB, "B", "local prefix cache", true, false, false, false, false},
      {StudyCase::kC, "C", "shared RAM", true, true, true, false, false},
      {StudyCase::kD, "D", "RAM + local NVMe", true, true, true, true, false},
      {StudyCase::kE, "E", "RAM + remote NVMe (NVMe/TCP)", true, true, true, true, true},
      {StudyCase::kF, "F", "direct reads from the volume (no RAM tier)", true, true, false, true,
       false},
  };
  return cases;
}

const CaseSpec& case_spec(StudyCase c) { return study_cases()[static_cast<size_t>(c)]; }

const char* pd_transfer_mode_name(PdTransferMode m) {
  return m == PdTransferMode::kModeled ? "modeled" : "loopback";
}

bool parse_pd_transfer_mode(const std::string& name, PdTransferMode* out) {
  for (auto m : {PdTransferMode::kLoopback, PdTransferMode::kModeled}) {
    if (name == pd_transfer_mode_name(m)) {
      *out = m;
      return true;
    }
  }
  return false;
}

bool parse_study_case(const std::string& letter, StudyCase* out) {
  if (letter.size() != 1) return false;
  const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(letter[0])));
  for (const auto& s : study_cases()) {
    if (s.letter[0] == c) {
      *out = s.id;
      return true;
    }
  }
  return false;
}

}  // namespace kvtier::bench
