#include "bench/raid_bench.h"

#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "bench/fio_runner.h"
#include "blk/dev/uring_device.h"
#include "blk/raid/raid0.h"
#include "blk/raid/raid_array.h"
#include "common/buffer.h"
#include "common/clock.h"

namespace kvtier::bench {

namespace {

namespace fs = std::filesystem;

// Keeps `qd` sequential requests of `block` outstanding over [0, span) for
// `seconds`; returns bytes per second of completed requests. Each completion
// issues the next request from the completion thread itself, as fio's loop
// does: a hand-off to a submitting thread costs a wake-up per request, which
// on a loaded two-core machine cost RAID0 a quarter of its read rate.
Result<double> drive(blk::BlockDevice& dev, bool write, uint64_t block, unsigned qd, uint64_t span,
                     double seconds) {
  span = span / block * block;
  if (span == 0) return Status::invalid_argument("bench: span smaller than one request");
  std::vector<AlignedBuffer> bufs;
  std::mt19937_64 rng(7);
  for (unsigned i = 0; i < qd; ++i) {
    bufs.emplace_back(block, 4096);
    for (uint64_t o = 0; o < block; o += 8) {
      const uint64_t v = rng();
      std::memcpy(bufs.back().data() + o, &v, 8);
    }
  }
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    unsigned in_flight = 0;
    Status first_error;
    std::atomic<uint64_t> next{0};
    std::atomic<uint64_t> done_bytes{0};
    std::atomic<bool> failed{false};
    uint64_t end_ns = 0;
    std::vector<unsigned> deferred;  // slots whose next request the caller's thread issues
  } st;
  // A device that completes inline would otherwise recurse without bound.
  thread_local unsigned depth = 0;
  const uint64_t t0 = now_ns();
  st.end_ns = t0 + static_cast<uint64_t>(seconds * 1e9);
  // issue(slot) runs on the caller's thread first, then on completion threads.
  std::function<void(unsigned)> issue = [&](unsigned slot) {
    const uint64_t off = st.next.fetch_add(block, std::memory_order_relaxed) % span;
    auto cb = [&, slot](Status s) {
      if (s.ok()) {
        st.done_bytes.fetch_add(block, std::memory_order_relaxed);
      } else if (!st.failed.exchange(true)) {
        std::lock_guard lk(st.mu);
        st.first_error = s;
      }
      if (!st.failed.load(std::memory_order_relaxed) && now_ns() < st.end_ns) {
        if (depth < 16) {
          ++depth;
          issue(slot);
          --depth;
        } else {
          std::lock_guard lk(st.mu);
          st.deferred.push_back(slot);
          st.cv.notify_all();
        }
        return;
      }
      std::lock_guard lk(st.mu);
      if (--st.in_flight == 0) st.cv.notify_all();
    };
    if (write) {
      dev.write(off, bufs[slot].view(), cb);
    } else {
      dev.read(off, bufs[slot].view(), cb);
    }
  };
  {
    std::lock_guard lk(st.mu);
    st.in_flight = qd;
  }
  for (unsigned i = 0; i < qd; ++i) issue(i);
  std::unique_lock lk(st.mu);
  for (;;) {
    st.cv.wait(lk, [&] { return st.in_flight == 0 || !st.deferred.empty(); });
    if (st.in_flight == 0) break;
    std::vector<unsigned> slots;
    slots.swap(st.deferred);
    lk.unlock();
    for (unsigned slot : slots) issue(slot);
    lk.lock();
  }
  if (!st.first_error.ok()) return st.first_error;
  return static_cast<double>(st.done_bytes.load()) / (static_cast<double>(now_ns() - t0) * 1e-9);
}

Result<std::vector<std::shared_ptr<blk::BlockDevice>>> open_members(
    const std::vector<std::string>& paths, uint64_t bytes) {
  std::vector<std::shared_ptr<blk::BlockDevice>> out;
  for (const auto& p : paths) {
    blk::UringOptions o;
    o.path = p;
    o.create_size = bytes;
    o.queue_depth = 128;
    auto d = blk::UringDevice::open(o);
    if (!d.ok()) return Status(d.status().code(), fmt::format("{}: {}", p, d.status().message()));
    out.push_back(std::move(*d));
  }
  return out;
}

// fio on every file at once (one process each): the members' combined limit.
Result<double> fio_all(const std::vector<std::string>& paths, const std::string& rw, uint64_t block,
                       unsigned qd, uint64_t size, double seconds) {
  std::vector<Result<FioResult>> results(paths.size(), Status::internal("not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < paths.size(); ++i) {
    threads.emplace_back([&, i] {
      FioJob j;
      j.filename = paths[i];
      j.rw = rw;
      j.block_bytes = block;
      j.iodepth = qd;
      j.size_bytes = size;
      j.seconds = std::max(1u, static_cast<unsigned>(seconds + 0.5));
      results[i] = run_fio(j);
    });
  }
  for (auto& t : threads) t.join();
  double sum = 0;
  for (auto& r : results) {
    if (!r.ok()) return r.status();
    sum += r->bytes_per_second;
  }
  return sum;
}

// What run_raid_bench measures, in bytes per second.
struct RaidFigures {
  double fio_write_2 = 0, fio_read_2 = 0;  // the limits: fio on 2 members at once
  double raid0_read = 0, raid0_write = 0, raid0_n_write = 0;
  double raid5_write = 0, raid5_read = 0, raid5_degraded = 0;
  double parity_cpu_s_per_gb = 0;
};

// Lays the files out (so reads hit the device, not holes) and measures the
// members' own limits at the member request size and depth.
Status measure_member_limits(const RaidBenchOptions& o, const std::vector<std::string>& paths,
                             RaidFigures* f) {
  const std::vector<std::string> two(paths.begin(), paths.begin() + 2);
  const uint64_t S = o.strip_bytes;
  const unsigned Q = o.queue_depth;
  // Opened (created at their size) and closed again, for fio.
  KVTIER_RETURN_IF_ERROR(open_members(paths, o.member_bytes).status());
  if (o.progress)
    o.progress("fio: sequential write on 2 members at once (also lays the files out)");
  KVTIER_ASSIGN_OR_RETURN(f->fio_write_2, fio_all(two, "write", S, Q, o.member_bytes, o.seconds));
  // Fill the third and later members too.
  std::vector<std::string> rest(paths.begin() + 2, paths.end());
  KVTIER_RETURN_IF_ERROR(fio_all(rest, "write", S, Q, o.member_bytes, o.seconds).status());
  if (o.progress) o.progress("fio: sequential read on 2 members at once");
  KVTIER_ASSIGN_OR_RETURN(f->fio_read_2, fio_all(two, "read", S, Q, o.member_bytes, o.seconds));
  return Status::ok_status();
}

// RAID0 over 2 members (against fio on the same 2) and over all of them (the
// limit RAID5's writes are held to).
Status measure_raid0(const RaidBenchOptions& o, const std::vector<std::string>& paths,
                     RaidFigures* f) {
  const std::vector<std::string> two(paths.begin(), paths.begin() + 2);
  const uint64_t S = o.strip_bytes;
  const unsigned Q = o.queue_depth;
  {
    KVTIER_ASSIGN_OR_RETURN(auto members, open_members(two, o.member_bytes));
    KVTIER_ASSIGN_OR_RETURN(auto r0, blk::Raid0::create(members, S));
    if (o.progress) o.progress("raid0 x2: sequential read");
    KVTIER_ASSIGN_OR_RETURN(f->raid0_read, drive(*r0, false, 2 * S, Q, r0->capacity(), o.seconds));
    if (o.progress) o.progress("raid0 x2: sequential write");
    KVTIER_ASSIGN_OR_RETURN(f->raid0_write, drive(*r0, true, 2 * S, Q, r0->capacity(), o.seconds));
  }
  KVTIER_ASSIGN_OR_RETURN(auto members, open_members(paths, o.member_bytes));
  KVTIER_ASSIGN_OR_RETURN(auto r0, blk::Raid0::create(members, S));
  if (o.progress) o.progress(fmt::format("raid0 x{}: sequential write", paths.size()));
  KVTIER_ASSIGN_OR_RETURN(f->raid0_n_write,
                          drive(*r0, true, paths.size() * S, Q, r0->capacity(), o.seconds));
  return Status::ok_status();
}

// RAID5: full-stripe writes (and the parity's CPU cost), reads healthy and
// with one member failed.
Status measure_raid5(const RaidBenchOptions& o, const std::vector<std::string>& paths,
                     RaidFigures* f) {
  const size_t n5 = paths.size();
  const uint64_t S = o.strip_bytes;
  const unsigned Q = o.queue_depth;
  auto m = open_members(paths, o.member_bytes);
  if (!m.ok()) return m.status();
  blk::RaidOptions ro;
  ro.level = blk::RaidLevel::kRaid5;
  ro.strip_bytes = S;
  blk::RaidRuntimeOptions rt;
  rt.workers = Q;
  auto a = blk::RaidArray::create(*m, ro, rt);
  if (!a.ok()) return a.status();
  const uint64_t row = (n5 - 1) * S;
  if (o.progress) o.progress(fmt::format("raid5 x{}: full-stripe sequential write", n5));
  auto w = drive(**a, true, row, Q, (*a)->capacity(), o.seconds);
  if (!w.ok()) return w.status();
  f->raid5_write = *w;
  const auto st = (*a)->status();
  f->parity_cpu_s_per_gb = st.parity_bytes ? static_cast<double>(st.parity_cpu_ns) * 1e-9 /
                                                 (static_cast<double>(st.parity_bytes) / 1e9)
                                           : 0;
  const uint64_t span =
      std::min<uint64_t>((*a)->capacity(), static_cast<uint64_t>(f->raid5_write * o.seconds));
  if (o.progress) o.progress(fmt::format("raid5 x{}: sequential read, healthy", n5));
  auto r = drive(**a, false, row, Q, span, o.seconds);
  if (!r.ok()) return r.status();
  f->raid5_read = *r;
  (void)(*a)->fail_member(0);
  if (o.progress) o.progress(fmt::format("raid5 x{}: sequential read, one member failed", n5));
  auto d = drive(**a, false, row, Q, span, o.seconds);
  if (!d.ok()) return d.status();
  f->raid5_degraded = *d;
  return Status::ok_status();
}

nlohmann::json figures_json(const RaidBenchOptions& o, unsigned n5, const RaidFigures& f) {
  const double gb = 1e9;
  const double raid5_limit = f.raid0_n_write * (n5 - 1) / n5;
  nlohmann::json j;
  j["member_bytes"] = o.member_bytes;
  j["strip_bytes"] = o.strip_bytes;
  j["queue_depth"] = o.queue_depth;
  j["raid5_members"] = n5;
  j["fio_2members_read_gbps"] = f.fio_read_2 / gb;
  j["fio_2members_write_gbps"] = f.fio_write_2 / gb;
  j["raid0_read_gbps"] = f.raid0_read / gb;
  j["raid0_write_gbps"] = f.raid0_write / gb;
  j["raid0_read_ratio"] = f.raid0_read / f.fio_read_2;
  j["raid0_write_ratio"] = f.raid0_write / f.fio_write_2;
  j["raid0_n_write_gbps"] = f.raid0_n_write / gb;
  j["raid5_write_gbps"] = f.raid5_write / gb;
  j["raid5_write_limit_gbps"] = raid5_limit / gb;
  j["raid5_write_ratio"] = f.raid5_write / raid5_limit;
  j["raid5_read_gbps"] = f.raid5_read / gb;
  j["raid5_degraded_read_gbps"] = f.raid5_degraded / gb;
  j["raid5_degraded_read_ratio"] = f.raid5_degraded / f.raid5_read;
  j["parity_cpu_seconds_per_gb"] = f.parity_cpu_s_per_gb;
  j["bars"] = {{"raid0_read_ratio", 0.9},
               {"raid0_write_ratio", 0.9},
               {"raid5_write_ratio", 0.7},
               {"raid5_degraded_read_ratio", 0.5}};
  return j;
}

}  // namespace

Result<RaidBenchReport> run_raid_bench(const RaidBenchOptions& o) {
  const unsigned n5 = std::max(3u, o.raid5_members);
  std::error_code ec;
  fs::create_directories(o.dir, ec);
  std::vector<std::string> paths;
  for (unsigned i = 0; i < n5; ++i) {
    paths.push_back((fs::path(o.dir) / fmt::format("kvtier-bench-raid-{}.member", i)).string());
  }
  RaidFigures f;
  Status st = measure_member_limits(o, paths, &f);
  if (st.ok()) st = measure_raid0(o, paths, &f);
  if (st.ok()) st = measure_raid5(o, paths, &f);
  if (!o.keep_files) {
    for (auto& p : paths) fs::remove(p, ec);
  }
  if (!st.ok()) return st;
  RaidBenchReport rep;
  rep.figures = figures_json(o, n5, f);
  return rep;
}

std::string RaidBenchReport::table() const {
  const auto& j = figures;
  std::string t;
  t += fmt::format("{:<34} {:>10} {:>12} {:>8} {:>6}\n", "measurement", "GB/s", "limit GB/s",
                   "ratio", "bar");
  auto row = [&](const char* what, double v, double lim, double ratio, double bar) {
    t += fmt::format("{:<34} {:>10.3f} {:>12.3f} {:>8.3f} {:>6.2f}\n", what, v, lim, ratio, bar);
  };
  row("raid0 x2 read vs fio both members", j["raid0_read_gbps"], j["fio_2members_read_gbps"],
      j["raid0_read_ratio"], 0.9);
  row("raid0 x2 write vs fio both members", j["raid0_write_gbps"], j["fio_2members_write_gbps"],
      j["raid0_write_ratio"], 0.9);
  row("raid5 full-stripe write vs raid0", j["raid5_write_gbps"], j["raid5_write_limit_gbps"],
      j["raid5_write_ratio"], 0.7);
  row("raid5 degraded read vs healthy", j["raid5_degraded_read_gbps"], j["raid5_read_gbps"],
      j["raid5_degraded_read_ratio"], 0.5);
  t += fmt::format("parity CPU seconds per GB: {:.4f}\n",
                   j["parity_cpu_seconds_per_gb"].get<double>());
  return t;
}

}  // namespace kvtier::bench
