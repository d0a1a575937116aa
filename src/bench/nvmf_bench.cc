// NVMe/TCP loopback benchmark (see nvmf_bench.h).
#include "bench/nvmf_bench.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>
#include <vector>

#include "blk/dev/mem_device.h"
#include "nvmf/host_device.h"
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
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  Run r;
  r.bytes_per_s = bytes / s;
  r.iops = ops / s;
  r.cpu_s_per_gb = bytes ? (cpu_seconds() - cpu0) / (bytes / 1e9) : 0;
  return r;
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

  NvmfBenchReport rep;
  auto& f = rep.figures;
  f["iperf3_single_stream_bytes_per_s"] = *limit;
  f["seq_write_128k_bytes_per_s"] = w.bytes_per_s;
  f["seq_read_128k_bytes_per_s"] = r.bytes_per_s;
  f["seq_write_128k_ratio"] = w.bytes_per_s / *limit;
  f["seq_read_128k_ratio"] = r.bytes_per_s / *limit;
  f["ratio_bar"] = 0.7;
  f["rand_read_4k_iops"] = r4.iops;
  f["cpu_seconds_per_gb_write"] = w.cpu_s_per_gb;
  f["cpu_seconds_per_gb_read"] = r.cpu_s_per_gb;
  f["queue_depth"] = o.queue_depth;
  f["io_queues"] = o.io_queues;
  f["ram_namespace_mib"] = o.ram_mib;
  return rep;
}

}  // namespace kvtier::bench
