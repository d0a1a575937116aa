#include "sim/validation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "bench/study_metrics.h"
#include "sim/sim_study.h"

namespace kvtier::sim {

namespace {

double rate(uint64_t bytes, double seconds) {
  return bytes > 0 && seconds > 0 ? static_cast<double>(bytes) / seconds : 0;
}

// The simulator's options for a case the testbed ran with `tb`: the same
// workload scale and deployment, blocks of a byte per token, sparse volumes,
// and the rates the testbed measured.
bench::StudyOptions simulated(const bench::StudyOptions& tb, const bench::CaseResult& measured) {
  bench::StudyOptions s = tb;
  s.profile.stored_kv_bytes_per_token = kStoredBytesPerToken;
  s.store_charge_scale = 0;
  s.modeled_store = measured_store_rates(measured, tb.charge_scale());
  // The simulator charges the prefill-to-decode transfer at the profile's
  // link rate; only a testbed run that did the same is comparable.
  s.pd_transfer = bench::PdTransferMode::kModeled;
  s.make_volume = sparse_volume_factory();
  return s;
}

double hit_share(const bench::CaseResult& r) {
  return r.prompt_blocks ? static_cast<double>(r.store_hit_blocks + r.hbm_hit_blocks) /
                               static_cast<double>(r.prompt_blocks)
                         : 0;
}

void add_rows(const bench::CaseResult& tb, const bench::CaseResult& sim,
              const bench::CaseResult& tb_a, const bench::CaseResult& sim_a,
              std::vector<ValidationRow>* rows) {
  auto add = [&](const char* metric, double t, double s) {
    rows->push_back({tb.protocol, tb.id, metric, t, s});
  };
  if (tb.id != bench::StudyCase::kA) {
    add("throughput / A", tb.throughput_rps / tb_a.throughput_rps,
        sim.throughput_rps / sim_a.throughput_rps);
  }
  if (tb.prompt_blocks > 0 && hit_share(tb) > 0) add("hit share", hit_share(tb), hit_share(sim));
  add("TTFT p50 s", bench::percentile(tb.ttft_s, 50), bench::percentile(sim.ttft_s, 50));
  add("TTFT p90 s", bench::percentile(tb.ttft_s, 90), bench::percentile(sim.ttft_s, 90));
}

}  // namespace

bench::StudyOptions::ModeledStoreRates measured_store_rates(const bench::CaseResult& r,
                                                            double charge_scale) {
  bench::StudyOptions::ModeledStoreRates m;
  // The RAM reads' own time: a lookup's is charged apart, once per consult
  // (misses too), not spread over the bytes that hits moved.
  m.ram_load_bytes_per_s = rate(r.store_load_bytes - r.store_disk_load_bytes,
                                r.store_read_wall_s - r.store_disk_load_wall_s);
  if (r.store_lookups > 0 && r.store_load_wall_s > r.store_read_wall_s) {
    m.lookup_s = (r.store_load_wall_s - r.store_read_wall_s) /
                 static_cast<double>(r.store_lookups) * charge_scale;
  }
  m.disk_load_bytes_per_s = rate(r.store_disk_load_bytes, r.store_disk_load_wall_s);
  m.save_bytes_per_s = rate(r.store_save_bytes, r.store_wall_s - r.store_load_wall_s);
  // The remote and direct rates stay 0: the runner then charges case E's and
  // F's disk loads at the disk rate, which is what this run measured for them.
  // A tier this case never used still needs a rate; it charges nothing.
  for (double* v : {&m.ram_load_bytes_per_s, &m.disk_load_bytes_per_s, &m.save_bytes_per_s}) {
    if (*v <= 0) *v = 1e12;
  }
  return m;
}

double ValidationRow::ratio() const {
  if (testbed == 0) return simulator == 0 ? 1 : INFINITY;
  return simulator / testbed;
}

std::vector<ValidationRow> ValidationReport::outside(
    double tolerance, const std::vector<std::string>& checked) const {
  std::vector<ValidationRow> out;
  for (const auto& r : rows) {
    const bool is_checked =
        checked.empty() || std::find(checked.begin(), checked.end(), r.metric) != checked.end();
    if (is_checked && !(std::abs(r.ratio() - 1) <= tolerance)) out.push_back(r);
  }
  return out;
}

std::string ValidationReport::markdown(double tolerance) const {
  std::string md = "| protocol | case | metric | testbed | simulator | ratio | within |\n";
  md += "|---|---|---|---:|---:|---:|---|\n";
  for (const auto& r : rows) {
    md += fmt::format("| {} | {} | {} | {:.3f} | {:.3f} | {:.3f} | {} |\n", r.protocol,
                      bench::case_spec(r.id).letter, r.metric, r.testbed, r.simulator, r.ratio(),
                      std::abs(r.ratio() - 1) <= tolerance ? "yes" : "NO");
  }
  return md;
}

Result<ValidationReport> validate_against_testbed(const bench::Workload& w,
                                                  const bench::StudyRunOptions& o,
                                                  const bench::SchedulerFactory& schedulers) {
  ValidationReport report;
  for (const auto& proto : o.protocols) {
    const size_t first = report.testbed.size();
    for (bench::StudyCase c : o.cases) {
      for (bool sim : {false, true}) {
        KVTIER_ASSIGN_OR_RETURN(auto sched, schedulers(w, proto));
        const bench::StudyOptions so = sim ? simulated(o.study, report.testbed.back()) : o.study;
        auto r = bench::run_study_case(w, *sched, proto, c, so);
        if (!r.ok()) {
          return Status(r.status().code(),
                        fmt::format("case {} ({}, {}): {}", bench::case_spec(c).letter, proto,
                                    sim ? "simulator" : "testbed", r.status().message()));
        }
        (sim ? report.simulator : report.testbed).push_back(std::move(*r));
      }
    }
    // Throughput is compared as each case's ratio to A, as the study states it.
    const bench::CaseResult* tb_a = nullptr;
    const bench::CaseResult* sim_a = nullptr;
    for (size_t i = first; i < report.testbed.size(); ++i) {
      if (report.testbed[i].id == bench::StudyCase::kA) {
        tb_a = &report.testbed[i];
        sim_a = &report.simulator[i];
      }
    }
    if (!tb_a) return Status::invalid_argument("validation needs case A (the ratios' base)");
    for (size_t i = first; i < report.testbed.size(); ++i) {
      add_rows(report.testbed[i], report.simulator[i], *tb_a, *sim_a, &report.rows);
    }
  }
  return report;
}

}  // namespace kvtier::sim
