// RaidArray: level names, geometry, creation and assembly from members' superblocks.
#include "blk/raid/raid_array.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "blk/raid/raid_internal.h"
#include "common/enum_name.h"

namespace kvtier::blk {

using namespace raid_internal;  // NOLINT: this module's own internals

Result<RaidLevel> parse_raid_level(std::string_view text) {
  std::string t(text);
  if (t.rfind("raid", 0) == 0) t = t.substr(4);
  if (t == "1") return RaidLevel::kRaid1;
  if (t == "5") return RaidLevel::kRaid5;
  if (t == "6") return RaidLevel::kRaid6;
  if (t == "10") return RaidLevel::kRaid10;
  return Status::invalid_argument(
      fmt::format("unknown RAID level '{}' (expected raid1, raid5, raid6 or raid10)", text));
}

std::string raid_level_name(RaidLevel level) {
  return fmt::format("raid{}", static_cast<uint32_t>(level));
}

const char* array_state_name(ArrayState s) {
  static constexpr const char* kNames[] = {"online", "degraded", "failed"};
  return enum_name<ArrayState::kFailed>(s, kNames, "unknown");
}

bool RaidArray::View::usable(size_t m, uint64_t row) const {
  if ((excluded >> m) & 1) return false;
  if (state[m] == MemberState::kActive) return true;
  return state[m] == MemberState::kRebuilding && row < recovery_row;
}

// ---------------------------------------------------------------- creation

Result<RaidArray::Geometry> RaidArray::plan_geometry(
    const std::vector<std::shared_ptr<BlockDevice>>& members, const RaidOptions& o) {
  const std::string lvl = raid_level_name(o.level);
  const size_t n = members.size();
  const size_t m = parity_count(o.level);
  if (n > kRaidMaxMembers) {
    return Status::invalid_argument(fmt::format("{}: at most {} members", lvl, kRaidMaxMembers));
  }
  Geometry g;
  g.level = o.level;
  g.n = n;
  switch (o.level) {
    case RaidLevel::kRaid1:
      if (n < 2) return Status::invalid_argument("raid1: needs at least 2 members");
      g.copies = static_cast<uint32_t>(n);
      break;
    case RaidLevel::kRaid10:
      if (o.copies < 2 || n < 2 * static_cast<size_t>(o.copies) || n % o.copies != 0) {
        return Status::invalid_argument(fmt::format(
            "raid10: member count {} must be a multiple of copies {} (>= 2) and hold 2 groups", n,
            o.copies));
      }
      g.copies = o.copies;
      break;
    case RaidLevel::kRaid5:
    case RaidLevel::kRaid6:
      if (n < m + 2) {
        return Status::invalid_argument(fmt::format("{}: needs at least {} members", lvl, m + 2));
      }
      break;
  }
  uint32_t bs = 0, align = 1;
  uint64_t min_cap = std::numeric_limits<uint64_t>::max();
  for (size_t i = 0; i < n; ++i) {
    if (!members[i]) return Status::invalid_argument(fmt::format("{}: member {} is null", lvl, i));
    if (i == 0) bs = members[i]->block_size();
    if (members[i]->block_size() != bs) {
      return Status::invalid_argument(fmt::format("{}: members have different block sizes", lvl));
    }
    align = std::max(align, members[i]->buffer_alignment());
    min_cap = std::min(min_cap, members[i]->capacity());
  }
  g.block_size = std::max(bs, align);
  g.alignment = align;
  if (g.block_size % bs != 0 || g.block_size % align != 0 || kRaidSuperblockBytes % g.block_size) {
    return Status::invalid_argument(
        fmt::format("{}: block size {} / alignment {} not supported", lvl, bs, align));
  }
  if (o.strip_bytes == 0 || o.strip_bytes % g.block_size != 0) {
    return Status::invalid_argument(fmt::format("{}: strip {} is not a non-zero multiple of {}",
                                                lvl, o.strip_bytes, g.block_size));
  }
  if (o.strip_bytes > kRaidMaxStripBytes) {
    return Status::invalid_argument(
        fmt::format("{}: strip {} is larger than {}", lvl, o.strip_bytes, kRaidMaxStripBytes));
  }
  g.strip = o.strip_bytes;
  const uint64_t rows_guess = min_cap / g.strip;
  g.rows_per_bit = std::max<uint64_t>({1, (kMinBytesPerBit + g.strip - 1) / g.strip,
                                       (rows_guess + kBitmapMaxBits - 1) / kBitmapMaxBits});
  g.bitmap_offset = kRaidSuperblockBytes;
  g.bitmap_area = align_up(kBitmapHeaderBytes + (kBitmapMaxBits + 7) / 8, kRaidSuperblockBytes);
  g.data_offset = align_up(g.bitmap_offset + g.bitmap_area, std::max(kDataAlign, g.strip));
  if (min_cap <= g.data_offset || (min_cap - g.data_offset) / g.strip == 0) {
    return Status::invalid_argument(fmt::format(
        "{}: smallest member ({} bytes) has no room for a strip after {} bytes of metadata", lvl,
        min_cap, g.data_offset));
  }
  g.rows = (min_cap - g.data_offset) / g.strip;
  return g;
}

Result<std::unique_ptr<RaidArray>> RaidArray::create(
    std::vector<std::shared_ptr<BlockDevice>> members, const RaidOptions& options,
    const RaidRuntimeOptions& runtime) {
  auto geo = plan_geometry(members, options);
  if (!geo.ok()) return geo.status();
  if (options.name.size() >= kRaidNameBytes) {
    return Status::invalid_argument(
        fmt::format("raid: name longer than {} bytes", kRaidNameBytes - 1));
  }
  std::vector<MemberState> states(members.size(), MemberState::kActive);
  std::unique_ptr<RaidArray> a(new RaidArray(*geo, random_uuid(), options.name, 1,
                                             std::move(members), std::move(states), runtime));
  KVTIER_RETURN_IF_ERROR(a->write_bitmap_now());
  KVTIER_RETURN_IF_ERROR(a->write_superblocks(false));
  return a;
}

Result<RaidSuperblock> RaidArray::read_superblock(BlockDevice& dev) {
  const uint32_t align = std::max<uint32_t>(dev.buffer_alignment(), 4096);
  if (dev.capacity() < kRaidSuperblockBytes || kRaidSuperblockBytes % dev.block_size() != 0) {
    return Status::invalid_argument(fmt::format("{}: too small for a raid superblock", dev.name()));
  }
  AlignedBuffer buf(kRaidSuperblockBytes, align);
  KVTIER_RETURN_IF_ERROR(dev.read_sync(0, buf.view()));
  return RaidSuperblock::decode(buf.view());
}

namespace {

Result<std::vector<RaidSuperblock>> read_superblocks(
    const std::vector<std::shared_ptr<BlockDevice>>& devices) {
  std::vector<RaidSuperblock> sbs;
  for (auto& d : devices) {
    if (!d) return Status::invalid_argument("raid assemble: null device");
    auto sb = RaidArray::read_superblock(*d);
    if (!sb.ok()) {
      return Status(sb.status().code(), fmt::format("{}: {}", d->name(), sb.status().message()));
    }
    sbs.push_back(std::move(*sb));
  }
  return sbs;
}

bool same_geometry(const RaidSuperblock& s, const RaidSuperblock& ref) {
  return s.level == ref.level && s.member_count == ref.member_count &&
         s.strip_bytes == ref.strip_bytes && s.rows == ref.rows &&
         s.data_offset == ref.data_offset && s.block_size == ref.block_size &&
         s.copies == ref.copies && s.bitmap_offset == ref.bitmap_offset &&
         s.bitmap_area_bytes == ref.bitmap_area_bytes && s.rows_per_bit == ref.rows_per_bit;
}

// Each device in the slot its superblock names, after checking that it
// belongs to the array `ref` describes and can hold its part. Slots no device
// claims stay empty.
Result<std::vector<std::shared_ptr<BlockDevice>>> place_members(
    const std::vector<std::shared_ptr<BlockDevice>>& devices,
    const std::vector<RaidSuperblock>& sbs, const RaidSuperblock& ref) {
  std::vector<std::shared_ptr<BlockDevice>> slots(ref.member_count);
  for (size_t i = 0; i < sbs.size(); ++i) {
    const auto& s = sbs[i];
    const auto& dev = *devices[i];
    if (s.uuid != ref.uuid) {
      return Status::invalid_argument(
          fmt::format("raid assemble: {} belongs to another array", dev.name()));
    }
    if (!same_geometry(s, ref)) {
      return Status::corruption(
          fmt::format("raid assemble: {} disagrees on the geometry", dev.name()));
    }
    if (slots[s.member_index]) {
      return Status::invalid_argument(
          fmt::format("raid assemble: two devices claim slot {}", s.member_index));
    }
    if (ref.block_size % dev.block_size() != 0 || ref.block_size % dev.buffer_alignment() != 0) {
      return Status::invalid_argument(
          fmt::format("raid assemble: {} has blocks of {} bytes; the array's are {}", dev.name(),
                      dev.block_size(), ref.block_size));
    }
    if (dev.capacity() < ref.data_offset + ref.rows * ref.strip_bytes) {
      return Status::invalid_argument(
          fmt::format("raid assemble: {} is smaller than the array needs", dev.name()));
    }
    slots[s.member_index] = devices[i];
  }
  return slots;
}

}  // namespace

Result<RaidArray::Geometry> RaidArray::recorded_geometry(
    const RaidSuperblock& ref, const std::vector<std::shared_ptr<BlockDevice>>& devices) {
  Geometry g;
  g.level = static_cast<RaidLevel>(ref.level);
  g.n = ref.member_count;
  g.copies = ref.copies;
  g.strip = ref.strip_bytes;
  g.rows = ref.rows;
  g.data_offset = ref.data_offset;
  g.bitmap_offset = ref.bitmap_offset;
  g.bitmap_area = ref.bitmap_area_bytes;
  g.rows_per_bit = ref.rows_per_bit;
  g.block_size = ref.block_size;
  g.alignment = 1;
  for (auto& d : devices) g.alignment = std::max(g.alignment, d->buffer_alignment());
  if ((g.level == RaidLevel::kRaid1 || g.level == RaidLevel::kRaid10) &&
      (g.copies < 2 || g.n % g.copies != 0)) {
    return Status::corruption("raid assemble: bad mirror geometry");
  }
  return g;
}

// The union of every readable copy of the bitmap; none readable means all dirty.
std::vector<uint8_t> RaidArray::read_dirty_bits(uint64_t nbits) const {
  const Geometry& g = geo_;
  std::vector<uint8_t> dirty((nbits + 7) / 8, 0);
  bool any_bitmap = false;
  const auto view = snapshot();
  for (size_t i = 0; i < g.n; ++i) {
    if (view.state[i] != MemberState::kActive) continue;
    AlignedBuffer buf(g.bitmap_area, std::max<uint32_t>(g.alignment, 4096));
    if (!view.dev[i]->read_sync(g.bitmap_offset, buf.view()).ok()) continue;
    auto bits = decode_bitmap(buf.view(), nbits);
    if (!bits.ok()) continue;
    any_bitmap = true;
    for (size_t b = 0; b < dirty.size(); ++b) dirty[b] |= (*bits)[b];
  }
  if (!any_bitmap) std::fill(dirty.begin(), dirty.end(), 0xff);
  if (nbits % 8 != 0) dirty.back() &= static_cast<uint8_t>((1u << (nbits % 8)) - 1);  // no padding
  return dirty;
}

// Resyncs every dirty row group and clears its bit; the array stays marked
// dirty while a group could not be completed.
Status RaidArray::resync_dirty_rows(const std::vector<uint8_t>& dirty, uint64_t nbits) {
  const Geometry& g = geo_;
  uint64_t resynced = 0;
  bool all = true;
  for (uint64_t b = 0; b < nbits; ++b) {
    if (!((dirty[b / 8] >> (b % 8)) & 1)) continue;
    const uint64_t r0 = b * g.rows_per_bit;
    const uint64_t r1 = std::min(g.rows, r0 + g.rows_per_bit);
    bool complete = true;
    KVTIER_RETURN_IF_ERROR(resync_rows(r0, r1, &complete));
    if (!complete) {
      all = false;
      continue;
    }
    resynced += r1 - r0;
    std::lock_guard lk(bitmap_mu_);
    bits_[b / 8] &= static_cast<uint8_t>(~(1u << (b % 8)));
  }
  resynced_rows_ = resynced;
  KVTIER_RETURN_IF_ERROR(flush_members());
  {
    std::lock_guard lk(bitmap_mu_);
    keep_dirty_ = !all;
  }
  return write_bitmap_now();
}

Result<std::unique_ptr<RaidArray>> RaidArray::assemble(
    std::vector<std::shared_ptr<BlockDevice>> devices, const RaidRuntimeOptions& runtime) {
  if (devices.empty()) return Status::invalid_argument("raid assemble: no devices");
  auto sbs = read_superblocks(devices);
  if (!sbs.ok()) return sbs.status();
  // The newest superblock holds the array's state; every device must agree on
  // identity and geometry.
  size_t newest = 0;
  for (size_t i = 1; i < sbs->size(); ++i) {
    if ((*sbs)[i].event > (*sbs)[newest].event) newest = i;
  }
  const RaidSuperblock& ref = (*sbs)[newest];
  auto slots = place_members(devices, *sbs, ref);
  if (!slots.ok()) return slots.status();
  auto geometry = recorded_geometry(ref, devices);
  if (!geometry.ok()) return geometry.status();
  const Geometry& g = *geometry;
  // States come from the newest superblock, so a device whose own superblock
  // is older than a state change that failed it does not come back.
  std::vector<MemberState> states(g.n);
  for (size_t i = 0; i < g.n; ++i) {
    states[i] = ref.states[i];
    // A member that was being rebuilt restarts its rebuild from scratch: it
    // stays out until replaced again.
    if (!(*slots)[i] || states[i] == MemberState::kRebuilding) states[i] = MemberState::kFailed;
  }
  std::unique_ptr<RaidArray> a(new RaidArray(g, ref.uuid, ref.name, ref.event + 1,
                                             std::move(*slots), std::move(states), runtime));
  const uint64_t nbits = (g.rows + g.rows_per_bit - 1) / g.rows_per_bit;
  const std::vector<uint8_t> dirty = a->read_dirty_bits(nbits);
  // The marks are the array's from here: any early return below leaves them
  // on the members (keep_dirty_), never an array marked clean by mistake.
  const bool any_dirty = std::any_of(dirty.begin(), dirty.end(), [](uint8_t x) { return x; });
  {
    std::lock_guard lk(a->bitmap_mu_);
    a->bits_ = dirty;
    a->keep_dirty_ = any_dirty;
  }
  if (any_dirty && a->is_parity() && a->state_locked() == ArrayState::kDegraded &&
      !runtime.force_dirty_degraded) {
    return Status::failed_precondition(fmt::format(
        "raid assemble: '{}' is degraded and has rows that were being written when it stopped; "
        "their parity cannot be trusted (the write hole). Replace the missing member and "
        "assemble with force, or restore the data from elsewhere",
        ref.name));
  }
  KVTIER_RETURN_IF_ERROR(a->write_superblocks(false));
  if (runtime.resync && a->state_locked() != ArrayState::kFailed) {
    KVTIER_RETURN_IF_ERROR(a->resync_dirty_rows(dirty, nbits));
  }
  return a;
}

size_t RaidArray::data_strips_per_row(const Geometry& g) {
  return parity_count(g.level) > 0 ? g.n - parity_count(g.level) : g.n / g.copies;
}

RaidArray::RaidArray(const Geometry& g, std::array<uint8_t, 16> uuid, std::string label,
                     uint64_t event, std::vector<std::shared_ptr<BlockDevice>> devs,
                     std::vector<MemberState> states, const RaidRuntimeOptions& runtime)
    : FixedGeometryDevice(g.block_size, std::max<uint32_t>(g.alignment, 1),
                          g.rows * data_strips_per_row(g) * g.strip),
      geo_(g),
      level_(g.level),
      n_(g.n),
      m_(parity_count(g.level)),
      data_per_row_(data_strips_per_row(g)),
      strip_(g.strip),
      uuid_(uuid),
      label_(std::move(label)),
      name_(fmt::format("{}[{}]", raid_level_name(g.level),
                        label_.empty() ? fmt::format("{} members", g.n) : label_)),
      runtime_(runtime),
      event_(event) {
  if (m_ > 0) codec_.emplace(static_cast<int>(n_ - m_), static_cast<int>(m_));
  for (size_t i = 0; i < n_; ++i) {
    auto mem = std::make_unique<Member>();
    mem->dev = devs[i];
    mem->state = states[i];
    members_.push_back(std::move(mem));
  }
  const uint64_t nbits = (g.rows + g.rows_per_bit - 1) / g.rows_per_bit;
  bits_.assign((nbits + 7) / 8, 0);
  inflight_.assign(nbits, 0);
  touched_.assign(nbits, 0);
  bit_gen_.assign(nbits, 0);
  const size_t workers = std::max<size_t>(1, runtime.workers);
  for (size_t i = 0; i < workers; ++i) workers_.emplace_back([this] { worker_loop(); });
}

RaidArray::~RaidArray() {
  rebuild_stop_ = true;
  if (rebuild_thread_.joinable()) rebuild_thread_.join();
  {
    std::lock_guard lk(queue_mu_);
    stop_ = true;
  }
  queue_cv_.notify_all();
  for (auto& t : workers_) t.join();
  // Orderly close: everything written is flushed, so no row is dirty, unless
  // rows were left dirty on purpose (assembled without resync).
  if (flush_members().ok() && !keep_dirty_) {
    {
      std::lock_guard lk(bitmap_mu_);
      std::fill(bits_.begin(), bits_.end(), 0);
    }
    if (write_bitmap_now().ok()) (void)write_superblocks(true);
  }
}

std::string RaidArray::uuid_string() const {
  std::string s;
  for (size_t i = 0; i < uuid_.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += fmt::format("{:02x}", uuid_[i]);
  }
  return s;
}

}  // namespace kvtier::blk
