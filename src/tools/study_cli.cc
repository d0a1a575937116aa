#include "tools/study_cli.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "bench/session_scheduler.h"
#include "bench/study_driver.h"
#include "bench/synthetic_workload.h"
#include "bench/trace_loaders.h"
#include "sim/sim_study.h"
#include "sim/validation.h"
#include "tools/commands.h"

namespace kvtier::tools {

namespace {

Result<bench::Workload> load_workload(const StudyCli& cli, const engine::EngineProfile& p) {
  if (cli.trace.empty()) {
    bench::SyntheticWorkloadOptions so;
    so.sessions = cli.sessions;
    so.length_scale = p.token_scale;
    so.seed = cli.run.study.seed;
    so.max_context_tokens = cli.max_context_tokens;
    return bench::make_synthetic_agentic_workload(so);
  }
  const auto colon = cli.trace.find(':');
  if (colon == std::string::npos) {
    return Status::invalid_argument("--trace takes mooncake:FILE or agent:DIR");
  }
  const std::string kind = cli.trace.substr(0, colon), path = cli.trace.substr(colon + 1);
  if (kind == "mooncake") return bench::load_mooncake_trace(path);
  if (kind == "agent") return bench::load_agent_session_traces(path);
  return Status::invalid_argument("unknown trace kind '" + kind + "' (mooncake or agent)");
}

void draw_progress(const bench::StudyProgress& sp) {
  const double frac =
      (static_cast<double>(sp.run_index) +
       (sp.total ? static_cast<double>(sp.done) / static_cast<double>(sp.total) : 0.0)) /
      static_cast<double>(sp.run_count ? sp.run_count : 1);
  const int width = 30;
  const int filled = static_cast<int>(frac * width);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(width, '.');
  std::fprintf(stderr, "\r[%s] %5.1f%%  %s case %s  %llu/%llu requests   ", bar.c_str(), 100 * frac,
               sp.protocol.c_str(), bench::case_spec(sp.id).letter,
               static_cast<unsigned long long>(sp.done), static_cast<unsigned long long>(sp.total));
  std::fflush(stderr);
}

// The run's options from the command line; false (after saying why) on bad input.
bool resolve_study_options(StudyCli& cli, engine::EngineProfile* profile) {
  if (cli.prefill_tokens_per_s > 0) profile->prefill_tokens_per_s = cli.prefill_tokens_per_s;
  auto& o = cli.run;
  o.study.profile = *profile;
  o.study.ram_bytes = static_cast<uint64_t>(cli.ram_gib * (1ull << 30));
  o.study.disk_bytes = static_cast<uint64_t>(cli.disk_tib * (1ull << 40));
  if (!bench::parse_pd_transfer_mode(cli.pd_transfer, &o.study.pd_transfer)) {
    std::fprintf(stderr, "%s: --pd-transfer is loopback or modeled\n", cli.command.c_str());
    return false;
  }
  o.cases.clear();
  for (char ch : cli.cases) {
    bench::StudyCase c;
    if (!bench::parse_study_case(std::string(1, ch), &c)) {
      std::fprintf(stderr, "%s: unknown case '%c' (A-F)\n", cli.command.c_str(), ch);
      return false;
    }
    o.cases.push_back(c);
  }
  if (cli.protocol == "both") {
    o.protocols = {"short-reuse", "long-reuse"};
  } else if (cli.protocol == "short" || cli.protocol == "long" || cli.protocol == "fleet") {
    o.protocols = {cli.protocol == "fleet" ? "fleet" : cli.protocol + "-reuse"};
  } else {
    std::fprintf(stderr, "%s: --protocol is short, long, both or fleet\n", cli.command.c_str());
    return false;
  }
  if (!cli.report_dir.empty() && cli.report_dir.find('\'') != std::string::npos) {
    std::fprintf(stderr, "%s: --report must not contain a quote\n", cli.command.c_str());
    return false;
  }
  return true;
}

// The session scheduler of each protocol, from the command line's options.
bench::SchedulerFactory scheduler_factory(const StudyCli& cli) {
  const uint64_t seed = cli.run.study.seed;
  return
      [&cli, seed](const bench::Workload& wl,
                   const std::string& proto) -> Result<std::unique_ptr<bench::SessionScheduler>> {
        if (proto == "short-reuse") {
          bench::ShortReuseOptions so;
          so.active_sessions = cli.active_sessions;
          so.seed = seed;
          return bench::make_short_reuse(wl, so);
        }
        if (proto == "long-reuse") {
          bench::LongReuseOptions lo;
          lo.min_other_completions = cli.min_other;
          lo.target_in_flight = cli.run.study.max_in_flight;
          lo.seed = seed;
          return bench::make_long_reuse(wl, lo);
        }
        bench::FleetOptions fo;
        fo.concurrent_sessions = cli.fleet_sessions;
        fo.steady_state = cli.fleet_steady;
        fo.pause_s = cli.fleet_pause_s;
        fo.rounds = cli.fleet_rounds;
        fo.seed = seed;
        return bench::make_fleet(wl, fo);
      };
}

// The report folder (with plots where the script is found) and the report
// on stdout; the exit code.
int write_study_outputs(const StudyCli& cli, const bench::StudyReport& report) {
  int rc = 0;
  if (!cli.report_dir.empty()) {
    const std::string script =
        cli.plot_script.empty() ? find_plot_script("plot_study.py") : cli.plot_script;
    if (script.empty()) {
      std::fprintf(stderr, "%s: scripts/plot_study.py not found; no plots\n", cli.command.c_str());
    }
    auto st = bench::write_study_report(report, cli.report_dir, script);
    if (!st.ok()) {
      std::fprintf(stderr, "%s: %s\n", cli.command.c_str(), st.to_string().c_str());
      rc = 1;
    } else {
      std::fprintf(stderr, "report written to %s\n", cli.report_dir.c_str());
    }
  }
  if (cli.json) {
    std::cout << report.json().dump(2) << std::endl;
  } else {
    std::cout << report.markdown() << std::endl;
  }
  return rc;
}

// `kvtier sim validate`: each case in the testbed, then in the simulator fed
// the testbed's measured rates; the table of both, exit 1 past the tolerance.
int run_validation(const StudyCli& cli, const bench::Workload& w) {
  std::fprintf(stderr, "%s: %zu cases x %zu protocols, each in the testbed then the simulator\n",
               cli.command.c_str(), cli.run.cases.size(), cli.run.protocols.size());
  auto report = sim::validate_against_testbed(w, cli.run, scheduler_factory(cli));
  if (!report.ok()) {
    std::fprintf(stderr, "%s: %s\n", cli.command.c_str(), report.status().to_string().c_str());
    return 1;
  }
  const auto off = report->outside(cli.tolerance, cli.checked);
  if (cli.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : report->rows) {
      rows.push_back({{"protocol", r.protocol},
                      {"case", bench::case_spec(r.id).letter},
                      {"metric", r.metric},
                      {"testbed", r.testbed},
                      {"simulator", r.simulator},
                      {"sim_vs_testbed_ratio", r.ratio()}});
    }
    std::cout << nlohmann::json{{"tolerance", cli.tolerance},
                                {"rows", rows},
                                {"outside_tolerance", off.size()}}
                     .dump(2)
              << std::endl;
  } else {
    std::cout << report->markdown(cli.tolerance);
  }
  std::fprintf(stderr, "%s: %zu of %zu figures within %.0f%%\n", cli.command.c_str(),
               report->rows.size() - off.size(), report->rows.size(), 100 * cli.tolerance);
  return off.empty() ? 0 : 1;
}

// The engine profile of the run: a built-in one, or the simulator's from
// its profile; nullopt after saying why.
std::optional<engine::EngineProfile> choose_profile(const StudyCli& cli,
                                                    std::optional<sim::SimProfile>* sim_profile) {
  if (cli.simulate) {
    auto sp = sim::resolve_sim_profile(cli.sim_profile, cli.sim_profile_file);
    if (!sp.ok()) {
      std::fprintf(stderr, "%s: %s\n", cli.command.c_str(), sp.status().to_string().c_str());
      return std::nullopt;
    }
    *sim_profile = *sp;
    return sim::sim_engine_profile(*sp);
  }
  auto profile = engine::find_engine_profile(cli.profile);
  if (!profile) {
    std::fprintf(stderr, "%s: unknown profile '%s'; known:", cli.command.c_str(),
                 cli.profile.c_str());
    for (const auto& p : engine::builtin_engine_profiles()) {
      std::fprintf(stderr, " %s", p.name.c_str());
    }
    std::fprintf(stderr, "\n");
  }
  return profile;
}

}  // namespace

std::string find_plot_script(const std::string& name) {
  // $KVTIER_PLOT_SCRIPT stands for the study's script only.
  if (const char* env = std::getenv("KVTIER_PLOT_SCRIPT"); env && name == "plot_study.py") {
    return env;
  }
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (auto dir = exe.parent_path(); !dir.empty() && dir != dir.root_path();
         dir = dir.parent_path()) {
      const auto p = dir / "scripts" / name;
      if (std::filesystem::exists(p)) return p.string();
    }
  }
  const auto local = std::filesystem::path("scripts") / name;
  if (std::filesystem::exists(local)) return local.string();
  return "";
}

void apply_fleet_testbed_defaults(const CLI::App& cmd, StudyCli* cli) {
  if (cli->protocol != "fleet") return;
  const auto unset = [&](const char* name) { return cmd.count(name) == 0; };
  using F = bench::FleetTestbed;
  if (unset("--ram-gib")) cli->ram_gib = static_cast<double>(F::kRamBytes) / (1ull << 30);
  if (unset("--prefill")) cli->run.study.prefill_replicas = F::kPrefillReplicas;
  if (unset("--decode")) cli->run.study.decode_replicas = F::kDecodeReplicas;
  if (unset("--max-context")) cli->max_context_tokens = F::kMaxContextTokens;
  if (unset("--fleet-steady")) cli->fleet_steady = true;
  if (unset("--fleet-pause")) cli->fleet_pause_s = F::kPauseS;
  if (unset("--fleet-rounds")) cli->fleet_rounds = F::kRounds;
  if (unset("--load-policy")) cli->run.study.load_policy = bench::LoadPolicy::kLoadAll;
}

int run_study_cli(StudyCli cli) {
  std::optional<sim::SimProfile> sim_profile;
  auto profile = choose_profile(cli, &sim_profile);
  if (!profile) return 2;
  // The simulator's settings first: the command line's options then apply to
  // them as to the testbed's.
  if (sim_profile) sim::configure_simulation(*sim_profile, &cli.run);
  if (!resolve_study_options(cli, &*profile)) return 2;
  if (cli.shared_disk) cli.run.study.shared_disk = *cli.shared_disk;
  auto& o = cli.run;
  std::fprintf(stderr, "%s: preparing the workload...\n", cli.command.c_str());
  auto w = load_workload(cli, *profile);
  if (!w.ok()) {
    std::fprintf(stderr, "%s: %s\n", cli.command.c_str(), w.status().to_string().c_str());
    return 1;
  }
  std::fprintf(
      stderr, "workload %s: %zu sessions, %llu requests (%llu records read, %llu skipped)\n",
      w->name.c_str(), w->sessions.size(), static_cast<unsigned long long>(w->request_count()),
      static_cast<unsigned long long>(w->records_read),
      static_cast<unsigned long long>(w->records_skipped));
  if (!cli.trace.empty() && profile->token_scale != 1.0 && w->block_tokens > 0) {
    // A trace has real token counts: keep them (token scale 1) and shrink
    // only the stored bytes, to 32 KiB per block as in the synthetic run;
    // the byte scale follows (docs/study.md, "Scaling rule").
    profile->token_scale = 1.0;
    profile->stored_kv_bytes_per_token = std::max<uint64_t>(64, 32768 / w->block_tokens);
    o.study.profile = *profile;
    std::fprintf(stderr, "trace: token scale 1, %llu stored bytes per token, byte scale %.0f\n",
                 static_cast<unsigned long long>(profile->stored_kv_bytes_per_token),
                 profile->byte_scale());
  }
  if (cli.validate) return run_validation(cli, *w);
  auto report =
      bench::run_study(*w, o, scheduler_factory(cli), [&](const bench::StudyProgress& sp) {
        if (!cli.quiet) draw_progress(sp);
      });
  if (!cli.quiet) std::fprintf(stderr, "\n");
  if (!report.ok()) {
    std::fprintf(stderr, "%s: %s\n", cli.command.c_str(), report.status().to_string().c_str());
    return 1;
  }
  return write_study_outputs(cli, *report);
}

// What is replayed: the profile, the protocol, the cases and the workload.
void add_workload_options(CLI::App* cmd, const std::shared_ptr<StudyCli>& cli) {
  if (cli->simulate) {
    cmd->add_option("--profile", cli->sim_profile,
                    "Built-in simulator profile (its figures and their sources: kvtier sim "
                    "profile NAME)")
        ->capture_default_str();
    cmd->add_option("--profile-file", cli->sim_profile_file,
                    "Simulator profile as a JSON file (docs/simulator.md), instead of a built-in");
  } else {
    cmd->add_option("--profile", cli->profile,
                    "Engine profile: h100-qwen3-coder-30b-scaled (for small machines) or "
                    "h100-qwen3-coder-30b (unscaled: 96 KiB stored per token)")
        ->capture_default_str();
  }
  cmd->add_option(
         "--protocol", cli->protocol,
         "short, long, both, or fleet. Fleet runs the study's fleet testbed unless an "
         "option says otherwise: one prefill and one decode endpoint (each sees every "
         "session, as each of the study's two role endpoints did), a 32 GB RAM tier, "
         "65,536-token contexts, steady state, three rounds per session with a 300 s pause "
         "between them, --load-policy load")
      ->capture_default_str();
  cmd->add_option("--cases", cli->cases, "Cases to run, letters A-F")->capture_default_str();
  add_ranged_option(cmd, "--sessions", cli->sessions,
                    "Sessions of the built-in synthetic agentic workload", 1u, 100000u);
  cmd->add_option("--trace", cli->trace,
                  "Replay a real trace instead: mooncake:FILE (FAST'25 JSONL) or agent:DIR "
                  "(kv-cache-tester session JSON)");
  cmd->add_option("--active-sessions", cli->active_sessions, "Short reuse: sessions active at once")
      ->capture_default_str();
  cmd->add_option("--min-other", cli->min_other,
                  "Long reuse: other requests that must complete before a session's next turn")
      ->capture_default_str();
  cmd->add_option("--fleet-sessions", cli->fleet_sessions, "Fleet: concurrent sessions")
      ->capture_default_str();
  cmd->add_flag("--fleet-steady,!--fleet-batch", cli->fleet_steady,
                "Fleet: steady state (staggered starts, a finished session replaced at once; the "
                "default) or batch (groups of sessions start together)");
  cmd->add_option("--fleet-pause", cli->fleet_pause_s,
                  "Fleet: pause between turns, or between rounds with --fleet-rounds, seconds")
      ->capture_default_str();
  cmd->add_option("--fleet-rounds", cli->fleet_rounds,
                  "Fleet: rounds per session; turns within a round follow each other at once and "
                  "only rounds are separated by the pause (0: the pause before every turn; fleet "
                  "default 3, the study's adev sessions)")
      ->capture_default_str();
  cmd->add_option("--max-context", cli->max_context_tokens,
                  "Context limit of the synthetic workload, real tokens: a session ends at the "
                  "first call that would pass it (0: none; fleet: 65536)")
      ->capture_default_str();
}

// The service: replicas, routing, the modeled GPU and how it uses a cached prefix.
void add_service_options(CLI::App* cmd, const std::shared_ptr<StudyCli>& cli) {
  add_ranged_option(cmd, "--prefill", cli->run.study.prefill_replicas, "Prefill replicas", 1u, 64u);
  add_ranged_option(cmd, "--decode", cli->run.study.decode_replicas, "Decode replicas", 1u, 64u);
  add_ranged_option(cmd, "--max-in-flight", cli->run.study.max_in_flight,
                    "Requests in flight at most", 1u, 4096u);
  cmd->add_option("--spill-margin", cli->run.study.spill_margin_tokens,
                  "Soft-sticky routing: queued tokens by which the preferred prefill may trail "
                  "the best before a turn spills")
      ->capture_default_str();
  cmd->add_option("--hbm-tokens", cli->run.study.hbm_pool_tokens,
                  "Local HBM prefix pool per prefill replica, deployment tokens (0: the "
                  "profile's: 166512, the study's vLLM figure for one H100)")
      ->capture_default_str();
  cmd->add_option("--prefill-tokens-per-s", cli->prefill_tokens_per_s,
                  "Modeled prefill rate per replica, tokens/s (0: the profile's, 14850). Whether "
                  "a disk-served prefix beats recomputation depends on the disk's load rate over "
                  "the rate at which prefill regenerates KV; a slower modeled GPU reproduces the "
                  "study's ratio on a machine whose disk is slower than the study's")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--disk-to-recompute", cli->run.disk_to_recompute,
                  "Set the modeled prefill rate so that fio's random-read rate of the volume "
                  "(measured first) is this many times the recompute KV rate (0: off). The "
                  "study's RAID0 read at about 2.5x its GPU's recompute rate; this reproduces "
                  "that ratio on a slower disk. Overrides --prefill-tokens-per-s")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag_function(
      "--shared-disk,!--no-shared-disk", [cli](int64_t n) { cli->shared_disk = n > 0; },
      "The replicas' disk reads queue on the one volume (case E: one link) in virtual time "
      "(default: on in the simulator; off in the testbed, which measures each call alone)");
  cmd->add_option_function<std::string>(
         "--load-policy",
         [cli](const std::string& v) {
           cli->run.study.load_policy =
               v == "race" ? bench::LoadPolicy::kRace : bench::LoadPolicy::kLoadAll;
         },
         "How a prefill replica uses a cached prefix: 'load' (the study's connector: load all of "
         "it, then compute the rest) or 'race' (compute the prefix's front while loading its "
         "back, split by each tier's measured load rate, so a tier slower than recomputation "
         "still helps)")
      ->check(CLI::IsMember({"load", "race"}))
      ->default_str("race");
  cmd->add_flag(
      "--no-promote", [cli](int64_t) { cli->run.study.promote_on_disk_hit = false; },
      "Serve disk-tier hits without copying them back into the RAM tier, as Mooncake Store's "
      "disk tier does (default: kvtier's policy, promote them)");
  cmd->add_option(
         "--time-lease", cli->run.study.time_lease_s,
         "Mooncake Store's lease semantics instead of kvtier's, seconds: every lookup "
         "and every read leases a RAM block this long, and a RAM tier whose blocks are all "
         "leased refuses writes (0: kvtier's policy, read leases of one transfer and "
         "demotion instead of refusal; the fleet study's Mooncake ran 300)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
}

// The store's tiers and the prefill-to-decode transfer.
void add_store_options(CLI::App* cmd, const std::shared_ptr<StudyCli>& cli) {
  cmd->add_option("--ram-gib", cli->ram_gib,
                  "Shared RAM tier, deployment GiB (divided by the byte scale for the run)")
      ->capture_default_str();
  cmd->add_option("--disk-tib", cli->disk_tib,
                  "Disk tier, deployment TiB (divided by the byte scale; two volume files, RAID0)")
      ->capture_default_str();
  if (cli->simulate) return;  // no volume files, modeled transfers
  cmd->add_option("--volume-dir", cli->run.study.volume_dir,
                  "Directory for the volume files (O_DIRECT capable, not tmpfs); removed after")
      ->capture_default_str();
  cmd->add_option("--pd-transfer", cli->pd_transfer,
                  "Prefill-to-decode KV transfer: loopback (each request's KV blocks really sent "
                  "over loopback TCP to its decode replica, which verifies them; the measured "
                  "time x the byte scale is charged) or modeled (the profile's link rate, "
                  "nothing sent)")
      ->capture_default_str();
  cmd->add_flag("--overlap-replicas", cli->run.study.overlap_replicas,
                "Let each prefill replica's write-behind saves and PD sends (on its own thread) "
                "run while other replicas load, instead of measuring every replica's store work "
                "alone; the report then shows the seconds replicas really overlapped. On a "
                "machine with few cores the overlap is mostly the testbed's own loopback copies "
                "competing with the store for the CPU");
}

// What the run prints and writes.
void add_output_options(CLI::App* cmd, const std::shared_ptr<StudyCli>& cli) {
  cmd->add_option("--seed", cli->run.study.seed, "Seed of the workload and the schedulers")
      ->capture_default_str();
  cmd->add_option("--report", cli->report_dir,
                  "Write report.md, results.json and the PNG plots into this directory");
  cmd->add_option("--plot-script", cli->plot_script,
                  "Plotting script (default: scripts/plot_study.py of the source tree)");
  if (!cli->simulate) {
    cmd->add_flag(
        "--no-limits", [cli](int64_t) { cli->run.measure_limits = false; },
        "Skip the memcpy and fio measurements");
  }
  cmd->add_flag("--quiet", cli->quiet, "No progress bar");
  cmd->add_flag(
      "--json", cli->json,
      "Print one JSON object (every ratio under a key ending in _ratio) instead of the tables");
}

void add_study_options(CLI::App* cmd, const std::shared_ptr<StudyCli>& cli) {
  add_workload_options(cmd, cli);
  add_service_options(cmd, cli);
  add_store_options(cmd, cli);
  add_output_options(cmd, cli);
  cmd->callback([cli, cmd] {
    apply_fleet_testbed_defaults(*cmd, cli.get());
    std::exit(run_study_cli(*cli));
  });
}

}  // namespace kvtier::tools
