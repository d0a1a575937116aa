// NVMe/TCP loopback benchmark (see nvmf_bench.h).
#include "bench/nvmf_bench.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "blk/dev/mem_device.h"
#include "blk/dev/uring_device.h"
#include "nvmf/host_device.h"
#include "nvmf/pdu.h"
#include "nvmf/raw_connection.h"
#include "nvmf/target.h"

namespace kvtier::bench {
namespace {

using Clock = std::chrono::steady_clock;

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Single-stream iperf3 over loopback, bytes per second received.
Result<double> iperf3_loopback(const NvmfBenchOptions& o) {
  const int port = 20000 + int(getpid() % 20000);
  const pid_t server = fork();
  if (server == 0) {
    const std::string p = std::to_string(port);
    freopen("/dev/null", "w", stdout);
    execlp(o.iperf3.c_str(), o.iperf3.c_str(), "-s", "-1", "-B", "127.0.0.1", "-p", p.c_str(),
           (char*)nullptr);
    _exit(127);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const std::string cmd = o.iperf3 + " -c 127.0.0.1 -J -P 1 -p " + std::to_string(port) + " -t " +
                          std::to_string(int(std::max(1.0, o.seconds)));
  FILE* f = popen(cmd.c_str(), "r");
  std::string out;
  if (f) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    pclose(f);
  }
  kill(server, SIGTERM);
  waitpid(server, nullptr, 0);
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded() || !j.contains("end")) return Status::unavailable("iperf3 gave no result");
  return j["end"]["sum_received"]["bits_per_second"].get<double>() / 8;
}

struct Run {
  double bytes_per_s = 0;
  double iops = 0;
  double cpu_s_per_gb = 0;
};

// The rates of `bytes` in `ops` requests since `t0`, and the process's CPU
// seconds per GB since `cpu0`.
Run rates_since(uint64_t bytes, uint64_t ops, Clock::time_point t0, double cpu0) {
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  Run r;
  r.bytes_per_s = bytes / s;
  r.iops = ops / s;
  r.cpu_s_per_gb = bytes ? (cpu_seconds() - cpu0) / (bytes / 1e9) : 0;
  return r;
}

// `qd` threads, each issuing `io` bytes at a time, sequential within its own
// stripe of the namespace (random offsets when `random`).
Run measure(nvmf::NvmeTcpDevice& dev, bool write, uint32_t io, uint32_t qd, double seconds,
            bool random) {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bytes{0}, ops{0};
  const uint64_t stripe = dev.capacity() / qd / io * io;
  const double cpu0 = cpu_seconds();
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < qd; ++t) {
    threads.emplace_back([&, t] {
      AlignedBuffer buf(io);
      std::memset(buf.data(), int(t), io);
      uint64_t pos = 0, x = 0x9E3779B97F4A7C15ull * (t + 1);
      while (!stop) {
        if (random) {
          x ^= x << 13, x ^= x >> 7, x ^= x << 17;
          pos = (x % (stripe / io)) * io;
        }
        const uint64_t off = t * stripe + pos;
        Status st = write ? dev.write_sync(off, buf.view()) : dev.read_sync(off, buf.view());
        if (!st.ok()) break;
        bytes += io;
        ++ops;
        pos = (pos + io) % stripe;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& th : threads) th.join();
  return rates_since(bytes, ops, t0, cpu0);
}

// Requests of `io` bytes kept `in_flight` at a time from one thread with the
// host's asynchronous read()/write() and callbacks, as the disk tier issues
// them (and as fio's io_uring engine does at --iodepth): no thread waits per
// request. Sequential over the namespace, or at random offsets. Each request
// slot has its own buffer, so reads in flight never share memory.
Run measure_async(nvmf::NvmeTcpDevice& dev, bool write, uint32_t io, uint32_t in_flight,
                  double seconds, bool random) {
  AlignedBuffer bufs(uint64_t{io} * in_flight);
  std::memset(bufs.data(), 0x5A, bufs.size());
  std::vector<uint32_t> free_slots(in_flight);
  for (uint32_t i = 0; i < in_flight; ++i) free_slots[i] = i;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t bytes = 0, ops = 0, failed = 0;
  uint64_t pos = 0, x = 0x9E3779B97F4A7C15ull;
  const uint64_t ios = dev.capacity() / io;
  const double cpu0 = cpu_seconds();
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::duration<double>(seconds);
  std::unique_lock lk(mu);
  while (Clock::now() < end && failed == 0) {
    cv.wait(lk, [&] { return !free_slots.empty(); });
    // Every free slot goes out before the next wait: one wake-up refills
    // all the requests that completed meanwhile.
    std::vector<uint32_t> slots;
    slots.swap(free_slots);
    lk.unlock();
    for (uint32_t slot : slots) {
      if (random) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        pos = x % ios;
      } else {
        pos = (pos + 1) % ios;
      }
      const uint64_t off = pos * io;
      MutableByteView buf(bufs.data() + uint64_t{slot} * io, io);
      auto done = [&, io, slot](Status st) {
        std::lock_guard g(mu);
        free_slots.push_back(slot);
        if (st.ok()) {
          bytes += io;
          ++ops;
        } else {
          ++failed;
        }
        cv.notify_one();
      };
      if (write) {
        dev.write(off, ByteView(buf.data(), buf.size()), std::move(done));
      } else {
        dev.read(off, buf, std::move(done));
      }
    }
    lk.lock();
  }
  cv.wait(lk, [&] { return free_slots.size() == in_flight; });
  Run r = rates_since(bytes, ops, t0, cpu0);
  if (failed) r.bytes_per_s = 0;
  return r;
}

// A host that stops reading: raw connections (an enabled admin queue and
// one I/O queue whose receive buffer is tiny) that submit reads and never
// read the answers. kvtier's own host always reads, so this speaks raw PDUs.
class StalledHost {
 public:
  // Connects to `subnqn` on the loopback `port` and leaves `reads` reads of
  // `io` bytes (spread over the first `blocks` blocks of namespace 1, 4 KiB
  // each) unread in flight.
  static Result<std::unique_ptr<StalledHost>> start(uint16_t port, const std::string& subnqn,
                                                    uint32_t reads, uint32_t io, uint64_t blocks,
                                                    uint32_t kato_ms) {
    static constexpr char kHostNqn[] = "nqn.2024-01.io.kvtier:bench-stalled-host";
    constexpr auto kWait = std::chrono::seconds(10);  // for each answer awaited here
    auto h = std::unique_ptr<StalledHost>(new StalledHost(port, kWait));
    if (!h->admin_.connected() || h->admin_.handshake().empty()) {
      return Status::unavailable("stalled host: no ICResp on the admin queue");
    }
    // No keep-alive is ever sent: `kato_ms` must outlast the stall, or the
    // controller's end, not the send timeout, would drop the host.
    const uint16_t cntlid = h->admin_.connect(0, subnqn, kHostNqn, 0xFFFF, kato_ms);
    if (cntlid == 0xFFFF) return refused("admin Connect", h->admin_.last_status());
    if (!h->admin_.capsule(nvmf::RawConnection::enable_sqe(2))) {
      return Status::unavailable("stalled host: send failed");
    }
    if (const auto r = h->admin_.recv_pdu(); r.size() != 24 || nvmf::get16(&r[22]) != 0) {
      return Status::unavailable("stalled host: the controller was not enabled");
    }
    if (!h->io_.connected() || h->io_.handshake().empty()) {
      return Status::unavailable("stalled host: no ICResp on the I/O queue");
    }
    if (h->io_.connect(1, subnqn, kHostNqn, cntlid, 0, uint16_t(reads - 1)) == 0xFFFF) {
      return refused("I/O Connect", h->io_.last_status());
    }
    const uint32_t nlb = io / 4096;
    for (uint32_t cid = 0; cid < reads; ++cid) {
      const uint64_t slba = uint64_t(cid) * nlb % (blocks - nlb);
      if (!h->io_.capsule(nvmf::RawConnection::io_sqe(0x02, uint16_t(cid), slba, nlb, io))) {
        return Status::unavailable("stalled host: send failed");
      }
    }
    return h;
  }

 private:
  StalledHost(uint16_t port, std::chrono::seconds wait)
      : admin_(port, 0, wait), io_(port, /*rcvbuf=*/4096, wait) {}
  static Status refused(const char* what, uint16_t status) {
    return Status::unavailable(std::string("stalled host: ") + what + " refused, status " +
                               std::to_string(status));
  }

  nvmf::RawConnection admin_, io_;
};

struct SlowReaderFigures {
  Run solo, beside_stalled, solo_after;
  bool stalled_throughout = false;  // not yet dropped when the measurement ended
  double dropped_after_s = 0;       // from the stalled reads' submission
  uint32_t send_timeout_ms = 0;
};

// Another host's 128 KiB reads on a file volume behind io_uring (whose one
// completion thread serves every connection of the volume), alone and then
// while a host that stopped reading holds 128 reads of 128 KiB. The target's
// send timeout is set past the second measurement, so the stalled host is
// connected throughout it, and the time until it is dropped is reported.
Result<SlowReaderFigures> measure_slow_reader(const NvmfBenchOptions& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir =
      o.scratch_dir.empty() ? fs::temp_directory_path(ec) : fs::path(o.scratch_dir);
  if (ec) return Status::failed_precondition("no temporary directory: " + ec.message());
  const fs::path file = dir / ("kvtier-bench-slow-reader-" + std::to_string(getpid()) + ".vol");
  struct Remove {
    fs::path p;
    ~Remove() {
      std::error_code e;
      fs::remove(p, e);
    }
  } remove{file};
  blk::UringOptions uo;
  uo.path = file.string();
  uo.create_size = uint64_t(o.ram_mib) << 20;
  uo.direct = false;  // a page-cache volume: the device is not what is measured
  KVTIER_ASSIGN_OR_RETURN(auto vol, blk::UringDevice::open(uo));
  const uint64_t blocks = vol->capacity() / 4096;
  // Fill the file so reads are not of holes.
  {
    AlignedBuffer chunk(1 << 20, 4096);
    std::memset(chunk.data(), 0x5A, chunk.size());
    for (uint64_t off = 0; off + chunk.size() <= vol->capacity(); off += chunk.size()) {
      KVTIER_RETURN_IF_ERROR(vol->write_sync(off, chunk.view()));
    }
  }

  SlowReaderFigures f;
  // Past the second measurement (which starts once the stalled host's reads
  // are sent), so that the stalled host is connected throughout it.
  f.send_timeout_ms = uint32_t(o.seconds * 1000) + 3000;
  nvmf::TargetConfig tc;
  tc.port = 0;
  tc.send_timeout_ms = f.send_timeout_ms;
  // The stalled host's keep-alive timeout, past the longest wait below.
  const uint32_t kato_ms = 2 * f.send_timeout_ms + 60000;
  tc.max_kato_ms = std::max(tc.max_kato_ms, kato_ms);
  nvmf::SubsystemConfig s;
  s.nqn = "nqn.2024-01.io.kvtier:bench-slow-reader";
  s.allow_any_host = true;
  s.namespaces.push_back(std::shared_ptr<blk::BlockDevice>(std::move(vol)));
  tc.subsystems.push_back(s);
  KVTIER_ASSIGN_OR_RETURN(auto target, nvmf::NvmfTarget::start(tc));
  nvmf::HostOptions ho;
  ho.port = target->port();
  ho.subnqn = s.nqn;
  ho.io_queues = 1;
  KVTIER_ASSIGN_OR_RETURN(auto other, nvmf::NvmeTcpDevice::connect(ho));

  if (o.progress) o.progress("slow reader: another host's 128 KiB reads alone...");
  f.solo = measure(*other, false, 128 << 10, o.queue_depth, o.seconds, false);
  if (o.progress) o.progress("slow reader: the same beside a host that stopped reading...");
  const auto stalled_at = Clock::now();
  KVTIER_ASSIGN_OR_RETURN(
      auto stalled, StalledHost::start(target->port(), s.nqn, 128, 128 << 10, blocks, kato_ms));
  f.beside_stalled = measure(*other, false, 128 << 10, o.queue_depth, o.seconds, false);
  f.stalled_throughout = target->counters().send_stalls == 0;
  // The drop is bounded by the send timeout; wait up to twice that.
  const auto give_up = stalled_at + std::chrono::milliseconds(2 * f.send_timeout_ms);
  while (target->counters().send_stalls == 0 && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (target->counters().send_stalls == 0) {
    return Status::timeout("slow reader: the stalled host was not dropped within " +
                           std::to_string(2 * f.send_timeout_ms) + " ms");
  }
  f.dropped_after_s = std::chrono::duration<double>(Clock::now() - stalled_at).count();
  // Alone again once the stalled host is gone: the solo rate is the mean of
  // the runs before and after, so a drift of the machine does not count as
  // the stalled host's doing.
  if (o.progress) o.progress("slow reader: alone again after the drop...");
  f.solo_after = measure(*other, false, 128 << 10, o.queue_depth, o.seconds, false);
  return f;
}

}  // namespace

std::string NvmfBenchReport::table() const {
  std::ostringstream os;
  os << "kvtier bench nvmf (kvtier host -> kvtier target, loopback, RAM namespace)\n";
  for (auto& [k, v] : figures.items()) os << "  " << k << ": " << v.dump() << "\n";
  return os.str();
}

Result<NvmfBenchReport> run_nvmf_bench(const NvmfBenchOptions& o) {
  auto say = [&](const std::string& s) {
    if (o.progress) o.progress(s);
  };
  say("iperf3 single stream on loopback...");
  auto limit = iperf3_loopback(o);
  if (!limit.ok()) return limit.status();

  nvmf::TargetConfig tc;
  tc.port = 0;
  nvmf::SubsystemConfig s;
  s.nqn = "nqn.2024-01.io.kvtier:bench";
  s.allow_any_host = true;
  s.namespaces.push_back(std::make_shared<blk::MemDevice>(uint64_t(o.ram_mib) << 20, 4096, 1));
  tc.subsystems.push_back(s);
  auto target = nvmf::NvmfTarget::start(tc);
  if (!target.ok()) return target.status();
  nvmf::HostOptions ho;
  ho.port = (*target)->port();
  ho.subnqn = s.nqn;
  ho.io_queues = o.io_queues;
  auto dev = nvmf::NvmeTcpDevice::connect(ho);
  if (!dev.ok()) return dev.status();

  say("128 KiB sequential writes...");
  const Run w = measure(**dev, true, 128 << 10, o.queue_depth, o.seconds, false);
  say("128 KiB sequential reads...");
  const Run r = measure(**dev, false, 128 << 10, o.queue_depth, o.seconds, false);
  say("4 KiB random reads...");
  const Run r4 = measure(**dev, false, 4096, o.queue_depth, o.seconds, true);
  say("4 MiB writes, 1 and 4 in flight, from one thread (the disk tier's region flushes)...");
  const uint64_t blocking_before = (*dev)->blocking_requests();
  const Run w4m1 = measure_async(**dev, true, 4u << 20, 1, o.seconds, false);
  const Run w4m = measure_async(**dev, true, 4u << 20, 4, o.seconds, false);
  say("128 KiB sequential writes and reads, 4 KiB random reads, from one thread...");
  const Run aw = measure_async(**dev, true, 128 << 10, o.queue_depth, o.seconds, false);
  const Run ar = measure_async(**dev, false, 128 << 10, o.queue_depth, o.seconds, false);
  const Run ar4 = measure_async(**dev, false, 4096, o.queue_depth, o.seconds, true);

  NvmfBenchReport rep;
  auto& f = rep.figures;
  f["iperf3_single_stream_bytes_per_s"] = *limit;
  f["seq_write_128k_bytes_per_s"] = w.bytes_per_s;
  f["seq_read_128k_bytes_per_s"] = r.bytes_per_s;
  f["seq_write_128k_ratio"] = w.bytes_per_s / *limit;
  f["seq_read_128k_ratio"] = r.bytes_per_s / *limit;
  f["ratio_bar"] = 0.85;  // one I/O queue against one iperf3 stream
  f["rand_read_4k_iops"] = r4.iops;
  f["async_write_4m_qd1_bytes_per_s"] = w4m1.bytes_per_s;
  f["async_write_4m_qd1_ratio"] = w4m1.bytes_per_s / *limit;
  f["async_write_4m_qd4_bytes_per_s"] = w4m.bytes_per_s;
  f["async_write_4m_qd4_ratio"] = w4m.bytes_per_s / *limit;
  f["async_write_4m_commands_on_submitters"] = (*dev)->blocking_requests() - blocking_before;
  f["async_write_128k_ratio"] = aw.bytes_per_s / *limit;
  f["async_read_128k_ratio"] = ar.bytes_per_s / *limit;
  f["async_rand_read_4k_iops"] = ar4.iops;
  f["async_cpu_seconds_per_gb_write"] = aw.cpu_s_per_gb;
  f["async_cpu_seconds_per_gb_read"] = ar.cpu_s_per_gb;
  f["cpu_seconds_per_gb_write"] = w.cpu_s_per_gb;
  f["cpu_seconds_per_gb_read"] = r.cpu_s_per_gb;
  if (o.slow_reader) {
    auto sr = measure_slow_reader(o);
    if (!sr.ok()) {
      // The figures above stand on their own: keep them, and say why this
      // phase has none.
      f["slow_reader_error"] = sr.status().to_string();
      return rep;
    }
    const double solo = (sr->solo.bytes_per_s + sr->solo_after.bytes_per_s) / 2;
    f["slow_reader_solo_bytes_per_s"] = solo;
    f["slow_reader_solo_before_after_bytes_per_s"] = {sr->solo.bytes_per_s,
                                                      sr->solo_after.bytes_per_s};
    f["slow_reader_beside_stalled_bytes_per_s"] = sr->beside_stalled.bytes_per_s;
    f["slow_reader_ratio"] = solo > 0 ? sr->beside_stalled.bytes_per_s / solo : 0;
    f["slow_reader_ratio_bar"] = 0.8;
    f["slow_reader_stalled_throughout"] = sr->stalled_throughout;
    f["slow_reader_dropped_after_s"] = sr->dropped_after_s;
    f["slow_reader_send_timeout_s"] = sr->send_timeout_ms / 1000.0;
  }
  f["queue_depth"] = o.queue_depth;
  f["io_queues"] = o.io_queues;
  f["ram_namespace_mib"] = o.ram_mib;
  return rep;
}

}  // namespace kvtier::bench
