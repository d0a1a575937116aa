#include "common/metrics.h"

#include <gtest/gtest.h>

namespace kvtier {
namespace {

TEST(Metrics, CountersAndGaugesAccumulate) {
  MetricsRegistry reg;
  auto& c = reg.counter("kvtier_test_total", "a test counter", "tier=\"ram\"");
  c.add();
  c.add(4);
  EXPECT_EQ(&c, &reg.counter("kvtier_test_total", "", "tier=\"ram\""));
  EXPECT_EQ(c.value(), 5u);
  reg.gauge("kvtier_g", "g").set(-3);
  std::string text = reg.render_prometheus();
  EXPECT_NE(text.find("kvtier_test_total{tier=\"ram\"} 5"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE kvtier_g gauge"), std::string::npos);
  EXPECT_NE(text.find("kvtier_g -3"), std::string::npos);
}

TEST(Metrics, HistogramQuantilesWithinBucketError) {
  Histogram h;
  for (uint64_t i = 1; i <= 10000; ++i) h.record(i * 1000);  // 1us .. 10ms uniform
  EXPECT_EQ(h.count(), 10000u);
  EXPECT_NEAR(h.quantile(0.5), 5e6, 5e6 * 0.2);
  EXPECT_NEAR(h.quantile(0.99), 9.9e6, 9.9e6 * 0.2);
  EXPECT_LE(h.quantile(0.5), h.quantile(0.9));
}

TEST(Metrics, HistogramBucketsAreMonotonic) {
  for (int i = 1; i < Histogram::kBuckets; ++i) {
    EXPECT_GT(Histogram::bucket_upper(i), Histogram::bucket_upper(i - 1)) << i;
  }
}

TEST(Metrics, PrometheusHistogramIsCumulative) {
  MetricsRegistry reg;
  auto& h = reg.histogram("kvtier_lat_seconds", "latency");
  h.record(100);
  h.record(1000000);
  std::string text = reg.render_prometheus();
  EXPECT_NE(text.find("kvtier_lat_seconds_count 2"), std::string::npos);
  EXPECT_NE(text.find("le=\"+Inf\"} 2"), std::string::npos) << text;
}

}  // namespace
}  // namespace kvtier
