#include "bench/study_driver.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace kvtier::bench {

Result<StudyReport> run_study(const Workload& w, const StudyRunOptions& o,
                              const SchedulerFactory& schedulers,
                              const std::function<void(const StudyProgress&)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  if (w.request_count() == 0) return Status::invalid_argument("the workload has no requests");
  StudyReport report;
  StudyOptions study = o.study;
  report.workload = describe_workload(w, study.profile.token_scale);
  if (o.measure_limits) {
    report.limits = measure_study_limits(
        study, static_cast<uint32_t>(w.block_tokens * study.profile.stored_kv_bytes_per_token));
  } else if (o.disk_to_recompute > 0) {
    return Status::invalid_argument(
        "a disk-to-recompute ratio needs the fio measurement (limits are off)");
  }
  if (o.disk_to_recompute > 0) {
    const double fio = report.limits.fio_randread_bytes_per_s;
    if (fio <= 0) {
      return Status::failed_precondition(
          "a disk-to-recompute ratio needs fio's random-read rate, and fio did not run: " +
          report.limits.fio_error);
    }
    study.profile.prefill_tokens_per_s =
        fio / o.disk_to_recompute / static_cast<double>(study.profile.kv_bytes_per_token);
  }
  report.limits.recompute_kv_bytes_per_s =
      study.profile.prefill_tokens_per_s * static_cast<double>(study.profile.kv_bytes_per_token);
  report.options = study;
  const size_t runs = o.protocols.size() * o.cases.size();
  size_t index = 0;
  for (const auto& proto : o.protocols) {
    for (StudyCase c : o.cases) {
      auto sched = schedulers(w, proto);
      if (!sched.ok()) return sched.status();
      StudyProgress sp;
      sp.protocol = proto;
      sp.id = c;
      sp.run_index = index;
      sp.run_count = runs;
      sp.total = w.request_count();
      if (progress) progress(sp);
      auto r = run_study_case(w, **sched, proto, c, study, [&](const RunProgress& rp) {
        sp.done = rp.done;
        sp.total = rp.total;
        if (progress) progress(sp);
      });
      if (!r.ok()) {
        return Status(r.status().code(), std::string("case ") + case_spec(c).letter + " (" + proto +
                                             "): " + r.status().message());
      }
      report.results.push_back(std::move(*r));
      ++index;
    }
  }
  report.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

std::string plot_python() {
  if (const char* env = std::getenv("KVTIER_PYTHON")) return env;
  // The distribution's interpreter has the distribution's matplotlib even
  // when a user-level python3 comes first in PATH.
  if (std::filesystem::exists("/usr/bin/python3")) return "/usr/bin/python3";
  return "python3";
}

Status write_study_report(const StudyReport& report, const std::string& dir,
                          const std::string& plot_script) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::io_error("cannot create " + dir + ": " + ec.message());
  const auto md_path = std::filesystem::path(dir) / "report.md";
  const auto json_path = std::filesystem::path(dir) / "results.json";
  {
    std::ofstream md(md_path);
    md << report.markdown();
    if (!md) return Status::io_error("cannot write " + md_path.string());
  }
  {
    std::ofstream js(json_path);
    js << report.json(/*with_samples=*/true).dump(1) << "\n";
    if (!js) return Status::io_error("cannot write " + json_path.string());
  }
  if (plot_script.empty()) return Status::ok_status();
  const std::string cmd =
      plot_python() + " '" + plot_script + "' '" + json_path.string() + "' '" + dir + "' >&2";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    return Status::failed_precondition("plotting failed (" + cmd + "), exit status " +
                                       std::to_string(rc) +
                                       "; report.md and results.json are written");
  }
  return Status::ok_status();
}

}  // namespace kvtier::bench
