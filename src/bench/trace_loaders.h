// Loaders of the real public traces the study's benchmark replays. Each
// returns a Workload (bench/workload.h) and records what it skipped and why.
#pragma once

#include <string>

#include "bench/workload.h"
#include "common/status.h"

namespace kvtier::bench {

// Mooncake FAST'25 JSONL (one request per line: timestamp, input_length,
// output_length, hash_ids of 512-token blocks).
Result<Workload> load_mooncake_trace(const std::string& path);

// kv-cache-tester session JSON: one file, or a directory whose *.json files
// are each loaded as sessions.
Result<Workload> load_agent_session_traces(const std::string& path);

}  // namespace kvtier::bench
