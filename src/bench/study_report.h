// The study report: the results of every case under every protocol, the
// physical limits measured in the same run (memcpy, fio on the volume, and
// the rate at which the modeled GPU produces KV by recomputing), and their
// renderings: one JSON object (ratios under keys ending in _ratio) and a
// Markdown report in the shape of the study's tables 6, 7 (and 8) and 9.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/study_config.h"
#include "bench/study_runner.h"
#include "bench/workload.h"

namespace kvtier::bench {

struct StudyLimits {
  double memcpy_bytes_per_s = 0;        // one thread, objects of the block size
  double fio_randread_bytes_per_s = 0;  // on a volume file, block entry size, read depth
  std::string fio_command;
  std::string fio_error;  // why fio did not run, if it did not
  // KV bytes per second the modeled GPU produces by recomputing (prefill rate
  // x KV bytes per token): a store load beats recomputation exactly when the
  // store moves stored bytes faster than this per wall second.
  double recompute_kv_bytes_per_s = 0;
};

struct StudyWorkloadInfo {
  std::string name;
  uint64_t sessions = 0, requests = 0, records_read = 0, records_skipped = 0;
  std::map<std::string, uint64_t> skipped_by_reason;
  uint32_t block_tokens = 0;
  std::vector<std::string> group_labels;
  std::vector<uint64_t> group_counts;
  uint64_t unique_blocks = 0;
  double mean_prompt_tokens = 0;  // deployment tokens
};

StudyWorkloadInfo describe_workload(const Workload& w, double token_scale);

// Measures memcpy and fio for the run's block size in `volume_dir`.
StudyLimits measure_study_limits(const StudyOptions& o, uint32_t block_bytes);

struct StudyReport {
  StudyWorkloadInfo workload;
  StudyOptions options;
  StudyLimits limits;
  std::vector<CaseResult> results;
  double wall_s = 0;

  // `with_samples` adds each case's per-request TTFTs (for the plots).
  nlohmann::json json(bool with_samples = false) const;
  std::string markdown() const;
};

}  // namespace kvtier::bench
