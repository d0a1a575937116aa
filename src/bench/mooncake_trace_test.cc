// Tests of the Mooncake FAST'25 loader on the real bundled traces and on
// hand-made files with every quirk the loader handles.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "bench/trace_loaders.h"

namespace kvtier::bench {
namespace {

std::string shared_trace(const std::string& rel) {
  const char* dir = std::getenv("KVTIER_SHARED_DIR");
  return std::string(dir ? dir : "../shared") + "/traces/" + rel;
}

// Figures computed here straight from the file, independently of the loader.
struct FileFigures {
  uint64_t lines = 0, input_tokens = 0;
  std::vector<uint64_t> groups = std::vector<uint64_t>(4, 0);
};

FileFigures scan(const std::string& path) {
  FileFigures f;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++f.lines;
    const uint64_t n = nlohmann::json::parse(line).at("input_length").get<uint64_t>();
    f.input_tokens += n;
    ++f.groups[n <= 32768 ? 0 : n <= 65536 ? 1 : n <= 98304 ? 2 : 3];
  }
  return f;
}

void expect_chained_sessions(const Workload& w) {
  for (const auto& s : w.sessions) {
    for (size_t t = 1; t < s.turns.size(); ++t) {
      const auto& prev = s.turns[t - 1];
      const auto& cur = s.turns[t];
      ASSERT_GT(cur.prompt_tokens, prev.prompt_tokens);
      ASSERT_GE(prev.block_ids.size(), 2u);
      ASSERT_TRUE(std::equal(prev.block_ids.begin(), prev.block_ids.end(), cur.block_ids.begin()));
      ASSERT_DOUBLE_EQ(cur.gap_s, cur.arrival_s - prev.arrival_s);
      ASSERT_GE(cur.gap_s, 0);
    }
  }
}

void check_real_trace(const std::string& file, uint64_t sessions, uint64_t multi_turn_sessions,
                      size_t longest) {
  const std::string path = shared_trace("mooncake-fast25/" + file);
  auto w = load_mooncake_trace(path);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const FileFigures f = scan(path);
  ASSERT_GT(f.lines, 1000u);
  EXPECT_EQ(w->records_read, f.lines);
  EXPECT_EQ(w->records_skipped, 0u);  // every published record is well formed
  EXPECT_EQ(w->request_count(), f.lines);
  EXPECT_EQ(w->block_tokens, 512u);
  uint64_t tokens = 0;
  std::vector<uint64_t> groups(4, 0);
  uint64_t multi = 0;
  size_t max_turns = 0;
  for (const auto& s : w->sessions) {
    multi += s.turns.size() > 1;
    max_turns = std::max(max_turns, s.turns.size());
    for (const auto& r : s.turns) {
      tokens += r.prompt_tokens;
      ++groups.at(r.length_group);
      ASSERT_EQ(r.block_ids.size(), r.prompt_tokens / 512);  // full blocks only
    }
  }
  EXPECT_EQ(tokens, f.input_tokens);
  EXPECT_EQ(groups, f.groups);
  // Session counts derived while writing this test by a separate Python
  // implementation of the documented grouping rule.
  EXPECT_EQ(w->sessions.size(), sessions);
  EXPECT_EQ(multi, multi_turn_sessions);
  EXPECT_EQ(max_turns, longest);
  expect_chained_sessions(*w);
}

TEST(MooncakeTrace, ConversationTrace) {
  check_real_trace("conversation_trace.jsonl", 8189, 2010, 43);
}

TEST(MooncakeTrace, SyntheticTrace) { check_real_trace("synthetic_trace.jsonl", 3239, 554, 5); }

class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    path_ =
        std::filesystem::temp_directory_path() / ("kvtier_mooncake_" + std::to_string(::getpid()) +
                                                  "_" + std::to_string(counter_++) + ".jsonl");
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

TEST(MooncakeTrace, QuirksAreSkippedAndCounted) {
  // A: 3 full blocks. B continues A (4 full blocks + a partial one). C also
  // extends A, but A already has a continuation: C forks a new session. D
  // continues B. E shares only the common block 0 with A: a new session.
  TempFile f(
      "{\"timestamp\": 0, \"input_length\": 1536, \"output_length\": 10, \"hash_ids\": [0, 1, 2]}\n"
      "not json\n"
      "\n"
      "{\"timestamp\": 5, \"input_length\": 100}\n"
      "{\"timestamp\": 6, \"input_length\": \"7\", \"output_length\": 1, \"hash_ids\": [0]}\n"
      "{\"timestamp\": 7, \"input_length\": 0, \"output_length\": 1, \"hash_ids\": []}\n"
      "{\"timestamp\": 8, \"input_length\": 1025, \"output_length\": 1, \"hash_ids\": [0, 1]}\n"
      "{\"timestamp\": -1, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0]}\n"
      "[1, 2]\n"
      "{\"timestamp\": 2000, \"input_length\": 2100, \"output_length\": 20, "
      "\"hash_ids\": [0, 1, 2, 3, 9]}\n"
      "{\"timestamp\": 2500, \"input_length\": 1700, \"output_length\": 5, "
      "\"hash_ids\": [0, 1, 2, 4]}\n"
      "{\"timestamp\": 4000, \"input_length\": 2600, \"output_length\": 5, "
      "\"hash_ids\": [0, 1, 2, 3, 5, 6]}\n"
      "{\"timestamp\": 4500, \"input_length\": 1536, \"output_length\": 5, "
      "\"hash_ids\": [0, 7, 8]}\n");
  auto w = load_mooncake_trace(f.path());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->records_read, 12u);  // the blank line is not a record
  EXPECT_EQ(w->records_skipped, 7u);
  EXPECT_EQ(w->skipped_by_reason.at("not valid JSON"), 1u);
  EXPECT_EQ(w->skipped_by_reason.at("not a JSON object"), 1u);
  EXPECT_EQ(w->skipped_by_reason.at("missing field"), 1u);
  EXPECT_EQ(w->skipped_by_reason.at("mistyped field"), 1u);
  EXPECT_EQ(w->skipped_by_reason.at("empty prompt (input_length 0)"), 1u);
  EXPECT_EQ(w->skipped_by_reason.at("hash_ids length is not ceil(input_length / 512)"), 1u);
  EXPECT_EQ(w->skipped_by_reason.at("negative or non-finite timestamp"), 1u);
  ASSERT_EQ(w->sessions.size(), 3u);
  const auto& a = w->sessions[0].turns;
  ASSERT_EQ(a.size(), 3u);  // A, B, D
  EXPECT_EQ(a[0].prompt_tokens, 1536u);
  EXPECT_EQ(a[1].prompt_tokens, 2100u);
  EXPECT_EQ(a[2].prompt_tokens, 2600u);
  EXPECT_EQ(a[1].block_ids, (std::vector<uint64_t>{0, 1, 2, 3}));  // partial block 9 dropped
  EXPECT_DOUBLE_EQ(a[1].gap_s, 2.0);
  EXPECT_DOUBLE_EQ(a[2].gap_s, 2.0);
  EXPECT_DOUBLE_EQ(a[2].arrival_s, 4.0);
  EXPECT_EQ(a[2].turn, 2u);
  EXPECT_EQ(a[2].session, 0u);
  ASSERT_EQ(w->sessions[1].turns.size(), 1u);  // C, the fork
  EXPECT_EQ(w->sessions[1].turns[0].prompt_tokens, 1700u);
  EXPECT_DOUBLE_EQ(w->sessions[1].turns[0].gap_s, 0.0);
  ASSERT_EQ(w->sessions[2].turns.size(), 1u);  // E
  EXPECT_EQ(w->sessions[2].turns[0].session, 2u);
}

TEST(MooncakeTrace, OutOfOrderRecordsReplayInArrivalOrder) {
  TempFile f(
      "{\"timestamp\": 3000, \"input_length\": 2048, \"output_length\": 1, "
      "\"hash_ids\": [5, 6, 7, 8]}\n"
      "{\"timestamp\": 1000, \"input_length\": 1024, \"output_length\": 1, "
      "\"hash_ids\": [5, 6]}\n");
  auto w = load_mooncake_trace(f.path());
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w->sessions.size(), 1u);
  ASSERT_EQ(w->sessions[0].turns.size(), 2u);
  EXPECT_EQ(w->sessions[0].turns[0].prompt_tokens, 1024u);
  EXPECT_DOUBLE_EQ(w->sessions[0].turns[0].arrival_s, 0.0);
  EXPECT_DOUBLE_EQ(w->sessions[0].turns[1].gap_s, 2.0);
}

TEST(MooncakeTrace, ClearErrors) {
  auto missing = load_mooncake_trace("/nonexistent/dir/trace.jsonl");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().to_string().find("/nonexistent/dir/trace.jsonl"), std::string::npos);
  TempFile garbage("garbage\n{\"a\": 1}\n");
  auto g = load_mooncake_trace(garbage.path());
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().to_string().find("no usable record"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::bench
