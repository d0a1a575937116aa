// Store's metrics: references into its registry, resolved once, shared by
// the store's files (store.cc, store_read.cc) and by nothing else.
#pragma once

#include <fmt/format.h>

#include <array>

#include "common/metrics.h"
#include "kv/store.h"

namespace kvtier::kv {

// Hot-path references into the registry, resolved once.
struct Store::Metrics {
  explicit Metrics(MetricsRegistry& r)
      : puts(r.counter("kvtier_store_puts_total", "Blocks stored")),
        dedups(r.counter("kvtier_store_dedup_total", "Puts of a key already stored")),
        put_bytes(r.counter("kvtier_store_put_bytes_total", "Payload bytes stored")),
        hits_ram(r.counter("kvtier_store_hits_total", "Gets served", "tier=\"ram\"")),
        hits_disk(r.counter("kvtier_store_hits_total", "Gets served", "tier=\"disk\"")),
        get_bytes(r.counter("kvtier_store_get_bytes_total", "Payload bytes served")),
        evictions(r.counter("kvtier_store_ram_evictions_total", "RAM slots evicted")),
        demotions(
            r.counter("kvtier_store_demotions_total", "Blocks written to disk on RAM eviction")),
        demotion_bytes(r.counter("kvtier_store_demotion_bytes_total", "Bytes demoted to disk")),
        eviction_drops(r.counter("kvtier_store_eviction_drops_total",
                                 "Blocks dropped on RAM eviction (no disk tier could take them)")),
        promotions(r.counter("kvtier_store_promotions_total", "Disk hits copied into RAM")),
        promotions_skipped(
            r.counter("kvtier_store_promotions_skipped_total",
                      "Disk hits not copied into RAM because the promotion queue was full")),
        demotions_rejected(r.counter("kvtier_store_demotions_rejected_total",
                                     "RAM evictions dropped because disk admission said no")),
        disk_direct_puts(
            r.counter("kvtier_store_disk_direct_puts_total",
                      "Puts written straight to disk (RAM tier absent or all leased)")),
        get_latency(r.histogram("kvtier_store_get_seconds", "Latency of a get or batch_get call")),
        put_latency(r.histogram("kvtier_store_put_seconds", "Latency of put")),
        match_latency(r.histogram("kvtier_store_match_prefix_seconds", "Latency of match_prefix")),
        index_reclaims(r.counter("kvtier_store_index_full_reclaims_total",
                                 "Oldest disk regions reclaimed because the index was full")) {
    for (size_t i = 1; i < misses.size(); ++i) {
      misses[i] =
          &r.counter("kvtier_store_misses_total", "Gets that missed, by reason",
                     fmt::format("reason=\"{}\"", miss_reason_name(static_cast<MissReason>(i))));
    }
    for (size_t i = 1; i < refusals.size(); ++i) {
      refusals[i] = &r.counter(
          "kvtier_store_refusals_total", "Puts refused, by reason",
          fmt::format("reason=\"{}\"", refuse_reason_name(static_cast<RefuseReason>(i))));
    }
  }
  Counter &puts, &dedups, &put_bytes, &hits_ram, &hits_disk, &get_bytes;
  Counter &evictions, &demotions, &demotion_bytes, &eviction_drops, &promotions;
  Counter& promotions_skipped;
  Counter &demotions_rejected, &disk_direct_puts;
  Histogram &get_latency, &put_latency, &match_latency;
  Counter& index_reclaims;
  std::array<Counter*, static_cast<size_t>(MissReason::kCount)> misses{};
  std::array<Counter*, static_cast<size_t>(RefuseReason::kCount)> refusals{};
};

}  // namespace kvtier::kv
