#include "sim/sweep.h"

#include <algorithm>
#include <chrono>
#include <map>

#include <fmt/format.h>

#include "bench/session_scheduler.h"
#include "bench/study_metrics.h"
#include "bench/synthetic_workload.h"
#include "sim/parallel_cases.h"
#include "sim/sim_study.h"

namespace kvtier::sim {
namespace {

using bench::StudyCase;

constexpr double kGiB = 1ull << 30;
constexpr double kTiB = 1ull << 40;

// One run: a deployment point, or (id A) the recompute baseline of its
// sessions and replicas.
struct SweepJob {
  uint32_t sessions, prefill, nodes;
  double ram_gib, disk_tib, link_gbps;
  StudyCase id;
};

std::vector<SweepJob> plan_jobs(const SweepAxes& a) {
  std::vector<SweepJob> jobs;
  const std::vector<double> links = a.link_gbps.empty() ? std::vector<double>{0} : a.link_gbps;
  for (uint32_t s : a.sessions) {
    for (uint32_t r : a.prefill_replicas) {
      jobs.push_back({s, r, 1, 0, 0, 0, StudyCase::kA});
      for (uint32_t n : a.store_nodes) {
        for (double ram : a.ram_gib) {
          for (double disk : a.disk_tib) {
            if (disk <= 0) {  // no disk tier: the link does not matter
              jobs.push_back({s, r, n, ram, 0, 0, StudyCase::kC});
              continue;
            }
            for (double link : links) {
              jobs.push_back({s, r, n, ram, disk, link, link > 0 ? StudyCase::kE : StudyCase::kD});
            }
          }
        }
      }
    }
  }
  return jobs;
}

Result<bench::CaseResult> run_job(const bench::Workload& w, const SweepOptions& o,
                                  const SweepJob& job) {
  bench::StudyOptions so = o.study;
  so.prefill_replicas = so.decode_replicas = job.prefill;
  so.store_nodes = job.nodes;
  so.ram_bytes = static_cast<uint64_t>(job.ram_gib * kGiB);
  so.disk_bytes = static_cast<uint64_t>(job.disk_tib * kTiB);
  if (job.link_gbps > 0 && so.modeled_store) {
    const double link = job.link_gbps * 1e9 / 8;
    auto& m = *so.modeled_store;
    m.remote_load_bytes_per_s = std::min(m.remote_load_bytes_per_s, link);
    m.remote_save_bytes_per_s = std::min(m.remote_save_bytes_per_s, link);
  }
  std::unique_ptr<bench::SessionScheduler> sched;
  if (o.protocol == "short-reuse") {
    bench::ShortReuseOptions sr;
    sr.active_sessions = o.active_sessions;
    sr.seed = so.seed;
    sched = bench::make_short_reuse(w, sr);
  } else {
    bench::LongReuseOptions lr;
    lr.min_other_completions = o.min_other;
    lr.target_in_flight = so.max_in_flight;
    lr.seed = so.seed;
    sched = bench::make_long_reuse(w, lr);
  }
  return bench::run_study_case(w, *sched, o.protocol, job.id, so);
}

double share(uint64_t part, uint64_t whole) {
  return bench::safe_ratio(static_cast<double>(part), static_cast<double>(whole));
}

}  // namespace

double SweepPoint::prefill_saved() const {
  return 1.0 - share(result.computed_blocks, result.prompt_blocks);
}

double SweepPoint::store_hit_share() const {
  return share(result.store_hit_blocks, result.prompt_blocks);
}

double SweepPoint::throughput_vs_recompute() const {
  return bench::safe_ratio(result.throughput_rps, recompute_rps);
}

SweepOptions sweep_options(const SimProfile& p) {
  const bench::StudyRunOptions run = study_connector_run(p);
  SweepOptions o;
  o.study = run.study;
  o.parallel_runs = run.parallel_runs;
  return o;
}

Result<SweepReport> run_sweep(const SweepOptions& o,
                              const std::function<void(const SweepProgress&)>& progress) {
  if (o.protocol != "long-reuse" && o.protocol != "short-reuse") {
    return Status::invalid_argument("a sweep runs long-reuse or short-reuse");
  }
  const auto& a = o.axes;
  if (a.sessions.empty() || a.prefill_replicas.empty() || a.store_nodes.empty() ||
      a.ram_gib.empty() || a.disk_tib.empty()) {
    return Status::invalid_argument("every axis of a sweep needs a value");
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::map<uint32_t, bench::Workload> workloads;
  for (uint32_t s : a.sessions) {
    bench::SyntheticWorkloadOptions wo;
    wo.sessions = s;
    wo.length_scale = o.study.profile.token_scale;
    wo.seed = o.study.seed;
    workloads.emplace(s, bench::make_synthetic_agentic_workload(wo));
  }
  const auto jobs = plan_jobs(a);
  auto results = run_cases_in_parallel(
      jobs.size(), o.parallel_runs,
      [&](size_t i) { return run_job(workloads.at(jobs[i].sessions), o, jobs[i]); },
      [&](size_t done, size_t total) {
        if (progress) progress({done, total});
      });
  SweepReport report;
  report.options = o;
  std::map<std::pair<uint32_t, uint32_t>, double> recompute;  // (sessions, replicas) -> req/s
  for (size_t i = 0; i < jobs.size(); ++i) {
    const SweepJob& j = jobs[i];
    if (!results[i].ok()) {
      return Status(results[i].status().code(),
                    fmt::format("sweep point {} sessions, {} replicas, {} nodes, {} GiB RAM, {} "
                                "TiB disk, case {}: {}",
                                j.sessions, j.prefill, j.nodes, j.ram_gib, j.disk_tib,
                                bench::case_spec(j.id).letter, results[i].status().message()));
    }
    if (j.id == StudyCase::kA) {
      recompute[{j.sessions, j.prefill}] = results[i]->throughput_rps;
      continue;
    }
    SweepPoint p;
    p.sessions = j.sessions;
    p.prefill_replicas = j.prefill;
    p.store_nodes = j.nodes;
    p.ram_gib = j.ram_gib;
    p.disk_tib = j.disk_tib;
    p.link_gbps = j.link_gbps;
    p.id = j.id;
    p.result = std::move(*results[i]);
    report.points.push_back(std::move(p));
  }
  for (auto& p : report.points) p.recompute_rps = recompute[{p.sessions, p.prefill_replicas}];
  report.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

nlohmann::json SweepReport::json() const {
  nlohmann::json points_json = nlohmann::json::array();
  for (const auto& p : points) {
    points_json.push_back({{"sessions", p.sessions},
                           {"prefill_replicas", p.prefill_replicas},
                           {"store_nodes", p.store_nodes},
                           {"ram_gib", p.ram_gib},
                           {"disk_tib", p.disk_tib},
                           {"link_gbps", p.link_gbps},
                           {"case", bench::case_spec(p.id).letter},
                           {"prefill_saved_ratio", p.prefill_saved()},
                           {"store_hit_share", p.store_hit_share()},
                           {"throughput_rps", p.result.throughput_rps},
                           {"recompute_rps", p.recompute_rps},
                           {"throughput_vs_recompute_ratio", p.throughput_vs_recompute()},
                           {"disk_queue_s", p.result.disk_queue_s},
                           {"wall_s", p.result.wall_s}});
  }
  return {{"benchmark", "sim-sweep"},
          {"protocol", options.protocol},
          {"profile", options.study.profile.name},
          {"prefill_tokens_per_s", options.study.profile.prefill_tokens_per_s},
          {"points", points_json},
          {"wall_s", wall_s}};
}

std::string SweepReport::markdown() const {
  std::string md = fmt::format(
      "## Sweep ({}, profile {})\n\n| sessions | prefill | store nodes | RAM GiB | disk TiB | "
      "link Gb/s | case | prefill saved | store hit share | x recompute |\n"
      "|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|\n",
      options.protocol, options.study.profile.name);
  for (const auto& p : points) {
    md += fmt::format("| {} | {} | {} | {:g} | {:g} | {} | {} | {:.1f}% | {:.1f}% | {:.2f} |\n",
                      p.sessions, p.prefill_replicas, p.store_nodes, p.ram_gib, p.disk_tib,
                      p.link_gbps > 0 ? fmt::format("{:g}", p.link_gbps) : std::string("local"),
                      bench::case_spec(p.id).letter, 100 * p.prefill_saved(),
                      100 * p.store_hit_share(), p.throughput_vs_recompute());
  }
  // The sizing tables: the first replica count, node count and link of the axes.
  const auto& a = options.axes;
  const uint32_t r0 = a.prefill_replicas.front(), n0 = a.store_nodes.front();
  const double l0 = a.link_gbps.empty() ? 0 : a.link_gbps.front();
  for (uint32_t s : a.sessions) {
    md += fmt::format(
        "\n## Sizing: {} sessions, {} prefill replicas, {} store node(s), {} disk tier\n\n"
        "Prefill saved (x throughput of recomputation) by RAM tier (rows) and disk tier "
        "(columns).\n\n| RAM GiB |",
        s, r0, n0, l0 > 0 ? fmt::format("{:g} Gb/s remote", l0) : std::string("local"));
    for (double d : a.disk_tib) md += fmt::format(" disk {:g} TiB |", d);
    md += "\n|---:|";
    for (size_t i = 0; i < a.disk_tib.size(); ++i) md += "---:|";
    md += "\n";
    for (double ram : a.ram_gib) {
      md += fmt::format("| {:g} |", ram);
      for (double d : a.disk_tib) {
        const SweepPoint* hit = nullptr;
        for (const auto& p : points) {
          if (p.sessions == s && p.prefill_replicas == r0 && p.store_nodes == n0 &&
              p.ram_gib == ram && p.disk_tib == d && (d <= 0 || p.link_gbps == l0)) {
            hit = &p;
          }
        }
        md += hit ? fmt::format(" {:.1f}% ({:.2f}x) |", 100 * hit->prefill_saved(),
                                hit->throughput_vs_recompute())
                  : std::string(" - |");
      }
      md += "\n";
    }
  }
  return md;
}

}  // namespace kvtier::sim
