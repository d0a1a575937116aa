// The study runner: replays a workload under one protocol (a SessionScheduler)
// through one of the six configurations, as a discrete-event run on a virtual
// clock. GPU time is modeled (a replica is busy for the ModeledEngine's
// prefill time); every store operation is really executed (real bytes, a real
// Store with its RAM tier and a disk tier on O_DIRECT volume files) and its
// measured wall time, multiplied by the profile's byte scale, is charged to
// the virtual clock. So the store's own CPU and I/O costs are what the run
// measures, while think times of seconds cost no wall time. The
// prefill-to-decode transfer is real too (unless options.pd_transfer is
// kModeled): each request's KV blocks go over loopback TCP to a receiver
// owned by its decode replica (serve/kv_transfer.h), and the measured time,
// scaled like the store's, is charged between prefill and first token.
//
// Replicas run on threads of their own: each prefill replica's store calls
// and PD sends are jobs on its ReplicaWorker (serve/replica_worker.h), each
// decode replica's receiver has its own thread. The event loop (the gateway
// and the virtual clock) never makes a store call or a send itself. It keeps
// causality by waiting for a job's result only when an event depends on it:
//   - a load is waited for at once (its measured time decides when the
//     replica is free: the next event of that replica);
//   - a save (write-behind) goes on in the background while the loop serves
//     the events before the request's prefill end (other replicas' loads
//     included); a kSaveDone event at prefill end waits for it, since the
//     blocks exist from then on and later loads must find them;
//   - a PD send goes on in the background too; the request's first token
//     cannot come before prefill end + one decode step, so a kTransferDone
//     event at that time waits for the send and then schedules the rest.
// So, with StudyOptions::overlap_replicas, replicas' saves and sends really
// overlap other replicas' loads, and the store and the loopback network see
// concurrent traffic as in a deployment. Without it (the default), the loop
// waits for every job as soon as it is posted: each replica still works on
// its own thread, one at a time, and the store's costs are measured alone.
//
// Thread-safety: a run owns everything it creates; runs are sequential.
// Results (CaseResult) are updated on the event loop's thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/session_scheduler.h"
#include "bench/study_config.h"
#include "bench/workload.h"
#include "common/status.h"

namespace kvtier::bench {

// Everything measured in one run of one case under one protocol.
struct CaseResult {
  std::string protocol;  // "short-reuse", "long-reuse", "fleet"
  StudyCase id = StudyCase::kA;
  bool available = true;
  std::string unavailable_reason;

  uint64_t completed = 0;
  double first_start_s = 0, last_end_s = 0;
  double throughput_rps = 0;
  std::vector<double> ttft_s;        // user TTFT per completed request
  std::vector<uint32_t> ttft_group;  // its prompt-length group
  std::vector<std::string> group_labels;

  // Reuse, in blocks of the workload.
  uint64_t prompt_blocks = 0, hbm_hit_blocks = 0, store_hit_blocks = 0, computed_blocks = 0;
  uint64_t same_session_blocks = 0, cross_session_blocks = 0;
  uint64_t store_load_events = 0;  // requests that loaded at least one block from the store
  // Under LoadPolicy::kRace: blocks the store held that the replica
  // recomputed while it loaded the rest of the prefix.
  uint64_t race_recomputed_blocks = 0;
  uint64_t store_blocks_from_ram = 0, store_blocks_from_disk = 0;
  uint64_t store_load_bytes = 0, store_save_bytes = 0;
  uint64_t store_disk_load_bytes = 0;  // of the loaded bytes, read from the disk tier
  // StudyOptions::window_s: the loaded bytes by window of virtual time.
  std::vector<uint64_t> store_load_bytes_by_window;
  uint64_t verify_failures = 0;
  uint64_t write_refusals = 0;
  uint64_t offered_write_blocks = 0;  // blocks the saves offered (stored, deduplicated or refused)
  // Store and device counters (stored bytes; multiply by byte_scale for the
  // deployment's bytes).
  uint64_t ram_evictions = 0, ram_eviction_bytes = 0;
  uint64_t device_reads = 0, device_read_bytes = 0;
  uint64_t device_coalesced_reads = 0;  // of device_reads, sent with the one before
  uint64_t device_writes = 0, device_write_bytes = 0;
  // The simulator's device bytes in deployment bytes (its own volume holds
  // entries of a few bytes, so device_*_bytes x byte_scale means nothing
  // there); negative in the testbed, where device_*_bytes x byte_scale is it.
  double deployment_device_read_bytes = -1, deployment_device_write_bytes = -1;
  // Prefill-to-decode transfer. network_bytes are stored bytes (multiply by
  // byte_scale): with "loopback", the frame bytes the prefill replicas wrote
  // to their sockets; with "modeled", the KV of the prompts at the stored
  // size (nothing is sent).
  std::string pd_transfer = "loopback";
  uint64_t network_bytes = 0;
  uint64_t pd_frames = 0, pd_payload_bytes = 0;
  // What the decode replicas' receivers read and verified (loopback only).
  uint64_t pd_received_bytes = 0, pd_blocks_verified = 0;
  double pd_wall_s = 0;     // measured transfer time (loopback)
  double pd_charged_s = 0;  // the transfer time charged to first tokens
  // Routing.
  uint64_t later_turns = 0, stayed_turns = 0;
  std::vector<uint64_t> pair_counts;
  // Time.
  double store_wall_s = 0;            // measured wall time of store calls
  double store_load_wall_s = 0;       // of which lookups and loads (the rest: saves)
  double store_disk_load_wall_s = 0;  // of which reads of disk-only blocks
  // Of the loads' time, the reads (RAM and disk); the rest is lookups, one
  // per store consult, hit or miss.
  double store_read_wall_s = 0;
  uint64_t store_lookups = 0;
  double store_charged_s = 0;  // the same, charged to the virtual clock
  double disk_queue_s = 0;  // StudyOptions::shared_disk: virtual seconds loads waited for the disk
  // Sum over prefill replicas of the union of the intervals in which the
  // replica had a request outstanding (dispatch to last token).
  double busy_union_s = 0;
  double kv_served_tokens = 0;     // deployment tokens served from HBM or store
  double store_served_tokens = 0;  // of which the store served
  // The fleet study's metric: the store's served tokens as prefill seconds
  // over busy_union_s. The study counts only the external store's tokens
  // (its 1-session saving is 0.28% at an HBM hit share of 45%): the HBM
  // prefix cache is the baseline.
  double gross_busy_saved_ratio = 0;
  // Replica threads: how many, and the wall seconds during which at least
  // two prefill replicas were running store or PD work at the same time.
  uint32_t replica_threads = 0;
  double replica_overlap_wall_s = 0;
  double wall_s = 0;  // wall time of the whole run
  double byte_scale = 1;
  uint32_t block_bytes = 0;
};

struct RunProgress {
  uint64_t done = 0, total = 0;
};

// Runs `c` on `workload` under `scheduler`. Bad options (no replicas, a
// volume directory without O_DIRECT) are errors; E without an NVMe/TCP host
// returns a result with available = false.
Result<CaseResult> run_study_case(const Workload& workload, SessionScheduler& scheduler,
                                  const std::string& protocol, StudyCase c,
                                  const StudyOptions& options,
                                  const std::function<void(const RunProgress&)>& progress = {});

}  // namespace kvtier::bench
