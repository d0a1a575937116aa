// The study run's store: its tiers sized in the deployment's blocks, its
// volumes (two O_DIRECT files in RAID0, case E's NVMe/TCP export, or the
// simulator's), its nodes, the modeled rates of its transfers and its
// counters at the end (study_run.h).
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "bench/study_run.h"
#include "blk/dev/uring_device.h"
#include "blk/raid/raid0.h"
#include "kv/disk_format.h"
#include "kv/ram_tier.h"
#include "nvmf/host_device.h"

namespace kvtier::bench::study_run {

namespace {

constexpr uint64_t kRaidStripBytes = 1ull << 20;

Result<std::shared_ptr<blk::BlockDevice>> open_raid0_volume(const StudyOptions& o, uint64_t bytes,
                                                            VolumeFiles* files) {
  std::vector<std::shared_ptr<blk::BlockDevice>> members;
  const uint64_t per_member =
      align_up(std::max<uint64_t>(bytes / 2, 4 * kStudyRegionBytes), kRaidStripBytes);
  for (int i = 0; i < 2; ++i) {
    const std::string path =
        (std::filesystem::path(o.volume_dir) /
         ("kvtier-study-" + std::to_string(::getpid()) + "-" + std::to_string(i) + ".vol"))
            .string();
    ::unlink(path.c_str());
    files->paths.push_back(path);
    blk::UringOptions uo;
    uo.path = path;
    uo.create_size = per_member;
    uo.queue_depth = 64;
    uo.direct = true;
    auto dev = blk::UringDevice::open(uo);
    if (!dev.ok()) {
      return Status(dev.status().code(), "volume file " + path + ": " + dev.status().message());
    }
    members.push_back(std::shared_ptr<blk::BlockDevice>(std::move(*dev)));
  }
  auto raid = blk::Raid0::create(std::move(members), kRaidStripBytes);
  if (!raid.ok()) return raid.status();
  return std::shared_ptr<blk::BlockDevice>(std::move(*raid));
}

}  // namespace

thread_local std::optional<uint64_t> save_time_ns;

VolumeFiles::~VolumeFiles() {
  for (const auto& p : paths) ::unlink(p.c_str());
}

Status Run::setup_store(const kv::Namespace& ns) {
  // As many RAM slots as the deployment's RAM holds blocks (a slot is larger
  // than the block, which matters for the simulator's blocks of a few bytes).
  const double deployment_block_bytes =
      o_.profile.real_tokens(w_.block_tokens) * static_cast<double>(o_.profile.kv_bytes_per_token);
  const auto ram_slots =
      static_cast<uint64_t>(static_cast<double>(o_.ram_bytes) / deployment_block_bytes);
  const auto disk_blocks =
      static_cast<uint64_t>(static_cast<double>(o_.disk_bytes) / deployment_block_bytes);
  const uint32_t n_nodes = std::max<uint32_t>(o_.store_nodes, 1);
  if (n_nodes > 1 && (!o_.modeled_store || !o_.make_volume)) {
    return Status::invalid_argument("store nodes above 1 are the simulator's (kvtier sim)");
  }
  std::vector<std::pair<std::string, KvStore*>> members;
  for (uint32_t n = 0; n < n_nodes; ++n) {
    auto node = open_store_node(ram_slots / n_nodes, disk_blocks / n_nodes);
    if (!node.ok()) return node.status();
    nodes_.push_back(std::move(*node));
    members.emplace_back("node-" + std::to_string(n), nodes_.back().get());
  }
  if (n_nodes > 1) {
    cluster_ = net::ClusterStore::over_stores(members);
    store_ = cluster_.get();
  } else {
    store_ = nodes_.front().get();
  }
  // Each replica has its own client and connector (a connector's buffers
  // belong to one thread); they share the store, as replicas share a service.
  for (auto& p : prefills_) {
    auto id = store_->register_namespace(ns);
    if (!id.ok()) return id.status();
    ns_ = *id;
    p.connector = std::make_unique<engine::KvConnector>(store_, ns_, block_bytes_);
  }
  return Status::ok_status();
}

Result<std::unique_ptr<kv::Store>> Run::open_store_node(uint64_t ram_slots, uint64_t disk_blocks) {
  kv::StoreOptions so;
  so.max_object_bytes = block_bytes_;
  so.ram_bytes = spec_.ram_tier
                     ? std::max<uint64_t>(ram_slots, 1) * kv::RamTier::slot_bytes_for(block_bytes_)
                     : 0;
  so.disk.region_bytes = kStudyRegionBytes;
  so.disk.max_payload_bytes = std::max<uint32_t>(block_bytes_, 4096);
  so.disk.read_depth = o_.disk_read_depth;
  // Room in the checkpoint for one entry per block (entries are small here).
  so.disk.checkpoint_min_entry_bytes = align_up(block_bytes_, 4096);
  if (spec_.disk_tier) {
    auto vol =
        o_.make_volume
            ? o_.make_volume(disk_blocks)
            : open_raid0_volume(o_, static_cast<uint64_t>(o_.disk_bytes / o_.profile.byte_scale()),
                                &files_);
    if (!vol.ok()) return vol.status();
    so.volume = *vol;
    if (spec_.remote_volume && !o_.make_volume) {
      auto remote = export_over_nvme_tcp(*vol);
      if (!remote.ok()) {
        return Status(remote.status().code(),
                      "case E needs kvtier's NVMe/TCP target and host on loopback: " +
                          remote.status().message());
      }
      so.volume = *remote;
    }
  }
  so.promote_in_background = o_.background_promotion;
  so.promote_on_disk_hit = o_.promote_on_disk_hit;
  if (o_.time_lease_s > 0) {
    so.time_lease_ms = static_cast<uint64_t>(o_.time_lease_s * 1000);
    so.lease_clock_ns = [this] {
      return save_time_ns ? *save_time_ns : virtual_now_ns_.load(std::memory_order_relaxed);
    };
  }
  return kv::Store::open(so);
}

Result<std::shared_ptr<blk::BlockDevice>> Run::export_over_nvme_tcp(
    std::shared_ptr<blk::BlockDevice> local) {
  static constexpr const char* kNqn = "nqn.2024-01.io.kvtier:study-volume";
  static constexpr const char* kHost = "nqn.2024-01.io.kvtier:study-prefill";
  nvmf::TargetConfig tc;
  tc.address = "127.0.0.1";
  tc.port = 0;  // a free port
  nvmf::SubsystemConfig sub;
  sub.nqn = kNqn;
  sub.allowed_hosts = {kHost};
  sub.namespaces.push_back(std::move(local));
  tc.subsystems.push_back(std::move(sub));
  auto target = nvmf::NvmfTarget::start(tc);
  if (!target.ok()) return target.status();
  target_ = std::move(*target);
  nvmf::HostOptions ho;
  ho.address = "127.0.0.1";
  ho.port = target_->port();
  ho.subnqn = kNqn;
  ho.hostnqn = kHost;
  // Queue count and depth: the host's defaults, as a deployment gets them.
  auto host = nvmf::NvmeTcpDevice::connect(ho);
  if (!host.ok()) return host.status();
  return std::shared_ptr<blk::BlockDevice>(std::move(*host));
}

Status Run::finish_save(PrefillReplica& p, double scale) {
  if (!p.save) return Status::ok_status();
  auto save = p.save->get();
  p.save.reset();
  if (!save.ok()) return save.status();
  res_.write_refusals += save->refused;
  res_.store_save_bytes += save->bytes;
  res_.store_wall_s += save->wall_s;
  res_.offered_write_blocks += save->stored + save->deduplicated + save->refused;
  // Only the stored blocks move bytes and take an operation each.
  const double save_s = o_.modeled_store
                            ? modeled_seconds(static_cast<double>(save->bytes), save->stored,
                                              modeled_save_rate(), modeled_save_ops(), scale)
                            : save->wall_s;
  res_.store_charged_s += save_s * scale;
  p.save_free_at = std::max(p.save_after, p.save_free_at) + save_s * scale;
  return Status::ok_status();
}

double Run::modeled_disk_load_rate() const {
  const auto& m = *o_.modeled_store;
  if (spec_.remote_volume && m.remote_load_bytes_per_s > 0) return m.remote_load_bytes_per_s;
  if (!spec_.ram_tier && spec_.disk_tier && m.direct_load_bytes_per_s > 0) {
    return m.direct_load_bytes_per_s;
  }
  return m.disk_load_bytes_per_s;
}

double Run::modeled_save_rate() const {
  const auto& m = *o_.modeled_store;
  if (spec_.remote_volume && m.remote_save_bytes_per_s > 0) return m.remote_save_bytes_per_s;
  return m.save_bytes_per_s;
}

const StudyOptions::ModeledStoreRates::OpCosts& Run::modeled_disk_load_ops() const {
  // As modeled_disk_load_rate(): a remote or direct path without a rate of
  // its own is charged as the local disk.
  const auto& m = *o_.modeled_store;
  if (spec_.remote_volume && m.remote_load_bytes_per_s > 0) return m.remote_ops;
  if (!spec_.ram_tier && spec_.disk_tier && m.direct_load_bytes_per_s > 0) return m.direct_ops;
  return m.disk_ops;
}

const StudyOptions::ModeledStoreRates::OpCosts& Run::modeled_save_ops() const {
  // Puts land in the store's RAM tier (case E's too: its volume is written
  // by demotion, not by the put); without one (F) they go to the volume.
  const auto& m = *o_.modeled_store;
  return spec_.ram_tier ? m.ram_ops : m.disk_ops;
}

double Run::modeled_seconds(double bytes, uint64_t blocks, double per_node_rate,
                            const StudyOptions::ModeledStoreRates::OpCosts& costs,
                            double scale) const {
  return bytes / over_nodes(per_node_rate) +
         costs.fixed_seconds(blocks, std::max<uint32_t>(o_.store_nodes, 1)) / scale;
}

double Run::over_nodes(double per_node_rate) const {
  const double rate = per_node_rate * std::max<uint32_t>(o_.store_nodes, 1);
  const double cap = o_.modeled_store->host_link_bytes_per_s;
  return cap > 0 ? std::min(rate, cap) : rate;
}

void Run::book_store_counters() {
  if (nodes_.empty()) return;
  kv::StoreStats st = nodes_.front()->local_stats();
  for (size_t n = 1; n < nodes_.size(); ++n) net::add_store_stats(st, nodes_[n]->local_stats());
  res_.ram_evictions = st.evictions;
  res_.ram_eviction_bytes = st.evictions * static_cast<uint64_t>(block_bytes_);
  res_.device_reads = st.disk.reads;
  res_.device_coalesced_reads = st.disk.coalesced_reads;
  res_.device_read_bytes = st.disk.bytes_read;
  res_.device_writes = st.disk.region_writes;
  res_.device_write_bytes = st.disk.bytes_written;
  if (o_.make_volume) {
    // The simulator's entries are a page or two of a few bytes: count the
    // deployment's entry (header page and payload pages) for each entry
    // read and each entry written (demoted or put straight to disk).
    const double entry = static_cast<double>(kv::disk::entry_bytes(
        static_cast<uint64_t>(o_.profile.real_tokens(w_.block_tokens) *
                              static_cast<double>(o_.profile.kv_bytes_per_token))));
    // Reinsertion (hot entries of a reclaimed region written again) reads
    // and writes an entry too.
    res_.deployment_device_read_bytes =
        static_cast<double>(st.disk.reads + st.disk.entries_reinserted) * entry;
    res_.deployment_device_write_bytes =
        static_cast<double>(st.demotions + st.disk_direct_puts + st.disk.entries_reinserted) *
        entry;
  }
}

}  // namespace kvtier::bench::study_run
