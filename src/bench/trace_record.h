// The fields every supported trace gives one request: when it came, its
// prompt and output lengths, and its prompt's block hash ids. The formats
// name them differently (Mooncake: timestamp, input_length, output_length;
// agent sessions: t, in, out; both: hash_ids) but check them alike.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace kvtier::bench {

struct TraceFieldNames {
  const char* time;
  const char* input;
  const char* output;
  const char* missing;  // the skip reason for a record that lacks one of them
};

struct TraceRequestFields {
  double time = 0;            // as the trace gives it (non-negative, finite)
  uint32_t input_tokens = 0;  // at least 1
  uint32_t output_tokens = 0;
  const nlohmann::json* hash_ids = nullptr;  // an array, in the record; not yet checked
};

// Why the object `record` lacks or mistypes one of the fields, or "" with
// `out` set. The reasons name the format's fields, for skip counts.
std::string read_request_fields(const nlohmann::json& record, const TraceFieldNames& names,
                                TraceRequestFields* out);

}  // namespace kvtier::bench
