#include "bench/study_driver.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

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
  struct Job {
    std::string protocol;
    StudyCase id;
  };
  std::vector<Job> jobs;
  for (const auto& proto : o.protocols) {
    for (StudyCase c : o.cases) jobs.push_back({proto, c});
  }
  std::vector<Result<CaseResult>> results(jobs.size(), Status::internal("not run"));
  // Progress over all runs: finished ones, plus the requests done by those
  // under way (several at once with parallel_runs).
  std::mutex progress_mu;
  std::vector<uint64_t> done(jobs.size(), 0);
  size_t finished = 0;
  auto report_progress = [&](size_t i) {
    if (!progress) return;
    StudyProgress sp;
    sp.protocol = jobs[i].protocol;
    sp.id = jobs[i].id;
    sp.run_index = finished;
    sp.run_count = jobs.size();
    sp.total = w.request_count();
    for (uint64_t d : done) sp.done += d;  // a finished run's is back to 0
    progress(sp);
  };
  auto run_one = [&](size_t i) {
    const Job& job = jobs[i];
    auto sched = schedulers(w, job.protocol);
    if (!sched.ok()) {
      results[i] = sched.status();
      return;
    }
    auto r = run_study_case(w, **sched, job.protocol, job.id, study, [&](const RunProgress& rp) {
      std::lock_guard lock(progress_mu);
      done[i] = rp.done;
      report_progress(i);
    });
    std::lock_guard lock(progress_mu);
    ++finished;
    done[i] = 0;
    report_progress(i);
    if (!r.ok()) {
      results[i] =
          Status(r.status().code(), std::string("case ") + case_spec(job.id).letter + " (" +
                                        job.protocol + "): " + r.status().message());
    } else {
      results[i] = std::move(*r);
    }
  };
  if (o.parallel_runs > 1 && !study.make_volume) {
    // The testbed's runs create volume files named by process, and measure
    // the machine: they must run one at a time.
    return Status::invalid_argument("parallel runs need the simulator's volumes (make_volume)");
  }
  if (o.parallel_runs <= 1) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      run_one(i);
      if (!results[i].ok()) return results[i].status();
    }
  } else {
    // Each run owns everything it uses (its store, volumes, threads); the
    // workload and the options are only read.
    // Last job first: the last protocol's cases with disk tiers take the
    // longest (long reuse, D to F), and starting them first keeps every core
    // busy to the end. Results stay in job order.
    std::atomic<size_t> next{0};
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < std::min<size_t>(o.parallel_runs, jobs.size()); ++t) {
      threads.emplace_back([&] {
        for (size_t n; (n = next.fetch_add(1)) < jobs.size();) {
          const size_t i = jobs.size() - 1 - n;
          // An exception must not escape the thread (std::terminate): it
          // becomes that run's error.
          try {
            run_one(i);
          } catch (const std::exception& e) {
            results[i] = Status::internal(std::string("run failed: ") + e.what());
          }
        }
      });
    }
    for (auto& t : threads) t.join();
  }
  for (auto& r : results) {
    if (!r.ok()) return r.status();
    report.results.push_back(std::move(*r));
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

Status write_report_folder(const std::string& dir, const std::string& markdown,
                           const nlohmann::json& results, const std::string& plot_script) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::io_error("cannot create " + dir + ": " + ec.message());
  const auto md_path = std::filesystem::path(dir) / "report.md";
  const auto json_path = std::filesystem::path(dir) / "results.json";
  {
    std::ofstream md(md_path);
    md << markdown;
    if (!md) return Status::io_error("cannot write " + md_path.string());
  }
  {
    std::ofstream js(json_path);
    js << results.dump(1) << "\n";
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

Status write_study_report(const StudyReport& report, const std::string& dir,
                          const std::string& plot_script) {
  return write_report_folder(dir, report.markdown(), report.json(/*with_samples=*/true),
                             plot_script);
}

}  // namespace kvtier::bench
