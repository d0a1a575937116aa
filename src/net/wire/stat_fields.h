// The store's statistics on the wire: the names under which a Stats
// response carries each kv::StoreStats field.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kv/store.h"
#include "net/wire/protocol.h"

namespace kvtier::net {

// A Stats response carries named counters. These are the names of the
// kv::StoreStats fields, shared by the server (which also exports the ones
// the store's registry lacks on /metrics) and the client (which rebuilds
// StoreStats from them). Names with labels are the registry's own.
struct StoreStatField {
  enum class Kind : uint8_t {
    kStoreMetric,  // already in the Store's metrics registry
    kGauge,        // a level (slots used, entries); mirrored as a gauge
    kCounter,      // cumulative, kept outside the registry; mirrored as a counter
  };
  std::string name;    // metric name without labels
  std::string labels;  // `reason="evicted"` or empty
  std::string help;
  Kind kind;
  std::function<uint64_t(const kv::StoreStats&)> get;
  std::function<void(kv::StoreStats&, uint64_t)> set;
  // name{labels}, the counter's name on the wire.
  std::string full_name() const { return labels.empty() ? name : name + "{" + labels + "}"; }
};
const std::vector<StoreStatField>& store_stat_fields();
std::vector<StatCounter> store_stats_to_counters(const kv::StoreStats& stats);
// Counters not named in store_stat_fields() are ignored.
kv::StoreStats store_stats_from_counters(std::span<const StatCounter> counters);

}  // namespace kvtier::net
