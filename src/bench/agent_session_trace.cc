// Loader of the kv-cache-tester coding-agent session JSON (one file per
// session). Quirks handled here are listed in docs/workloads.md.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/trace_loaders.h"
#include "bench/trace_record.h"

namespace kvtier::bench {
namespace {

namespace fs = std::filesystem;

// Session-local hash ids are moved into a namespace of their own: the file's
// ordinal (from 1) in the bits above kLocalIdBits.
constexpr int kLocalIdBits = 40;

struct Parsed {
  double t = 0;
  TraceRequest req;
};

// Why a request record is unusable, or "" when it parsed into `out`.
std::string parse_request(const nlohmann::json& r, uint32_t block_size, bool local_ids,
                          uint64_t file_ordinal, Parsed* out) {
  if (!r.is_object()) return "request not a JSON object";
  TraceRequestFields f;
  std::string why =
      read_request_fields(r, {"t", "in", "out", "missing field (t, in, out or hash_ids)"}, &f);
  if (!why.empty()) return why;
  const nlohmann::json* ids = f.hash_ids;
  if (ids->size() != f.input_tokens / block_size) {
    return "hash_ids length is not floor(in / block_size)";
  }
  out->t = f.time;
  out->req.prompt_tokens = f.input_tokens;
  out->req.output_tokens = f.output_tokens;
  out->req.block_ids.reserve(ids->size());
  for (const auto& id : *ids) {
    if (!id.is_number_unsigned()) return "hash id not a non-negative integer";
    const uint64_t v = id.get<uint64_t>();
    if (local_ids) {
      if (v >> kLocalIdBits) return "hash id out of range";
      out->req.block_ids.push_back((file_ordinal << kLocalIdBits) | v);
    } else {
      out->req.block_ids.push_back(v);
    }
  }
  return "";
}

// Loads one session file into `w` (appending at most one session).
Status load_session_file(const fs::path& file, uint64_t file_ordinal, Workload& w) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    return Status::not_found("cannot open session trace '" + file.string() +
                             "': " + std::strerror(errno));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::io_error("error reading session trace '" + file.string() + "'");
  const nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, false);
  if (doc.is_discarded()) {
    return Status::invalid_argument("session trace '" + file.string() + "' is not valid JSON");
  }
  const auto reqs = doc.is_object() ? doc.find("requests") : doc.end();
  if (!doc.is_object() || reqs == doc.end() || !reqs->is_array()) {
    return Status::invalid_argument("session trace '" + file.string() +
                                    "' has no \"requests\" array (not a kv-cache-tester file)");
  }
  const auto bs = doc.find("block_size");
  if (bs == doc.end() || !bs->is_number_unsigned() || bs->get<uint64_t>() == 0 ||
      bs->get<uint64_t>() > (1u << 20)) {
    return Status::invalid_argument("session trace '" + file.string() +
                                    "' lacks a positive integer \"block_size\"");
  }
  const auto block_size = static_cast<uint32_t>(bs->get<uint64_t>());
  const auto scope = doc.find("hash_id_scope");
  const bool local_ids = scope == doc.end() || !scope->is_string() || *scope != "global";

  // Count every request record, nested ones included, before deciding.
  std::vector<Parsed> kept;
  for (const auto& r : *reqs) {
    ++w.records_read;
    const auto nested = r.is_object() ? r.find("requests") : r.end();
    const bool marker = r.is_object() && ((r.contains("type") && r["type"] == "subagent") ||
                                          (nested != r.end() && nested->is_array()));
    if (marker) {
      count_skipped(w, "subagent marker (no prompt of its own)");
      if (nested != r.end() && nested->is_array()) {
        w.records_read += nested->size();
        count_skipped(w, "request nested in a subagent marker (not replayed)", nested->size());
      }
      continue;
    }
    if (w.block_tokens != 0 && block_size != w.block_tokens) {
      count_skipped(w, "block_size differs from the first file's");
      continue;
    }
    Parsed p;
    const std::string why = parse_request(r, block_size, local_ids, file_ordinal, &p);
    if (!why.empty()) {
      count_skipped(w, why);
      continue;
    }
    kept.push_back(std::move(p));
  }
  if (kept.empty()) return Status::ok_status();
  if (w.block_tokens == 0) w.block_tokens = block_size;
  // Turn order is the recorded start order (files are sorted; ties keep file
  // order). The planned gap is the recorded start-to-start interval.
  std::stable_sort(kept.begin(), kept.end(),
                   [](const Parsed& a, const Parsed& b) { return a.t < b.t; });
  Session s;
  for (size_t i = 0; i < kept.size(); ++i) {
    kept[i].req.gap_s = i == 0 ? 0 : kept[i].t - kept[i - 1].t;
    s.turns.push_back(std::move(kept[i].req));
  }
  w.sessions.push_back(std::move(s));
  return Status::ok_status();
}

}  // namespace

Result<Workload> load_agent_session_traces(const std::string& path) {
  std::error_code ec;
  const fs::path root(path);
  const auto st = fs::status(root, ec);
  if (ec || !fs::exists(st)) {
    return Status::not_found("session trace path '" + path + "' does not exist");
  }
  std::vector<fs::path> files;
  if (fs::is_directory(st)) {
    for (const auto& e : fs::directory_iterator(root, ec)) {
      if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path());
    }
    if (ec) return Status::io_error("cannot list '" + path + "': " + ec.message());
    std::sort(files.begin(), files.end());
    if (files.empty()) {
      return Status::not_found("no *.json session trace in directory '" + path + "'");
    }
  } else {
    files.push_back(root);
  }
  Workload w;
  w.name = "agent:" + (root.has_filename() ? root.filename().string()
                                           : root.parent_path().filename().string());
  w.length_groups = study_length_groups();
  for (size_t i = 0; i < files.size(); ++i) {
    KVTIER_RETURN_IF_ERROR(load_session_file(files[i], i + 1, w));
  }
  if (w.sessions.empty()) {
    return Status::invalid_argument("session traces at '" + path + "' hold no usable request (" +
                                    std::to_string(w.records_read) + " read, " +
                                    std::to_string(w.records_skipped) + " skipped)");
  }
  finalize_workload(w);
  return w;
}

}  // namespace kvtier::bench
