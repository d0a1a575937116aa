#include "kv/index.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <new>
#include <type_traits>

namespace kvtier::kv {

// A table slot: four 64-bit words, all atomics so a reader racing a writer
// reads stale or mixed words (caught by the seqlock), never undefined memory.
//   w0 = key.hi, w1 = key.lo (both zero = empty slot)
//   w2 = ram_slot | disk_page << 32
//   w3 = length | ns << 32 | disk_hits << 48
struct Index::Slot {
  std::atomic<uint64_t> w[4];
};
static_assert(sizeof(std::atomic<uint64_t>) == 8);

struct alignas(64) Index::Shard {
  std::atomic<uint64_t> seq{0};
  std::mutex mu;  // serialises writers of this shard
  size_t slots = 0;
  size_t max_used = 0;  // refuse inserts beyond this (keeps probes short)
  std::atomic<size_t> used{0};
  Slot* table = nullptr;
};

namespace {

constexpr double kDesignLoad = 0.75;
constexpr double kMaxLoad = 0.92;

inline uint64_t pack_loc(const IndexRecord& r) {
  return static_cast<uint64_t>(r.ram_slot) | (static_cast<uint64_t>(r.disk_page) << 32);
}
inline uint64_t pack_meta(const IndexRecord& r) {
  return static_cast<uint64_t>(r.length) | (static_cast<uint64_t>(r.ns) << 32) |
         (static_cast<uint64_t>(r.disk_hits) << 48);
}
inline void unpack(uint64_t w0, uint64_t w1, uint64_t w2, uint64_t w3, IndexRecord* r) {
  r->key = Key128{w0, w1};
  r->ram_slot = static_cast<uint32_t>(w2);
  r->disk_page = static_cast<uint32_t>(w2 >> 32);
  r->length = static_cast<uint32_t>(w3);
  r->ns = static_cast<uint16_t>(w3 >> 32);
  r->disk_hits = static_cast<uint16_t>(w3 >> 48);
}

// Writer-side seqlock section.
class WriteSection {
 public:
  explicit WriteSection(std::atomic<uint64_t>& seq) : seq_(seq) {
    seq_.store(seq_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
  }
  ~WriteSection() {
    seq_.store(seq_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }

 private:
  std::atomic<uint64_t>& seq_;
};

constexpr auto kRelaxed = std::memory_order_relaxed;

}  // namespace

Index::Index(uint64_t max_entries, unsigned shards)
    : shard_count_(std::bit_ceil(std::max(1u, shards))),
      by_ns_(std::make_unique<NamespaceCounters[]>(65536)) {
  uint64_t want = static_cast<uint64_t>(static_cast<double>(max_entries) / kDesignLoad) + 1;
  uint64_t per_shard = (want + shard_count_ - 1) / shard_count_ + 8;
  shards_ = std::make_unique<Shard[]>(shard_count_);
  total_slots_ = per_shard * shard_count_;
  // 64-byte alignment: two slots per cache line, none straddling one.
  table_memory_ = AlignedBuffer(total_slots_ * sizeof(Slot), 64, /*zero=*/false);
  Slot* all = reinterpret_cast<Slot*>(table_memory_.data());
  for (uint64_t j = 0; j < total_slots_; ++j) {
    Slot* slot = new (&all[j]) Slot;
    for (auto& w : slot->w) w.store(0, kRelaxed);
  }
  for (unsigned i = 0; i < shard_count_; ++i) {
    Shard& s = shards_[i];
    s.slots = per_shard;
    s.max_used = static_cast<size_t>(static_cast<double>(per_shard) * kMaxLoad);
    s.table = all + i * per_shard;
  }
}

// Slots hold only atomics of integers: nothing to destroy.
static_assert(std::is_trivially_destructible_v<std::atomic<uint64_t>>);
Index::~Index() = default;

Index::Shard& Index::shard_of(const Key128& key) const {
  // Keys are uniform hashes: the low bits pick the shard, the high bits the
  // home slot, so the two choices are independent.
  return shards_[key.lo & (shard_count_ - 1)];
}

size_t Index::home_of(const Shard& s, const Key128& key) {
  return static_cast<size_t>((static_cast<unsigned __int128>(key.hi) * s.slots) >> 64);
}

std::optional<IndexRecord> Index::find(const Key128& key) const {
  const Shard& s = shard_of(key);
  for (;;) {
    uint64_t seq1 = s.seq.load(std::memory_order_acquire);
    if (seq1 & 1) {
      _mm_pause();
      continue;
    }
    std::optional<IndexRecord> found;
    size_t i = home_of(s, key);
    for (size_t probes = 0; probes < s.slots; ++probes) {
      const Slot& slot = s.table[i];
      uint64_t w0 = slot.w[0].load(kRelaxed);
      uint64_t w1 = slot.w[1].load(kRelaxed);
      if (w0 == 0 && w1 == 0) break;
      if (w0 == key.hi && w1 == key.lo) {
        IndexRecord r;
        unpack(w0, w1, slot.w[2].load(kRelaxed), slot.w[3].load(kRelaxed), &r);
        found = r;
        break;
      }
      if (++i == s.slots) i = 0;
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.seq.load(kRelaxed) == seq1) return found;
  }
}

Index::InsertResult Index::insert(const IndexRecord& rec, IndexRecord* existing) {
  Shard& s = shard_of(rec.key);
  std::lock_guard lock(s.mu);
  size_t i = home_of(s, rec.key);
  for (;;) {
    Slot& slot = s.table[i];
    uint64_t w0 = slot.w[0].load(kRelaxed);
    uint64_t w1 = slot.w[1].load(kRelaxed);
    if (w0 == 0 && w1 == 0) break;
    if (w0 == rec.key.hi && w1 == rec.key.lo) {
      if (existing) unpack(w0, w1, slot.w[2].load(kRelaxed), slot.w[3].load(kRelaxed), existing);
      return InsertResult::kExists;
    }
    if (++i == s.slots) i = 0;
  }
  if (s.used.load(kRelaxed) >= s.max_used) return InsertResult::kFull;
  WriteSection ws(s.seq);
  Slot& slot = s.table[i];
  slot.w[2].store(pack_loc(rec), kRelaxed);
  slot.w[3].store(pack_meta(rec), kRelaxed);
  slot.w[1].store(rec.key.lo, kRelaxed);
  slot.w[0].store(rec.key.hi, kRelaxed);
  s.used.fetch_add(1, kRelaxed);
  account(rec, +1);
  return InsertResult::kInserted;
}

bool Index::update(const Key128& key, const std::function<bool(IndexRecord&)>& fn) {
  Shard& s = shard_of(key);
  std::lock_guard lock(s.mu);
  size_t i = home_of(s, key);
  for (;;) {
    Slot& slot = s.table[i];
    uint64_t w0 = slot.w[0].load(kRelaxed);
    uint64_t w1 = slot.w[1].load(kRelaxed);
    if (w0 == 0 && w1 == 0) return false;
    if (w0 == key.hi && w1 == key.lo) break;
    if (++i == s.slots) i = 0;
  }
  IndexRecord r;
  Slot& slot = s.table[i];
  unpack(key.hi, key.lo, slot.w[2].load(kRelaxed), slot.w[3].load(kRelaxed), &r);
  const IndexRecord before = r;
  bool keep = fn(r);
  account(before, -1);
  if (keep) account(r, +1);
  WriteSection ws(s.seq);
  if (keep) {
    slot.w[2].store(pack_loc(r), kRelaxed);
    slot.w[3].store(pack_meta(r), kRelaxed);
    return true;
  }
  // Backward-shift deletion: pull later members of the probe run into the
  // hole so no tombstones are needed and probe runs stay short.
  size_t hole = i;
  size_t j = i;
  for (;;) {
    if (++j == s.slots) j = 0;
    Slot& next = s.table[j];
    uint64_t n0 = next.w[0].load(kRelaxed);
    uint64_t n1 = next.w[1].load(kRelaxed);
    if (n0 == 0 && n1 == 0) break;
    size_t home = home_of(s, Key128{n0, n1});
    // Move `next` into the hole unless its home lies cyclically in (hole, j].
    bool home_between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (home_between) continue;
    Slot& h = s.table[hole];
    for (int w = 0; w < 4; ++w) h.w[w].store(next.w[w].load(kRelaxed), kRelaxed);
    hole = j;
  }
  for (auto& w : s.table[hole].w) w.store(0, kRelaxed);
  s.used.fetch_sub(1, kRelaxed);
  return true;
}

bool Index::erase(const Key128& key) {
  return update(key, [](IndexRecord&) { return false; });
}

void Index::prefetch(const Key128& key) const {
  const Shard& s = shard_of(key);
  __builtin_prefetch(&s.table[home_of(s, key)]);
}

size_t Index::match_prefix(std::span<const Key128> keys, IndexRecord* out) const {
  // A long chain is a series of cache misses in unrelated shards. Work in
  // groups: prefetch every home slot of the group, then probe them, so the
  // misses overlap instead of queueing one behind the other.
  constexpr size_t kGroup = 16;
  for (size_t base = 0; base < keys.size(); base += kGroup) {
    const size_t end = std::min(keys.size(), base + kGroup);
    for (size_t k = base; k < end; ++k) prefetch(keys[k]);
    for (size_t k = base; k < end; ++k) {
      auto rec = find(keys[k]);
      if (!rec) return k;
      if (out) out[k] = *rec;
    }
  }
  return keys.size();
}

void Index::for_each(const std::function<void(const IndexRecord&)>& fn) const {
  for (unsigned i = 0; i < shard_count_; ++i) {
    Shard& s = shards_[i];
    std::lock_guard lock(s.mu);
    for (size_t j = 0; j < s.slots; ++j) {
      const Slot& slot = s.table[j];
      uint64_t w0 = slot.w[0].load(kRelaxed), w1 = slot.w[1].load(kRelaxed);
      if (w0 == 0 && w1 == 0) continue;
      IndexRecord r;
      unpack(w0, w1, slot.w[2].load(kRelaxed), slot.w[3].load(kRelaxed), &r);
      fn(r);
    }
  }
}

void Index::account(const IndexRecord& r, int64_t sign) {
  NamespaceCounters& c = by_ns_[r.ns];
  const auto d = static_cast<uint64_t>(sign);  // two's complement: adds or subtracts
  c.blocks.fetch_add(d, kRelaxed);
  if (r.in_ram()) c.ram_bytes.fetch_add(d * r.length, kRelaxed);
  if (r.on_disk()) c.disk_bytes.fetch_add(d * r.length, kRelaxed);
}

NamespaceUsage Index::usage(uint16_t ns) const {
  const NamespaceCounters& c = by_ns_[ns];
  return {c.blocks.load(kRelaxed), c.ram_bytes.load(kRelaxed), c.disk_bytes.load(kRelaxed)};
}

uint64_t Index::size() const {
  uint64_t n = 0;
  for (unsigned i = 0; i < shard_count_; ++i) n += shards_[i].used.load(kRelaxed);
  return n;
}

uint64_t Index::memory_bytes() const {
  return sizeof(*this) + shard_count_ * sizeof(Shard) + total_slots_ * sizeof(Slot);
}

}  // namespace kvtier::kv
