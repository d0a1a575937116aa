// Workloads of the study's benchmark: agent sessions, each a sequence of LLM
// calls as recorded (the next turn uses the recorded prompt, never the live
// answer). Produced by the trace loaders (Mooncake FAST'25 JSONL,
// kv-cache-tester session JSON) and by the built-in synthetic agentic
// workload; consumed by the session schedulers and the study runner.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kvtier::bench {

// One LLM call of a session.
struct TraceRequest {
  uint32_t session = 0;  // dense index into Workload::sessions
  uint32_t turn = 0;     // 0-based position within the session
  uint32_t prompt_tokens = 0;
  uint32_t output_tokens = 0;
  // Content identity of the prompt at the workload's block granularity
  // (Workload::block_tokens): one id per full block. Two requests share a
  // prefix of n blocks exactly when their first n ids are equal (the ids are
  // already chained or positionally unique, as the trace's hash ids are).
  std::vector<uint64_t> block_ids;
  // Planned start-to-start interval from the previous turn of the same
  // session, in seconds (0 for turn 0). The short-reuse protocol honours it.
  double gap_s = 0;
  // Recorded arrival time relative to the start of the trace, where the trace
  // has one (Mooncake); otherwise 0.
  double arrival_s = 0;
  // Index into Workload::length_groups of the group this prompt length falls in.
  uint32_t length_group = 0;
};

struct Session {
  std::vector<TraceRequest> turns;
};

// A prompt-length group of the study's tables (for example "<32K tokens").
struct LengthGroup {
  std::string label;
  uint32_t min_tokens = 0;  // inclusive
  uint32_t max_tokens = 0;  // exclusive; UINT32_MAX for the last group
};

struct Workload {
  std::string name;           // "synthetic-agentic", "mooncake:<file>", ...
  uint32_t block_tokens = 0;  // tokens per entry of TraceRequest::block_ids
  std::vector<Session> sessions;
  std::vector<LengthGroup> length_groups;
  // What the loader read and what it skipped, by reason, so that a report can
  // say how much of the trace it replayed.
  uint64_t records_read = 0;
  uint64_t records_skipped = 0;
  std::map<std::string, uint64_t> skipped_by_reason;

  uint64_t request_count() const {
    uint64_t n = 0;
    for (const auto& s : sessions) n += s.turns.size();
    return n;
  }
};

// The study's prompt-length groups: <=32K, 32-64K, 64-96K and >96K tokens
// (K = 1024; "<=32K" holds prompts of at most 32,768 tokens). The bounds are
// multiplied by `length_scale` (a workload generated with shorter prompts
// keeps the study's groups in real-token terms); labels stay the study's.
std::vector<LengthGroup> study_length_groups(double length_scale = 1.0);

// Index of the group holding `prompt_tokens` (the last group if none does).
uint32_t length_group_of(const std::vector<LengthGroup>& groups, uint32_t prompt_tokens);

// Sets TraceRequest::session, ::turn and ::length_group of every request from
// the workload's layout and length groups (loaders call it last).
void finalize_workload(Workload& w);

// Records one skipped record under `reason`.
void count_skipped(Workload& w, const std::string& reason, uint64_t n = 1);

}  // namespace kvtier::bench
