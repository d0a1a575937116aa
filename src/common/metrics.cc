#include "common/metrics.h"

#include <bit>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

namespace kvtier {

int Histogram::bucket_of(uint64_t ns) {
  if (ns < (1ull << kMinShift)) return 0;
  int msb = 63 - std::countl_zero(ns);
  if (msb >= kMaxShift) return kBuckets - 1;
  int sub = static_cast<int>((ns >> (msb - 2)) & (kSubBuckets - 1));
  return 1 + (msb - kMinShift) * kSubBuckets + sub;
}

double Histogram::bucket_upper(int i) {
  if (i == 0) return static_cast<double>(1ull << kMinShift);
  if (i >= kBuckets - 1) return INFINITY;
  int msb = (i - 1) / kSubBuckets + kMinShift;
  int sub = (i - 1) % kSubBuckets;
  return std::ldexp(1.0 + (sub + 1) / static_cast<double>(kSubBuckets), msb);
}

void Histogram::record(uint64_t ns) {
  buckets_[bucket_of(ns)].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(ns, std::memory_order_relaxed);
}

double Histogram::quantile(double q) const {
  uint64_t total = 0;
  std::array<uint64_t, kBuckets> snap;
  for (int i = 0; i < kBuckets; ++i) total += snap[i] = bucket_count(i);
  if (total == 0) return 0;
  double rank = q * static_cast<double>(total);
  double seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    if (snap[i] == 0) continue;
    if (seen + snap[i] >= rank) {
      double lo = i == 0 ? 0 : bucket_upper(i - 1);
      double hi = bucket_upper(i);
      if (std::isinf(hi)) return lo;
      double frac = (rank - seen) / static_cast<double>(snap[i]);
      return lo + (hi - lo) * frac;
    }
    seen += snap[i];
  }
  return bucket_upper(kBuckets - 2);
}

void Histogram::reset() {
  for (auto& b : buckets_) b.store(0, std::memory_order_relaxed);
  count_.store(0, std::memory_order_relaxed);
  sum_.store(0, std::memory_order_relaxed);
}

MetricsRegistry::Family& MetricsRegistry::family(const std::string& name, const std::string& help,
                                                 const char* type) {
  auto& f = families_[name];
  if (f.type.empty()) {
    f.type = type;
    f.help = help;
  }
  return f;
}

namespace {
// The metric of `labels` in one family's map, made on first use.
template <typename Metric>
Metric& slot_of(std::map<std::string, std::unique_ptr<Metric>>& metrics,
                const std::string& labels) {
  auto& slot = metrics[labels];
  if (!slot) slot = std::make_unique<Metric>();
  return *slot;
}
}  // namespace

Counter& MetricsRegistry::counter(const std::string& name, const std::string& help,
                                  const std::string& labels) {
  MutexLock lock(mu_);
  return slot_of(family(name, help, "counter").counters, labels);
}

Gauge& MetricsRegistry::gauge(const std::string& name, const std::string& help,
                              const std::string& labels) {
  MutexLock lock(mu_);
  return slot_of(family(name, help, "gauge").gauges, labels);
}

Histogram& MetricsRegistry::histogram(const std::string& name, const std::string& help,
                                      const std::string& labels) {
  MutexLock lock(mu_);
  return slot_of(family(name, help, "histogram").histograms, labels);
}

namespace {
std::string with_labels(const std::string& name, const std::string& labels,
                        const std::string& extra = "") {
  std::string all = labels;
  if (!extra.empty()) all = all.empty() ? extra : all + "," + extra;
  return all.empty() ? name : name + "{" + all + "}";
}
}  // namespace

std::string MetricsRegistry::render_prometheus() const {
  MutexLock lock(mu_);
  std::ostringstream out;
  for (const auto& [name, f] : families_) {
    out << "# HELP " << name << ' ' << f.help << '\n' << "# TYPE " << name << ' ' << f.type << '\n';
    for (const auto& [labels, c] : f.counters)
      out << with_labels(name, labels) << ' ' << c->value() << '\n';
    for (const auto& [labels, g] : f.gauges)
      out << with_labels(name, labels) << ' ' << g->value() << '\n';
    for (const auto& [labels, h] : f.histograms) {
      // Exported in seconds, as Prometheus expects.
      uint64_t cumulative = 0;
      for (int i = 0; i < Histogram::kBuckets; ++i) {
        cumulative += h->bucket_count(i);
        double le = Histogram::bucket_upper(i);
        std::ostringstream le_s;
        if (std::isinf(le)) {
          le_s << "+Inf";
        } else {
          le_s << le / 1e9;
        }
        out << with_labels(name + "_bucket", labels, "le=\"" + le_s.str() + "\"") << ' '
            << cumulative << '\n';
      }
      out << with_labels(name + "_sum", labels) << ' ' << static_cast<double>(h->sum()) / 1e9
          << '\n';
      out << with_labels(name + "_count", labels) << ' ' << h->count() << '\n';
    }
  }
  return out.str();
}

std::string MetricsRegistry::render_json() const {
  MutexLock lock(mu_);
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, f] : families_) {
    for (const auto& [labels, c] : f.counters) j[with_labels(name, labels)] = c->value();
    for (const auto& [labels, g] : f.gauges) j[with_labels(name, labels)] = g->value();
    for (const auto& [labels, h] : f.histograms) {
      j[with_labels(name, labels)] = {{"count", h->count()},
                                      {"p50_ns", h->quantile(0.5)},
                                      {"p90_ns", h->quantile(0.9)},
                                      {"p99_ns", h->quantile(0.99)}};
    }
  }
  return j.dump();
}

}  // namespace kvtier
