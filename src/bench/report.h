// BenchReport: the figures of one `kvtier bench ...` run. Each measurement
// sits beside the limit it is compared with and the ratio to that limit; it
// prints as a table for people or as one JSON object (`--json`) in which every
// ratio's key ends in `_ratio`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvtier::bench {

struct BenchLine {
  std::string key;         // JSON key stem, e.g. "ram_get"
  std::string what;        // human description
  double value = 0;        // measured figure
  std::string unit;        // "GB/s", "ms", "B/block"
  double limit = 0;        // what it is compared with (0 = none)
  std::string limit_what;  // e.g. "memcpy 1 thread"
  double ratio = 0;        // value / limit, or limit / value for "lower is better"
  double bar = 0;          // the ratio the issue requires
  bool higher_is_better = true;
  bool passed() const { return ratio >= bar; }
};

class BenchReport {
 public:
  explicit BenchReport(std::string title) : title_(std::move(title)) {}
  void add(BenchLine line) { lines_.push_back(std::move(line)); }
  void note(const std::string& key, nlohmann::json value) { extra_[key] = std::move(value); }
  bool all_passed() const;
  std::string table() const;
  nlohmann::json json() const;

 private:
  std::string title_;
  std::vector<BenchLine> lines_;
  nlohmann::json extra_ = nlohmann::json::object();
};

}  // namespace kvtier::bench
