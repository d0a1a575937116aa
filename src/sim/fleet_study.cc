#include "sim/fleet_study.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "bench/study_metrics.h"
#include "bench/synthetic_workload.h"
#include "sim/parallel_cases.h"
#include "sim/sim_study.h"

namespace kvtier::sim {
namespace {

using bench::StudyCase;

struct FleetJob {
  std::string part;
  uint32_t width;
  StudyCase id;
  StorePolicy policy;
};

std::vector<FleetJob> plan_jobs(const FleetStudyOptions& o) {
  std::vector<FleetJob> jobs;
  for (uint32_t width : o.widths) {
    for (const auto& p : o.policies) jobs.push_back({"sweep", width, StudyCase::kD, p});
  }
  for (const auto& p : o.policies) {
    for (StudyCase c : {StudyCase::kC, StudyCase::kD, StudyCase::kE}) {
      jobs.push_back({"point", o.point_width, c, p});
    }
  }
  // The lease row, unless a policy above already runs that lease.
  const bool known = std::any_of(o.policies.begin(), o.policies.end(), [&](const StorePolicy& p) {
    return p.time_lease_s == o.lease_row.time_lease_s;
  });
  if (!known) {
    jobs.push_back({"point", o.point_width, StudyCase::kC, o.lease_row});
    jobs.push_back({"point", o.point_width, StudyCase::kD, o.lease_row});
  }
  return jobs;
}

Result<bench::CaseResult> run_job(const bench::Workload& w, const FleetStudyOptions& o,
                                  const FleetJob& job) {
  bench::StudyOptions so = o.study;
  so.time_lease_s = job.policy.time_lease_s;
  so.window_s = o.window_s;
  bench::FleetOptions fo = o.fleet;
  fo.concurrent_sessions = job.width;
  auto sched = bench::make_fleet(w, fo);
  return bench::run_study_case(w, *sched, "fleet", job.id, so);
}

double mean_of(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

// Coefficient of variation (population standard deviation over the mean).
double cv_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  if (v.size() < 2 || m == 0) return 0;
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return std::sqrt(ss / static_cast<double>(v.size())) / m;
}

constexpr double kGiB = 1ull << 30;

nlohmann::json run_json(const FleetRun& run, double window_s) {
  const auto& r = run.result;
  const double blocks = static_cast<double>(r.prompt_blocks);
  const auto windows = run.window_bytes(window_s);
  return {
      {"part", run.part},
      {"width", run.width},
      {"case", bench::case_spec(run.id).letter},
      {"policy", run.policy},
      {"gross_busy_time_saved_ratio", r.gross_busy_saved_ratio},
      {"hbm_hit_share", bench::safe_ratio(static_cast<double>(r.hbm_hit_blocks), blocks)},
      {"store_hit_share", bench::safe_ratio(static_cast<double>(r.store_hit_blocks), blocks)},
      {"refused_write_share", run.refused_write_share()},
      {"refused_write_bytes", static_cast<double>(r.write_refusals) * r.block_bytes * r.byte_scale},
      {"store_bytes_per_window_mean", mean_of(windows)},
      {"store_bytes_per_window_cv", cv_of(windows)},
      {"full_windows", windows.size()},
      {"completed", r.completed},
      {"wall_s", r.wall_s}};
}

}  // namespace

FleetStudyOptions fleet_testbed_options(const SimProfile& p) {
  const bench::StudyRunOptions run = study_connector_run(p);
  FleetStudyOptions o;
  o.study = run.study;
  o.study.prefill_replicas = bench::FleetTestbed::kPrefillReplicas;
  o.study.decode_replicas = bench::FleetTestbed::kDecodeReplicas;
  o.study.ram_bytes = bench::FleetTestbed::kRamBytes;
  o.parallel_runs = run.parallel_runs;
  return o;
}

bench::Workload fleet_workload(uint32_t sessions, uint64_t seed) {
  bench::SyntheticWorkloadOptions wo;
  wo.sessions = sessions;
  wo.seed = seed;
  wo.max_context_tokens = bench::FleetTestbed::kMaxContextTokens;
  return bench::make_synthetic_agentic_workload(wo);
}

std::vector<double> FleetRun::window_bytes(double window_s) const {
  const auto& by_window = result.store_load_bytes_by_window;
  // The windows that ended before the run did; a window without loads is 0.
  const auto full = window_s > 0 ? static_cast<size_t>(result.last_end_s / window_s) : 0;
  std::vector<double> out;
  for (size_t i = 1; i < full; ++i) {
    out.push_back(i < by_window.size() ? static_cast<double>(by_window[i]) * result.byte_scale : 0);
  }
  return out;
}

double FleetRun::refused_write_share() const {
  return bench::safe_ratio(static_cast<double>(result.write_refusals),
                           static_cast<double>(result.offered_write_blocks));
}

const FleetRun* FleetStudyReport::find(const std::string& part, uint32_t width, StudyCase id,
                                       const std::string& policy) const {
  for (const auto& r : runs) {
    if (r.part == part && r.width == width && r.id == id && r.policy == policy) return &r;
  }
  return nullptr;
}

Result<FleetStudyReport> run_fleet_study(
    const bench::Workload& w, const FleetStudyOptions& o,
    const std::function<void(const FleetProgress&)>& progress) {
  if (o.widths.empty() || o.point_width == 0) {
    return Status::invalid_argument("the fleet study needs widths and a point width above 0");
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto jobs = plan_jobs(o);
  auto results = run_cases_in_parallel(
      jobs.size(), o.parallel_runs, [&](size_t i) { return run_job(w, o, jobs[i]); },
      [&](size_t done, size_t total) {
        if (progress) progress({done, total});
      });

  FleetStudyReport report;
  report.options = o;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (!results[i].ok()) {
      return Status(results[i].status().code(),
                    "fleet " + jobs[i].part + " width " + std::to_string(jobs[i].width) + " case " +
                        bench::case_spec(jobs[i].id).letter + " " + jobs[i].policy.name + ": " +
                        results[i].status().message());
    }
    report.runs.push_back(
        {jobs[i].part, jobs[i].width, jobs[i].id, jobs[i].policy.name, std::move(*results[i])});
  }
  report.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

nlohmann::json FleetStudyReport::json() const {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : runs) rows.push_back(run_json(r, options.window_s));
  nlohmann::json j = {{"benchmark", "sim-fleet"},
                      {"point_width", options.point_width},
                      {"window_s", options.window_s},
                      {"pause_s", options.fleet.pause_s},
                      {"rounds", options.fleet.rounds},
                      {"ram_bytes", options.study.ram_bytes},
                      {"prefill_replicas", options.study.prefill_replicas},
                      {"runs", rows},
                      {"wall_s", wall_s}};
  // The disk tier's points of the saving at the operating point, per policy.
  nlohmann::json disk = nlohmann::json::object();
  for (const auto& p : options.policies) {
    const auto* c = find("point", options.point_width, StudyCase::kC, p.name);
    const auto* d = find("point", options.point_width, StudyCase::kD, p.name);
    if (!c || !d) continue;
    const double points = d->result.gross_busy_saved_ratio - c->result.gross_busy_saved_ratio;
    disk[p.name] = {
        {"disk_tier_points", points},
        {"disk_tier_share_of_saving", bench::safe_ratio(points, d->result.gross_busy_saved_ratio)}};
  }
  j["disk_tier"] = disk;
  return j;
}

std::string FleetStudyReport::markdown() const {
  std::string md = fmt::format(
      "## Fleet width sweep (case D, local disk tier; gross endpoint busy time saved at {:.0f} "
      "tokens/s)\n\n| width | policy | saved | HBM hit share | store hit share | refused writes "
      "|\n|---:|---|---:|---:|---:|---:|\n",
      options.study.profile.prefill_tokens_per_s);
  for (const auto& r : runs) {
    if (r.part != "sweep") continue;
    const auto j = run_json(r, options.window_s);
    md += fmt::format("| {} | {} | {:.2f}% | {:.1f}% | {:.1f}% | {:.1f}% |\n", r.width, r.policy,
                      100 * j["gross_busy_time_saved_ratio"].get<double>(),
                      100 * j["hbm_hit_share"].get<double>(),
                      100 * j["store_hit_share"].get<double>(), 100 * r.refused_write_share());
  }
  md += fmt::format(
      "\n## Operating points at {} sessions\n\n| case | policy | saved | store hit share | "
      "refused writes (share, GiB) | store GiB per {:.0f} s window (mean, CV) |\n"
      "|---|---|---:|---:|---:|---:|\n",
      options.point_width, options.window_s);
  for (const auto& r : runs) {
    if (r.part != "point") continue;
    const auto j = run_json(r, options.window_s);
    md += fmt::format(
        "| {} {} | {} | {:.2f}% | {:.1f}% | {:.1f}%, {:.1f} | {:.1f}, {:.0f}% ({} windows) |\n",
        bench::case_spec(r.id).letter, bench::case_spec(r.id).name, r.policy,
        100 * j["gross_busy_time_saved_ratio"].get<double>(),
        100 * j["store_hit_share"].get<double>(), 100 * r.refused_write_share(),
        j["refused_write_bytes"].get<double>() / kGiB,
        j["store_bytes_per_window_mean"].get<double>() / kGiB,
        100 * j["store_bytes_per_window_cv"].get<double>(), j["full_windows"].get<size_t>());
  }
  const auto disk = json()["disk_tier"];
  md += "\n";
  for (const auto& [policy, v] : disk.items()) {
    md += fmt::format("Disk tier under {}: {:.2f} points of the saving ({:.0f}% of it).\n", policy,
                      100 * v["disk_tier_points"].get<double>(),
                      100 * v["disk_tier_share_of_saving"].get<double>());
  }
  return md;
}

}  // namespace kvtier::sim
