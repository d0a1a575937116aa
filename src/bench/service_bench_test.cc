// run_service_bench end to end with a small in-process configuration: every
// measurement runs for real (iperf3 included) and the report carries each
// figure, limit and ratio.
#include "bench/service_bench.h"

#include <gtest/gtest.h>

namespace kvtier::bench {
namespace {

TEST(ServiceBench, SmallRunReportsEveryFigureWithoutErrors) {
  ServiceBenchOptions o;
  o.object_bytes = 256 << 10;
  o.seconds = 0.5;
  o.tcp_depth = 2;
  o.match_keys = 512;
  o.match_calls = 20;
  o.clients = 4;
  o.mixed_seconds = 1;
  o.mixed_object_bytes = 16 << 10;
  auto r = run_service_bench(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->errors, 0u);
  nlohmann::json j = r->report.json();
  for (const char* k :
       {"tcp_get", "shm_get", "match_prefix_p99", "match_prefix_tcp_p99", "mixed_rss"}) {
    ASSERT_TRUE(j.contains(std::string(k) + "_ratio")) << k << "\n" << j.dump(2);
    ASSERT_TRUE(j.contains(std::string(k) + "_limit")) << k;
  }
  EXPECT_GT(j["tcp_get_limit"].get<double>(), 0);  // iperf3 measured
  EXPECT_GT(j["tcp_get_ratio"].get<double>(), 0);
  EXPECT_GT(j["shm_get_ratio"].get<double>(), 0);  // the shared-memory path was used
  EXPECT_GT(j["match_prefix_p99_ratio"].get<double>(), 0);
  EXPECT_GT(j["mixed"]["calls"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["mixed"]["errors"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["server"].get<std::string>().rfind("in-process", 0), 0u);
}

}  // namespace
}  // namespace kvtier::bench
