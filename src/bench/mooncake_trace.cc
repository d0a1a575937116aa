// Loader of the Mooncake FAST'25 JSONL traces. The trace has no session ids,
// so sessions are rebuilt from the block chains (rule below and in
// docs/workloads.md).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/trace_loaders.h"
#include "bench/trace_record.h"

namespace kvtier::bench {
namespace {

constexpr uint32_t kMooncakeBlockTokens = 512;
// A continuation must extend its parent by more than the one block every
// conversation of the trace shares (block 0, a common system prompt).
constexpr size_t kMinSessionPrefixBlocks = 2;

struct Record {
  double timestamp_ms = 0;
  uint32_t input_length = 0;
  uint32_t output_length = 0;
  std::vector<uint64_t> full_blocks;  // hash ids of the full 512-token blocks
  uint64_t line = 0;
};

// Why a line is unusable, or "" when it parsed.
std::string parse_record(const std::string& line, Record* out) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return "not valid JSON";
  if (!j.is_object()) return "not a JSON object";
  TraceRequestFields f;
  std::string why =
      read_request_fields(j, {"timestamp", "input_length", "output_length", "missing field"}, &f);
  if (!why.empty()) return why;
  const nlohmann::json* ids = f.hash_ids;
  const uint64_t blocks = (f.input_tokens + kMooncakeBlockTokens - 1) / kMooncakeBlockTokens;
  if (ids->size() != blocks) return "hash_ids length is not ceil(input_length / 512)";
  out->timestamp_ms = f.time;
  out->input_length = f.input_tokens;
  out->output_length = f.output_tokens;
  const size_t full = f.input_tokens / kMooncakeBlockTokens;
  out->full_blocks.clear();
  out->full_blocks.reserve(full);
  for (size_t i = 0; i < ids->size(); ++i) {
    if (!(*ids)[i].is_number_unsigned()) return "hash id not a non-negative integer";
    if (i < full) out->full_blocks.push_back((*ids)[i].get<uint64_t>());
  }
  return "";
}

// 64-bit hash of a block-id prefix, extended one id at a time.
uint64_t extend_hash(uint64_t h, uint64_t id) {
  h ^= id + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

// Every usable record of the file, in file order; unusable lines are
// counted in `w` by reason.
std::vector<Record> read_records(std::istream& in, Workload& w) {
  std::vector<Record> records;
  std::string line;
  uint64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank: not a record
    ++w.records_read;
    Record r;
    r.line = line_no;
    const std::string why = parse_record(line, &r);
    if (!why.empty()) {
      count_skipped(w, why);
      continue;
    }
    records.push_back(std::move(r));
  }
  return records;
}

// Session rule: a request continues the session whose last request's full
// blocks (at least kMinSessionPrefixBlocks of them) are a prefix of its own
// full blocks, taking the longest such prefix. A request whose parent
// already has a continuation starts a new session (a fork), so every
// session stays one chain of turns.
class SessionBuilder {
 public:
  explicit SessionBuilder(Workload& w) : w_(w) {}

  void add(Record& r, double t0_ms) {
    prefix_hash_.resize(r.full_blocks.size() + 1);
    prefix_hash_[0] = 0;
    for (size_t i = 0; i < r.full_blocks.size(); ++i) {
      prefix_hash_[i + 1] = extend_hash(prefix_hash_[i], r.full_blocks[i]);
    }
    int64_t session = take_parent(r);
    TraceRequest req;
    req.prompt_tokens = r.input_length;
    req.output_tokens = r.output_length;
    req.arrival_s = (r.timestamp_ms - t0_ms) / 1000.0;
    req.block_ids = std::move(r.full_blocks);
    if (session < 0) {
      session = static_cast<int64_t>(w_.sessions.size());
      w_.sessions.emplace_back();
    } else {
      req.gap_s = req.arrival_s - w_.sessions[session].turns.back().arrival_s;
    }
    if (req.block_ids.size() >= kMinSessionPrefixBlocks) {
      tails_[prefix_hash_[req.block_ids.size()]].push_back(static_cast<uint32_t>(session));
    }
    w_.sessions[session].turns.push_back(std::move(req));
  }

 private:
  // The session `r` continues (no longer open to another continuation), or
  // -1 when it starts a new one.
  int64_t take_parent(const Record& r) {
    for (size_t k = r.full_blocks.size(); k >= kMinSessionPrefixBlocks; --k) {
      auto found = tails_.find(prefix_hash_[k]);
      if (found == tails_.end()) continue;
      auto& candidates = found->second;
      for (size_t c = candidates.size(); c-- > 0;) {
        const auto& prev = w_.sessions[candidates[c]].turns.back();
        if (prev.block_ids.size() == k && prev.prompt_tokens < r.input_length &&
            std::equal(prev.block_ids.begin(), prev.block_ids.end(), r.full_blocks.begin())) {
          const int64_t session = candidates[c];
          candidates.erase(candidates.begin() + static_cast<std::ptrdiff_t>(c));
          return session;
        }
      }
    }
    return -1;
  }

  Workload& w_;
  // Sessions whose last request has a given prefix hash, oldest first;
  // among equal candidates the most recent one wins.
  std::unordered_map<uint64_t, std::vector<uint32_t>> tails_;
  std::vector<uint64_t> prefix_hash_;  // of the request being added, by block count
};

}  // namespace

Result<Workload> load_mooncake_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return Status::not_found("cannot open Mooncake trace '" + path + "': " + std::strerror(errno));
  }
  Workload w;
  w.name =
      "mooncake:" +
      path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  w.block_tokens = kMooncakeBlockTokens;
  w.length_groups = study_length_groups();

  std::vector<Record> records = read_records(in, w);
  if (in.bad()) return Status::io_error("error reading Mooncake trace '" + path + "'");
  if (records.empty()) {
    return Status::invalid_argument("Mooncake trace '" + path + "' has no usable record (" +
                                    std::to_string(w.records_read) + " read, " +
                                    std::to_string(w.records_skipped) + " skipped)");
  }
  // Replay order is arrival order (the published files are already sorted;
  // ties keep file order).
  std::stable_sort(records.begin(), records.end(), [](const Record& a, const Record& b) {
    return a.timestamp_ms < b.timestamp_ms;
  });
  const double t0 = records.front().timestamp_ms;
  SessionBuilder sessions(w);
  for (auto& r : records) sessions.add(r, t0);
  finalize_workload(w);
  return w;
}

}  // namespace kvtier::bench
