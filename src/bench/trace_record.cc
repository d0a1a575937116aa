#include "bench/trace_record.h"

#include <fmt/format.h>

#include <cmath>

namespace kvtier::bench {

std::string read_request_fields(const nlohmann::json& record, const TraceFieldNames& names,
                                TraceRequestFields* out) {
  const auto t = record.find(names.time);
  const auto in = record.find(names.input);
  const auto outl = record.find(names.output);
  const auto ids = record.find("hash_ids");
  if (t == record.end() || in == record.end() || outl == record.end() || ids == record.end()) {
    return names.missing;
  }
  if (!t->is_number() || !in->is_number_unsigned() || !outl->is_number_unsigned() ||
      !ids->is_array()) {
    return "mistyped field";
  }
  const double time = t->get<double>();
  if (!std::isfinite(time) || time < 0) return fmt::format("negative or non-finite {}", names.time);
  const uint64_t input = in->get<uint64_t>(), output = outl->get<uint64_t>();
  if (input == 0) return fmt::format("empty prompt ({} 0)", names.input);
  if (input > UINT32_MAX || output > UINT32_MAX) return "length out of range";
  out->time = time;
  out->input_tokens = static_cast<uint32_t>(input);
  out->output_tokens = static_cast<uint32_t>(output);
  out->hash_ids = &*ids;
  return "";
}

}  // namespace kvtier::bench
