#include "kv/ram_tier.h"

#include <array>
#include <thread>

namespace kvtier::kv {

namespace {
constexpr uint32_t word(uint32_t state, uint32_t leases) { return state << 24 | leases; }
constexpr auto kAcqRel = std::memory_order_acq_rel;
constexpr auto kAcquire = std::memory_order_acquire;
constexpr auto kRelease = std::memory_order_release;
constexpr auto kRelaxed = std::memory_order_relaxed;
}  // namespace

RamTier::RamTier(uint64_t capacity_bytes, uint32_t slot_bytes, bool shared_arena)
    : RamTier(slot_bytes, std::span<const RamPartitionSpec>(
                              std::array{RamPartitionSpec{capacity_bytes, shared_arena}})) {}

RamTier::RamTier(uint32_t slot_bytes, std::span<const RamPartitionSpec> partitions)
    : slot_bytes_(slot_bytes_for(slot_bytes)) {
  for (const RamPartitionSpec& spec : partitions) {
    auto p = std::make_unique<Partition>();
    p->first = slot_count_;
    p->count = slot_bytes_ == 0 ? 0 : static_cast<uint32_t>(spec.bytes / slot_bytes_);
    p->arena = SharedArena(static_cast<size_t>(p->count) * slot_bytes_, spec.shared);
    p->free.reserve(p->count);
    // Hand out low slots first: they are the ones already faulted in.
    for (uint32_t i = p->count; i > 0; --i) p->free.push_back(p->first + i - 1);
    slot_count_ += p->count;
    parts_.push_back(std::move(p));
  }
  if (parts_.empty()) parts_.push_back(std::make_unique<Partition>());
  meta_ = std::make_unique<Meta[]>(slot_count_);
  for (size_t i = 0; i < parts_.size(); ++i) {
    for (uint32_t s = 0; s < parts_[i]->count; ++s) {
      meta_[parts_[i]->first + s].part = static_cast<uint16_t>(i);
    }
  }
}

std::optional<uint32_t> RamTier::allocate(size_t part) {
  Partition& p = *parts_[part];
  std::lock_guard lock(p.free_mu);
  if (p.free.empty()) return std::nullopt;
  uint32_t s = p.free.back();
  p.free.pop_back();
  meta_[s].state.store(word(kFilling, 0), kRelaxed);
  used_.fetch_add(1, kRelaxed);
  return s;
}

void RamTier::publish(uint32_t slot, const Key128& key, uint16_t ns, uint32_t length, uint32_t crc,
                      bool hold_lease) {
  Meta& m = meta_[slot];
  m.key = key;
  m.hint_hi.store(key.hi, kRelaxed);
  m.hint_lo.store(key.lo, kRelaxed);
  m.ns = ns;
  m.length = length;
  m.crc = crc;
  m.pin_until_ns.store(0, kRelaxed);
  m.referenced.store(1, kRelaxed);
  m.state.store(word(kReady, hold_lease ? 1 : 0), std::memory_order_release);
  parts_[m.part]->all_pinned_until_ns.store(0, kRelease);
}

bool RamTier::try_lease(uint32_t slot, const Key128& key, uint16_t ns) {
  if (slot >= slot_count_) return false;
  Meta& m = meta_[slot];
  uint32_t w = m.state.load(kAcquire);
  for (;;) {
    if ((w >> 24) != kReady || (w & kLeaseMask) == kLeaseMask) return false;
    if (m.state.compare_exchange_weak(w, w + 1, kAcqRel, kAcquire)) break;
  }
  // Ready and leased: the key cannot change under us now.
  if (!(m.key == key) || m.ns != ns) {
    release(slot);
    return false;
  }
  m.referenced.store(1, kRelaxed);
  return true;
}

void RamTier::release(uint32_t slot) { meta_[slot].state.fetch_sub(1, std::memory_order_release); }

uint32_t RamTier::lease_count(uint32_t slot) const {
  return meta_[slot].state.load(kRelaxed) & kLeaseMask;
}

uint64_t RamTier::leased_slots() const {
  uint64_t n = 0;
  for (uint32_t i = 0; i < slot_count_; ++i) n += (meta_[i].state.load(kRelaxed) & kLeaseMask) != 0;
  return n;
}

bool RamTier::try_claim(uint32_t slot) {
  uint32_t expected = word(kReady, 0);
  return meta_[slot].state.compare_exchange_strong(expected, word(kEvicting, 0), kAcqRel);
}

std::optional<uint32_t> RamTier::claim_victim(uint64_t now_ns, size_t part,
                                              std::optional<Key128>* next_key) {
  Partition& p = *parts_[part];
  if (p.count == 0) return std::nullopt;
  if (now_ns < p.all_pinned_until_ns.load(kAcquire)) return std::nullopt;
  std::lock_guard lock(p.clock_mu);
  uint64_t earliest_pin_end = UINT64_MAX;
  bool only_pins = true;  // every slot passed over was pinned
  for (uint64_t step = 0; step < 2ull * p.count; ++step) {
    uint32_t s = p.first + p.hand;
    p.hand = p.hand + 1 == p.count ? 0 : p.hand + 1;
    Meta& m = meta_[s];
    if (m.state.load(kRelaxed) != word(kReady, 0)) {
      only_pins = false;
      continue;
    }
    const uint64_t pin_end = m.pin_until_ns.load(kRelaxed);
    if (pin_end > now_ns) {
      earliest_pin_end = std::min(earliest_pin_end, pin_end);
      continue;
    }
    only_pins = false;
    if (m.referenced.exchange(0, kRelaxed)) continue;  // second chance
    if (try_claim(s)) {
      if (next_key) {
        const Meta& n = meta_[p.first + p.hand];
        *next_key =
            n.state.load(kAcquire) >> 24 == kReady
                ? std::optional<Key128>(Key128{n.hint_hi.load(kRelaxed), n.hint_lo.load(kRelaxed)})
                : std::nullopt;
      }
      return s;
    }
  }
  if (only_pins) p.all_pinned_until_ns.store(earliest_pin_end, kRelease);
  return std::nullopt;
}

void RamTier::release_slot(uint32_t slot) {
  Meta& m = meta_[slot];
  m.key = Key128{};
  m.state.store(word(kFree, 0), std::memory_order_release);
  used_.fetch_sub(1, kRelaxed);
  Partition& p = *parts_[m.part];
  p.all_pinned_until_ns.store(0, kRelease);
  std::lock_guard lock(p.free_mu);
  p.free.push_back(slot);
}

void RamTier::recycle(uint32_t slot) {
  Meta& m = meta_[slot];
  m.key = Key128{};
  m.state.store(word(kFilling, 0), std::memory_order_release);
}

void RamTier::abandon(uint32_t slot) {
  Meta& m = meta_[slot];
  uint32_t expected = word(kReady, 1);
  while (!m.state.compare_exchange_weak(expected, word(kEvicting, 0), kAcqRel, kAcquire)) {
    expected = word(kReady, 1);  // another reader's lease is passing: let it finish
    std::this_thread::yield();
  }
  release_slot(slot);
}

void RamTier::pin(uint32_t slot, uint64_t until_ns) {
  if (!ever_pinned_.load(kRelaxed)) ever_pinned_.store(true, kRelaxed);
  auto& p = meta_[slot].pin_until_ns;
  uint64_t cur = p.load(kRelaxed);
  while (cur < until_ns && !p.compare_exchange_weak(cur, until_ns, kRelaxed)) {
  }
}

void RamTier::unpin(uint32_t slot) {
  // Under the sweep's lock: a sweep that saw this pin cannot store its hint
  // after the hint is cleared here.
  Partition& p = *parts_[meta_[slot].part];
  std::lock_guard lock(p.clock_mu);
  meta_[slot].pin_until_ns.store(0, kRelaxed);
  p.all_pinned_until_ns.store(0, kRelease);
}

}  // namespace kvtier::kv
