#include "net/wire/stat_fields.h"

#include <fmt/format.h>

#include <array>
#include <string_view>
#include <unordered_map>

namespace kvtier::net {

namespace {

using K = StoreStatField::Kind;
using S = kv::StoreStats;
using Fields = std::vector<StoreStatField>;

void add(Fields& f, std::string name, std::string labels, std::string help, K kind,
         std::function<uint64_t(const S&)> get, std::function<void(S&, uint64_t)> set) {
  f.push_back(
      {std::move(name), std::move(labels), std::move(help), kind, std::move(get), std::move(set)});
}

// One field of StoreStats, read and written by member.
#define KVTIER_FIELD(NAME, LABELS, HELP, KIND, MEMBER)                            \
  add(                                                                            \
      f, NAME, LABELS, HELP, KIND, [](const S& s) { return uint64_t(s.MEMBER); }, \
      [](S& s, uint64_t v) { s.MEMBER = static_cast<decltype(s.MEMBER)>(v); })

// One counter per reason of StoreStats' array `counts`, labelled with the
// reason's name (reason 0 is "none" and has no counter).
template <typename Reason, size_t N>
void add_by_reason(Fields& f, const char* name, std::array<uint64_t, N> S::*counts,
                   const char* (*name_of)(Reason)) {
  for (size_t i = 1; i < N; ++i) {
    add(
        f, name, fmt::format("reason=\"{}\"", name_of(static_cast<Reason>(i))), "", K::kStoreMetric,
        [i, counts](const S& s) { return (s.*counts)[i]; },
        [i, counts](S& s, uint64_t v) { (s.*counts)[i] = v; });
  }
}

// The store's own counters: puts, hits and misses by reason, refusals by
// reason, eviction, demotion and promotion.
void add_store_counters(Fields& f) {
  KVTIER_FIELD("kvtier_store_puts_total", "", "", K::kStoreMetric, puts);
  KVTIER_FIELD("kvtier_store_dedup_total", "", "", K::kStoreMetric, dedups);
  KVTIER_FIELD("kvtier_store_put_bytes_total", "", "", K::kStoreMetric, put_bytes);
  KVTIER_FIELD("kvtier_store_hits_total", "tier=\"ram\"", "", K::kStoreMetric, hits_ram);
  KVTIER_FIELD("kvtier_store_hits_total", "tier=\"disk\"", "", K::kStoreMetric, hits_disk);
  KVTIER_FIELD("kvtier_store_get_bytes_total", "", "", K::kStoreMetric, get_bytes);
  add_by_reason(f, "kvtier_store_misses_total", &S::misses, kv::miss_reason_name);
  add_by_reason(f, "kvtier_store_refusals_total", &S::refusals, kv::refuse_reason_name);
  KVTIER_FIELD("kvtier_store_ram_evictions_total", "", "", K::kStoreMetric, evictions);
  KVTIER_FIELD("kvtier_store_demotions_total", "", "", K::kStoreMetric, demotions);
  KVTIER_FIELD("kvtier_store_demotion_bytes_total", "", "", K::kStoreMetric, demotion_bytes);
  KVTIER_FIELD("kvtier_store_eviction_drops_total", "", "", K::kStoreMetric, eviction_drops);
  KVTIER_FIELD("kvtier_store_promotions_total", "", "", K::kStoreMetric, promotions);
  KVTIER_FIELD("kvtier_store_disk_direct_puts_total", "", "", K::kStoreMetric, disk_direct_puts);
  KVTIER_FIELD("kvtier_store_demotions_rejected_total", "", "", K::kStoreMetric,
               demotions_rejected);
}

// The RAM tier's and the index's gauges.
void add_store_gauges(Fields& f) {
  KVTIER_FIELD("kvtier_store_ram_slots", "", "RAM tier slots", K::kGauge, ram_slots);
  KVTIER_FIELD("kvtier_store_ram_used_slots", "", "RAM tier slots holding a block", K::kGauge,
               ram_used);
  KVTIER_FIELD("kvtier_store_ram_leased_slots", "", "RAM slots under a read lease right now",
               K::kGauge, ram_leased);
  KVTIER_FIELD("kvtier_store_index_entries", "", "Blocks in the index", K::kGauge, index_entries);
  KVTIER_FIELD("kvtier_store_index_capacity", "", "Index capacity in blocks", K::kGauge,
               index_capacity);
  KVTIER_FIELD("kvtier_store_index_bytes", "", "Memory used by the index", K::kGauge, index_bytes);
  KVTIER_FIELD("kvtier_store_disk_enabled", "", "1 when the store has a disk tier", K::kGauge,
               has_disk);
}

// The disk tier's gauges and counters.
void add_disk_fields(Fields& f) {
  KVTIER_FIELD("kvtier_disk_regions", "", "Disk tier regions", K::kGauge, disk.region_count);
  KVTIER_FIELD("kvtier_disk_regions_in_use", "", "Disk tier regions holding entries", K::kGauge,
               disk.regions_in_use);
  KVTIER_FIELD("kvtier_disk_recovered_from_checkpoint", "",
               "1 when the last open loaded a checkpoint (clean restart)", K::kGauge,
               disk.recovered_from_checkpoint);
  KVTIER_FIELD("kvtier_disk_recovered_entries", "", "Entries found on the volume at open",
               K::kGauge, disk.recovered_entries);
  KVTIER_FIELD("kvtier_disk_recovery_dropped", "",
               "Entries dropped at open (checksum or header mismatch)", K::kGauge,
               disk.recovery_dropped);
  KVTIER_FIELD("kvtier_disk_appends_total", "", "Entries appended to the disk tier", K::kCounter,
               disk.appends);
  KVTIER_FIELD("kvtier_disk_appended_bytes_total", "", "Bytes appended to the disk tier",
               K::kCounter, disk.bytes_appended);
  KVTIER_FIELD("kvtier_disk_region_writes_total", "", "Region writes issued", K::kCounter,
               disk.region_writes);
  KVTIER_FIELD("kvtier_disk_written_bytes_total", "", "Bytes written to the volume", K::kCounter,
               disk.bytes_written);
  KVTIER_FIELD("kvtier_disk_write_errors_total", "", "Failed volume writes", K::kCounter,
               disk.write_errors);
  KVTIER_FIELD("kvtier_disk_reads_total", "", "Disk tier reads", K::kCounter, disk.reads);
  KVTIER_FIELD("kvtier_disk_read_bytes_total", "", "Bytes read from the volume", K::kCounter,
               disk.bytes_read);
  KVTIER_FIELD("kvtier_disk_coalesced_reads_total", "",
               "Disk reads sent in one vectored request with the read before them", K::kCounter,
               disk.coalesced_reads);
  KVTIER_FIELD("kvtier_disk_buffer_reads_total", "",
               "Reads served from a region buffer not yet written", K::kCounter, disk.buffer_reads);
  KVTIER_FIELD("kvtier_disk_read_corrupt_total", "", "Reads that failed verification", K::kCounter,
               disk.read_corrupt);
  KVTIER_FIELD("kvtier_disk_read_io_errors_total", "", "Reads the device failed", K::kCounter,
               disk.read_io_errors);
  KVTIER_FIELD("kvtier_disk_regions_reclaimed_total", "", "Regions reclaimed (FIFO eviction)",
               K::kCounter, disk.regions_reclaimed);
  KVTIER_FIELD("kvtier_disk_entries_evicted_total", "", "Entries evicted with their region",
               K::kCounter, disk.entries_evicted);
  KVTIER_FIELD("kvtier_disk_entries_reinserted_total", "", "Hot entries reinserted on reclaim",
               K::kCounter, disk.entries_reinserted);
}

#undef KVTIER_FIELD

}  // namespace

const std::vector<StoreStatField>& store_stat_fields() {
  static const Fields fields = [] {
    Fields f;
    add_store_counters(f);
    add_store_gauges(f);
    add_disk_fields(f);
    return f;
  }();
  return fields;
}

std::vector<StatCounter> store_stats_to_counters(const kv::StoreStats& stats) {
  std::vector<StatCounter> out;
  for (const auto& f : store_stat_fields()) out.push_back({f.full_name(), f.get(stats)});
  return out;
}

kv::StoreStats store_stats_from_counters(std::span<const StatCounter> counters) {
  std::unordered_map<std::string, uint64_t> by_name;
  for (const auto& c : counters) by_name[c.name] = c.value;
  kv::StoreStats s;
  for (const auto& f : store_stat_fields()) {
    auto it = by_name.find(f.full_name());
    if (it != by_name.end()) f.set(s, it->second);
  }
  return s;
}

}  // namespace kvtier::net
