#include "bench/service_bench.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench/memcpy_limit.h"
#include "common/buffer.h"
#include "kv/test_payload.h"
#include "net/client/remote_store.h"
#include "net/server/server_config.h"
#include "net/server/store_server.h"
#include "net/wire/tls_certs.h"

extern char** environ;

namespace kvtier::bench {

namespace {

using Clock = std::chrono::steady_clock;
using kv::fill_payload;
using kv::payload_matches;
using kv::test_key;
using nlohmann::json;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A port nobody listens on right now (bind to 0, read it, close).
Result<uint16_t> free_loopback_port() {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return Status::unavailable("socket failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(s);
    return Status::unavailable("cannot bind a loopback port");
  }
  ::close(s);
  return ntohs(a.sin_port);
}

// Spawns `args` with stdout and stderr to `log` (or /dev/null).
pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  const char* out = log.empty() ? "/dev/null" : log.c_str();
  posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

void stop_process(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGTERM);
  for (int i = 0; i < 500; ++i) {
    if (::waitpid(pid, nullptr, WNOHANG) == pid) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

uint64_t rss_bytes(pid_t pid) {
  std::ifstream in(pid > 0 ? fmt::format("/proc/{}/status", pid) : "/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The store server under test: a `kvtier store serve` process, or a
// StoreServer in this process.
class BenchServer {
 public:
  static Result<std::unique_ptr<BenchServer>> start(const ServiceBenchOptions& o, json config,
                                                    const std::string& tag) {
    auto s = std::unique_ptr<BenchServer>(new BenchServer());
    config["listen"] = {{"address", "127.0.0.1"}, {"port", 0}};
    config["metrics"] = nullptr;
    if (o.server_binary.empty()) {
      auto cfg = net::parse_server_config(config.dump());
      if (!cfg.ok()) return cfg.status();
      auto srv = net::StoreServer::start(*cfg);
      if (!srv.ok()) return srv.status();
      s->inproc_ = std::move(*srv);
      s->port_ = s->inproc_->port();
      return s;
    }
    const std::string base =
        fmt::format("{}/kvtier-bench-service-{}-{}", o.work_dir, getpid(), tag);
    s->files_ = {base + ".json", base + ".log"};
    std::ofstream(s->files_[0]) << config.dump(2);
    s->pid_ = spawn({o.server_binary, "store", "serve", "--config", s->files_[0]}, s->files_[1]);
    if (s->pid_ <= 0) return Status::unavailable("cannot start " + o.server_binary);
    const std::string marker = "listening on 127.0.0.1:";
    for (int i = 0; i < 1000; ++i) {
      std::string text = read_file(s->files_[1]);
      size_t at = text.find(marker);
      if (at != std::string::npos && text.find(',', at) != std::string::npos) {
        s->port_ = static_cast<uint16_t>(std::stoi(text.substr(at + marker.size())));
        return s;
      }
      if (::waitpid(s->pid_, nullptr, WNOHANG) == s->pid_) {
        s->pid_ = -1;
        return Status::unavailable("the store server exited: " + text);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return Status::timeout("the store server did not start within 10 s");
  }
  ~BenchServer() {
    if (inproc_) (void)inproc_->stop();
    stop_process(pid_);
    for (const auto& f : files_) std::filesystem::remove(f);
  }
  uint16_t port() const { return port_; }
  uint64_t rss() const { return rss_bytes(pid_); }

 private:
  BenchServer() = default;
  std::unique_ptr<net::StoreServer> inproc_;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
  std::vector<std::string> files_;
};

json server_config(uint32_t max_object, uint64_t ram_bytes, unsigned max_connections) {
  return {{"io_threads", 2},
          {"store_threads", 4},
          {"max_connections", max_connections},
          {"store", {{"ram_bytes", ram_bytes}, {"max_object_bytes", max_object}}}};
}

kv::Namespace bench_namespace() { return kv::Namespace::of_model("bench-service", "r1", "tok"); }

Result<std::unique_ptr<net::RemoteStore>> open_client(uint16_t port, unsigned connections, bool shm,
                                                      const net::ClientTlsOptions& tls = {}) {
  net::RemoteStoreOptions ro;
  ro.port = port;
  ro.tls = tls;
  ro.connections = connections;
  ro.shared_memory = shm;
  ro.call_timeout_ms = 10000;
  ro.connect_timeout_ms = 5000;
  auto c = net::RemoteStore::open(ro);
  if (!c.ok()) return c.status();
  KVTIER_RETURN_IF_ERROR((*c)->wait_connected(10000));
  return std::move(*c);
}

// Single-stream iperf3 on loopback: bytes per second received.
Result<double> measure_iperf3(const ServiceBenchOptions& o) {
  auto port = free_loopback_port();
  if (!port.ok()) return port.status();
  pid_t server = spawn({o.iperf3, "-s", "-B", "127.0.0.1", "-p", std::to_string(*port)}, "");
  if (server <= 0) return Status::unavailable("cannot start " + o.iperf3);
  Result<double> result = Status::unavailable("iperf3 never answered");
  for (int attempt = 0; attempt < 20; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::string cmd = fmt::format("{} -c 127.0.0.1 -p {} -t {} -J 2>/dev/null", o.iperf3, *port,
                                  std::max(1, static_cast<int>(o.seconds + 0.5)));
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) break;
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    ::pclose(p);
    json j = json::parse(out, nullptr, false);
    if (j.is_object() && j.contains("end") && j["end"].contains("sum_received")) {
      result = j["end"]["sum_received"]["bits_per_second"].get<double>() / 8;
      break;
    }
    if (j.is_object() && j.contains("error")) {
      result = Status::unavailable("iperf3: " + j["error"].get<std::string>());
    }
  }
  stop_process(server);
  return result;
}

struct Percentiles {
  double p50_ms = 0, p99_ms = 0;
  size_t count = 0;
};
Percentiles percentiles(std::vector<uint64_t>& ns) {
  Percentiles p;
  p.count = ns.size();
  if (ns.empty()) return p;
  std::sort(ns.begin(), ns.end());
  p.p50_ms = ns[ns.size() / 2] / 1e6;
  p.p99_ms = ns[std::min(ns.size() - 1, ns.size() * 99 / 100)] / 1e6;
  return p;
}

using Progress = std::function<void(const std::string&)>;

// The objects the get measurements read (ids 1..kGetObjects).
constexpr int kGetObjects = 64;
Status load_get_objects(uint16_t port, const net::ClientTlsOptions& tls, uint32_t obj) {
  auto loader = open_client(port, 1, false, tls);
  if (!loader.ok()) return loader.status();
  const uint16_t ns = *(*loader)->register_namespace(bench_namespace());
  AlignedBuffer buf(obj);
  for (int i = 0; i < kGetObjects; ++i) {
    fill_payload(test_key(i + 1), buf.view());
    auto p = (*loader)->put(ns, test_key(i + 1), buf.view());
    if (!p.ok() || !p->stored()) return Status::internal("loading the get objects failed");
  }
  return Status::ok_status();
}

// Gets on one connection for o.seconds; `depth` callers keep that many in
// flight. Returns bytes per second; failed or wrong gets add to *errors_out.
Result<double> timed_gets(const ServiceBenchOptions& o, uint16_t port,
                          const net::ClientTlsOptions& tls, bool shm, unsigned depth,
                          uint64_t* errors_out, uint64_t* shm_calls) {
  const uint32_t obj = o.object_bytes;
  auto c = open_client(port, 1, shm, tls);
  if (!c.ok()) return c.status();
  const uint16_t h = *(*c)->register_namespace(bench_namespace());
  std::atomic<uint64_t> bytes{0}, errors{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> th;
  for (unsigned t = 0; t < depth; ++t) {
    th.emplace_back([&, t] {
      AlignedBuffer out(obj);
      uint64_t mine = 0;
      for (uint64_t i = t; seconds_since(t0) < o.seconds; i += depth) {
        const uint64_t id = 1 + i % kGetObjects;
        auto g = (*c)->get(h, test_key(id), out.view());
        if (!g.ok() || !g->hit || g->length != obj ||
            (i < kGetObjects && !payload_matches(test_key(id), out.view()))) {
          ++errors;
          continue;
        }
        mine += g->length;
      }
      bytes += mine;
    });
  }
  for (auto& x : th) x.join();
  const double secs = seconds_since(t0);
  *errors_out += errors;
  if (shm_calls) *shm_calls = (*c)->client_stats().shm_calls;
  return bytes / secs;
}

// Large gets: loopback TCP against iperf3, TLS against TCP, shared memory
// against memcpy.
Status measure_large_gets(const ServiceBenchOptions& o, const Progress& say,
                          ServiceBenchResult& res) {
  BenchReport& rep = res.report;
  say("iperf3 single stream on loopback...");
  auto iperf = measure_iperf3(o);
  if (!iperf.ok()) return Status(iperf.status().code(), iperf.status().message());
  const uint32_t obj = o.object_bytes;
  const json get_config =
      server_config(obj, std::max<uint64_t>(256ull << 20, 2ull * kGetObjects * obj), 64);
  auto server = BenchServer::start(o, get_config, "get");
  if (!server.ok()) return server.status();
  KVTIER_RETURN_IF_ERROR(load_get_objects((*server)->port(), {}, obj));
  say("get over loopback TCP...");
  auto tcp = timed_gets(o, (*server)->port(), {}, false, o.tcp_depth, &res.errors, nullptr);
  if (!tcp.ok()) return tcp.status();
  // The same gets over TLS (server certificate only, AES-GCM as OpenSSL
  // picks it), from a server with the same config plus its certificate.
  say("get over loopback TLS...");
  const std::string pki_dir = fmt::format("{}/kvtier-bench-tls-{}", o.work_dir, getpid());
  auto pki = net::write_test_pki(pki_dir, {});
  if (!pki.ok()) return pki.status();
  struct RemoveDir {
    std::string d;
    ~RemoveDir() { std::filesystem::remove_all(d); }
  } remove_pki{pki_dir};
  json tls_config = get_config;
  tls_config["tls"] = {{"cert_file", pki->server_cert}, {"key_file", pki->server_key}};
  net::ClientTlsOptions tls;
  tls.ca_file = pki->ca_file;
  double tls_rate = 0;
  {
    auto tls_server = BenchServer::start(o, tls_config, "tls");
    if (!tls_server.ok()) return tls_server.status();
    KVTIER_RETURN_IF_ERROR(load_get_objects((*tls_server)->port(), tls, obj));
    auto r = timed_gets(o, (*tls_server)->port(), tls, false, o.tcp_depth, &res.errors, nullptr);
    if (!r.ok()) return r.status();
    tls_rate = *r;
  }
  say("get through shared memory...");
  uint64_t shm_calls = 0;
  auto shm = timed_gets(o, (*server)->port(), {}, true, 1, &res.errors, &shm_calls);
  if (!shm.ok()) return shm.status();
  if (shm_calls == 0) {
    rep.note("shm_note", "the shared-memory path was not used (not offered or not attachable)");
    *shm = 0;
  }
  say("memcpy...");
  MemcpyLimit mc = measure_memcpy(obj, 512ull << 20, std::max(0.5, o.seconds / 3));
  rep.add({"tcp_get",
           fmt::format("get {:.2f} MiB over loopback TCP, 1 connection, {} in flight",
                       obj / 1048576.0, o.tcp_depth),
           *tcp / 1e9, "GB/s", *iperf / 1e9, "iperf3 1 stream", *tcp / *iperf, 0.8, true});
  rep.add({"tls_get",
           fmt::format("get {:.2f} MiB over loopback TLS, 1 connection, {} in flight",
                       obj / 1048576.0, o.tcp_depth),
           tls_rate / 1e9, "GB/s", *tcp / 1e9, "the same gets over plain TCP", tls_rate / *tcp, 0.0,
           true});  // the cost of TLS, reported; docs/benchmarks.md says what bounds it
  rep.add({"shm_get",
           fmt::format("get {:.2f} MiB through shared memory, 1 thread", obj / 1048576.0),
           *shm / 1e9, "GB/s", mc.bytes_per_second / 1e9, "memcpy 1 thread",
           *shm / mc.bytes_per_second, 0.5, true});
  return Status::ok_status();
}

// match_prefix of a long chain as one RPC, from a same-host client and from
// a TCP-only one.
Status measure_match_prefix(const ServiceBenchOptions& o, const Progress& say,
                            ServiceBenchResult& res) {
  BenchReport& rep = res.report;
  say(fmt::format("match_prefix of {} keys...", o.match_keys));
  const uint32_t small = 4096;
  auto server = BenchServer::start(
      o, server_config(small, std::max<uint64_t>(64ull << 20, 2ull * o.match_keys * small), 16),
      "match");
  if (!server.ok()) return server.status();
  auto c = open_client((*server)->port(), 1, true);
  if (!c.ok()) return c.status();
  const uint16_t ns = *(*c)->register_namespace(bench_namespace());
  std::vector<kv::Key128> keys(o.match_keys);
  AlignedBuffer buf(small);
  for (unsigned i = 0; i < o.match_keys; ++i) {
    keys[i] = test_key(500000 + i);
    fill_payload(keys[i], buf.view());
    auto p = (*c)->put(ns, keys[i], buf.view());
    if (!p.ok() || !p->stored()) return Status::internal("loading the match chain failed");
  }
  // The same calls from a same-host client (its direct channel) and from
  // a TCP-only one (as a client on another host would make them).
  auto timed_matches = [&](net::RemoteStore& client, uint16_t h) {
    std::vector<uint64_t> lat;
    for (unsigned i = 0; i < o.match_calls; ++i) {
      const auto t0 = Clock::now();
      auto m = client.match_prefix(h, keys);
      lat.push_back(
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
      if (!m.ok() || m->blocks != o.match_keys) ++res.errors;
    }
    return percentiles(lat);
  };
  Percentiles p = timed_matches(**c, ns);
  const bool direct = (*c)->client_stats().direct_channels > 0;
  auto tcp = open_client((*server)->port(), 1, false);
  if (!tcp.ok()) return tcp.status();
  Percentiles pt = timed_matches(**tcp, *(*tcp)->register_namespace(bench_namespace()));
  rep.add({"match_prefix_p99",
           fmt::format("match_prefix of {} keys, one RPC, p99 ({})", o.match_keys,
                       direct ? "same host: direct channel" : "TCP: no direct channel"),
           p.p99_ms, "ms", 1.0, "bar 1 ms (study: 4.85 ms)", p.p99_ms > 0 ? 1.0 / p.p99_ms : 0, 1.0,
           false});
  rep.add({"match_prefix_tcp_p99",
           fmt::format("match_prefix of {} keys, one RPC, p99 (TCP)", o.match_keys), pt.p99_ms,
           "ms", 1.0, "bar 1 ms (study: 4.85 ms)", pt.p99_ms > 0 ? 1.0 / pt.p99_ms : 0, 1.0,
           false});
  rep.note("match_prefix_p50_ms", p.p50_ms);
  rep.note("match_prefix_tcp_p50_ms", pt.p50_ms);
  return Status::ok_status();
}

// What the mixed load's client threads share.
enum MixedOp { kPut, kGet, kMatch, kOpCount };
struct MixedShared {
  std::mutex lat_mu;
  std::vector<uint64_t> lat[kOpCount];  // guarded by lat_mu
  std::atomic<uint64_t> errors{0}, wrong{0}, calls{0};
  std::atomic<bool> stop{false};
};

// One client of the mixed load: puts, gets and matches over its own chain of
// 16 keys until `shared.stop`.
void mixed_client(net::RemoteStore& c, uint16_t ns, unsigned t, uint32_t mobj,
                  MixedShared& shared) {
  using Op = MixedOp;
  std::mt19937_64 rng(t + 1);
  AlignedBuffer in(mobj), out(mobj);
  std::vector<uint64_t> mine[kOpCount];
  constexpr int kChain = 16;
  std::vector<kv::Key128> chain(kChain);
  for (int i = 0; i < kChain; ++i) chain[i] = test_key(1000000ull * (t + 1) + i);
  while (!shared.stop) {
    const int k = static_cast<int>(rng() % kChain);
    const unsigned dice = rng() % 10;
    const Op op = dice < 4 ? kPut : dice < 8 ? kGet : kMatch;
    const auto s = Clock::now();
    if (op == kPut) {
      fill_payload(chain[k], in.view());
      if (!c.put(ns, chain[k], in.view()).ok()) ++shared.errors;
    } else if (op == kGet) {
      auto g = c.get(ns, chain[k], out.view());
      if (!g.ok()) {
        ++shared.errors;
      } else if (g->hit && (g->length != mobj || !payload_matches(chain[k], out.view()))) {
        ++shared.wrong;
      }
    } else {
      if (!c.match_prefix(ns, chain).ok()) ++shared.errors;
    }
    mine[op].push_back(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - s).count());
    ++shared.calls;
  }
  std::lock_guard lk(shared.lat_mu);
  for (int i = 0; i < kOpCount; ++i)
    shared.lat[i].insert(shared.lat[i].end(), mine[i].begin(), mine[i].end());
}

// Many clients doing a mixed put/get/match load: errors, wrong bytes, the
// server's RSS over the run, and latency percentiles per operation.
Status measure_mixed_load(const ServiceBenchOptions& o, const Progress& say,
                          ServiceBenchResult& res) {
  BenchReport& rep = res.report;
  say(fmt::format("{} clients, mixed put/get/match for {:.0f} s...", o.clients, o.mixed_seconds));
  const uint32_t mobj = o.mixed_object_bytes;
  auto server = BenchServer::start(o, server_config(mobj, 256ull << 20, o.clients + 16), "mixed");
  if (!server.ok()) return server.status();
  std::vector<std::unique_ptr<net::RemoteStore>> clients;
  std::vector<uint16_t> handles;
  for (unsigned i = 0; i < o.clients; ++i) {
    auto c = open_client((*server)->port(), 1, true);
    if (!c.ok()) return c.status();
    handles.push_back(*(*c)->register_namespace(bench_namespace()));
    clients.push_back(std::move(*c));
  }
  MixedShared shared;
  const auto t0 = Clock::now();
  std::vector<std::thread> th;
  for (unsigned t = 0; t < o.clients; ++t) {
    th.emplace_back([&, t] { mixed_client(*clients[t], handles[t], t, mobj, shared); });
  }
  // RSS: the level reached after warm-up (a quarter of the run) and the
  // highest after it.
  uint64_t rss_warm = 0, rss_max = 0, rss_end = 0;
  while (seconds_since(t0) < o.mixed_seconds) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const uint64_t r = (*server)->rss();
    if (seconds_since(t0) >= o.mixed_seconds / 4) {
      if (rss_warm == 0) rss_warm = r;
      rss_max = std::max(rss_max, r);
    }
    rss_end = r;
  }
  shared.stop = true;
  for (auto& x : th) x.join();
  const uint64_t failed = shared.errors + shared.wrong;
  res.errors += failed;
  const double growth = rss_warm ? static_cast<double>(rss_max) / rss_warm : 0;
  rep.add({"mixed_rss",
           fmt::format("{} clients mixed {:.0f} s: server RSS max/after warm-up", o.clients,
                       o.mixed_seconds),
           growth, "x", 1.10, "at most 1.10x", growth > 0 ? 1.10 / growth : 0, 1.0, false});
  json mixed = {{"clients", o.clients},
                {"seconds", o.mixed_seconds},
                {"calls", shared.calls.load()},
                {"errors", shared.errors.load()},
                {"wrong_bytes", shared.wrong.load()},
                {"rss_warm_bytes", rss_warm},
                {"rss_max_bytes", rss_max},
                {"rss_end_bytes", rss_end}};
  const char* names[kOpCount] = {"put", "get", "match_prefix_16"};
  for (int i = 0; i < kOpCount; ++i) {
    Percentiles p = percentiles(shared.lat[i]);
    mixed[std::string(names[i]) + "_p50_ms"] = p.p50_ms;
    mixed[std::string(names[i]) + "_p99_ms"] = p.p99_ms;
    mixed[std::string(names[i]) + "_count"] = p.count;
  }
  rep.note("mixed", mixed);
  clients.clear();
  return Status::ok_status();
}

}  // namespace

Result<ServiceBenchResult> run_service_bench(const ServiceBenchOptions& o) {
  const Progress say = [&](const std::string& s) {
    if (o.progress) o.progress(s);
  };
  ServiceBenchResult res;
  const bool process = !o.server_binary.empty();
  res.report.note("server", process ? "process (kvtier store serve, real loopback TCP and shm)"
                                    : "in-process (StoreServer on its own threads, real loopback "
                                      "TCP and shm; RSS is of the whole process)");
  KVTIER_RETURN_IF_ERROR(measure_large_gets(o, say, res));
  KVTIER_RETURN_IF_ERROR(measure_match_prefix(o, say, res));
  KVTIER_RETURN_IF_ERROR(measure_mixed_load(o, say, res));
  res.report.note("errors", res.errors);
  return res;
}

}  // namespace kvtier::bench
