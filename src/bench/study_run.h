// The study runner's run of one case (study_runner.h): the Run class and
// the records it keeps, shared by study_runner.cc (the event loop, loads,
// saves and transfers) and study_run_store.cc (the store it sets up: tiers,
// volumes, nodes, and its counters at the end). Internal to bench.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <vector>

#include "bench/session_keys.h"
#include "bench/study_runner.h"
#include "common/flat_insert_map.h"
#include "engine/engine.h"
#include "engine/hbm_prefix_pool.h"
#include "engine/kv_connector.h"
#include "engine/load_planner.h"
#include "kv/store.h"
#include "net/cluster/cluster_store.h"
#include "nvmf/target.h"
#include "serve/kv_transfer.h"
#include "serve/replica_worker.h"
#include "serve/router.h"

namespace kvtier::bench::study_run {

// Volume files of one run, removed when the run ends.
struct VolumeFiles {
  std::vector<std::string> paths;
  ~VolumeFiles();
};

// Set on a replica thread for the duration of a save: the virtual time at
// which the saved blocks exist (the store's lease clock reads it).
extern thread_local std::optional<uint64_t> save_time_ns;

// What a PD send job hands back to the event loop.
using TransferJob = Result<serve::TransferOutcome>;

struct Inflight {
  const TraceRequest* req = nullptr;
  double dispatch_s = 0;
  size_t prefill = 0, decode = 0;
  double ttft_s = 0;
  double prefill_end = 0;
  std::future<TransferJob> transfer;  // loopback PD send in flight
  double modeled_transfer_s = 0;      // --pd-transfer modeled
};

struct PrefillReplica {
  std::deque<uint32_t> queue;  // inflight ids waiting
  bool busy = false;
  uint32_t current = 0;  // inflight id in service while busy
  // Saves are write-behind: they overlap the replica's next compute, but the
  // replica's next store load waits for them (one store path per replica).
  double save_free_at = 0;
  double score = 0;  // deployment tokens queued or in service
  std::unique_ptr<engine::HbmPrefixPool> pool;
  engine::LoadRateTracker load_rates;  // charged seconds per block, per tier
  // The replica's own thread and store connection.
  std::unique_ptr<serve::ReplicaWorker> worker;
  std::unique_ptr<engine::KvConnector> connector;
  // The write-behind save of the last request, and when its prefill ended.
  std::optional<std::future<Result<engine::SaveOutcome>>> save;
  double save_after = 0;
};

enum class EvKind : uint8_t { kArrive, kSaveDone, kPrefillFree, kTransferDone, kDecodeDone };
struct Event {
  double t;
  uint64_t seq;
  EvKind kind;
  // kArrive: pending issue index; kSaveDone, kPrefillFree: replica; else inflight id
  uint32_t idx;
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

// Where one request's cached prefix came from and what its load cost.
struct PrefixLoad {
  size_t hbm = 0;            // blocks served from the replica's HBM pool
  size_t cached = 0;         // blocks served from HBM or the store
  size_t load_from = 0;      // under the race, [hbm, load_from) is recomputed during the load
  size_t store_matched = 0;  // blocks the store already holds
  double load_s = 0;         // the load's time, as charged (measured, or modeled in tests)
  double disk_s = 0;         // of which reading disk-served blocks
  double load_wall_s = 0;    // the load's measured wall time
};

class Run {
 public:
  Run(const Workload& w, SessionScheduler& s, const std::string& protocol, StudyCase c,
      const StudyOptions& o, const std::function<void(const RunProgress&)>& progress)
      : w_(w), sched_(s), spec_(case_spec(c)), o_(o), engine_(o.profile), progress_(progress) {
    res_.protocol = protocol;
    res_.id = c;
    res_.byte_scale = o.profile.byte_scale();
  }

  // The replica threads end first: a job still queued after an error uses
  // the store, the senders and the receivers.
  ~Run() {
    for (auto& p : prefills_) p.worker.reset();
  }

  Result<CaseResult> run();

 private:
  Status setup();
  // setup()'s store: its tiers sized in the deployment's blocks, its volume,
  // and each replica's connector.
  Status setup_store(const kv::Namespace& ns);
  // At the run's end: the store's eviction and device counters into res_.
  void book_store_counters();
  void push(double t, EvKind k, uint32_t idx) { events_.push({t, seq_++, k, idx}); }
  // Measured store and transfer seconds x this = virtual seconds charged.
  double charge_scale() const { return o_.charge_scale(); }
  // With modeled_store: the rates of this case's disk-tier loads and of its
  // saves (case E over its remote link, case F by the direct path).
  double modeled_disk_load_rate() const;
  double modeled_save_rate() const;
  // ... and their costs besides bytes (ModeledStoreRates::OpCosts).
  const StudyOptions::ModeledStoreRates::OpCosts& modeled_disk_load_ops() const;
  const StudyOptions::ModeledStoreRates::OpCosts& modeled_save_ops() const;
  // The modeled time of a transfer of `bytes` stored bytes in `blocks`
  // blocks, per node at `per_node_rate` with `costs`, over the store nodes,
  // in the units that the charge `scale` turns into virtual time: the bytes
  // are the store's, so their time scales; the costs are the deployment's
  // seconds already, so they are divided by it.
  double modeled_seconds(double bytes, uint64_t blocks, double per_node_rate,
                         const StudyOptions::ModeledStoreRates::OpCosts& costs, double scale) const;
  // A modeled per-node rate as the deployment's: summed over the store
  // nodes, capped by the host's link.
  double over_nodes(double per_node_rate) const;
  // setup_store's store of one node, with these many RAM slots and disk blocks.
  Result<std::unique_ptr<kv::Store>> open_store_node(uint64_t ram_slots, uint64_t disk_blocks);
  void accept_issues(const std::vector<Issue>& issues, double now);
  void dispatch(const TraceRequest* req, double now);
  Status start_prefill(size_t p, double now);
  // start_prefill's steps: the store load (after `hbm` blocks from the HBM
  // pool), the books on which blocks were served and from where, and the
  // write-behind save and PD transfer once prefill ends.
  Result<PrefixLoad> load_from_store(PrefillReplica& p, std::span<const kv::Key128> keys,
                                     size_t hbm, double scale);
  void count_served_blocks(const TraceRequest& r, std::span<const kv::Key128> keys,
                           const PrefixLoad& load);
  Status after_prefill(size_t pi, uint32_t id, std::span<const kv::Key128> keys,
                       size_t store_matched, double prefill_end, double scale);
  Status setup_pd_transfer();
  // Starts moving request `id`'s KV to its decode replica (on prefill
  // replica `p`'s thread).
  void start_pd_transfer(size_t p, uint32_t id, std::span<const kv::Key128> keys);
  // Waits for that transfer; returns the seconds charged to its first token.
  Result<double> finish_pd_transfer(uint32_t id, double charge_scale);
  // Waits for replica `p`'s write-behind save, if any, and books it.
  Status finish_save(PrefillReplica& p, double scale);
  Status on_transfer_done(uint32_t id);
  void on_decode_done(uint32_t id, double now);
  std::span<const kv::Key128> keys_of(const TraceRequest& r) const;
  Result<std::shared_ptr<blk::BlockDevice>> export_over_nvme_tcp(
      std::shared_ptr<blk::BlockDevice> local);

  const Workload& w_;
  SessionScheduler& sched_;
  const CaseSpec& spec_;
  const StudyOptions& o_;
  engine::ModeledEngine engine_;
  std::function<void(const RunProgress&)> progress_;
  CaseResult res_;

  VolumeFiles files_;
  // Case E: kvtier's NVMe/TCP target serves the RAID0 volume on loopback and
  // the store reaches it through kvtier's NVMe/TCP host.
  std::unique_ptr<nvmf::NvmfTarget> target_;
  // The store: one kv::Store, or with StudyOptions::store_nodes > 1 one per
  // node under a cluster client; store_ is what the connectors call.
  std::vector<std::unique_ptr<kv::Store>> nodes_;
  std::unique_ptr<net::ClusterStore> cluster_;
  KvStore* store_ = nullptr;
  // The event loop's virtual time, the clock of the store's time leases
  // (read on replica threads).
  std::atomic<uint64_t> virtual_now_ns_{0};
  uint16_t ns_ = 0;
  kv::Key128 ns_digest_;
  uint32_t block_bytes_ = 0;

  std::vector<SessionKeys> keys_;  // [session]: spans into it stay valid for the run
  // The session that first touched each block (same- or cross-session reuse).
  FlatInsertMap<kv::Key128, uint32_t, kv::Key128Hash> first_session_;
  // [session][chain]: first_session_ of the chain's leading blocks that the
  // session has touched so far (those blocks' entries, kept beside the chain).
  std::vector<std::vector<std::vector<uint32_t>>> known_first_;
  std::unique_ptr<serve::SoftStickyRouter> router_;
  std::vector<PrefillReplica> prefills_;
  // Loopback PD transfer: one receiver per decode replica, one sender per
  // prefill replica (each keeps a connection to every decode replica).
  std::vector<std::unique_ptr<serve::KvTransferReceiver>> receivers_;
  std::vector<std::unique_ptr<serve::KvTransferSender>> senders_;
  std::vector<double> decode_budget_;
  std::vector<Inflight> inflight_;
  // Per prefill replica: [dispatch, completion] of the requests it served.
  std::vector<std::vector<std::pair<double, double>>> busy_;
  std::vector<Issue> pending_;  // issues waiting for their time (index = event idx)
  std::deque<const TraceRequest*> client_queue_;
  uint32_t in_flight_ = 0;
  double disk_free_at_ = 0;  // StudyOptions::shared_disk: when the volume is next free
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t seq_ = 0;
  uint64_t total_ = 0;
  bool started_any_ = false;
};

}  // namespace kvtier::bench::study_run
