// Tests of the kv-cache-tester session loader on the real bundled sessions
// and on hand-made files with its quirks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/trace_loaders.h"

namespace kvtier::bench {
namespace {

namespace fs = std::filesystem;

std::string tester_dir() {
  const char* dir = std::getenv("KVTIER_SHARED_DIR");
  return std::string(dir ? dir : "../shared") + "/traces/kv-cache-tester";
}

TEST(AgentSessionTrace, BundledSessions) {
  // Figures computed here from the files themselves: every top-level record
  // and every record nested in a marker is read; records with a prompt are
  // replayed.
  uint64_t files = 0, read = 0, nested = 0, markers = 0, replayable = 0, tokens = 0;
  std::vector<uint64_t> groups(4, 0);
  for (const auto& e : fs::directory_iterator(tester_dir())) {
    if (e.path().extension() != ".json") continue;
    ++files;
    std::ifstream in(e.path());
    const auto doc = nlohmann::json::parse(in);
    for (const auto& r : doc.at("requests")) {
      ++read;
      if (r.contains("requests")) {
        ++markers;
        nested += r.at("requests").size();
        continue;
      }
      ++replayable;
      const uint64_t n = r.at("in").get<uint64_t>();
      tokens += n;
      ++groups[n <= 32768 ? 0 : n <= 65536 ? 1 : n <= 98304 ? 2 : 3];
    }
  }
  ASSERT_GT(files, 10u);
  auto w = load_agent_session_traces(tester_dir());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->sessions.size(), files);
  EXPECT_EQ(w->block_tokens, 64u);
  EXPECT_EQ(w->records_read, read + nested);
  EXPECT_EQ(w->request_count(), replayable);
  EXPECT_EQ(w->records_skipped, markers + nested);
  EXPECT_EQ(w->skipped_by_reason["subagent marker (no prompt of its own)"], markers);
  EXPECT_EQ(w->skipped_by_reason["request nested in a subagent marker (not replayed)"], nested);
  // Derived while writing the test (Python over the same files): 1 marker
  // with 2 nested requests, 1,697 replayable records.
  EXPECT_EQ(markers, 1u);
  EXPECT_EQ(nested, 2u);
  EXPECT_EQ(replayable, 1697u);

  uint64_t got_tokens = 0;
  std::vector<uint64_t> got_groups(4, 0);
  std::set<uint64_t> namespaces;
  for (size_t s = 0; s < w->sessions.size(); ++s) {
    const auto& turns = w->sessions[s].turns;
    ASSERT_FALSE(turns.empty());
    EXPECT_EQ(turns[0].gap_s, 0);
    std::set<uint64_t> own;
    for (size_t t = 0; t < turns.size(); ++t) {
      const auto& r = turns[t];
      EXPECT_EQ(r.session, s);
      EXPECT_EQ(r.turn, t);
      EXPECT_GE(r.gap_s, 0);
      ASSERT_EQ(r.block_ids.size(), r.prompt_tokens / 64);  // floor: full blocks only
      got_tokens += r.prompt_tokens;
      ++got_groups.at(r.length_group);
      for (uint64_t id : r.block_ids) own.insert(id >> 40);
    }
    // One namespace per session, none shared with another session.
    if (!own.empty()) {
      EXPECT_EQ(own.size(), 1u);
      EXPECT_TRUE(namespaces.insert(*own.begin()).second);
    }
  }
  EXPECT_EQ(got_tokens, tokens);
  EXPECT_EQ(got_groups, groups);
}

TEST(AgentSessionTrace, GapIsRecordedStartToStart) {
  // trace_0026 is a small session (t = 0, 94, 146, ...): the planned gaps are
  // the differences of its t column.
  const std::string file = tester_dir() + "/trace_0026.json";
  std::ifstream in(file);
  const auto doc = nlohmann::json::parse(in);
  auto w = load_agent_session_traces(file);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ASSERT_EQ(w->sessions.size(), 1u);
  const auto& turns = w->sessions[0].turns;
  const auto& reqs = doc.at("requests");
  ASSERT_EQ(turns.size(), reqs.size());
  for (size_t i = 1; i < turns.size(); ++i) {
    EXPECT_DOUBLE_EQ(turns[i].gap_s,
                     reqs[i].at("t").get<double>() - reqs[i - 1].at("t").get<double>());
    EXPECT_EQ(turns[i].output_tokens, reqs[i].at("out").get<uint32_t>());
  }
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("kvtier_agent_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name) << text;
    return (path_ / name).string();
  }
  std::string path() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

TEST(AgentSessionTrace, QuirksAreSkippedAndCounted) {
  TempDir d;
  d.write("a.json", R"({"id": "a", "block_size": 4, "hash_id_scope": "local", "requests": [
      {"t": 0.0, "type": "n", "in": 9, "out": 3, "hash_ids": [1, 2]},
      {"t": 7.5, "type": "s", "in": 13, "out": 2, "hash_ids": [1, 2, 3], "think_time": 1},
      {"t": 8.0, "type": "subagent", "requests": [{"t": 0, "in": 4, "out": 1, "hash_ids": [9]}]},
      {"t": 9.0, "type": "n", "out": 1},
      {"t": 9.5, "type": "n", "in": 12, "out": 1, "hash_ids": [1, 2]},
      {"t": 9.6, "type": "n", "in": 0, "out": 1, "hash_ids": []},
      {"t": 9.7, "type": "n", "in": "12", "out": 1, "hash_ids": [1, 2, 3]},
      {"t": 3.0, "type": "n", "in": 11, "out": 4, "hash_ids": [1, 2]}
  ]})");
  d.write("b.json", R"({"id": "b", "block_size": 4, "requests": [
      {"t": 1.0, "type": "n", "in": 8, "out": 1, "hash_ids": [1, 2]}]})");
  d.write("c.json", R"({"id": "c", "block_size": 8, "requests": [
      {"t": 1.0, "type": "n", "in": 8, "out": 1, "hash_ids": [1]}]})");
  d.write("notes.txt", "not a trace");
  auto w = load_agent_session_traces(d.path());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->records_read, 11u);  // a: 8 + 1 nested; b: 1; c: 1
  EXPECT_EQ(w->records_skipped, 7u);
  EXPECT_EQ(w->skipped_by_reason["subagent marker (no prompt of its own)"], 1u);
  EXPECT_EQ(w->skipped_by_reason["request nested in a subagent marker (not replayed)"], 1u);
  EXPECT_EQ(w->skipped_by_reason["missing field (t, in, out or hash_ids)"], 1u);
  EXPECT_EQ(w->skipped_by_reason["hash_ids length is not floor(in / block_size)"], 1u);
  EXPECT_EQ(w->skipped_by_reason["empty prompt (in 0)"], 1u);
  EXPECT_EQ(w->skipped_by_reason["mistyped field"], 1u);
  EXPECT_EQ(w->skipped_by_reason["block_size differs from the first file's"], 1u);
  EXPECT_EQ(w->block_tokens, 4u);
  ASSERT_EQ(w->sessions.size(), 2u);
  const auto& a = w->sessions[0].turns;
  ASSERT_EQ(a.size(), 3u);  // t = 0, 3, 7.5 (sorted by t)
  EXPECT_EQ(a[0].prompt_tokens, 9u);
  EXPECT_EQ(a[1].prompt_tokens, 11u);
  EXPECT_EQ(a[2].prompt_tokens, 13u);
  EXPECT_DOUBLE_EQ(a[1].gap_s, 3.0);
  EXPECT_DOUBLE_EQ(a[2].gap_s, 4.5);
  const uint64_t ns_a = uint64_t{1} << 40, ns_b = uint64_t{2} << 40;
  EXPECT_EQ(a[2].block_ids, (std::vector<uint64_t>{ns_a | 1, ns_a | 2, ns_a | 3}));
  EXPECT_EQ(w->sessions[1].turns[0].block_ids, (std::vector<uint64_t>{ns_b | 1, ns_b | 2}));
}

TEST(AgentSessionTrace, ClearErrors) {
  auto missing = load_agent_session_traces("/nonexistent/sessions");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().to_string().find("/nonexistent/sessions"), std::string::npos);
  TempDir d;
  auto empty = load_agent_session_traces(d.path());
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().to_string().find("no *.json"), std::string::npos);
  const std::string bad = d.write("bad.json", "{\"requests\": [");
  auto b = load_agent_session_traces(bad);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().to_string().find("not valid JSON"), std::string::npos);
  const std::string other = d.write("other.json", "{\"conversations\": []}");
  auto o = load_agent_session_traces(other);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().to_string().find("requests"), std::string::npos);
  // In a directory, one unreadable file fails the load and is named.
  auto dir = load_agent_session_traces(d.path());
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().to_string().find("bad.json"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::bench
