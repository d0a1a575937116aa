// Metrics registry: counters, gauges and latency histograms that every layer
// registers once and updates lock-free on its hot path. The registry renders
// the Prometheus text format (the store service exports it on /metrics) and a
// JSON object (for `--json` reports).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
namespace kvtier {

class Counter {
 public:
  void add(uint64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

class Gauge {
 public:
  void set(int64_t v) { v_.store(v, std::memory_order_relaxed); }
  void add(int64_t n) { v_.fetch_add(n, std::memory_order_relaxed); }
  int64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> v_{0};
};

// Latency histogram in nanoseconds with power-of-two-spaced buckets (each
// power of two split in 4), from 64 ns to about 70 s. Quantiles are
// interpolated inside a bucket, so they are accurate to about 19%.
class Histogram {
 public:
  static constexpr int kSubBuckets = 4;
  static constexpr int kMinShift = 6;   // 64 ns
  static constexpr int kMaxShift = 36;  // ~68.7 s
  static constexpr int kBuckets = (kMaxShift - kMinShift) * kSubBuckets + 2;

  void record(uint64_t ns);
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  uint64_t sum() const { return sum_.load(std::memory_order_relaxed); }
  // q in [0, 1]; 0 when empty.
  double quantile(double q) const;
  // Upper bound (ns) of bucket i, for export.
  static double bucket_upper(int i);
  uint64_t bucket_count(int i) const { return buckets_[i].load(std::memory_order_relaxed); }
  void reset();

 private:
  static int bucket_of(uint64_t ns);
  std::array<std::atomic<uint64_t>, kBuckets> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_{0};
};

// Owns named metrics. Names follow Prometheus rules; labels are given as a
// preformatted `key="value",...` string. Registration takes a lock; updates
// through the returned reference do not.
class MetricsRegistry {
 public:
  Counter& counter(const std::string& name, const std::string& help,
                   const std::string& labels = "");
  Gauge& gauge(const std::string& name, const std::string& help, const std::string& labels = "");
  Histogram& histogram(const std::string& name, const std::string& help,
                       const std::string& labels = "");

  std::string render_prometheus() const;
  // {"name{labels}": value, ...}; histograms give count, p50, p90, p99.
  std::string render_json() const;

 private:
  struct Family {
    std::string help;
    std::string type;
    std::map<std::string, std::unique_ptr<Counter>> counters;
    std::map<std::string, std::unique_ptr<Gauge>> gauges;
    std::map<std::string, std::unique_ptr<Histogram>> histograms;
  };
  Family& family(const std::string& name, const std::string& help, const char* type)
      KVTIER_REQUIRES(mu_);

  mutable Mutex mu_;
  std::map<std::string, Family> families_ KVTIER_GUARDED_BY(mu_);
};

}  // namespace kvtier
