#include "blk/raid_array.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <utility>

namespace kvtier::blk {

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;
constexpr uint64_t kBitmapMaxBits = 64 * 1024 * 8;  // a 64 KiB bitmap at most
// Member bytes one bit covers, at least: every newly set bit costs a bitmap
// write and flush on each member before the data write, so bits are coarse.
constexpr uint64_t kMinBytesPerBit = 64ull << 20;
constexpr uint64_t kDataAlign = 1ull << 20;
enum Op { kOpRead = 0, kOpWrite = 1, kOpFlush = 2, kOpTrim = 3 };

uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

size_t parity_count(RaidLevel l) {
  return l == RaidLevel::kRaid5 ? 1 : l == RaidLevel::kRaid6 ? 2 : 0;
}

// Per-thread scratch memory for stripe work, kept between requests so that
// encode and copies do not pay first-touch page faults on every request.
std::byte* scratch(size_t bytes) {
  thread_local AlignedBuffer buf;
  if (buf.size() < bytes) {
    buf = AlignedBuffer(align_up(bytes, 1 << 20), 4096);
    std::memset(buf.data(), 0, buf.size());
  }
  return buf.data();
}

std::array<uint8_t, 16> random_uuid() {
  std::random_device rd;
  std::array<uint8_t, 16> u{};
  for (auto& b : u) b = static_cast<uint8_t>(rd());
  return u;
}

}  // namespace

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
  switch (s) {
    case ArrayState::kOnline:
      return "online";
    case ArrayState::kDegraded:
      return "degraded";
    case ArrayState::kFailed:
      return "failed";
  }
  return "unknown";
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

Result<std::unique_ptr<RaidArray>> RaidArray::assemble(
    std::vector<std::shared_ptr<BlockDevice>> devices, const RaidRuntimeOptions& runtime) {
  if (devices.empty()) return Status::invalid_argument("raid assemble: no devices");
  std::vector<RaidSuperblock> sbs;
  for (auto& d : devices) {
    if (!d) return Status::invalid_argument("raid assemble: null device");
    auto sb = read_superblock(*d);
    if (!sb.ok()) {
      return Status(sb.status().code(), fmt::format("{}: {}", d->name(), sb.status().message()));
    }
    sbs.push_back(std::move(*sb));
  }
  // The newest superblock holds the array's state; every device must agree on
  // identity and geometry.
  size_t newest = 0;
  for (size_t i = 1; i < sbs.size(); ++i) {
    if (sbs[i].event > sbs[newest].event) newest = i;
  }
  const RaidSuperblock& ref = sbs[newest];
  std::vector<std::shared_ptr<BlockDevice>> slots(ref.member_count);
  for (size_t i = 0; i < sbs.size(); ++i) {
    const auto& s = sbs[i];
    if (s.uuid != ref.uuid) {
      return Status::invalid_argument(
          fmt::format("raid assemble: {} belongs to another array", devices[i]->name()));
    }
    if (s.level != ref.level || s.member_count != ref.member_count ||
        s.strip_bytes != ref.strip_bytes || s.rows != ref.rows ||
        s.data_offset != ref.data_offset || s.block_size != ref.block_size ||
        s.copies != ref.copies || s.bitmap_offset != ref.bitmap_offset ||
        s.bitmap_area_bytes != ref.bitmap_area_bytes || s.rows_per_bit != ref.rows_per_bit) {
      return Status::corruption(
          fmt::format("raid assemble: {} disagrees on the geometry", devices[i]->name()));
    }
    if (slots[s.member_index]) {
      return Status::invalid_argument(
          fmt::format("raid assemble: two devices claim slot {}", s.member_index));
    }
    if (ref.block_size % devices[i]->block_size() != 0 ||
        ref.block_size % devices[i]->buffer_alignment() != 0) {
      return Status::invalid_argument(
          fmt::format("raid assemble: {} has blocks of {} bytes; the array's are {}",
                      devices[i]->name(), devices[i]->block_size(), ref.block_size));
    }
    if (devices[i]->capacity() < ref.data_offset + ref.rows * ref.strip_bytes) {
      return Status::invalid_argument(
          fmt::format("raid assemble: {} is smaller than the array needs", devices[i]->name()));
    }
    slots[s.member_index] = devices[i];
  }
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
  std::vector<MemberState> states(g.n);
  for (size_t i = 0; i < g.n; ++i) {
    states[i] = ref.states[i];
    // A member that was being rebuilt restarts its rebuild from scratch: it
    // stays out until replaced again.
    if (!slots[i] || states[i] == MemberState::kRebuilding) states[i] = MemberState::kFailed;
    // A device whose own superblock is older than a state change that failed
    // it must not come back.
  }
  std::unique_ptr<RaidArray> a(new RaidArray(g, ref.uuid, ref.name, ref.event + 1, std::move(slots),
                                             std::move(states), runtime));
  // Bitmap: the union of every readable copy; none readable means all dirty.
  const uint64_t nbits = (g.rows + g.rows_per_bit - 1) / g.rows_per_bit;
  std::vector<uint8_t> dirty((nbits + 7) / 8, 0);
  bool any_bitmap = false;
  const auto view = a->snapshot();
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
    uint64_t resynced = 0;
    bool all = true;
    for (uint64_t b = 0; b < nbits; ++b) {
      if (!((dirty[b / 8] >> (b % 8)) & 1)) continue;
      const uint64_t r0 = b * g.rows_per_bit;
      const uint64_t r1 = std::min(g.rows, r0 + g.rows_per_bit);
      bool complete = true;
      KVTIER_RETURN_IF_ERROR(a->resync_rows(r0, r1, &complete));
      if (!complete) {
        all = false;
        continue;
      }
      resynced += r1 - r0;
      std::lock_guard lk(a->bitmap_mu_);
      a->bits_[b / 8] &= static_cast<uint8_t>(~(1u << (b % 8)));
    }
    a->resynced_rows_ = resynced;
    KVTIER_RETURN_IF_ERROR(a->flush_members());
    {
      std::lock_guard lk(a->bitmap_mu_);
      a->keep_dirty_ = !all;
    }
    KVTIER_RETURN_IF_ERROR(a->write_bitmap_now());
  }
  return a;
}

RaidArray::RaidArray(const Geometry& g, std::array<uint8_t, 16> uuid, std::string label,
                     uint64_t event, std::vector<std::shared_ptr<BlockDevice>> devs,
                     std::vector<MemberState> states, const RaidRuntimeOptions& runtime)
    : geo_(g),
      level_(g.level),
      n_(g.n),
      m_(parity_count(g.level)),
      data_per_row_(parity_count(g.level) > 0 ? g.n - parity_count(g.level) : g.n / g.copies),
      strip_(g.strip),
      block_size_(g.block_size),
      buffer_alignment_(std::max<uint32_t>(g.alignment, 1)),
      capacity_(g.rows * data_per_row_ * g.strip),
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

// ---------------------------------------------------------------- state

RaidArray::View RaidArray::snapshot() const {
  std::lock_guard lk(state_mu_);
  View v;
  for (const auto& m : members_) {
    v.dev.push_back(m->dev);
    v.state.push_back(m->state);
  }
  v.recovery_row = recovery_row_;
  return v;
}

ArrayState RaidArray::state_locked() const {
  // Callers hold state_mu_ or own the array exclusively.
  size_t down = 0;
  bool group_lost = false;
  for (size_t i = 0; i < n_; ++i) {
    if (members_[i]->state != MemberState::kActive) ++down;
  }
  if (m_ == 0) {
    for (size_t g = 0; g < n_ / geo_.copies; ++g) {
      bool any = false;
      for (size_t c = 0; c < geo_.copies; ++c) {
        any |= members_[g * geo_.copies + c]->state == MemberState::kActive;
      }
      group_lost |= !any;
    }
    if (group_lost) return ArrayState::kFailed;
  } else if (down > m_) {
    return ArrayState::kFailed;
  }
  return down == 0 ? ArrayState::kOnline : ArrayState::kDegraded;
}

RaidStatus RaidArray::status() const {
  RaidStatus s;
  {
    std::lock_guard lk(state_mu_);
    s.state = state_locked();
    for (const auto& m : members_) {
      RaidMemberInfo info;
      info.device = m->dev ? m->dev->name() : "(missing)";
      info.state = m->state;
      info.read_errors = m->read_errors.load(kRelaxed);
      info.write_errors = m->write_errors.load(kRelaxed);
      s.members.push_back(std::move(info));
    }
  }
  s.rows = geo_.rows;
  s.rebuilding = rebuilding_.load();
  s.rebuild_rows_done = rebuild_rows_done_.load();
  s.resynced_rows = resynced_rows_;
  {
    std::lock_guard lk(const_cast<std::mutex&>(bitmap_mu_));
    for (uint8_t b : bits_) s.dirty_bits += static_cast<uint64_t>(__builtin_popcount(b));
  }
  s.parity_cpu_ns = parity_cpu_ns_.load(kRelaxed);
  s.parity_bytes = parity_bytes_.load(kRelaxed);
  return s;
}

std::vector<std::shared_ptr<BlockDevice>> RaidArray::member_devices() const {
  return snapshot().dev;
}

void RaidArray::note_error(size_t member, bool write) {
  bool fail = false;
  {
    std::lock_guard lk(state_mu_);
    Member& m = *members_[member];
    if (write) {
      m.write_errors.fetch_add(1, kRelaxed);
      fail = m.state != MemberState::kFailed;
    } else {
      const uint64_t e = m.read_errors.fetch_add(1, kRelaxed) + 1;
      fail = m.state != MemberState::kFailed && e > runtime_.read_error_budget;
    }
    if (fail) {
      m.state = MemberState::kFailed;
      ++event_;
    }
  }
  if (fail) (void)write_superblocks(false);
}

Status RaidArray::fail_member(size_t index) {
  {
    std::lock_guard lk(state_mu_);
    if (index >= n_) return Status::invalid_argument(fmt::format("no member {}", index));
    if (members_[index]->state == MemberState::kFailed) return Status::ok_status();
    members_[index]->state = MemberState::kFailed;
    ++event_;
  }
  return write_superblocks(false);
}

Status RaidArray::write_superblocks(bool clean) {
  std::lock_guard sl(sb_mu_);
  RaidSuperblock sb;
  sb.uuid = uuid_;
  sb.level = static_cast<uint32_t>(level_);
  sb.member_count = static_cast<uint32_t>(n_);
  sb.block_size = block_size_;
  sb.copies = geo_.copies;
  sb.clean = clean ? 1 : 0;
  sb.strip_bytes = strip_;
  sb.data_offset = geo_.data_offset;
  sb.rows = geo_.rows;
  sb.bitmap_offset = geo_.bitmap_offset;
  sb.bitmap_area_bytes = geo_.bitmap_area;
  sb.rows_per_bit = geo_.rows_per_bit;
  sb.name = label_;
  std::vector<std::shared_ptr<BlockDevice>> targets;
  {
    std::lock_guard lk(state_mu_);
    sb.event = event_;
    sb.recovery_row = recovery_row_;
    for (size_t i = 0; i < n_; ++i) {
      sb.states[i] = members_[i]->state;
      targets.push_back(members_[i]->state == MemberState::kFailed ? nullptr : members_[i]->dev);
    }
  }
  AlignedBuffer buf(kRaidSuperblockBytes, std::max<uint32_t>(buffer_alignment_, 4096));
  Status first;
  size_t written = 0;
  for (size_t i = 0; i < n_; ++i) {
    if (!targets[i]) continue;
    sb.member_index = static_cast<uint32_t>(i);
    sb.encode(buf.view());
    Status st = targets[i]->write_sync(0, buf.view());
    if (st.ok()) st = targets[i]->flush_sync();
    if (st.ok()) {
      ++written;
    } else if (first.ok()) {
      first = st;
    }
  }
  return written > 0 ? Status::ok_status() : first;
}

Status RaidArray::flush_members() {
  const View v = snapshot();
  Status first;
  for (size_t i = 0; i < n_; ++i) {
    if (v.state[i] == MemberState::kFailed || !v.dev[i]) continue;
    Status st = v.dev[i]->flush_sync();
    if (!st.ok()) {
      note_error(i, true);
      if (first.ok()) first = st;
    }
  }
  return first;
}

// ---------------------------------------------------------------- bitmap

Status RaidArray::write_bitmap_now() {
  const uint64_t nbits = inflight_.size();
  std::vector<uint8_t> bits;
  {
    std::lock_guard lk(bitmap_mu_);
    bits = bits_;
  }
  AlignedBuffer buf(geo_.bitmap_area, std::max<uint32_t>(buffer_alignment_, 4096));
  encode_bitmap(bits, nbits, buf.view());
  // Only the blocks that hold bits need writing.
  const uint64_t used = align_up(kBitmapHeaderBytes + bits.size(), block_size_);
  const View v = snapshot();
  size_t ok = 0;
  Status first;
  for (size_t i = 0; i < n_; ++i) {
    if (v.state[i] == MemberState::kFailed || !v.dev[i]) continue;
    Status st = v.dev[i]->write_sync(geo_.bitmap_offset, buf.subview(0, used));
    if (st.ok()) st = v.dev[i]->flush_sync();
    if (st.ok()) {
      ++ok;
    } else if (first.ok()) {
      first = st;
    }
  }
  return ok > 0 ? Status::ok_status() : first;
}

void RaidArray::persist_bitmap_until(uint64_t gen) {
  std::lock_guard pl(persist_mu_);
  if (durable_gen_ >= gen) return;
  uint64_t snap_gen = 0;
  {
    std::lock_guard lk(bitmap_mu_);
    snap_gen = gen_;
  }
  (void)write_bitmap_now();  // a failure shows up as member errors on data I/O
  durable_gen_ = std::max(durable_gen_, snap_gen);
}

void RaidArray::mark_rows(uint64_t r0, uint64_t r1) {
  uint64_t need = 0;
  {
    std::lock_guard lk(bitmap_mu_);
    for (uint64_t b = r0 / geo_.rows_per_bit; b <= r1 / geo_.rows_per_bit; ++b) {
      ++inflight_[b];
      touched_[b] = 1;
      if (!((bits_[b / 8] >> (b % 8)) & 1)) {
        bits_[b / 8] |= static_cast<uint8_t>(1u << (b % 8));
        bit_gen_[b] = ++gen_;
      }
      need = std::max(need, bit_gen_[b]);
    }
  }
  bool durable = false;
  {
    std::lock_guard pl(persist_mu_);
    durable = durable_gen_ >= need;
  }
  if (!durable) persist_bitmap_until(need);
}

void RaidArray::unmark_rows(uint64_t r0, uint64_t r1) {
  std::lock_guard lk(bitmap_mu_);
  for (uint64_t b = r0 / geo_.rows_per_bit; b <= r1 / geo_.rows_per_bit; ++b) --inflight_[b];
}

void RaidArray::clear_idle_bits_after(const std::function<void()>& flush_members_fn) {
  if (keep_dirty_) return flush_members_fn();
  {
    std::lock_guard lk(bitmap_mu_);
    std::fill(touched_.begin(), touched_.end(), 0);
  }
  flush_members_fn();
  bool changed = false;
  {
    std::lock_guard lk(bitmap_mu_);
    for (uint64_t b = 0; b < inflight_.size(); ++b) {
      const bool set = (bits_[b / 8] >> (b % 8)) & 1;
      // Bits written to after the flush began may cover unflushed bytes.
      if (set && inflight_[b] == 0 && !touched_[b]) {
        bits_[b / 8] &= static_cast<uint8_t>(~(1u << (b % 8)));
        changed = true;
      }
    }
    if (changed) ++gen_;
  }
  if (changed) {
    std::lock_guard pl(persist_mu_);
    (void)write_bitmap_now();
  }
}

// ---------------------------------------------------------------- requests

void RaidArray::enqueue(std::function<void()> job) {
  {
    std::lock_guard lk(queue_mu_);
    queue_.push_back(std::move(job));
  }
  queue_cv_.notify_one();
}

void RaidArray::worker_loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lk(queue_mu_);
      queue_cv_.wait(lk, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();
  }
}

void RaidArray::lock_rows(uint64_t r0, uint64_t r1) {
  std::unique_lock lk(rows_mu_);
  rows_cv_.wait(lk, [&] {
    for (const auto& [a, b] : locked_) {
      if (a <= r1 && r0 <= b) return false;
    }
    return true;
  });
  locked_.emplace_back(r0, r1);
}

void RaidArray::unlock_rows(uint64_t r0, uint64_t r1) {
  {
    std::lock_guard lk(rows_mu_);
    auto it = std::find(locked_.begin(), locked_.end(), std::make_pair(r0, r1));
    if (it != locked_.end()) locked_.erase(it);
  }
  rows_cv_.notify_all();
}

bool RaidArray::run_batch(View& view, std::vector<MemberIo>& ios) {
  if (ios.empty()) return true;
  std::mutex mu;
  std::condition_variable cv;
  size_t left = ios.size();
  for (auto& io : ios) {
    auto done = [&mu, &cv, &left, &io](Status st) {
      std::lock_guard lk(mu);
      io.status = std::move(st);
      if (--left == 0) cv.notify_all();
    };
    const uint64_t off = geo_.data_offset + io.offset;
    if (io.write) {
      view.dev[io.member]->write(off, ByteView(io.buf, io.len), done);
    } else {
      view.dev[io.member]->read(off, MutableByteView(io.buf, io.len), done);
    }
  }
  {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return left == 0; });
  }
  bool all_ok = true;
  for (auto& io : ios) {
    if (io.status.ok()) continue;
    all_ok = false;
    view.excluded |= 1ull << io.member;
    note_error(io.member, io.write);
  }
  return all_ok;
}

void RaidArray::finish(bool ok, int op, uint64_t bytes) {
  if (!ok) {
    io_.errors.fetch_add(1, kRelaxed);
    return;
  }
  switch (op) {
    case kOpRead:
      io_.reads.fetch_add(1, kRelaxed);
      io_.bytes_read.fetch_add(bytes, kRelaxed);
      break;
    case kOpWrite:
      io_.writes.fetch_add(1, kRelaxed);
      io_.bytes_written.fetch_add(bytes, kRelaxed);
      break;
    case kOpFlush:
      io_.flushes.fetch_add(1, kRelaxed);
      break;
    default:
      io_.trims.fetch_add(1, kRelaxed);
  }
}

void RaidArray::read(uint64_t offset, MutableByteView dst, IoCallback cb) {
  Status st = check_io(offset, dst.size(), dst.data());
  if (!st.ok()) {
    io_.errors.fetch_add(1, kRelaxed);
    return cb(std::move(st));
  }
  enqueue([this, offset, dst, cb = std::move(cb)]() mutable {
    Status s = do_read(offset, dst);
    finish(s.ok(), kOpRead, dst.size());
    cb(std::move(s));
  });
}

void RaidArray::write(uint64_t offset, ByteView src, IoCallback cb) {
  Status st = check_io(offset, src.size(), src.data());
  if (!st.ok()) {
    io_.errors.fetch_add(1, kRelaxed);
    return cb(std::move(st));
  }
  enqueue([this, offset, src, cb = std::move(cb)]() mutable {
    Status s = do_write(offset, src);
    finish(s.ok(), kOpWrite, src.size());
    cb(std::move(s));
  });
}

void RaidArray::flush(IoCallback cb) {
  enqueue([this, cb = std::move(cb)]() mutable {
    Status s;
    clear_idle_bits_after([&] { s = flush_members(); });
    if (s.ok() && snapshot().state.size() > 0) {
      std::lock_guard lk(state_mu_);
      if (state_locked() == ArrayState::kFailed) s = Status::io_error(name_ + ": array failed");
    }
    finish(s.ok(), kOpFlush, 0);
    cb(std::move(s));
  });
}

void RaidArray::trim(uint64_t offset, uint64_t length, IoCallback cb) {
  Status st = check_io(offset, length, nullptr);
  finish(st.ok(), kOpTrim, length);
  cb(std::move(st));
}

DeviceStats RaidArray::stats() const { return io_.snapshot(); }

Status RaidArray::do_read(uint64_t offset, MutableByteView dst) {
  const uint64_t r0 = offset / row_bytes();
  const uint64_t r1 = (offset + dst.size() - 1) / row_bytes();
  lock_rows(r0, r1);
  View v = snapshot();
  Status st;
  for (size_t attempt = 0; attempt <= n_; ++attempt) {
    bool retry = false;
    st = is_parity() ? read_parity(v, offset, dst, retry) : read_mirror(v, offset, dst, retry);
    if (!retry) break;
    // Members that failed this attempt stay excluded; pick up state changes.
    const uint64_t excluded = v.excluded;
    v = snapshot();
    v.excluded = excluded;
  }
  unlock_rows(r0, r1);
  return st;
}

Status RaidArray::do_write(uint64_t offset, ByteView src) {
  const uint64_t r0 = offset / row_bytes();
  const uint64_t r1 = (offset + src.size() - 1) / row_bytes();
  lock_rows(r0, r1);
  mark_rows(r0, r1);
  View v = snapshot();
  Status st;
  if (is_parity()) {
    for (size_t attempt = 0; attempt <= n_; ++attempt) {
      bool retry = false;
      st = write_parity(v, offset, src, retry);
      if (!retry) break;
      const uint64_t excluded = v.excluded;
      v = snapshot();
      v.excluded = excluded;
    }
  } else {
    st = write_mirror(v, offset, src);
  }
  unmark_rows(r0, r1);
  unlock_rows(r0, r1);
  return st;
}

void RaidArray::encode_parity(size_t len, std::byte* const* shards) {
  const uint64_t t0 = thread_cpu_ns();
  const size_t k = n_ - m_;
  codec_->encode(len, shards, shards + k);
  parity_cpu_ns_.fetch_add(thread_cpu_ns() - t0, kRelaxed);
  parity_bytes_.fetch_add(len * k, kRelaxed);
}

Status RaidArray::reconstruct(size_t len, std::byte* const* shards,
                              const std::vector<int>& missing) {
  const uint64_t t0 = thread_cpu_ns();
  Status st = codec_->reconstruct(len, shards, missing);
  parity_cpu_ns_.fetch_add(thread_cpu_ns() - t0, kRelaxed);
  parity_bytes_.fetch_add(len * (n_ - m_), kRelaxed);
  return st;
}

// One row's share of a parity request: which bytes of which data shards it
// touches ([lo, hi) within the strip, lo == hi when untouched) and the row
// range [rmin, rmax) spanned by them.
namespace {
struct RowSpan {
  uint64_t row = 0;
  uint64_t rmin = 0, rmax = 0;
  uint64_t logical_base = 0;  // logical offset of (row, shard 0, byte 0)
  std::vector<uint64_t> lo, hi;
};

std::vector<RowSpan> split_rows(uint64_t offset, uint64_t len, uint64_t strip, size_t k) {
  std::vector<RowSpan> rows;
  const uint64_t rb = strip * k;
  const uint64_t end = offset + len;
  for (uint64_t r = offset / rb; r * rb < end; ++r) {
    RowSpan s;
    s.row = r;
    s.logical_base = r * rb;
    s.lo.assign(k, 0);
    s.hi.assign(k, 0);
    s.rmin = strip;
    s.rmax = 0;
    for (size_t d = 0; d < k; ++d) {
      const uint64_t a = std::max(offset, s.logical_base + d * strip);
      const uint64_t b = std::min(end, s.logical_base + (d + 1) * strip);
      if (a >= b) continue;
      s.lo[d] = a - s.logical_base - d * strip;
      s.hi[d] = b - s.logical_base - d * strip;
      s.rmin = std::min(s.rmin, s.lo[d]);
      s.rmax = std::max(s.rmax, s.hi[d]);
    }
    rows.push_back(std::move(s));
  }
  return rows;
}
}  // namespace

Status RaidArray::read_parity(View& v, uint64_t offset, MutableByteView dst, bool& retry) {
  const size_t k = n_ - m_;
  auto rows = split_rows(offset, dst.size(), strip_, k);
  struct Degraded {
    const RowSpan* span;
    std::vector<std::byte*> shard;
    std::vector<int> missing;
  };
  std::vector<Degraded> degraded;
  std::vector<MemberIo> ios;
  uint64_t scratch_bytes = 0;
  for (const auto& s : rows) scratch_bytes += (s.rmax - s.rmin) * n_;
  std::byte* next_scratch = scratch(scratch_bytes);
  for (const auto& s : rows) {
    bool healthy = true;
    for (size_t d = 0; d < k; ++d) {
      if (s.lo[d] < s.hi[d] && !v.usable(member_of(s.row, d), s.row)) healthy = false;
    }
    if (healthy) {
      for (size_t d = 0; d < k; ++d) {
        if (s.lo[d] >= s.hi[d]) continue;
        std::byte* p = dst.data() + (s.logical_base + d * strip_ + s.lo[d] - offset);
        ios.push_back(
            {member_of(s.row, d), false, s.row * strip_ + s.lo[d], p, s.hi[d] - s.lo[d], {}});
      }
      continue;
    }
    Degraded dg;
    dg.span = &s;
    const uint64_t len = s.rmax - s.rmin;
    for (size_t sh = 0; sh < n_; ++sh) {
      dg.shard.push_back(next_scratch);
      next_scratch += len;
      if (v.usable(member_of(s.row, sh), s.row)) {
        ios.push_back(
            {member_of(s.row, sh), false, s.row * strip_ + s.rmin, dg.shard.back(), len, {}});
      } else {
        dg.missing.push_back(static_cast<int>(sh));
      }
    }
    if (dg.missing.size() > m_) {
      return Status::io_error(fmt::format("{}: row {} has {} members down, data lost", name_, s.row,
                                          dg.missing.size()));
    }
    degraded.push_back(std::move(dg));
  }
  if (!run_batch(v, ios)) {
    retry = true;
    return Status::io_error(name_ + ": member read failed");
  }
  for (auto& dg : degraded) {
    const RowSpan& s = *dg.span;
    const uint64_t len = s.rmax - s.rmin;
    KVTIER_RETURN_IF_ERROR(reconstruct(len, dg.shard.data(), dg.missing));
    for (size_t d = 0; d < k; ++d) {
      if (s.lo[d] >= s.hi[d]) continue;
      std::memcpy(dst.data() + (s.logical_base + d * strip_ + s.lo[d] - offset),
                  dg.shard[d] + (s.lo[d] - s.rmin), s.hi[d] - s.lo[d]);
    }
  }
  return Status::ok_status();
}

Status RaidArray::write_parity(View& v, uint64_t offset, ByteView src, bool& retry) {
  const size_t k = n_ - m_;
  auto rows = split_rows(offset, src.size(), strip_, k);
  struct Plan {
    const RowSpan* span;
    std::vector<std::byte*> shard;
    std::vector<int> missing;  // shards to reconstruct before overlaying
  };
  std::vector<Plan> plans;
  plans.reserve(rows.size());
  std::vector<MemberIo> reads;
  uint64_t scratch_bytes = 0;
  for (const auto& s : rows) scratch_bytes += (s.rmax - s.rmin) * n_;
  std::byte* next_scratch = scratch(scratch_bytes);
  auto src_at = [&](const RowSpan& s, size_t d, uint64_t within) {
    return const_cast<std::byte*>(src.data()) + (s.logical_base + d * strip_ + within - offset);
  };
  for (const auto& s : rows) {
    Plan p;
    p.span = &s;
    const uint64_t len = s.rmax - s.rmin;
    p.shard.resize(n_);
    for (size_t sh = 0; sh < n_; ++sh) {
      p.shard[sh] = next_scratch;
      next_scratch += len;
    }
    // Data shards the write does not cover over [rmin, rmax) must be read.
    bool need_reconstruct = false;
    for (size_t d = 0; d < k; ++d) {
      const bool covered = s.lo[d] == s.rmin && s.hi[d] == s.rmax;
      if (!covered && !v.usable(member_of(s.row, d), s.row)) need_reconstruct = true;
    }
    for (size_t sh = 0; sh < n_; ++sh) {
      const size_t mem = member_of(s.row, sh);
      const bool usable = v.usable(mem, s.row);
      if (need_reconstruct) {
        // Degraded: old contents of every shard, to rebuild the missing ones.
        if (usable) {
          reads.push_back({mem, false, s.row * strip_ + s.rmin, p.shard[sh], len, {}});
        } else {
          p.missing.push_back(static_cast<int>(sh));
        }
      } else if (sh < k) {
        const bool covered = s.lo[sh] == s.rmin && s.hi[sh] == s.rmax;
        if (covered) {
          p.shard[sh] = src_at(s, sh, s.rmin);  // zero-copy: parity straight from the caller
        } else {
          reads.push_back({mem, false, s.row * strip_ + s.rmin, p.shard[sh], len, {}});
        }
      }
    }
    if (p.missing.size() > m_) {
      return Status::io_error(fmt::format("{}: row {} has {} members down, cannot write", name_,
                                          s.row, p.missing.size()));
    }
    plans.push_back(std::move(p));
  }
  if (!run_batch(v, reads)) {
    retry = true;  // nothing written yet: plan again around the failed member
    return Status::io_error(name_ + ": member read failed");
  }
  std::vector<MemberIo> writes;
  for (auto& p : plans) {
    const RowSpan& s = *p.span;
    const uint64_t len = s.rmax - s.rmin;
    if (!p.missing.empty()) KVTIER_RETURN_IF_ERROR(reconstruct(len, p.shard.data(), p.missing));
    for (size_t d = 0; d < k; ++d) {
      if (s.lo[d] >= s.hi[d]) continue;
      std::byte* from = src_at(s, d, s.lo[d]);
      std::byte* to = p.shard[d] + (s.lo[d] - s.rmin);
      if (from != to) std::memcpy(to, from, s.hi[d] - s.lo[d]);
    }
    encode_parity(len, p.shard.data());
    for (size_t sh = 0; sh < n_; ++sh) {
      const size_t mem = member_of(s.row, sh);
      if (!v.usable(mem, s.row)) continue;
      if (sh < k) {
        if (s.lo[sh] >= s.hi[sh]) continue;
        writes.push_back({mem,
                          true,
                          s.row * strip_ + s.lo[sh],
                          p.shard[sh] + (s.lo[sh] - s.rmin),
                          s.hi[sh] - s.lo[sh],
                          {}});
      } else {
        writes.push_back({mem, true, s.row * strip_ + s.rmin, p.shard[sh], len, {}});
      }
    }
  }
  // A member that fails a write is taken out; the parity already accounts
  // for its bytes, so the array stays consistent unless too many are gone.
  run_batch(v, writes);
  std::lock_guard lk(state_mu_);
  if (state_locked() == ArrayState::kFailed) return Status::io_error(name_ + ": array failed");
  return Status::ok_status();
}

Status RaidArray::read_mirror(View& v, uint64_t offset, MutableByteView dst, bool& retry) {
  const uint64_t c = geo_.copies;
  const uint64_t end = offset + dst.size();
  std::vector<MemberIo> ios;
  for (uint64_t pos = offset; pos < end;) {
    const uint64_t strip_idx = pos / strip_;
    const uint64_t within = pos % strip_;
    const uint64_t len = std::min(strip_ - within, end - pos);
    const uint64_t row = strip_idx / data_per_row_;
    const uint64_t group = strip_idx % data_per_row_;
    // Spread reads over the copies by row.
    size_t chosen = n_;
    for (uint64_t t = 0; t < c; ++t) {
      const size_t mem = group * c + (row + t) % c;
      if (v.usable(mem, row)) {
        chosen = mem;
        break;
      }
    }
    if (chosen == n_) {
      return Status::io_error(
          fmt::format("{}: every copy of row {} group {} is down", name_, row, group));
    }
    ios.push_back({chosen, false, row * strip_ + within, dst.data() + (pos - offset), len, {}});
    pos += len;
  }
  if (!run_batch(v, ios)) {
    retry = true;
    return Status::io_error(name_ + ": member read failed");
  }
  return Status::ok_status();
}

Status RaidArray::write_mirror(View& v, uint64_t offset, ByteView src) {
  const uint64_t c = geo_.copies;
  const uint64_t end = offset + src.size();
  std::vector<MemberIo> ios;
  for (uint64_t pos = offset; pos < end;) {
    const uint64_t strip_idx = pos / strip_;
    const uint64_t within = pos % strip_;
    const uint64_t len = std::min(strip_ - within, end - pos);
    const uint64_t row = strip_idx / data_per_row_;
    const uint64_t group = strip_idx % data_per_row_;
    for (uint64_t t = 0; t < c; ++t) {
      const size_t mem = group * c + t;
      if (!v.usable(mem, row)) continue;
      ios.push_back({mem,
                     true,
                     row * strip_ + within,
                     const_cast<std::byte*>(src.data()) + (pos - offset),
                     len,
                     {}});
    }
    pos += len;
  }
  run_batch(v, ios);
  std::lock_guard lk(state_mu_);
  if (state_locked() == ArrayState::kFailed) return Status::io_error(name_ + ": array failed");
  return Status::ok_status();
}

// ---------------------------------------------------------------- resync, rebuild, scrub

Status RaidArray::resync_rows(uint64_t r0, uint64_t r1, bool* complete) {
  View v = snapshot();
  const uint64_t len = strip_;
  for (uint64_t row = r0; row < r1; ++row) {
    if (is_parity()) {
      const size_t k = n_ - m_;
      bool data_ok = true;
      for (size_t d = 0; d < k; ++d) data_ok &= v.usable(member_of(row, d), row);
      // Degraded and dirty: the write hole; nothing trustworthy to recompute from.
      if (!data_ok) {
        *complete = false;
        continue;
      }
      AlignedBuffer buf(len * n_, std::max<uint32_t>(buffer_alignment_, 64));
      std::vector<std::byte*> shard(n_);
      std::vector<MemberIo> reads;
      for (size_t sh = 0; sh < n_; ++sh) {
        shard[sh] = buf.data() + sh * len;
        if (sh < k) reads.push_back({member_of(row, sh), false, row * strip_, shard[sh], len, {}});
      }
      if (!run_batch(v, reads)) return Status::io_error(name_ + ": resync read failed");
      encode_parity(len, shard.data());
      std::vector<MemberIo> writes;
      for (size_t sh = k; sh < n_; ++sh) {
        if (v.usable(member_of(row, sh), row)) {
          writes.push_back({member_of(row, sh), true, row * strip_, shard[sh], len, {}});
        }
      }
      if (!run_batch(v, writes)) {
        // The member that failed the write is out of the array now; the
        // row keeps its bit, so the next assembly tries again.
        spdlog::warn("{}: resync write of row {} failed; the row stays marked dirty", name_, row);
        *complete = false;
      }
    } else {
      const uint64_t c = geo_.copies;
      AlignedBuffer buf(len, std::max<uint32_t>(buffer_alignment_, 64));
      for (size_t g = 0; g < data_per_row_; ++g) {
        size_t src = n_;
        for (uint64_t t = 0; t < c && src == n_; ++t) {
          if (v.usable(g * c + t, row)) src = g * c + t;
        }
        if (src == n_) {
          *complete = false;
          continue;
        }
        std::vector<MemberIo> rd{{src, false, row * strip_, buf.data(), len, {}}};
        if (!run_batch(v, rd)) return Status::io_error(name_ + ": resync read failed");
        std::vector<MemberIo> writes;
        for (uint64_t t = 0; t < c; ++t) {
          const size_t mem = g * c + t;
          if (mem != src && v.usable(mem, row)) {
            writes.push_back({mem, true, row * strip_, buf.data(), len, {}});
          }
        }
        if (!run_batch(v, writes)) {
          // The member that failed the write is out of the array now; the
          // row keeps its bit, so the next assembly tries again.
          spdlog::warn("{}: resync write of row {} failed; the row stays marked dirty", name_, row);
          *complete = false;
        }
      }
    }
  }
  return Status::ok_status();
}

Status RaidArray::rebuild_rows(size_t target, uint64_t r0, uint64_t r1) {
  View v = snapshot();
  v.excluded |= 1ull << target;  // not a source
  const uint64_t len = strip_;
  const uint64_t nrows = r1 - r0;
  if (is_parity()) {
    AlignedBuffer buf(len * n_ * nrows, std::max<uint32_t>(buffer_alignment_, 64));
    std::vector<std::vector<std::byte*>> shards(nrows, std::vector<std::byte*>(n_));
    std::vector<std::vector<int>> missing(nrows);
    std::vector<MemberIo> reads;
    for (uint64_t i = 0; i < nrows; ++i) {
      const uint64_t row = r0 + i;
      for (size_t sh = 0; sh < n_; ++sh) {
        shards[i][sh] = buf.data() + (i * n_ + sh) * len;
        const size_t mem = member_of(row, sh);
        if (v.usable(mem, row)) {
          reads.push_back({mem, false, row * strip_, shards[i][sh], len, {}});
        } else {
          missing[i].push_back(static_cast<int>(sh));
        }
      }
      if (missing[i].size() > m_)
        return Status::io_error(name_ + ": too many members down to rebuild");
    }
    if (!run_batch(v, reads)) return Status::unavailable(name_ + ": rebuild source read failed");
    std::vector<MemberIo> writes;
    for (uint64_t i = 0; i < nrows; ++i) {
      const uint64_t row = r0 + i;
      KVTIER_RETURN_IF_ERROR(reconstruct(len, shards[i].data(), missing[i]));
      const size_t sh = (target + n_ - row % n_) % n_;
      writes.push_back({target, true, row * strip_, shards[i][sh], len, {}});
    }
    if (!run_batch(v, writes)) return Status::io_error(name_ + ": replacement write failed");
  } else {
    const uint64_t c = geo_.copies;
    const size_t g = target / c;
    size_t src = n_;
    for (uint64_t t = 0; t < c && src == n_; ++t) {
      if (g * c + t != target && v.usable(g * c + t, r0)) src = g * c + t;
    }
    if (src == n_) return Status::io_error(name_ + ": no copy left to rebuild from");
    AlignedBuffer buf(len * nrows, std::max<uint32_t>(buffer_alignment_, 64));
    std::vector<MemberIo> rd{{src, false, r0 * strip_, buf.data(), len * nrows, {}}};
    if (!run_batch(v, rd)) return Status::unavailable(name_ + ": rebuild source read failed");
    std::vector<MemberIo> wr{{target, true, r0 * strip_, buf.data(), len * nrows, {}}};
    if (!run_batch(v, wr)) return Status::io_error(name_ + ": replacement write failed");
  }
  return Status::ok_status();
}

Status RaidArray::replace_member(size_t index, std::shared_ptr<BlockDevice> device) {
  if (!device) return Status::invalid_argument("replace: no device");
  if (device->block_size() > block_size_ || block_size_ % device->block_size() != 0 ||
      device->buffer_alignment() > buffer_alignment_) {
    return Status::invalid_argument(
        fmt::format("replace: {} has block size {} / alignment {}, the array uses {}",
                    device->name(), device->block_size(), device->buffer_alignment(), block_size_));
  }
  if (device->capacity() < geo_.data_offset + geo_.rows * strip_) {
    return Status::invalid_argument(fmt::format("replace: {} holds {} bytes, a member needs {}",
                                                device->name(), device->capacity(),
                                                geo_.data_offset + geo_.rows * strip_));
  }
  if (rebuilding_.load()) return Status::failed_precondition("replace: a rebuild is running");
  if (rebuild_thread_.joinable()) rebuild_thread_.join();
  {
    std::lock_guard lk(state_mu_);
    if (index >= n_) return Status::invalid_argument(fmt::format("replace: no member {}", index));
    if (members_[index]->state != MemberState::kFailed) {
      return Status::failed_precondition(
          fmt::format("replace: member {} is {}, only a failed member can be replaced", index,
                      member_state_name(members_[index]->state)));
    }
    members_[index]->dev = device;
    members_[index]->state = MemberState::kRebuilding;
    members_[index]->read_errors = 0;
    members_[index]->write_errors = 0;
    recovery_row_ = 0;
    ++event_;
  }
  KVTIER_RETURN_IF_ERROR(write_bitmap_now());
  KVTIER_RETURN_IF_ERROR(write_superblocks(false));
  rebuilding_ = true;
  rebuild_rows_done_ = 0;
  rebuild_stop_ = false;
  rebuild_thread_ = std::thread([this, index] { rebuild_loop(index); });
  return Status::ok_status();
}

void RaidArray::rebuild_loop(size_t target) {
  const uint64_t step = std::max<uint64_t>(1, (1ull << 20) / strip_);
  bool ok = true;
  for (uint64_t r = 0; r < geo_.rows && !rebuild_stop_.load(); r += step) {
    const uint64_t r1 = std::min(geo_.rows, r + step);
    lock_rows(r, r1 - 1);
    Status st = rebuild_rows(target, r, r1);
    if (st.ok()) {
      std::lock_guard lk(state_mu_);
      recovery_row_ = r1;
    }
    unlock_rows(r, r1 - 1);
    if (!st.ok()) {
      ok = false;
      // A failed replacement write already failed the member; a failed
      // source read leaves it rebuilding only if we stop here, so fail it.
      std::lock_guard lk(state_mu_);
      members_[target]->state = MemberState::kFailed;
      ++event_;
      break;
    }
    rebuild_rows_done_ = r1;
  }
  if (ok && !rebuild_stop_.load()) {
    (void)flush_members();
    std::lock_guard lk(state_mu_);
    if (members_[target]->state == MemberState::kRebuilding) {
      members_[target]->state = MemberState::kActive;
      ++event_;
    }
  } else if (rebuild_stop_.load()) {
    // Closing mid-rebuild: the replacement is not complete; next assembly
    // treats it as failed.
  }
  (void)write_superblocks(false);
  {
    std::lock_guard lk(rebuild_mu_);
    rebuilding_ = false;
  }
  rebuild_cv_.notify_all();
}

bool RaidArray::wait_rebuild(std::chrono::milliseconds timeout) {
  std::unique_lock lk(rebuild_mu_);
  return rebuild_cv_.wait_for(lk, timeout, [this] { return !rebuilding_.load(); });
}

Result<uint64_t> RaidArray::count_inconsistent_rows() {
  uint64_t bad = 0;
  const uint64_t len = strip_;
  AlignedBuffer buf(len * (n_ + (is_parity() ? m_ : 0)), std::max<uint32_t>(buffer_alignment_, 64));
  for (uint64_t row = 0; row < geo_.rows; ++row) {
    lock_rows(row, row);
    View v = snapshot();
    std::vector<MemberIo> reads;
    for (size_t mem = 0; mem < n_; ++mem) {
      if (!v.usable(mem, row)) {
        unlock_rows(row, row);
        return Status::failed_precondition(name_ + ": scrub needs every member");
      }
      const size_t sh = is_parity() ? (mem + n_ - row % n_) % n_ : mem;
      reads.push_back({mem, false, row * strip_, buf.data() + sh * len, len, {}});
    }
    const bool ok = run_batch(v, reads);
    unlock_rows(row, row);
    if (!ok) return Status::io_error(name_ + ": scrub read failed");
    if (is_parity()) {
      const size_t k = n_ - m_;
      std::vector<std::byte*> shard(n_);
      for (size_t sh = 0; sh < k; ++sh) shard[sh] = buf.data() + sh * len;
      for (size_t j = 0; j < m_; ++j) shard[k + j] = buf.data() + (n_ + j) * len;
      encode_parity(len, shard.data());
      if (std::memcmp(buf.data() + k * len, buf.data() + n_ * len, m_ * len) != 0) ++bad;
    } else {
      const uint64_t c = geo_.copies;
      bool same = true;
      for (size_t mem = 0; mem < n_; ++mem) {
        if (mem % c == 0) continue;
        same &= std::memcmp(buf.data() + mem * len, buf.data() + (mem - mem % c) * len, len) == 0;
      }
      if (!same) ++bad;
    }
  }
  return bad;
}

}  // namespace kvtier::blk
