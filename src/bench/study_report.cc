#include "bench/study_report.h"

#include <unistd.h>

#include <fmt/format.h>
#include <filesystem>

#include "bench/fio_runner.h"
#include "bench/memcpy_limit.h"
#include "bench/study_metrics.h"
#include "common/buffer.h"
#include "common/flat_insert_map.h"

namespace kvtier::bench {

namespace {

const CaseResult* find(const std::vector<CaseResult>& rs, const std::string& proto, StudyCase c) {
  for (const auto& r : rs) {
    if (r.protocol == proto && r.id == c) return &r;
  }
  return nullptr;
}

std::vector<std::string> protocols_of(const std::vector<CaseResult>& rs) {
  std::vector<std::string> out;
  for (const auto& r : rs) {
    if (std::find(out.begin(), out.end(), r.protocol) == out.end()) out.push_back(r.protocol);
  }
  return out;
}

double group_percentile(const CaseResult& r, uint32_t g, double p) {
  std::vector<double> v;
  for (size_t i = 0; i < r.ttft_s.size(); ++i) {
    if (r.ttft_group[i] == g) v.push_back(r.ttft_s[i]);
  }
  return percentile(std::move(v), p);
}

std::string bytes_h(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) {
    b /= 1024;
    ++u;
  }
  return fmt::format("{:.2f} {}", b, units[u]);
}

double load_rate(const CaseResult& r) {
  return safe_ratio(static_cast<double>(r.store_load_bytes), r.store_load_wall_s);
}

double disk_load_rate(const CaseResult& r) {
  return safe_ratio(static_cast<double>(r.store_disk_load_bytes), r.store_disk_load_wall_s);
}

// The prefill-to-decode transfer: bytes, and where it really ran, its frames and rate.
// The deployment's device bytes: the simulator's own count, else the
// testbed's scaled.
double device_read_bytes(const CaseResult& r) {
  return r.deployment_device_read_bytes >= 0
             ? r.deployment_device_read_bytes
             : static_cast<double>(r.device_read_bytes) * r.byte_scale;
}
double device_write_bytes(const CaseResult& r) {
  return r.deployment_device_write_bytes >= 0
             ? r.deployment_device_write_bytes
             : static_cast<double>(r.device_write_bytes) * r.byte_scale;
}

void add_transfer_json(nlohmann::json& j, const CaseResult& r, double scale) {
  j["network_bytes"] = static_cast<double>(r.network_bytes) * scale;
  j["pd_transfer"] = r.pd_transfer;
  j["pd_transfer_charged_s"] = r.pd_charged_s;
  if (r.pd_frames > 0) {
    j["pd_transfer_frames"] = r.pd_frames;
    j["pd_transfer_wall_s"] = r.pd_wall_s;
    j["pd_transfer_received_bytes"] = static_cast<double>(r.pd_received_bytes) * scale;
    j["pd_transfer_blocks_verified"] = r.pd_blocks_verified;
    // Stored bytes per wall second through loopback: the rate that, like
    // the store's load rate, decides what the transfer costs.
    if (r.pd_wall_s > 0) {
      j["pd_transfer_bytes_per_s"] = static_cast<double>(r.network_bytes) / r.pd_wall_s;
    }
  }
}

// The store's load rates against the limits measured in the same run.
void add_load_rate_json(nlohmann::json& j, const CaseResult& r, const StudyLimits& lim) {
  if (r.store_load_wall_s > 0 && r.store_load_bytes > 0) {
    const double rate = load_rate(r);
    j["store_load_bytes_per_s"] = rate;
    j["store_load_vs_recompute_ratio"] = safe_ratio(rate, lim.recompute_kv_bytes_per_s);
    j["store_load_vs_memcpy_ratio"] = safe_ratio(rate, lim.memcpy_bytes_per_s);
    if (lim.fio_randread_bytes_per_s > 0 && r.store_blocks_from_disk > 0) {
      j["store_load_vs_fio_ratio"] = safe_ratio(rate, lim.fio_randread_bytes_per_s);
    }
  }
  if (r.store_disk_load_wall_s > 0 && r.store_disk_load_bytes > 0) {
    // The rate that decides whether a disk-served prefix beats recomputation.
    const double rate =
        safe_ratio(static_cast<double>(r.store_disk_load_bytes), r.store_disk_load_wall_s);
    j["store_disk_load_bytes_per_s"] = rate;
    j["store_disk_load_vs_recompute_ratio"] = safe_ratio(rate, lim.recompute_kv_bytes_per_s);
    if (lim.fio_randread_bytes_per_s > 0) {
      j["store_disk_load_vs_fio_ratio"] = safe_ratio(rate, lim.fio_randread_bytes_per_s);
    }
  }
}

nlohmann::json case_json(const CaseResult& r, const CaseResult* recompute, const StudyLimits& lim,
                         bool samples) {
  nlohmann::json j;
  const auto& spec = case_spec(r.id);
  j["case"] = spec.letter;
  j["name"] = spec.name;
  j["available"] = r.available;
  if (!r.available) {
    j["reason"] = r.unavailable_reason;
    return j;
  }
  const double scale = r.byte_scale;
  j["completed"] = r.completed;
  j["throughput_rps"] = r.throughput_rps;
  if (recompute && recompute->available) {
    j["throughput_vs_recompute_ratio"] = safe_ratio(r.throughput_rps, recompute->throughput_rps);
  }
  j["ttft_p50_s"] = percentile(r.ttft_s, 50);
  j["ttft_p90_s"] = percentile(r.ttft_s, 90);
  j["ttft_p99_s"] = percentile(r.ttft_s, 99);
  nlohmann::json groups = nlohmann::json::object();
  for (uint32_t g = 0; g < r.group_labels.size(); ++g) {
    groups[r.group_labels[g]] = {{"p50_s", group_percentile(r, g, 50)},
                                 {"p90_s", group_percentile(r, g, 90)},
                                 {"p99_s", group_percentile(r, g, 99)}};
  }
  j["ttft_by_group"] = groups;
  const double blocks = static_cast<double>(r.prompt_blocks);
  j["hbm_hit_share"] = safe_ratio(static_cast<double>(r.hbm_hit_blocks), blocks);
  j["store_hit_share"] = safe_ratio(static_cast<double>(r.store_hit_blocks), blocks);
  j["recomputed_share"] = safe_ratio(static_cast<double>(r.computed_blocks), blocks);
  const double reused = static_cast<double>(r.same_session_blocks + r.cross_session_blocks);
  j["same_session_reuse_share"] = safe_ratio(static_cast<double>(r.same_session_blocks), reused);
  j["cross_session_reuse_share"] = safe_ratio(static_cast<double>(r.cross_session_blocks), reused);
  j["store_load_events"] = r.store_load_events;
  j["race_recomputed_blocks"] = r.race_recomputed_blocks;
  j["store_blocks_from_ram"] = r.store_blocks_from_ram;
  j["store_blocks_from_disk"] = r.store_blocks_from_disk;
  j["verify_failures"] = r.verify_failures;
  j["write_refusals"] = r.write_refusals;
  j["offered_write_blocks"] = r.offered_write_blocks;
  if (!r.store_load_bytes_by_window.empty()) {
    nlohmann::json windows = nlohmann::json::array();
    for (uint64_t b : r.store_load_bytes_by_window)
      windows.push_back(static_cast<double>(b) * scale);
    j["store_load_bytes_by_window"] = windows;
  }
  // Deployment-equivalent bytes (stored bytes x byte scale).
  j["device_reads"] = r.device_reads;
  j["device_coalesced_reads"] = r.device_coalesced_reads;
  j["device_read_bytes"] = device_read_bytes(r);
  j["device_writes"] = r.device_writes;
  j["device_write_bytes"] = device_write_bytes(r);
  j["ram_eviction_cycles"] = r.ram_evictions;
  j["ram_eviction_bytes"] = static_cast<double>(r.ram_eviction_bytes) * scale;
  add_transfer_json(j, r, scale);
  j["stayed_on_preferred_share"] =
      safe_ratio(static_cast<double>(r.stayed_turns), static_cast<double>(r.later_turns));
  j["prefill_decode_pairs"] = r.pair_counts;
  j["gross_busy_time_saved_ratio"] = r.gross_busy_saved_ratio;
  j["busy_union_s"] = r.busy_union_s;
  j["replica_threads"] = r.replica_threads;
  j["replica_overlap_wall_s"] = r.replica_overlap_wall_s;
  j["store_wall_s"] = r.store_wall_s;
  j["store_read_wall_s"] = r.store_read_wall_s;
  j["store_lookups"] = r.store_lookups;
  j["store_charged_s"] = r.store_charged_s;
  j["disk_queue_s"] = r.disk_queue_s;
  add_load_rate_json(j, r, lim);
  j["wall_s"] = r.wall_s;
  if (samples) {
    j["ttft_samples_s"] = r.ttft_s;
    j["ttft_sample_groups"] = r.ttft_group;
  }
  return j;
}

}  // namespace

StudyWorkloadInfo describe_workload(const Workload& w, double token_scale) {
  StudyWorkloadInfo info;
  info.name = w.name;
  info.sessions = w.sessions.size();
  info.requests = w.request_count();
  info.records_read = w.records_read;
  info.records_skipped = w.records_skipped;
  info.skipped_by_reason = w.skipped_by_reason;
  info.block_tokens = w.block_tokens;
  for (const auto& g : w.length_groups) info.group_labels.push_back(g.label);
  info.group_counts.assign(w.length_groups.size(), 0);
  struct Mixed {  // the chain hash below is already mixed
    size_t operator()(uint64_t h) const { return static_cast<size_t>(h); }
  };
  FlatInsertMap<uint64_t, bool, Mixed> seen;  // tens of millions of inserts at full scale
  std::vector<uint64_t> prefix;
  double tokens = 0;
  for (const auto& s : w.sessions) {
    for (const auto& t : s.turns) {
      if (t.length_group < info.group_counts.size()) ++info.group_counts[t.length_group];
      tokens += t.prompt_tokens;
      // Blocks are identified by their whole prefix; hash the id chain.
      uint64_t h = 0xcbf29ce484222325ull;
      for (uint64_t id : t.block_ids) {
        h = (h ^ id) * 0x100000001b3ull;
        h ^= h >> 31;
        seen.emplace(h, true);
      }
    }
  }
  info.unique_blocks = seen.size();
  info.mean_prompt_tokens =
      info.requests ? tokens / static_cast<double>(info.requests) / token_scale : 0;
  return info;
}

StudyLimits measure_study_limits(const StudyOptions& o, uint32_t block_bytes) {
  StudyLimits lim;
  lim.recompute_kv_bytes_per_s =
      o.profile.prefill_tokens_per_s * static_cast<double>(o.profile.kv_bytes_per_token);
  lim.memcpy_bytes_per_s = measure_memcpy(block_bytes, 256ull << 20, 0.3, 3).bytes_per_second;
  const std::string path = (std::filesystem::path(o.volume_dir) /
                            ("kvtier-study-fio-" + std::to_string(::getpid()) + ".vol"))
                               .string();
  FioJob job;
  job.filename = path;
  job.rw = "randread";
  job.block_bytes = align_up(block_bytes, 4096) + 4096;  // a disk-tier entry: header page + payload
  job.iodepth = o.disk_read_depth;
  job.size_bytes = 512ull << 20;
  job.seconds = 2;
  auto r = run_fio(job);
  ::unlink(path.c_str());
  if (r.ok()) {
    lim.fio_randread_bytes_per_s = r->bytes_per_second;
    lim.fio_command = r->command;
  } else {
    lim.fio_error = r.status().to_string();
  }
  return lim;
}

nlohmann::json StudyReport::json(bool with_samples) const {
  nlohmann::json j;
  j["benchmark"] = "study";
  nlohmann::json wj;
  wj["name"] = workload.name;
  wj["sessions"] = workload.sessions;
  wj["requests"] = workload.requests;
  wj["records_read"] = workload.records_read;
  wj["records_skipped"] = workload.records_skipped;
  wj["skipped_by_reason"] = workload.skipped_by_reason;
  wj["block_tokens"] = workload.block_tokens;
  wj["unique_blocks"] = workload.unique_blocks;
  wj["mean_prompt_tokens"] = workload.mean_prompt_tokens;
  nlohmann::json groups = nlohmann::json::object();
  for (size_t i = 0; i < workload.group_labels.size(); ++i) {
    groups[workload.group_labels[i]] = workload.group_counts[i];
  }
  wj["length_groups"] = groups;
  j["workload"] = wj;
  const auto& p = options.profile;
  j["profile"] = {{"name", p.name},
                  {"kv_bytes_per_token", p.kv_bytes_per_token},
                  {"prefill_tokens_per_s", p.prefill_tokens_per_s},
                  {"decode_s_per_token", p.decode_s_per_token},
                  {"token_scale", p.token_scale},
                  {"stored_kv_bytes_per_token", p.stored_kv_bytes_per_token},
                  {"byte_scale", p.byte_scale()}};
  j["service"] = {
      {"prefill_replicas", options.prefill_replicas},
      {"decode_replicas", options.decode_replicas},
      {"max_in_flight", options.max_in_flight},
      {"spill_margin_tokens", options.spill_margin_tokens},
      {"hbm_pool_tokens", options.hbm_pool_tokens ? options.hbm_pool_tokens : p.hbm_pool_tokens},
      {"ram_bytes", options.ram_bytes},
      {"disk_bytes", options.disk_bytes},
      {"load_policy", load_policy_name(options.load_policy)}};
  j["limits"] = {{"memcpy_bytes_per_s", limits.memcpy_bytes_per_s},
                 {"fio_randread_bytes_per_s", limits.fio_randread_bytes_per_s},
                 {"fio_command", limits.fio_command},
                 {"recompute_kv_bytes_per_s", limits.recompute_kv_bytes_per_s}};
  if (!limits.fio_error.empty()) j["limits"]["fio_error"] = limits.fio_error;
  nlohmann::json protos = nlohmann::json::object();
  for (const auto& proto : protocols_of(results)) {
    nlohmann::json cases = nlohmann::json::object();
    const CaseResult* a = find(results, proto, StudyCase::kA);
    for (const auto& r : results) {
      if (r.protocol == proto)
        cases[case_spec(r.id).letter] = case_json(r, a, limits, with_samples);
    }
    protos[proto] = cases;
  }
  j["protocols"] = protos;
  j["wall_s"] = wall_s;
  return j;
}

namespace {

// The run's setup: workload, profile, service, limits and the policies in force.
std::string setup_section(const StudyReport& rep) {
  const auto& options = rep.options;
  const auto& workload = rep.workload;
  const auto& limits = rep.limits;
  const auto& p = options.profile;
  std::string md = fmt::format(
      "Workload `{}`: {} sessions, {} requests, mean prompt {:.0f} tokens, blocks of {} workload "
      "tokens ({} records read, {} skipped). Profile `{}` (prefill {:.0f} tokens/s, {} KiB KV per "
      "token; byte scale {:.0f}). Service: {} prefill x {} decode replicas, at most {} requests in "
      "flight; HBM pool {} tokens per prefill, RAM tier {}, disk tier {} (deployment sizes).\n\n",
      workload.name, workload.sessions, workload.requests, workload.mean_prompt_tokens,
      workload.block_tokens, workload.records_read, workload.records_skipped, p.name,
      p.prefill_tokens_per_s, p.kv_bytes_per_token / 1024, p.byte_scale(), options.prefill_replicas,
      options.decode_replicas, options.max_in_flight,
      options.hbm_pool_tokens ? options.hbm_pool_tokens : p.hbm_pool_tokens,
      bytes_h(static_cast<double>(options.ram_bytes)),
      bytes_h(static_cast<double>(options.disk_bytes)));
  md += fmt::format(
      "Limits measured in this run: memcpy {:.2f} GB/s, fio randread on the volume {:.2f} GB/s{}, "
      "modeled recompute produces KV at {:.2f} GB/s (a load beats recomputation when the store "
      "moves bytes faster than this).\n\n",
      limits.memcpy_bytes_per_s / 1e9, limits.fio_randread_bytes_per_s / 1e9,
      limits.fio_error.empty() ? "" : " (fio failed: " + limits.fio_error + ")",
      limits.recompute_kv_bytes_per_s / 1e9);
  md += options.load_policy == LoadPolicy::kRace
            ? "Load policy `race`: each prefill replica computes the front of a cached prefix "
              "while it loads the back, split by the tiers' measured load rates (not the "
              "study's connector, which loads all of it first).\n\n"
            : "Load policy `load` (the study's connector: a cached prefix is loaded in full "
              "before the rest is computed).\n\n";
  md +=
      "Times are virtual: GPU time is modeled, store operations are really executed and their wall "
      "time x byte scale is charged. Bytes are deployment-equivalent (stored bytes x byte "
      "scale).\n\n";
  md += options.pd_transfer == PdTransferMode::kLoopback
            ? "Prefill-to-decode transfer: loopback (each request's KV blocks really sent over "
              "loopback TCP and verified by its decode replica; measured time x byte scale "
              "charged to its first token).\n\n"
            : "Prefill-to-decode transfer: modeled (the profile's link rate; nothing sent).\n\n";
  {
    double overlap = 0;
    uint32_t threads = 0;
    for (const auto& r : rep.results) {
      overlap += r.replica_overlap_wall_s;
      threads = std::max(threads, r.replica_threads);
    }
    md += options.overlap_replicas
              ? fmt::format(
                    "Replicas: each prefill replica works on its own thread ({} threads); "
                    "saves and PD sends overlapped other replicas' work (replicas ran at "
                    "the same time for {:.1f} s of wall time over all cases).\n\n",
                    threads, overlap)
              : fmt::format(
                    "Replicas: each prefill replica works on its own thread ({} threads), "
                    "one job at a time, so each store call is measured alone "
                    "(`--overlap-replicas` lets them overlap).\n\n",
                    threads);
  }
  return md;
}

// One protocol's main table: throughput against recompute, TTFT, hit shares, device bytes.
// The study numbers these tables 6 (short reuse) and 7 (long reuse); any other
// protocol (fleet) gets 6.
std::string results_table(const std::vector<CaseResult>& results, const std::string& proto) {
  const CaseResult* a = find(results, proto, StudyCase::kA);
  const char* title = proto == "short-reuse"  ? "Experiment 1 (short reuse) complete results"
                      : proto == "long-reuse" ? "Experiment 2 (long reuse) complete results"
                                              : "results";
  std::string md =
      fmt::format("## Table {}. {} ({})\n\n", proto == "long-reuse" ? 7 : 6, title, proto);
  md +=
      "| case | requests/s | vs recompute | TTFT p50 s | TTFT p90 s | TTFT p99 s | HBM hits | "
      "store hits | store-load events | device reads | device writes | stayed on preferred |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : results) {
    if (r.protocol != proto) continue;
    const auto& s = case_spec(r.id);
    if (!r.available) {
      md += fmt::format("| {} {} | {} | | | | | | | | | | |\n", s.letter, s.name,
                        r.unavailable_reason);
      continue;
    }
    const double blocks = static_cast<double>(r.prompt_blocks);
    md += fmt::format(
        "| {} {} | {:.3f} | {:.2f}x | {:.2f} | {:.2f} | {:.2f} | {:.1f}% | {:.1f}% | {} | {} | "
        "{} "
        "| {:.1f}% |\n",
        s.letter, s.name, r.throughput_rps,
        a ? safe_ratio(r.throughput_rps, a->throughput_rps) : 0.0, percentile(r.ttft_s, 50),
        percentile(r.ttft_s, 90), percentile(r.ttft_s, 99),
        100 * safe_ratio(static_cast<double>(r.hbm_hit_blocks), blocks),
        100 * safe_ratio(static_cast<double>(r.store_hit_blocks), blocks), r.store_load_events,
        bytes_h(device_read_bytes(r)), bytes_h(device_write_bytes(r)),
        100 * safe_ratio(static_cast<double>(r.stayed_turns), static_cast<double>(r.later_turns)));
  }
  return md;
}

// One protocol's mechanism table: where loads came from, how fast, what was evicted and sent.
std::string mechanism_table(const std::vector<CaseResult>& results, const std::string& proto) {
  std::string md = fmt::format("\n### Mechanism ({}): store, RAM, storage and network\n\n", proto);
  md +=
      "| case | RAM eviction cycles | RAM eviction volume | loads from RAM / disk (blocks) | "
      "store load rate (all / disk only) | write refusals | network (PD) | same / cross-session "
      "reuse | gross "
      "busy-time saved | verify failures |\n|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : results) {
    if (r.protocol != proto || !r.available) continue;
    const auto& s = case_spec(r.id);
    const double reused = static_cast<double>(r.same_session_blocks + r.cross_session_blocks);
    md += fmt::format(
        "| {} | {} | {} | {} / {} | {} / {} | {} | {} | {:.1f}% / {:.1f}% | {:.1f}% | {} |\n",
        s.letter, r.ram_evictions,
        bytes_h(static_cast<double>(r.ram_eviction_bytes) * r.byte_scale), r.store_blocks_from_ram,
        r.store_blocks_from_disk,
        r.store_load_wall_s > 0 ? fmt::format("{:.2f} GB/s", load_rate(r) / 1e9) : "-",
        r.store_disk_load_wall_s > 0 ? fmt::format("{:.2f} GB/s", disk_load_rate(r) / 1e9) : "-",
        r.write_refusals,
        bytes_h(static_cast<double>(r.network_bytes) * r.byte_scale) +
            (r.pd_wall_s > 0 ? fmt::format(" ({} {:.2f} GB/s)", r.pd_transfer,
                                           static_cast<double>(r.network_bytes) / r.pd_wall_s / 1e9)
                             : " (" + r.pd_transfer + ")"),
        100 * safe_ratio(static_cast<double>(r.same_session_blocks), reused),
        100 * safe_ratio(static_cast<double>(r.cross_session_blocks), reused),
        100 * r.gross_busy_saved_ratio, r.verify_failures);
  }
  return md + "\n";
}

// Table 9: long reuse (or the last protocol) median TTFT by prompt length.
std::string ttft_by_length_table(const StudyReport& rep) {
  const auto& results = rep.results;
  const auto& workload = rep.workload;
  const auto protos = protocols_of(results);
  if (protos.empty()) return "";
  const std::string proto = std::find(protos.begin(), protos.end(), "long-reuse") != protos.end()
                                ? "long-reuse"
                                : protos.back();
  std::string md = fmt::format(
      "## Table 9. Median user TTFT in seconds by prompt length ({})\n\n| group "
      "| requests |",
      proto);
  std::string sep = "|---|---|";
  for (const auto& r : results) {
    if (r.protocol == proto && r.available) {
      md += fmt::format(" {} |", case_spec(r.id).letter);
      sep += "---|";
    }
  }
  md += "\n" + sep + "\n";
  for (uint32_t g = 0; g < workload.group_labels.size(); ++g) {
    md += fmt::format("| {} | {} |", workload.group_labels[g], workload.group_counts[g]);
    for (const auto& r : results) {
      if (r.protocol == proto && r.available) {
        md += fmt::format(" {:.2f} |", group_percentile(r, g, 50));
      }
    }
    md += "\n";
  }
  return md;
}

}  // namespace

std::string StudyReport::markdown() const {
  std::string md = "# kvtier study report\n\n" + setup_section(*this);
  for (const auto& proto : protocols_of(results)) {
    md += results_table(results, proto);
    md += mechanism_table(results, proto);
  }
  md += ttft_by_length_table(*this);
  md += fmt::format("\nWall time of the whole run: {:.1f} s.\n", wall_s);
  return md;
}

}  // namespace kvtier::bench
