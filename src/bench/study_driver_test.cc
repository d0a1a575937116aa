#include "bench/study_driver.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/testing/study_testing.h"

namespace kvtier::bench {
namespace {

Result<std::unique_ptr<SessionScheduler>> mini(const Workload& w, const std::string& proto) {
  return std::unique_ptr<SessionScheduler>(std::make_unique<testing::MiniScheduler>(
      w, proto == "short-reuse" ? 4 : 8, proto == "short-reuse" ? 0 : 4));
}

TEST(StudyDriver, RunsEveryCaseAndWritesTheReport) {
  auto w = testing::tiny_workload(8, 4, 6, 2);
  StudyRunOptions o;
  o.study.volume_dir = ".";
  o.measure_limits = false;
  uint64_t progress_calls = 0;
  auto report = run_study(w, o, mini, [&](const StudyProgress&) { ++progress_calls; });
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_GT(progress_calls, 0u);
  ASSERT_EQ(report->results.size(), 12u);
  const auto j = report->json();
  // E runs its disk tier through kvtier's NVMe/TCP host and target on loopback.
  for (const char* c : {"A", "B", "C", "D", "E", "F"}) {
    const auto& cj = j["protocols"]["long-reuse"][c];
    EXPECT_TRUE(cj["available"].get<bool>()) << c;
    EXPECT_EQ(cj["completed"].get<uint64_t>(), w.request_count()) << c;
    EXPECT_TRUE(cj.contains("throughput_vs_recompute_ratio")) << c;
  }
  EXPECT_DOUBLE_EQ(
      j["protocols"]["short-reuse"]["A"]["throughput_vs_recompute_ratio"].get<double>(), 1.0);
  const std::string md = report->markdown();
  EXPECT_NE(md.find("## Table 6."), std::string::npos);
  EXPECT_NE(md.find("## Table 7."), std::string::npos);
  EXPECT_NE(md.find("## Table 9."), std::string::npos);

  // The report folder, with the plots when matplotlib is here.
  const auto dir = std::filesystem::path("study-report-test-" + std::to_string(::getpid()));
  const auto script = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() /
                      "scripts" / "plot_study.py";
  const bool plots =
      std::system((plot_python() + " -c 'import matplotlib' 2>/dev/null").c_str()) == 0 &&
      std::filesystem::exists(script);
  auto st = write_study_report(*report, dir.string(), plots ? script.string() : "");
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(std::filesystem::exists(dir / "report.md"));
  std::ifstream js(dir / "results.json");
  std::stringstream ss;
  ss << js.rdbuf();
  auto parsed = nlohmann::json::parse(ss.str());
  EXPECT_EQ(parsed["protocols"]["short-reuse"]["C"]["ttft_samples_s"].size(), w.request_count());
  if (plots) {
    for (const char* f :
         {"throughput_short-reuse.png", "ttft_short-reuse.png", "throughput_long-reuse.png",
          "ttft_long-reuse.png", "long_reuse_io.png"}) {
      EXPECT_GT(std::filesystem::file_size(dir / f), 1000u) << f;
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvtier::bench
