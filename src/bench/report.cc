#include "bench/report.h"

#include <fmt/format.h>

namespace kvtier::bench {

bool BenchReport::all_passed() const {
  for (const auto& l : lines_) {
    if (!l.passed()) return false;
  }
  return true;
}

std::string BenchReport::table() const {
  std::string out = fmt::format("\n{}\n", title_);
  out += fmt::format("{:<44} {:>12} {:>26} {:>8} {:>6} {}\n", "measurement", "value", "limit",
                     "ratio", "bar", "");
  out += std::string(108, '-') + "\n";
  for (const auto& l : lines_) {
    std::string value = fmt::format("{:.3f} {}", l.value, l.unit);
    std::string limit =
        l.limit > 0 ? fmt::format("{:.3f} ({})", l.limit, l.limit_what) : l.limit_what;
    out += fmt::format("{:<44} {:>12} {:>26} {:>7.3f}x {:>5.2f}x {}\n", l.what, value, limit,
                       l.ratio, l.bar, l.passed() ? "ok" : "BELOW BAR");
  }
  return out;
}

nlohmann::json BenchReport::json() const {
  nlohmann::json j;
  j["benchmark"] = title_;
  for (const auto& l : lines_) {
    j[l.key] = l.value;
    j[l.key + "_unit"] = l.unit;
    j[l.key + "_limit"] = l.limit;
    j[l.key + "_limit_source"] = l.limit_what;
    j[l.key + "_ratio"] = l.ratio;
    j[l.key + "_bar"] = l.bar;
    j[l.key + "_passed"] = l.passed();
  }
  j["all_passed"] = all_passed();
  for (auto it = extra_.begin(); it != extra_.end(); ++it) j[it.key()] = it.value();
  return j;
}

}  // namespace kvtier::bench
