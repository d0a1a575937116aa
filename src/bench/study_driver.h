// The study driver: runs the chosen cases under the chosen protocols on one
// workload, measures the physical limits of the same machine, and writes the
// report folder (report.md, results.json and, through scripts/plot_study.py,
// the PNG plots). `kvtier bench study` is a thin CLI over it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/session_scheduler.h"
#include "bench/study_config.h"
#include "bench/study_report.h"
#include "bench/workload.h"
#include "common/status.h"

namespace kvtier::bench {

// Makes the scheduler of `protocol` ("short-reuse", "long-reuse", "fleet").
using SchedulerFactory = std::function<Result<std::unique_ptr<SessionScheduler>>(
    const Workload& w, const std::string& protocol)>;

struct StudyRunOptions {
  StudyOptions study;
  std::vector<std::string> protocols = {"short-reuse", "long-reuse"};
  std::vector<StudyCase> cases = {StudyCase::kA, StudyCase::kB, StudyCase::kC,
                                  StudyCase::kD, StudyCase::kE, StudyCase::kF};
  bool measure_limits = true;
  // When > 0: set the modeled prefill rate so that fio's random-read rate of
  // the run's volume (measured first) is this many times the rate at which
  // recomputation produces KV. The study's RAID0 read at about 2.5x its
  // GPU's recompute rate; a machine with a slower disk reproduces that ratio
  // with a slower modeled GPU instead of failing to show the study's shape.
  double disk_to_recompute = 0;
  // (protocol, case) runs at once. 1 for the testbed: its runs measure this
  // machine, so each must have it to itself. The simulator's runs measure
  // nothing and may share the cores.
  unsigned parallel_runs = 1;
};

struct StudyProgress {
  std::string protocol;
  StudyCase id = StudyCase::kA;
  size_t run_index = 0, run_count = 0;  // which (protocol, case) run
  uint64_t done = 0, total = 0;         // requests of that run
};

Result<StudyReport> run_study(const Workload& w, const StudyRunOptions& o,
                              const SchedulerFactory& schedulers,
                              const std::function<void(const StudyProgress&)>& progress = {});

// Writes report.md and results.json (with per-request TTFTs) into `dir`
// (created), then, when `plot_script` is not empty, runs it with python3 to
// draw the PNGs. A plotting failure is returned as an error after the files
// are written.
// The interpreter the plots run with: $KVTIER_PYTHON, else /usr/bin/python3
// when present, else python3 from PATH.
std::string plot_python();

Status write_study_report(const StudyReport& report, const std::string& dir,
                          const std::string& plot_script);
// The same for any report: `dir`/report.md, `dir`/results.json, then the
// plotting script (when not empty) with the JSON's path and `dir`. The
// caller quotes nothing: `dir` and `plot_script` must not contain a quote.
Status write_report_folder(const std::string& dir, const std::string& markdown,
                           const nlohmann::json& results, const std::string& plot_script);

}  // namespace kvtier::bench
