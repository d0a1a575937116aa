// The study's six service configurations (ARCHITECTURE.md section 5) and the
// options of a study run: engine profile, replica counts, routing margin, and
// the capacities of the HBM pool, RAM tier and disk tier in deployment units
// (divided by the profile's byte scale for the run; docs/study.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "blk/block_device.h"
#include "common/status.h"
#include "engine/engine_profile.h"

namespace kvtier::bench {

enum class StudyCase : uint8_t { kA, kB, kC, kD, kE, kF };

struct CaseSpec {
  StudyCase id;
  const char* letter;  // "A".."F"
  const char* name;    // "recompute", ...
  bool hbm_pool;       // local prefix pool per prefill replica
  bool store;          // shared store
  bool ram_tier;       // store has a RAM tier
  bool disk_tier;      // store has a disk tier
  bool remote_volume;  // disk tier on a volume reached over kvtier's NVMe/TCP
};

// How a request's KV moves from its prefill to its decode replica.
enum class PdTransferMode : uint8_t {
  // Real bytes over loopback TCP (src/serve/kv_transfer.h): the measured
  // wall time x the store's charge scale goes into the first-token time.
  kLoopback,
  // The profile's link rate (pd_link_bytes_per_s); nothing is sent.
  kModeled,
};
const char* pd_transfer_mode_name(PdTransferMode m);  // "loopback", "modeled"
bool parse_pd_transfer_mode(const std::string& name, PdTransferMode* out);

const std::vector<CaseSpec>& study_cases();
const CaseSpec& case_spec(StudyCase c);
// "A".."F" (case-insensitive) to a case; false when unknown.
bool parse_study_case(const std::string& letter, StudyCase* out);

// How a prefill replica uses a cached prefix (engine/load_planner.h).
enum class LoadPolicy : uint8_t {
  kLoadAll,  // the study's connector: load the whole matched prefix, then compute
  kRace,     // compute the prefix's front while loading its back, split by measured rates
};
const char* load_policy_name(LoadPolicy p);

// The study's fleet testbed (its Part II), which `--protocol fleet` and the
// simulator's fleet study run unless told otherwise: two H100 endpoints,
// one per role, each seeing every session (here one prefill and one decode
// replica), a 32 GB RAM tier, vLLM at a 65,536-token context limit, steady
// state, adev sessions of up to three rounds with the 300 s test gate
// between rounds, and Mooncake's connector loading the whole matched prefix.
struct FleetTestbed {
  static constexpr uint32_t kPrefillReplicas = 1, kDecodeReplicas = 1;
  static constexpr uint64_t kRamBytes = 32'000'000'000ull;
  static constexpr uint64_t kMaxContextTokens = 65536;
  static constexpr double kPauseS = 300;
  static constexpr uint32_t kRounds = 3;
  static constexpr double kMooncakeLeaseS = 300;  // the lease row
};

// The region size of a study run's disk tier (testbed and simulator).
inline constexpr uint64_t kStudyRegionBytes = 16ull << 20;

struct StudyOptions {
  engine::EngineProfile profile;  // default: the scaled H100 profile
  uint32_t prefill_replicas = 2;
  uint32_t decode_replicas = 2;
  uint32_t max_in_flight = 16;  // requests at once, as in the study
  // Soft-sticky routing: how many deployment tokens the preferred prefill's
  // queue may exceed the best one's before a turn spills.
  double spill_margin_tokens = 65536;
  // Capacities in deployment units (the study's service: 256 GiB RAM store).
  // 0 for hbm_pool_tokens means the profile's.
  uint64_t hbm_pool_tokens = 0;
  uint64_t ram_bytes = 256ull << 30;
  uint64_t disk_bytes = 3ull << 40;
  // Where the disk-tier volume files are created (two files, RAID0); must be
  // a filesystem that supports O_DIRECT.
  std::string volume_dir = ".";
  uint32_t disk_read_depth = 32;
  // Multiplier from measured store wall time to virtual time; 0 means the
  // profile's byte scale (the scaling rule). Tests lower it to model a store
  // faster than the machine they run on.
  double store_charge_scale = 0;
  // Tests: when set, each store call is charged from the bytes it moved at
  // these rates instead of its measured wall time (then times the charge
  // scale as usual), so every throughput and every compute-or-load split of
  // a run is the same on an idle machine and a busy one. Benchmarks leave it
  // unset: they measure.
  struct ModeledStoreRates {
    double ram_load_bytes_per_s = 0;   // RAM-tier hits
    double disk_load_bytes_per_s = 0;  // disk-tier hits
    double save_bytes_per_s = 0;       // puts
    // Case E's disk-tier hits and puts, over the remote link, and case F's
    // direct reads; 0: the rates above.
    double remote_load_bytes_per_s = 0;
    double remote_save_bytes_per_s = 0;
    double direct_load_bytes_per_s = 0;
    // The prefill host's own link, which caps the sum over store nodes of
    // the rates above (0: no cap).
    double host_link_bytes_per_s = 0;
    // Every request that consults the store (a hit or a miss) pays one
    // lookup first (0: none).
    double lookup_s = 0;
    // What a transfer costs besides its bytes, per device or link (all 0 by
    // default: a rate alone). A load's part from one tier, or a save, of
    // `blocks` blocks and `bytes` bytes takes
    //   latency_s + bytes / rate + blocks * op_s / queue_depth
    // (the first block's round trip, then the bytes at the rate, with each
    // block an operation of op_s of which queue_depth are in flight).
    struct OpCosts {
      double latency_s = 0;
      double op_s = 0;
      double queue_depth = 1;
      // The time of a transfer at `rate` bytes/s spread over `nodes` store
      // nodes (each its own device, so their operations overlap); 0 when it
      // moves nothing.
      double seconds(double bytes, uint64_t blocks, double rate, uint32_t nodes = 1) const;
      // Its part besides the bytes: latency and operations.
      double fixed_seconds(uint64_t blocks, uint32_t nodes = 1) const;
    };
    // RAM-tier loads and saves; the local disk tier's reads (D) and the
    // saves of a case without a RAM tier (F); the remote volume's reads (E);
    // direct reads (F).
    OpCosts ram_ops, disk_ops, remote_ops, direct_ops;
  };
  std::optional<ModeledStoreRates> modeled_store;
  // The simulator (src/sim): makes the disk tier's volume, which must hold
  // `blocks` blocks of the deployment, instead of two O_DIRECT volume files;
  // case E then reaches it directly too (its link is modeled by
  // modeled_store's remote rates), not through a loopback NVMe/TCP export.
  std::function<Result<std::shared_ptr<blk::BlockDevice>>(uint64_t blocks)> make_volume;
  // The replicas' disk-tier reads share one volume (case E: one link): a
  // load's disk part starts when the reads booked before it are done, in
  // virtual time. Off, each replica's reads take their own charged time
  // whatever the others do (the testbed measures each call alone).
  bool shared_disk = false;
  // Mooncake Store's lease semantics instead of kvtier's (kv::StoreOptions::
  // time_lease_ms), in virtual seconds: lookups and reads lease a RAM block
  // this long, and a RAM tier whose blocks are all leased refuses writes. 0:
  // kvtier's policy (one-transfer read leases, demotion instead of refusal).
  double time_lease_s = 0;
  // The store promotes disk hits on a background thread
  // (kv::StoreOptions::promote_in_background). The simulator turns it off,
  // so that no decision of a run depends on thread timing.
  bool background_promotion = true;
  // A disk-tier hit is copied back into the RAM tier (kvtier's policy,
  // kv::StoreOptions::promote_on_disk_hit). Off: the disk tier serves it and
  // RAM keeps what it had, as Mooncake Store's disk tier does.
  bool promote_on_disk_hit = true;
  // Store nodes (the simulator only): the RAM and disk tiers are split
  // evenly over this many kv::Stores under the cluster's rendezvous
  // placement (net::ClusterStore::over_stores). Each node has its own RAM,
  // volume and link at modeled_store's rates, so a load or save, spread
  // over the nodes by the placement, moves at the nodes' summed rate, up to
  // the host's link.
  uint32_t store_nodes = 1;
  // When > 0: CaseResult::store_load_bytes_by_window counts the bytes the
  // store served in each window of this many virtual seconds (the fleet
  // study's per-window volumes).
  double window_s = 0;
  LoadPolicy load_policy = LoadPolicy::kRace;
  PdTransferMode pd_transfer = PdTransferMode::kLoopback;
  // Each prefill replica runs its store calls and PD sends on its own
  // thread. Off (default): the event loop waits for every job, so one
  // replica's store work is measured alone. On: a replica's saves and PD
  // sends run while the loop serves other replicas (their loads included),
  // so the measured times include contention between replicas; on a machine
  // with few cores that is mostly the testbed's own loopback PD copies
  // competing with the store for the CPU (docs/study.md).
  bool overlap_replicas = false;
  uint64_t seed = 1;

  StudyOptions();

  // Measured store and transfer seconds x this = virtual seconds charged:
  // store_charge_scale, or the profile's byte scale when that is 0.
  double charge_scale() const {
    return store_charge_scale > 0 ? store_charge_scale : profile.byte_scale();
  }
};

}  // namespace kvtier::bench
