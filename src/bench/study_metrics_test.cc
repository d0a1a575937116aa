#include "bench/study_metrics.h"

#include <gtest/gtest.h>

namespace kvtier::bench {
namespace {

TEST(StudyMetrics, PercentileInterpolatesBetweenRanks) {
  // Sorted: 1 2 3 4 10; rank = p/100 * 4.
  std::vector<double> v = {10, 2, 4, 1, 3};
  EXPECT_DOUBLE_EQ(percentile(v, 50), 3.0);
  EXPECT_DOUBLE_EQ(percentile(v, 90), 4.0 + (10.0 - 4.0) * 0.6);  // rank 3.6
  EXPECT_DOUBLE_EQ(percentile(v, 99), 4.0 + 6.0 * 0.96);          // rank 3.96
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 10.0);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0.0);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7.0);
}

TEST(StudyMetrics, UnionOfIntervals) {
  // [0,2) and [1,3) overlap -> 3; [5,6) apart -> 1; [4,4) empty.
  EXPECT_DOUBLE_EQ(union_length({{1, 3}, {0, 2}, {5, 6}, {4, 4}}), 4.0);
  EXPECT_DOUBLE_EQ(union_length({{0, 10}, {2, 3}}), 10.0);  // nested
  EXPECT_DOUBLE_EQ(union_length({{0, 1}, {1, 2}}), 2.0);    // touching
  EXPECT_DOUBLE_EQ(union_length({}), 0.0);
}

TEST(StudyMetrics, ThroughputAndBusyTimeSaved) {
  EXPECT_DOUBLE_EQ(throughput_rps(30, 10, 70), 0.5);
  EXPECT_DOUBLE_EQ(throughput_rps(5, 3, 3), 0.0);
  // 29,700 tokens served at 14,850 tokens/s = 2 s avoided over 8 s busy.
  EXPECT_DOUBLE_EQ(gross_busy_time_saved(29700, 14850, 8), 0.25);
  EXPECT_DOUBLE_EQ(gross_busy_time_saved(1, 1, 0), 0.0);
  EXPECT_DOUBLE_EQ(safe_ratio(1, 0), 0.0);
  EXPECT_DOUBLE_EQ(safe_ratio(3, 4), 0.75);
}

}  // namespace
}  // namespace kvtier::bench
