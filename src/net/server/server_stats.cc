// StoreServer: the Stats response and /metrics (the store's registry plus
// mirrors of the StoreStats fields it lacks).
#include "net/server/server_impl.h"

namespace kvtier::net {

void StoreServer::Impl::setup_mirrors() {
  const auto& fields = store_stat_fields();
  mirror_gauges.assign(fields.size(), nullptr);
  mirror_counters.assign(fields.size(), nullptr);
  mirror_last.assign(fields.size(), 0);
  MetricsRegistry& r = store->metrics();
  for (size_t i = 0; i < fields.size(); ++i) {
    const auto& f = fields[i];
    if (f.kind == StoreStatField::Kind::kGauge) {
      mirror_gauges[i] = &r.gauge(f.name, f.help, f.labels);
    } else if (f.kind == StoreStatField::Kind::kCounter) {
      mirror_counters[i] = &r.counter(f.name, f.help, f.labels);
    }
  }
}

kv::StoreStats StoreServer::Impl::refresh_mirrors() {
  kv::StoreStats s = store->local_stats();
  const auto& fields = store_stat_fields();
  std::lock_guard lk(mirror_mu);
  for (size_t i = 0; i < fields.size(); ++i) {
    uint64_t v = fields[i].get(s);
    if (mirror_gauges[i]) mirror_gauges[i]->set(static_cast<int64_t>(v));
    if (mirror_counters[i]) {
      if (v > mirror_last[i]) mirror_counters[i]->add(v - mirror_last[i]);
      mirror_last[i] = std::max(v, mirror_last[i]);
    }
  }
  return s;
}

std::string StoreServer::Impl::render_metrics() {
  refresh_mirrors();
  return store->metrics().render_prometheus();
}

void StoreServer::Impl::build_stats(StatsFormat format, StatsResponse* resp,
                                    std::string* json_out) {
  kv::StoreStats s = refresh_mirrors();
  std::vector<StatCounter> counters = store_stats_to_counters(s);
  // Server metrics (counters and gauges) from the shared registry.
  nlohmann::json reg = nlohmann::json::parse(store->metrics().render_json(), nullptr, false);
  if (reg.is_object()) {
    for (auto it = reg.begin(); it != reg.end(); ++it) {
      if (it.key().rfind("kvtier_server_", 0) != 0) continue;
      if (it.value().is_number_unsigned()) {
        counters.push_back({it.key(), it.value().get<uint64_t>()});
      } else if (it.value().is_number_integer()) {
        counters.push_back(
            {it.key(), static_cast<uint64_t>(std::max<int64_t>(0, it.value().get<int64_t>()))});
      } else if (it.value().is_object() && it.value().contains("count")) {
        std::string key = it.key();
        size_t brace = key.find('{');
        std::string name = brace == std::string::npos
                               ? key + "_count"
                               : key.substr(0, brace) + "_count" + key.substr(brace);
        counters.push_back({name, it.value()["count"].get<uint64_t>()});
      }
    }
  }
  if (format == StatsFormat::kCounters) {
    for (StatCounter& sc : counters) {
      if (resp->counters.size() == kMaxStatsCounters) break;
      if (sc.name.size() <= kMaxNameBytes) resp->counters.push_back(std::move(sc));
    }
    return;
  }
  nlohmann::json j;
  j["server"] = {{"name", cfg.server_name},
                 {"address", bound_address},
                 {"port", bound_port},
                 {"active_connections", active_count()}};
  nlohmann::json cj = nlohmann::json::object();
  for (const StatCounter& sc : counters) cj[sc.name] = sc.value;
  j["counters"] = std::move(cj);
  if (reg.is_object()) j["metrics"] = std::move(reg);
  *json_out = j.dump();
  if (json_out->size() > limits.max_data_bytes) *json_out = "{}";
  resp->json_bytes = static_cast<uint32_t>(json_out->size());
}

}  // namespace kvtier::net
