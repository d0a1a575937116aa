// BlockDaemon: the state of kvtier-blockd. It owns every volume (files, RAM
// volumes, remote NVMe/TCP namespaces, RAID arrays, partitions), each behind a HealthDevice
// (latency, errors, state) and a QosDevice (limits that can change at any time), and keeps the
// persisted config in step: every change is applied, then the whole config is saved atomically; at
// start the config is replayed in order (files opened, redundant arrays assembled from their
// superblocks, RAID0 and partitions recreated). A volume that cannot be restored stays listed with
// its error instead of stopping the daemon. NVMe/TCP exports (one NVM subsystem per export,
// namespace 1 = a volume, its own listener) are part of the same config and restored after the
// volumes; a volume with an export cannot be deleted or built upon.
//
// Threads: management calls take one mutex (they are rare); data calls
// (read/write) look up the volume under it and do their I/O outside it.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "blk/block_device.h"
#include "blk/raid/raid0.h"
#include "blk/raid/raid_array.h"
#include "blk/stack/health_device.h"
#include "blk/stack/qos_device.h"
#include "blockd.pb.h"
#include "blockd/config.h"
#include "blockd/volume_paths.h"
#include "common/status.h"
#include "nvmf/host_device.h"
#include "nvmf/target.h"

namespace kvtier::blockd {

// A watched device's counters and latency quantiles, as the API reports them
// (for a volume and for an export alike).
void stats_to_proto(const blk::HealthDevice& dev, v1::Stats* out);

class BlockDaemon {
 public:
  // Loads `config_path` (missing = empty) and restores every volume in it.
  // `health` sets every volume's error thresholds (degraded, failed).
  // File volumes and exports must fit `paths` (volume_paths.h), restored
  // ones included: a restored volume outside it stays listed with its error.
  // `raid` is how arrays are assembled at start (force_dirty_degraded).
  static Result<std::unique_ptr<BlockDaemon>> open(const std::string& config_path,
                                                   VolumePaths paths,
                                                   blk::HealthOptions health = {},
                                                   blk::RaidRuntimeOptions raid = {});
  ~BlockDaemon();

  Result<v1::Volume> create_file(const v1::CreateFileRequest& r);
  Result<v1::Volume> create_mem(const v1::CreateMemRequest& r);
  Result<v1::Volume> create_remote(const v1::CreateRemoteRequest& r);
  Result<v1::Volume> create_array(const v1::CreateArrayRequest& r);
  Result<v1::Volume> create_partition(const v1::CreatePartitionRequest& r);
  Result<v1::Volume> remove(const std::string& name);
  Result<v1::Volume> replace_member(const v1::ReplaceMemberRequest& r);
  Result<v1::Volume> fail_member(const v1::FailMemberRequest& r);
  Result<v1::Volume> set_qos(const v1::SetQosRequest& r);
  Result<v1::Volume> show(const std::string& name) const;
  v1::ListReply list() const;
  Status write(const v1::WriteRequest& r);
  Result<std::string> read(const v1::ReadRequest& r);

  Result<v1::Export> create_export(const v1::CreateExportRequest& r);
  Result<v1::Export> delete_export(const std::string& nqn);
  v1::ExportList list_exports() const;

  // Prometheus text of every volume and array.
  std::string render_metrics() const;

  static constexpr uint64_t kMaxDataBytes = 4ull << 20;

 private:
  struct Volume {
    VolumeConfig cfg;
    std::shared_ptr<blk::BlockDevice> base;
    std::shared_ptr<nvmf::NvmeTcpDevice> remote;  // remote volumes: the host device
    std::shared_ptr<blk::RaidArray> raid;
    std::shared_ptr<blk::HealthDevice> health;
    std::shared_ptr<blk::QosDevice> qos;  // the device everything above uses
    std::string used_by;
    std::string exported_as;  // NQN of the export serving it, if any
    std::string error;        // set when the volume could not be restored
  };

  struct Export {
    ExportConfig cfg;
    // Counts the I/O of this export alone (the volume's own counters also see
    // gRPC reads and writes).
    std::shared_ptr<blk::HealthDevice> counted;
    std::unique_ptr<nvmf::NvmfTarget> target;
    std::string error;  // set when the export could not be restored
  };

  BlockDaemon(std::string config_path, VolumePaths paths, blk::HealthOptions health,
              blk::RaidRuntimeOptions raid)
      : config_path_(std::move(config_path)),
        paths_(std::move(paths)),
        health_options_(health),
        raid_options_(raid) {}
  // render_metrics' parts, under mu_.
  void render_volume_metrics_locked(std::string& out) const;
  void render_array_metrics_locked(std::string& out) const;
  void render_export_metrics_locked(std::string& out) const;
  // The export targets' protections (nvmf::TargetCounters) by reason.
  void render_export_protection_metrics_locked(std::string& out) const;
  // Builds the device stack of `cfg` (format = false: assemble arrays).
  Status instantiate_locked(const VolumeConfig& cfg, bool format);
  // The device of one volume kind, for instantiate_locked.
  Result<std::shared_ptr<blk::BlockDevice>> open_file_volume(const VolumeConfig& cfg);
  Result<std::shared_ptr<blk::BlockDevice>> open_partition_locked(const VolumeConfig& cfg);
  Result<std::shared_ptr<blk::BlockDevice>> open_array_locked(const VolumeConfig& cfg, bool format,
                                                              Volume* v);
  void add_restored_locked(const VolumeConfig& cfg);
  // A new volume from the API: built (arrays formatted), persisted, described.
  Result<v1::Volume> add_volume_locked(const VolumeConfig& c);
  Status persist_locked();
  // A config with `name` (checked: valid and not taken) and `kind` set.
  Result<VolumeConfig> new_volume_locked(const std::string& name, const std::string& kind) const;
  Result<Volume*> find_locked(const std::string& name);
  Result<const Volume*> find_locked(const std::string& name) const;
  v1::Volume describe_locked(const Volume& v) const;
  // Remote volumes: mirrors the host's connection state into the volume's
  // health (reconnecting while the connection is down).
  static void refresh_remote_state(const Volume& v);
  Result<std::shared_ptr<blk::BlockDevice>> data_device(const std::string& name) const;
  // Starts the target of `cfg` (its volume must be usable); on success the
  // export is recorded with the port actually bound.
  Status start_export_locked(ExportConfig cfg);
  v1::Export describe_export_locked(const Export& e) const;
  Status check_not_exported_locked(const std::string& volume) const;

  const std::string config_path_;
  const VolumePaths paths_;
  const blk::HealthOptions health_options_;
  const blk::RaidRuntimeOptions raid_options_;
  mutable std::mutex mu_;
  std::vector<std::string> order_;  // creation order (the config's order)
  std::map<std::string, std::unique_ptr<Volume>> volumes_;
  std::vector<std::string> export_order_;  // creation order (the config's order)
  std::map<std::string, std::unique_ptr<Export>> exports_;
};

}  // namespace kvtier::blockd
