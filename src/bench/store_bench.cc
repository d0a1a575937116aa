#include "bench/store_bench.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "bench/fio_runner.h"
#include "bench/memcpy_limit.h"
#include "blk/dev/uring_device.h"
#include "common/clock.h"
#include "kv/block_key.h"
#include "kv/disk_format.h"
#include "kv/index.h"
#include "kv/store.h"
#include "kv/test_payload.h"

namespace kvtier::bench {

using kv::Key128;

namespace {

kv::Namespace bench_namespace() {
  return kv::Namespace::of_model("Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8", "bench", "qwen3");
}

struct Step {
  const StoreBenchOptions& o;
  int n = 0;
  void operator()(const std::string& what) {
    if (o.progress) o.progress(fmt::format("[{}/7] {}", ++n, what));
  }
};

// Payloads for the disk measurements, generated before any clock starts:
// block i carries pool[i % kPool] (content generation is not what is measured).
class PayloadPool {
 public:
  static constexpr uint64_t kPool = 32;
  explicit PayloadPool(uint32_t bytes) {
    for (uint64_t j = 0; j < kPool; ++j) {
      bufs_.emplace_back(bytes);
      kv::fill_payload(kv::test_key(1000000 + j), bufs_.back().view());
    }
  }
  ByteView of(uint64_t i) const { return bufs_[i % kPool].view(); }
  bool matches(uint64_t i, ByteView got) const {
    return got.size() == of(i).size() && std::memcmp(got.data(), of(i).data(), got.size()) == 0;
  }

 private:
  std::vector<AlignedBuffer> bufs_;
};

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

Result<double> ram_get_rate(const StoreBenchOptions& o) {
  kv::StoreOptions so;
  so.ram_bytes = o.ram_pool_bytes;
  so.max_object_bytes = o.object_bytes;
  auto s = kv::Store::open(so);
  if (!s.ok()) return s.status();
  auto& store = **s;
  auto ns = store.register_namespace(bench_namespace());
  if (!ns.ok()) return ns.status();
  const uint64_t objects = o.ram_pool_bytes / o.object_bytes;
  AlignedBuffer buf(o.object_bytes);
  for (uint64_t i = 0; i < objects; ++i) {
    kv::fill_payload(kv::test_key(i), buf.view());
    auto r = store.put(*ns, kv::test_key(i), buf.view());
    if (!r.ok() || r->tier != kv::Tier::kRam)
      return Status::internal("RAM put did not land in RAM");
  }
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    const uint64_t t0 = now_ns(), until = t0 + static_cast<uint64_t>(o.seconds / 3 * 1e9);
    uint64_t bytes = 0, i = 0, t = t0;
    while (t < until) {
      auto g = store.get(*ns, kv::test_key(i % objects), buf.view());
      if (!g.ok() || !g->hit || g->tier != kv::Tier::kRam)
        return Status::internal("RAM get missed");
      bytes += g->length;
      ++i;
      t = now_ns();
    }
    best = std::max(best, bytes * 1e9 / static_cast<double>(t - t0));
  }
  // One verification pass: the benchmark must not measure wrong bytes.
  auto g = store.get(*ns, kv::test_key(7 % objects), buf.view());
  if (!kv::payload_matches(kv::test_key(7 % objects), ByteView(buf.data(), g->length))) {
    return Status::internal("RAM get returned wrong bytes");
  }
  return best;
}

Result<std::shared_ptr<blk::UringDevice>> open_volume(const StoreBenchOptions& o) {
  blk::UringOptions uo;
  uo.path = o.volume_path;
  uo.create_size = o.volume_bytes;
  uo.queue_depth = 64;
  auto d = blk::UringDevice::open(uo);
  if (!d.ok()) return d.status();
  return std::shared_ptr<blk::UringDevice>(std::move(d).value());
}

kv::StoreOptions disk_store_options(const StoreBenchOptions& o,
                                    std::shared_ptr<blk::BlockDevice> dev) {
  kv::StoreOptions so;
  so.ram_bytes = 64ull * o.object_bytes;
  so.max_object_bytes = o.object_bytes;
  so.volume = std::move(dev);
  so.promote_on_disk_hit = false;
  so.disk.read_depth = o.queue_depth;
  return so;
}

// The RAM tier's get rate against one thread's memcpy.
Status measure_ram_get(const StoreBenchOptions& o, Step& step, BenchReport& report) {
  const double mib = static_cast<double>(o.object_bytes) / (1 << 20);
  step(fmt::format("memcpy limit: {:.2f} MiB objects, 1 thread", mib));
  MemcpyLimit mc = measure_memcpy(o.object_bytes, o.ram_pool_bytes, o.seconds);
  step("RAM-tier get");
  auto ram = ram_get_rate(o);
  if (!ram.ok()) return ram.status();
  report.add({"ram_get", fmt::format("RAM get, {:.2f} MiB objects", mib), *ram / 1e9, "GB/s",
              mc.bytes_per_second / 1e9, "memcpy 1 thread", *ram / mc.bytes_per_second, 0.6});
  return Status::ok_status();
}

// Rounds of kvtier against fio on the same job, paired so that a drifting
// device (cloud disks, host caches) affects both sides of each ratio alike;
// fio goes first in odd rounds so that a trend favours neither side. The
// ratio is the median of the rounds' ratios; the rates are the means.
struct FioPairedRounds {
  using Turn = std::function<Result<std::pair<double, nlohmann::json>>()>;

  unsigned count = 1;
  std::vector<double> ratios;
  nlohmann::json rounds = nlohmann::json::array();
  double kvtier_rate = 0, fio_rate = 0;  // bytes per second
  std::string fio_command;

  // One round: `kvtier_turn` measures kvtier and returns its rate and the
  // extra fields of the round's record; fio runs `job` before or after it.
  // `job` is read when fio runs, so a turn may still change it (the write
  // rounds give fio's next turn the length of kvtier's).
  Status run(unsigned round, const FioJob& job, const Turn& kvtier_turn) {
    const bool fio_first = round % 2 == 1;
    Result<FioResult> fio = Status::internal("fio not run");
    if (fio_first) fio = run_fio(job);
    if (fio_first && !fio.ok()) return fio.status();
    auto turn = kvtier_turn();
    if (!turn.ok()) return turn.status();
    if (!fio_first) fio = run_fio(job);
    if (!fio.ok()) return fio.status();
    const double rate = turn->first;
    ratios.push_back(rate / fio->bytes_per_second);
    nlohmann::json record = {{"order", fio_first ? "fio,kvtier" : "kvtier,fio"},
                             {"kvtier_gbps", rate / 1e9},
                             {"fio_gbps", fio->bytes_per_second / 1e9},
                             {"round_ratio", ratios.back()}};
    record.update(turn->second);
    rounds.push_back(std::move(record));
    kvtier_rate += rate / count;
    fio_rate += fio->bytes_per_second / count;
    fio_command = fio->command;
    return Status::ok_status();
  }
  double median_ratio() const { return percentile(ratios, 0.5); }
};

// What the disk-tier steps share: the volume and how much of it the store
// filled.
struct DiskBench {
  std::shared_ptr<blk::UringDevice> dev;
  uint64_t entry = 0;            // bytes of one block's on-disk entry
  uint64_t written_objects = 0;  // blocks the write step leaves on the volume
  kv::DiskTierOptions dto;
};

// Writes by demotion (a full RAM tier demotes one block per put) against fio
// sequential writes of the store's flush size, in paired rounds.
Status measure_disk_writes(const StoreBenchOptions& o, const PayloadPool& payloads, DiskBench& d,
                           BenchReport& report) {
  auto& dev = d.dev;
  auto& dto = d.dto;
  auto& written_objects = d.written_objects;
  const uint64_t entry = d.entry;
  double write_ratio = 0, write_rate = 0, fio_write_rate = 0;
  std::string fio_write_command;
  {
    auto s = kv::Store::open(disk_store_options(o, dev));
    if (!s.ok()) return s.status();
    auto& store = **s;
    dto = store.options().disk;
    auto ns = store.register_namespace(bench_namespace());
    const uint64_t data_bytes = uint64_t{store.local_stats().disk.region_count} * dto.region_bytes;
    written_objects = data_bytes * 3 / 4 / entry;
    // Fill the RAM tier first: from then on every put demotes one block.
    uint64_t next = 0;
    for (; next < store.local_stats().ram_slots; ++next)
      (void)store.put(*ns, kv::test_key(next), payloads.of(next));
    // Rounds of (kvtier writes, fio writes as long), paired so that a
    // drifting device affects both sides of each ratio alike; the order
    // alternates (kvtier first, then fio first) so a trend does not favour
    // one side, and the ratio is the median of the rounds' ratios.
    const unsigned nrounds = o.rounds;
    const uint64_t per_round = std::max<uint64_t>(32, written_objects * 5 / 3 / nrounds);
    FioJob wjob{
        o.volume_path,         "write",
        dto.flush_chunk_bytes, static_cast<unsigned>(dto.region_bytes / dto.flush_chunk_bytes),
        o.volume_bytes,        1,
        /*end_fsync=*/true};
    FioPairedRounds paired{nrounds};
    for (unsigned round = 0; round < nrounds; ++round) {
      KVTIER_RETURN_IF_ERROR(
          paired.run(round, wjob, [&]() -> Result<std::pair<double, nlohmann::json>> {
            const uint64_t bytes0 = store.local_stats().disk.bytes_written;
            const uint64_t t0 = now_ns();
            for (uint64_t i = 0; i < per_round; ++i, ++next) {
              auto r = store.put(*ns, kv::test_key(next), payloads.of(next));
              if (!r.ok() || !r->stored())
                return Status::internal("put refused during the write benchmark");
            }
            const uint64_t t_flush = now_ns();
            KVTIER_RETURN_IF_ERROR(store.flush());
            const double secs = (now_ns() - t0) / 1e9;
            const double flush_secs = (now_ns() - t_flush) / 1e9;
            // fio's next turn runs as long as this one.
            wjob.seconds = static_cast<unsigned>(std::max(1.0, secs + 0.5));
            return std::make_pair(
                (store.local_stats().disk.bytes_written - bytes0) / secs,
                nlohmann::json{{"kvtier_seconds", secs}, {"kvtier_flush_seconds", flush_secs}});
          }));
    }
    write_rate = paired.kvtier_rate;
    fio_write_rate = paired.fio_rate;
    fio_write_command = paired.fio_command;
    write_ratio = paired.median_ratio();
    report.note("disk_write_rounds", paired.rounds);
    report.note("demotions", store.local_stats().demotions);
    // fio overwrote what the store wrote: this store's disk copies are void.
  }
  // fio overwrote what the store wrote: the volume is reopened fresh.
  ::unlink(o.volume_path.c_str());
  auto reopened = open_volume(o);
  if (!reopened.ok()) return reopened.status();
  dev = *reopened;
  report.add({"disk_write", "disk-tier write (demotion + flush)", write_rate / 1e9, "GB/s",
              fio_write_rate / 1e9,
              fmt::format("fio seq write {}K qd{}", dto.flush_chunk_bytes >> 10,
                          dto.region_bytes / dto.flush_chunk_bytes),
              write_ratio, 0.85});
  report.note("fio_write_command", fio_write_command);

  return Status::ok_status();
}

// Fills the volume again (untimed) and closes the store, for the read step.
Status refill_volume(const StoreBenchOptions& o, const PayloadPool& payloads, const DiskBench& d) {
  auto s = kv::Store::open(disk_store_options(o, d.dev));
  if (!s.ok()) return s.status();
  auto& store = **s;
  auto ns = store.register_namespace(bench_namespace());
  for (uint64_t i = 0; i < d.written_objects; ++i)
    (void)store.put(*ns, kv::test_key(i), payloads.of(i));
  return store.close();
}

// Batch gets of every written object in a fixed random order, wrapping
// around, for a timed round: the disk-served bytes per second.
struct ColdReader {
  ColdReader(kv::Store& s, uint16_t n, uint64_t objects, size_t batch, uint32_t object_bytes)
      : store(s), ns(n), order(objects), items(batch) {
    for (uint64_t i = 0; i < objects; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), std::mt19937_64(1));
    for (size_t i = 0; i < batch; ++i) outs.emplace_back(object_bytes, kDirectIoAlignment, true);
  }

  Result<double> run_for(double seconds) {
    uint64_t bytes = 0;
    const uint64_t t0 = now_ns(), until = t0 + static_cast<uint64_t>(seconds * 1e9);
    uint64_t t = t0;
    while (t < until) {
      last_first = order[pos % order.size()];
      for (size_t i = 0; i < items.size(); ++i) {
        items[i] = {kv::test_key(order[pos++ % order.size()]), outs[i].view()};
      }
      auto r = store.batch_get(ns, items);
      if (!r.ok()) return r.status();
      for (const auto& g : *r) {
        if (g.hit && g.tier == kv::Tier::kDisk) {
          bytes += g.length;
        } else {
          ++misses;
        }
      }
      t = now_ns();
    }
    return bytes * 1e9 / static_cast<double>(t - t0);
  }

  kv::Store& store;
  uint16_t ns;
  std::vector<uint64_t> order;
  std::vector<AlignedBuffer> outs;
  std::vector<kv::BatchGetItem> items;
  uint64_t pos = 0, misses = 0;
  uint64_t last_first = 0;  // object of the last batch's first item (outs[0])
};

// Cold batch gets from a reopened store (empty RAM tier) against fio random
// reads of the entry size at the same depth, in paired rounds.
Status measure_disk_reads(const StoreBenchOptions& o, const PayloadPool& payloads,
                          const DiskBench& d, BenchReport& report) {
  const auto& dev = d.dev;
  const uint64_t entry = d.entry;
  const uint64_t written_objects = d.written_objects;
  // The device is shared and its speed drifts (cloud disks, host caches), so
  // kvtier and fio take turns for o.rounds short rounds, in alternating order;
  // the ratio is the median of the per-round ratios and the rates shown are
  // the means.
  double read_rate = 0, fio_read_rate = 0;
  std::vector<double> ratios;
  std::string fio_read_command;
  {
    const uint64_t t_open = now_ns();
    auto s = kv::Store::open(disk_store_options(o, dev));
    if (!s.ok()) return s.status();
    auto& store = **s;
    report.note("warm_restart_ms", (now_ns() - t_open) / 1e6);
    report.note("warm_restart_entries", store.local_stats().disk.recovered_entries);
    auto ns = store.register_namespace(bench_namespace());
    // A reopened store has an empty RAM tier: every get goes to the volume.
    ColdReader reader(store, *ns, written_objects, std::max<size_t>(256, o.queue_depth * 16),
                      o.object_bytes);
    const double round_seconds = std::max(1.0, o.seconds / 3);
    FioJob rjob{o.volume_path,
                "randread",
                entry,
                o.queue_depth,
                std::min<uint64_t>(o.volume_bytes, written_objects * entry + (64ull << 20)),
                static_cast<unsigned>(round_seconds + 0.5)};
    (void)run_fio(rjob);  // warm-up: the first pass over a fresh file is not representative
    FioPairedRounds paired{o.rounds};
    for (unsigned round = 0; round < o.rounds; ++round) {
      KVTIER_RETURN_IF_ERROR(
          paired.run(round, rjob, [&]() -> Result<std::pair<double, nlohmann::json>> {
            auto measured = reader.run_for(round_seconds);
            if (!measured.ok()) return measured.status();
            if (!payloads.matches(reader.last_first, reader.outs[0].view())) {
              return Status::internal("disk get returned wrong bytes");
            }
            return std::make_pair(*measured, nlohmann::json::object());
          }));
    }
    read_rate = paired.kvtier_rate;
    fio_read_rate = paired.fio_rate;
    fio_read_command = paired.fio_command;
    ratios = paired.ratios;
    report.note("disk_get_misses", reader.misses);
    report.note("disk_direct_reads", store.local_stats().disk.direct_reads);
    report.note("disk_get_rounds", paired.rounds);
  }
  report.add({"disk_get", "disk-tier cold get", read_rate / 1e9, "GB/s", fio_read_rate / 1e9,
              fmt::format("fio randread {}K qd{}", entry >> 10, o.queue_depth),
              percentile(ratios, 0.5), 0.85});
  report.note("fio_read_command", fio_read_command);
  return Status::ok_status();
}

// Disk hits promoted into a full RAM tier: on the store's promoter thread
// (the default) and before batch_get returns, each against the same reads
// with no promotion at all, the three taking turns round by round on
// reopened stores. `staged`: reads through staging buffers (what RAID0 and
// NVMe/TCP volumes get), else direct reads into the caller's buffers (which
// are promoted before batch_get returns in both modes). The ratio says how
// much of the read rate promotion costs the caller.
Status measure_promoted_reads(const StoreBenchOptions& o, const DiskBench& d, bool staged,
                              BenchReport& report) {
  enum Mode { kNone, kBackground, kInline };
  const double round_seconds = std::max(0.5, o.seconds / 6);
  std::vector<double> bg_ratios, inline_ratios;
  double rates[3] = {0, 0, 0};
  uint64_t misses = 0;
  for (unsigned round = 0; round < o.rounds; ++round) {
    double rate[3] = {0, 0, 0};
    for (int k = 0; k < 3; ++k) {
      const Mode mode = static_cast<Mode>((k + round) % 3);  // each goes first in turn
      kv::StoreOptions so = disk_store_options(o, d.dev);
      so.promote_on_disk_hit = mode != kNone;
      so.promote_in_background = mode == kBackground;
      if (staged) so.disk.direct_reads = kv::DiskTierOptions::DirectReads::kNever;
      auto s = kv::Store::open(so);
      if (!s.ok()) return s.status();
      auto ns = (*s)->register_namespace(bench_namespace());
      if (!ns.ok()) return ns.status();
      ColdReader reader(**s, *ns, d.written_objects, std::max<size_t>(256, o.queue_depth * 16),
                        o.object_bytes);
      reader.pos = round * 7919;  // another stretch of the order each round
      auto measured = reader.run_for(round_seconds);
      if (!measured.ok()) return measured.status();
      rate[mode] = *measured;
      misses += reader.misses;
      KVTIER_RETURN_IF_ERROR((*s)->close());
    }
    bg_ratios.push_back(rate[kBackground] / rate[kNone]);
    inline_ratios.push_back(rate[kInline] / rate[kNone]);
    for (int m = 0; m < 3; ++m) rates[m] += rate[m] / o.rounds;
  }
  const std::string name = staged ? "promoted_get_staged" : "promoted_get_direct";
  report.add({name,
              staged ? "disk get via staging, promoted to RAM in the background"
                     : "disk get direct, promoted to RAM before return",
              rates[kBackground] / 1e9, "GB/s", rates[kNone] / 1e9, "same reads, no promotion",
              percentile(bg_ratios, 0.5), 0.9});
  report.note(name + "_inline_gbps", rates[kInline] / 1e9);
  report.note(name + "_inline_ratio", percentile(inline_ratios, 0.5));
  report.note(name + "_misses", misses);
  return Status::ok_status();
}

// match_prefix over a 128K-token prompt (8,192 keys) in a store whose index
// is sized for a million blocks.
Status measure_match_prefix(BenchReport& report) {
  kv::StoreOptions so;
  so.max_object_bytes = 4096;
  so.ram_bytes = 8192ull * 4096 + 4096 * 64;
  so.index_capacity = 1000000;  // the table of a million-block store
  auto s = kv::Store::open(so);
  if (!s.ok()) return s.status();
  auto& store = **s;
  kv::Namespace nsd = bench_namespace();
  auto ns = store.register_namespace(nsd);
  std::vector<uint32_t> tokens(8192 * 16);
  std::mt19937 rng(5);
  for (auto& t : tokens) t = rng() % 151000;
  const uint64_t k0 = now_ns();
  auto keys = kv::chain_block_keys(nsd.scheme, nsd.digest(), 16, tokens);
  report.note("chain_keys_128k_tokens_ms", (now_ns() - k0) / 1e6);
  AlignedBuffer small(4096);
  for (const auto& k : keys) (void)store.put(*ns, k, small.view());
  std::vector<double> lat;
  for (int i = 0; i < 2000; ++i) {
    const uint64_t t0 = now_ns();
    auto m = store.match_prefix(*ns, keys);
    lat.push_back((now_ns() - t0) / 1e6);
    if (!m.ok() || m->blocks != keys.size()) return Status::internal("match_prefix lost blocks");
  }
  const double p99 = percentile(lat, 0.99);
  report.note("match_prefix_p50_ms", percentile(lat, 0.5));
  report.add({"match_prefix_p99", "match_prefix 8,192 keys, p99", p99, "ms", 0.5, "bar 0.5 ms",
              0.5 / p99, 1.0, false});
  return Status::ok_status();
}

// The index's memory per block at one million blocks.
Status measure_index_memory(BenchReport& report) {
  kv::Index idx(1000000);
  for (uint64_t i = 0; i < 1000000; ++i) {
    kv::IndexRecord r;
    r.key = kv::test_key(i + 1);
    r.ram_slot = static_cast<uint32_t>(i);
    if (idx.insert(r) != kv::Index::InsertResult::kInserted) {
      return Status::internal("index refused a record below its capacity");
    }
  }
  const double per = static_cast<double>(idx.memory_bytes()) / 1e6;
  report.add({"index_bytes_per_block", "index memory at 1M blocks", per, "B/block", 48,
              "bar 48 B/block", 48 / per, 1.0, false});
  return Status::ok_status();
}

Status check_options(const StoreBenchOptions& o) {
  if (o.object_bytes == 0 || o.object_bytes % 4096 != 0) {
    return Status::invalid_argument("object size must be a non-zero multiple of 4096");
  }
  if (o.volume_bytes < 1ull << 30) return Status::invalid_argument("volume must be at least 1 GiB");
  if (o.queue_depth == 0 || o.queue_depth > 256)
    return Status::invalid_argument("queue depth in [1, 256]");
  if (o.rounds == 0 || o.rounds > 99) return Status::invalid_argument("rounds in [1, 99]");
  return Status::ok_status();
}

}  // namespace

Result<BenchReport> run_store_bench(const StoreBenchOptions& o) {
  KVTIER_RETURN_IF_ERROR(check_options(o));
  BenchReport report("kvtier bench store");
  Step step{o};
  KVTIER_RETURN_IF_ERROR(measure_ram_get(o, step, report));

  step("disk-tier writes (demotion + region flush)");
  DiskBench disk;
  {
    // `disk` holds the only reference: the write step replaces it, and the
    // old volume closes then (its unlinked file's space is freed).
    auto dev = open_volume(o);
    if (!dev.ok()) return dev.status();
    disk.dev = std::move(*dev);
  }
  disk.entry = kv::disk::entry_bytes(o.object_bytes);
  const PayloadPool payloads(o.object_bytes);
  KVTIER_RETURN_IF_ERROR(measure_disk_writes(o, payloads, disk, report));

  step("disk-tier cold get (O_DIRECT, nothing in RAM)");
  KVTIER_RETURN_IF_ERROR(refill_volume(o, payloads, disk));
  KVTIER_RETURN_IF_ERROR(measure_disk_reads(o, payloads, disk, report));
  step("disk-tier get promoted into RAM (staged reads): in the background, inline, none");
  KVTIER_RETURN_IF_ERROR(measure_promoted_reads(o, disk, /*staged=*/true, report));
  step("disk-tier get promoted into RAM (direct reads): default, inline, none");
  KVTIER_RETURN_IF_ERROR(measure_promoted_reads(o, disk, /*staged=*/false, report));
  if (!o.keep_volume) ::unlink(o.volume_path.c_str());

  step("match_prefix over 8,192 keys (128K tokens)");
  KVTIER_RETURN_IF_ERROR(measure_match_prefix(report));
  step("index memory at 1,000,000 blocks");
  KVTIER_RETURN_IF_ERROR(measure_index_memory(report));
  step("done");
  return report;
}

}  // namespace kvtier::bench
