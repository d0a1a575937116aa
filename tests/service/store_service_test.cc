// Integration tests of the store service with real processes: `kvtier store
// serve` is started from a config file, loaded by many client threads over
// TCP, killed with SIGKILL and restarted, stopped with SIGTERM and restarted,
// and fed frames it must refuse.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "common/clock.h"
#include "common/testing/eventually.h"
#include "kv/test_payload.h"
#include "net/client/remote_store.h"
#include "net/wire/protocol.h"

extern char** environ;

namespace kvtier::net {
namespace {

namespace fs = std::filesystem;
using kv::fill_payload;
using kv::payload_matches;
using kv::test_key;
using std::chrono::milliseconds;

constexpr uint32_t kObj = 16 << 10;

kv::Namespace test_namespace() { return kv::test_namespace("service-test"); }

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A scratch directory per test, under the build tree (a real filesystem).
fs::path test_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path d = fs::path(KVTIER_SERVICE_TEST_DIR) / "scratch" / info->name();
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Runs `args` with stdout and stderr appended to files (the same file when
// `out` is empty: spdlog's default sink is stdout, the CLI's messages go to
// stderr, and a server's log should hold both).
pid_t spawn(const std::vector<std::string>& args, const fs::path& out, const fs::path& err) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (out.empty()) {
    posix_spawn_file_actions_adddup2(&fa, 2, 1);
  } else {
    posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  }
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_store{"KVTIER_LOG=info"};
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "KVTIER_LOG=", 11) != 0) env_store.emplace_back(*e);
  }
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, args[0].c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

// Waits for `pid` up to `timeout_ms`; the exit status, or -1 on timeout.
int wait_exit(pid_t pid, int timeout_ms) {
  auto until = std::chrono::steady_clock::now() + milliseconds(timeout_ms);
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::steady_clock::now() > until) return -1;
    std::this_thread::sleep_for(milliseconds(5));
  }
}

// One `kvtier store serve` process over a config file it can rewrite.
class ServerProcess {
 public:
  ServerProcess(fs::path dir, nlohmann::json config)
      : dir_(std::move(dir)), config_(std::move(config)) {}
  ~ServerProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      wait_exit(pid_, 5000);
    }
  }

  nlohmann::json& config() { return config_; }
  fs::path log() const { return dir_ / "server.log"; }
  uint16_t port() const { return port_; }
  uint16_t metrics_port() const { return metrics_port_; }
  pid_t pid() const { return pid_; }

  // Starts the process and waits for its "listening on" line. An empty
  // return means it is up; otherwise why not (with the log).
  std::string start() {
    fs::path cfg = dir_ / "server.json";
    std::ofstream(cfg) << config_.dump(2);
    size_t log_from = fs::exists(log()) ? fs::file_size(log()) : 0;
    pid_ = spawn({KVTIER_BIN, "store", "serve", "--config", cfg.string()}, {}, log());
    if (pid_ < 0) return "spawn failed";
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until) {
      std::string text = read_all(log());
      text = text.size() > log_from ? text.substr(log_from) : "";
      // "kvtier store serve: listening on 127.0.0.1:PORT, metrics on
      // http://127.0.0.1:MPORT/metrics (pid N)" or "..., metrics disabled".
      size_t at = text.find("kvtier store serve: listening on ");
      size_t eol = at == std::string::npos ? at : text.find('\n', at);
      if (eol != std::string::npos) {
        std::string line = text.substr(at, eol - at);
        size_t comma = line.find(',');
        size_t colon = line.rfind(':', comma);
        port_ = static_cast<uint16_t>(std::stoi(line.substr(colon + 1, comma - colon - 1)));
        size_t m = line.find("/metrics");
        if (m != std::string::npos) {
          size_t mc = line.rfind(':', m);
          metrics_port_ = static_cast<uint16_t>(std::stoi(line.substr(mc + 1, m - mc - 1)));
        } else {
          metrics_port_ = 0;
        }
        return "";
      }
      int st = wait_exit(pid_, 0);
      if (st >= 0) {
        pid_ = -1;
        exit_status_ = st;
        return "exited with " + std::to_string(st) + ":\n" + text;
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
    return "not ready after 10 s:\n" + read_all(log());
  }

  void kill9() {
    ASSERT_GT(pid_, 0);
    ::kill(pid_, SIGKILL);
    EXPECT_EQ(wait_exit(pid_, 5000), 128 + SIGKILL);
    pid_ = -1;
  }
  // SIGTERM; the exit status.
  int terminate() {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGTERM);
    int st = wait_exit(pid_, 15000);
    pid_ = -1;
    return st;
  }
  int exit_status() const { return exit_status_; }

 private:
  fs::path dir_;
  nlohmann::json config_;
  pid_t pid_ = -1;
  uint16_t port_ = 0, metrics_port_ = 0;
  int exit_status_ = -1;
};

nlohmann::json base_config(const fs::path& dir, bool volume = true) {
  nlohmann::json c = {{"listen", {{"address", "127.0.0.1"}, {"port", 0}}},
                      {"metrics", {{"address", "127.0.0.1"}, {"port", 0}}},
                      {"io_threads", 2},
                      {"store_threads", 4},
                      {"max_connections", 64},
                      {"store",
                       {{"ram_bytes", "2MiB"},  // 128 slots: most blocks end up on disk
                        {"max_object_bytes", kObj},
                        {"region_bytes", "1MiB"},
                        {"io_timeout_ms", 2000}}}};
  if (volume) {
    // A file volume, created by the server; buffered I/O so that the test
    // does not depend on the build filesystem supporting O_DIRECT.
    c["store"]["volume"] = {
        {"path", (dir / "store.vol").string()}, {"size", "64MiB"}, {"direct", false}};
  }
  return c;
}

RemoteStoreOptions client_options(uint16_t port) {
  RemoteStoreOptions o;
  o.port = port;
  o.connections = 2;
  o.call_timeout_ms = 500;
  o.connect_timeout_ms = 300;
  o.reconnect_min_ms = 20;
  o.reconnect_max_ms = 200;
  return o;
}

// For tests of the TCP path alone (its per-op request metrics);
// the shared-memory path has its own kill-and-restart test.
RemoteStoreOptions tcp_client_options(uint16_t port) {
  RemoteStoreOptions o = client_options(port);
  o.shared_memory = false;
  return o;
}

// A blocking POSIX client for raw frames.
class RawClient {
 public:
  explicit RawClient(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawClient() { ::close(fd_); }
  bool connected() const { return connected_; }
  bool send(ByteView b) {
    size_t off = 0;
    while (off < b.size()) {
      ssize_t n = ::send(fd_, b.data() + off, b.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  Result<Frame> read_frame(int timeout_ms = 3000) {
    auto until = std::chrono::steady_clock::now() + milliseconds(timeout_ms);
    for (;;) {
      if (!pending_.empty()) {
        auto used = dec_.feed(pending_);
        if (!used.ok()) return used.status();
        pending_.erase(pending_.begin(), pending_.begin() + static_cast<ptrdiff_t>(*used));
        if (dec_.state() == FrameDecoder::State::kReady) return dec_.take_frame();
      }
      auto left =
          std::chrono::duration_cast<milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return Status::timeout("no frame");
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      std::byte buf[65536];
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return Status::unavailable("connection closed");
      pending_.insert(pending_.end(), buf, buf + n);
    }
  }
  bool closed_by_peer(int timeout_ms = 3000) {
    auto until = std::chrono::steady_clock::now() + milliseconds(timeout_ms);
    for (;;) {
      auto left =
          std::chrono::duration_cast<milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      std::byte buf[4096];
      if (::recv(fd_, buf, sizeof buf, 0) <= 0) return true;
    }
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  FrameDecoder dec_;
  std::vector<std::byte> pending_;
};

// ---- The load test ----------------------------------------------------------------------

struct PhaseCounts {
  std::atomic<uint64_t> calls{0}, puts_stored{0}, puts_refused{0}, hits{0}, misses_unreachable{0},
      misses_other{0}, matches{0}, wrong_bytes{0}, errors{0}, max_call_ns{0};
  void call_took(uint64_t ns) {
    uint64_t cur = max_call_ns.load();
    while (ns > cur && !max_call_ns.compare_exchange_weak(cur, ns)) {
    }
  }
};

TEST(StoreService, ManyClientsSurviveKillAndRestart) {
  fs::path dir = test_dir();
  ServerProcess server(dir, base_config(dir));
  std::string why = server.start();
  ASSERT_EQ(why, "");
  const uint16_t port = server.port();

  constexpr int kClients = 4, kThreadsPerClient = 4, kThreads = kClients * kThreadsPerClient;
  std::vector<std::unique_ptr<RemoteStore>> clients;
  std::vector<uint16_t> handles;
  for (int i = 0; i < kClients; ++i) {
    auto c = RemoteStore::open(client_options(port));
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE((*c)->wait_connected(5000).ok());
    auto h = (*c)->register_namespace(test_namespace());
    ASSERT_TRUE(h.ok());
    handles.push_back(*h);
    clients.push_back(std::move(*c));
  }

  std::atomic<int> phase{1};
  std::atomic<bool> stop{false};
  PhaseCounts counts[4];
  std::atomic<bool> restarting{false};
  std::atomic<int64_t> first_put_after_restart[kThreads];
  for (auto& f : first_put_after_restart) f = -1;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      RemoteStore& c = *clients[t % kClients];
      const uint16_t ns = handles[t % kClients];
      std::mt19937_64 rng(t);
      AlignedBuffer buf(kObj), out(kObj);
      uint64_t next = 1;
      while (!stop) {
        const int ph = phase.load();
        // A call that began during the outage but finished after the restart
        // began (it waited for a reconnect) counts for neither: bucket 0.
        auto pc = [&]() -> PhaseCounts& {
          return ph == 2 && restarting.load() ? counts[0] : counts[ph];
        };
        const uint64_t key_id = (static_cast<uint64_t>(t) << 32) | next;
        // Near the maximum size: the Store sizes its index for objects of
        // max_object_bytes, and much smaller ones would fill the index before
        // the volume (puts then refused with index_full, a sizing matter of
        // the Store, not of the service under test here).
        const uint32_t len = kObj - static_cast<uint32_t>(rng() % 2048);
        fill_payload(test_key(key_id), buf.subview(0, len));
        uint64_t t0 = now_ns();
        auto p = c.put(ns, test_key(key_id), ByteView(buf.data(), len));
        pc().call_took(now_ns() - t0);
        ++pc().calls;
        if (!p.ok()) {
          ++pc().errors;
        } else if (p->stored()) {
          ++pc().puts_stored;
          ++next;
          if (ph == 3 && first_put_after_restart[t] < 0) {
            first_put_after_restart[t] = static_cast<int64_t>(now_ns());
          }
        } else {
          ++pc().puts_refused;
        }
        // Read back one of this thread's earlier blocks.
        const uint64_t back = (static_cast<uint64_t>(t) << 32) | (1 + rng() % next);
        t0 = now_ns();
        auto g = c.get(ns, test_key(back), out.view());
        pc().call_took(now_ns() - t0);
        ++pc().calls;
        if (!g.ok()) {
          ++pc().errors;
        } else if (g->hit) {
          ++pc().hits;
          if (!payload_matches(test_key(back), ByteView(out.data(), g->length))) ++pc().wrong_bytes;
        } else if (g->miss == kv::MissReason::kIoError || g->miss == kv::MissReason::kTimeout) {
          ++pc().misses_unreachable;
        } else {
          ++pc().misses_other;
        }
        if (rng() % 8 == 0 && next > 3) {
          std::vector<kv::Key128> chain;
          for (uint64_t i = next - 3; i < next; ++i) {
            chain.push_back(test_key((static_cast<uint64_t>(t) << 32) | i));
          }
          t0 = now_ns();
          auto m = c.match_prefix(ns, chain);
          pc().call_took(now_ns() - t0);
          ++pc().calls;
          if (!m.ok() || m->blocks > chain.size())
            ++pc().errors;
          else
            ++pc().matches;
        }
        if (ph == 2) std::this_thread::sleep_for(milliseconds(2));  // no need to spin while down
      }
    });
  }

  // Enough traffic before the crash for phase 1's counts.
  EXPECT_TRUE(kvtier::testing::eventually(
      [&] { return counts[1].puts_stored.load() > 50 && counts[1].hits.load() > 20; },
      std::chrono::seconds(60)));
  // Crash: no checkpoint, no goodbye. Calls that start once the process is
  // gone count for the outage (those in between count for phase 1, which
  // asserts nothing about misses).
  server.kill9();
  phase = 2;
  // Down for a while (the outage's calls must meet a dead server), at least
  // until both a get and a put did.
  std::this_thread::sleep_for(milliseconds(1000));
  EXPECT_TRUE(kvtier::testing::eventually([&] {
    return counts[2].misses_unreachable.load() > 0 && counts[2].puts_refused.load() > 0;
  }));
  // Restart on the same port over the same volume: the crash scan applies.
  server.config()["listen"]["port"] = port;
  restarting = true;
  why = server.start();
  ASSERT_EQ(why, "");
  const uint64_t restarted = now_ns();
  phase = 3;
  // Every thread recovers by itself.
  kvtier::testing::eventually(
      [&] {
        for (auto& f : first_put_after_restart) {
          if (f.load() < 0) return false;
        }
        return true;
      },
      std::chrono::seconds(30));
  kvtier::testing::eventually(
      [&] { return counts[3].puts_stored.load() > 50 && counts[3].hits.load() > 0; },
      std::chrono::seconds(60));
  stop = true;
  for (auto& th : threads) th.join();

  for (int ph = 1; ph <= 3; ++ph) {
    const PhaseCounts& pc = counts[ph];
    std::printf(
        "phase %d: calls %lu stored %lu refused %lu hits %lu unreachable-misses %lu other-misses "
        "%lu matches %lu max call %.1f ms\n",
        ph, pc.calls.load(), pc.puts_stored.load(), pc.puts_refused.load(), pc.hits.load(),
        pc.misses_unreachable.load(), pc.misses_other.load(), pc.matches.load(),
        pc.max_call_ns.load() / 1e6);
    EXPECT_EQ(pc.wrong_bytes.load(), 0u) << "phase " << ph;
    EXPECT_EQ(pc.errors.load(), 0u) << "phase " << ph;
    // No call ever hung: each ends by its timeouts (500 ms call, 300 ms
    // connect), so 10 s means something waited without a bound.
    EXPECT_LT(pc.max_call_ns.load(), 10'000'000'000ull) << "phase " << ph;
  }
  EXPECT_GT(counts[1].puts_stored.load(), 50u);
  EXPECT_GT(counts[1].hits.load(), 20u);
  // The outage: nothing hits, gets are misses, puts are refused.
  EXPECT_EQ(counts[2].hits.load(), 0u);
  EXPECT_EQ(counts[2].puts_stored.load(), 0u);
  EXPECT_GT(counts[2].misses_unreachable.load(), 0u);
  EXPECT_GT(counts[2].puts_refused.load(), 0u);
  // Recovery: every thread stored again by itself, within 20 s of the
  // restart (its reconnect backoff is far shorter; the rest is a busy machine).
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_GE(first_put_after_restart[t].load(), 0) << "thread " << t << " never recovered";
    EXPECT_LT(static_cast<uint64_t>(first_put_after_restart[t].load()) - restarted,
              20'000'000'000ull);
  }
  EXPECT_GT(counts[3].puts_stored.load(), 50u);
  EXPECT_GT(counts[3].hits.load(), 0u);

  // The server's log names the crash recovery, and `kvtier store stats` reads it.
  fs::path stats_out = dir / "stats.json";
  pid_t st = spawn(
      {KVTIER_BIN, "store", "stats", "--address", "127.0.0.1:" + std::to_string(port), "--json"},
      stats_out, dir / "stats.err");
  ASSERT_EQ(wait_exit(st, 10000), 0) << read_all(dir / "stats.err");
  auto j = nlohmann::json::parse(read_all(stats_out), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << read_all(stats_out);
  EXPECT_GT(j["counters"]["kvtier_store_puts_total"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["counters"]["kvtier_disk_recovered_from_checkpoint"].get<uint64_t>(), 0u);
  EXPECT_GE(j["counters"]["kvtier_server_connections_total"].get<uint64_t>(),
            uint64_t(kClients * 2));
  clients.clear();
  EXPECT_EQ(server.terminate(), 0) << read_all(server.log());
}

TEST(StoreService, GracefulStopAndRestartKeepsEveryBlock) {
  fs::path dir = test_dir();
  ServerProcess server(dir, base_config(dir));
  ASSERT_EQ(server.start(), "");
  const uint16_t port = server.port();
  constexpr int kBlocks = 300;  // more than the RAM tier holds
  {
    auto c = RemoteStore::open(client_options(port));
    ASSERT_TRUE((*c)->wait_connected(5000).ok());
    uint16_t ns = *(*c)->register_namespace(test_namespace());
    AlignedBuffer buf(kObj);
    for (int i = 1; i <= kBlocks; ++i) {
      fill_payload(test_key(i), buf.view());
      auto p = (*c)->put(ns, test_key(i), buf.view());
      ASSERT_TRUE(p.ok() && p->stored()) << i;
    }
  }
  ASSERT_EQ(server.terminate(), 0) << read_all(server.log());
  EXPECT_NE(read_all(server.log()).find("stopped"), std::string::npos);

  server.config()["listen"]["port"] = port;
  ASSERT_EQ(server.start(), "");
  auto c = RemoteStore::open(client_options(port));
  ASSERT_TRUE((*c)->wait_connected(5000).ok());
  uint16_t ns = *(*c)->register_namespace(test_namespace());
  AlignedBuffer out(kObj);
  int hits = 0;
  for (int i = 1; i <= kBlocks; ++i) {
    auto g = (*c)->get(ns, test_key(i), out.view());
    ASSERT_TRUE(g.ok());
    if (g->hit) {
      ++hits;
      EXPECT_TRUE(payload_matches(test_key(i), ByteView(out.data(), g->length))) << i;
    }
  }
  EXPECT_EQ(hits, kBlocks);
  auto s = (*c)->stats();
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_TRUE(s->disk.recovered_from_checkpoint);
  EXPECT_GE(s->disk.recovered_entries, uint64_t(kBlocks) - 128);
  c->reset();
  EXPECT_EQ(server.terminate(), 0);
}

// The same-host shared-memory path against a real server process: block
// bytes go through the client's memfd area (checked byte for byte); the
// server is SIGKILLed while callers stream, which gives misses and refusals,
// never errors or wrong bytes; after a restart the path comes back.
TEST(StoreService, SharedMemoryPathSurvivesKillAndRestart) {
  fs::path dir = test_dir();
  ServerProcess server(dir, base_config(dir, /*volume=*/false));
  ASSERT_EQ(server.start(), "");
  const uint16_t port = server.port();
  RemoteStoreOptions o = client_options(port);
  auto c = RemoteStore::open(o);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->wait_connected(5000).ok());
  ASSERT_TRUE((*c)->shared_memory_active());
  const uint16_t ns = *(*c)->register_namespace(test_namespace());

  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0}, errors{0}, hits{0}, misses{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      AlignedBuffer in(kObj), out(kObj);
      for (uint64_t i = 0; !stop; ++i) {
        const uint64_t id = 1 + t * 1000000 + i % 64;
        fill_payload(test_key(id), in.view());
        if (!(*c)->put(ns, test_key(id), in.view()).ok()) ++errors;
        auto g = (*c)->get(ns, test_key(id), out.view());
        if (!g.ok()) {
          ++errors;
        } else if (g->hit) {
          ++hits;
          if (!payload_matches(test_key(id), ByteView(out.data(), g->length))) ++wrong;
        } else {
          ++misses;
        }
      }
    });
  }
  EXPECT_TRUE(kvtier::testing::eventually([&] { return hits.load() > 0; }));
  const int hits_before = hits.load();
  server.kill9();
  EXPECT_TRUE(kvtier::testing::eventually(
      [&] { return !(*c)->shared_memory_active() && misses.load() > 0; }));
  server.config()["listen"]["port"] = port;
  ASSERT_EQ(server.start(), "");
  // Back within the reconnect backoff, on shared memory again.
  EXPECT_TRUE(kvtier::testing::eventually([&] { return (*c)->shared_memory_active(); },
                                          std::chrono::seconds(30)));
  const int hits_restarted = hits.load();
  EXPECT_TRUE(kvtier::testing::eventually([&] { return hits.load() > hits_restarted; }));
  stop = true;
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(hits_before, 0);
  EXPECT_GT(misses.load(), 0);             // the calls that met the dead server
  EXPECT_GT(hits.load(), hits_restarted);  // served again after the restart
  EXPECT_GT((*c)->client_stats().shm_sessions, 2u);
  c->reset();
  EXPECT_EQ(server.terminate(), 0);
}

TEST(StoreService, WrongTokenIsRefused) {
  fs::path dir = test_dir();
  nlohmann::json cfg = base_config(dir, false);
  cfg["auth_token"] = "s3cret-token";
  ServerProcess server(dir, cfg);
  ASSERT_EQ(server.start(), "");

  RemoteStoreOptions o = client_options(server.port());
  o.auth_token = "not-the-token";
  auto bad = RemoteStore::open(o);
  ASSERT_TRUE(bad.ok());
  // The refusal, however late it comes (wait_connected would return
  // whatever error it last saw when its time ran out).
  Status st;
  kvtier::testing::eventually(
      [&] {
        st = (*bad)->last_error();
        return st.message().find("authentication failed") != std::string::npos;
      },
      std::chrono::seconds(30));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("authentication failed"), std::string::npos) << st.to_string();
  uint16_t ns = *(*bad)->register_namespace(test_namespace());
  AlignedBuffer out(kObj);
  auto g = (*bad)->get(ns, test_key(1), out.view());
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(g->hit);

  o.auth_token = "s3cret-token";
  auto good = RemoteStore::open(o);
  ASSERT_TRUE((*good)->wait_connected(5000).ok());
  uint16_t gns = *(*good)->register_namespace(test_namespace());
  fill_payload(test_key(1), out.view());
  EXPECT_TRUE((*good)->put(gns, test_key(1), out.view())->stored());

  // The CLI too: wrong token fails, the right one (from a file) works.
  const std::string addr = "127.0.0.1:" + std::to_string(server.port());
  pid_t p1 = spawn(
      {KVTIER_BIN, "store", "stats", "--address", addr, "--token", "nope", "--timeout-ms", "1000"},
      dir / "bad.out", dir / "bad.err");
  EXPECT_EQ(wait_exit(p1, 10000), 1);
  EXPECT_NE(read_all(dir / "bad.err").find("authentication failed"), std::string::npos)
      << read_all(dir / "bad.err");
  std::ofstream(dir / "token") << "s3cret-token\n";
  pid_t p2 = spawn(
      {KVTIER_BIN, "store", "stats", "--address", addr, "--token-file", (dir / "token").string()},
      dir / "good.out", dir / "good.err");
  EXPECT_EQ(wait_exit(p2, 10000), 0) << read_all(dir / "good.err");
  EXPECT_NE(read_all(dir / "good.out").find("kvtier_store_puts_total"), std::string::npos);

  // The token never appears in the server's log.
  std::string log = read_all(server.log());
  EXPECT_NE(log.find("authentication failed"), std::string::npos) << log;
  EXPECT_EQ(log.find("s3cret-token"), std::string::npos);
  EXPECT_EQ(log.find("not-the-token"), std::string::npos);
  bad->reset();
  good->reset();
  EXPECT_EQ(server.terminate(), 0);
}

TEST(StoreService, NonLoopbackWithoutTokenRefusesToStart) {
  fs::path dir = test_dir();
  nlohmann::json cfg = base_config(dir, false);
  cfg["listen"]["address"] = "0.0.0.0";
  ServerProcess server(dir, cfg);
  std::string why = server.start();
  ASSERT_NE(why, "");
  EXPECT_EQ(server.exit_status(), 2) << why;
  EXPECT_NE(why.find("a credential is required"), std::string::npos) << why;

  // An unknown key is named.
  fs::path dir2 = dir / "typo";
  fs::create_directories(dir2);
  nlohmann::json typo = base_config(dir2, false);
  typo["store"]["ram_byte"] = 1;
  ServerProcess s2(dir2, typo);
  why = s2.start();
  EXPECT_NE(why.find("unknown config key 'store.ram_byte'"), std::string::npos) << why;
}

TEST(StoreService, OversizedAndMalformedFramesAreRefused) {
  fs::path dir = test_dir();
  nlohmann::json cfg = base_config(dir, false);
  cfg["max_data_bytes"] = "1MiB";
  ServerProcess server(dir, cfg);
  ASSERT_EQ(server.start(), "");
  auto c = RemoteStore::open(client_options(server.port()));
  ASSERT_TRUE((*c)->wait_connected(5000).ok());
  EXPECT_EQ((*c)->server_limits().max_data_bytes, 1u << 20);
  uint16_t ns = *(*c)->register_namespace(test_namespace());
  AlignedBuffer buf(kObj), out(kObj);
  fill_payload(test_key(1), buf.view());
  ASSERT_TRUE((*c)->put(ns, test_key(1), buf.view())->stored());

  auto hello = [](RawClient& raw) {
    auto f = encode_message_frame(HelloRequest{1, 1, "raw", ""}, 1);
    if (!raw.send(*f)) return false;
    auto r = raw.read_frame();
    return r.ok() && r->header.type == MessageType::kHelloResponse;
  };
  auto expect_refused = [](RawClient& raw, const std::string& cls) {
    auto f = raw.read_frame();
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    ASSERT_EQ(f->header.type, MessageType::kErrorResponse);
    auto e = ErrorResponse::decode(f->descriptor);
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->message.rfind(cls, 0), 0u) << e->message;
    EXPECT_TRUE(raw.closed_by_peer());
  };
  for (uint32_t data_len : {(1u << 20) + 1, kMaxDataBytes + 1, 0xFFFFFFFFu}) {
    RawClient raw(server.port());
    ASSERT_TRUE(hello(raw));
    FrameHeader h;
    h.type = MessageType::kPutRequest;
    h.request_id = 9;
    h.descriptor_len = 22;
    h.data_len = data_len;
    std::byte hdr[kFrameHeaderSize];
    encode_header(h, std::span<std::byte, kFrameHeaderSize>(hdr));
    ASSERT_TRUE(raw.send(ByteView(hdr, sizeof hdr)));
    expect_refused(raw, "data_too_large");
  }
  {
    RawClient raw(server.port());
    ASSERT_TRUE(hello(raw));
    FrameHeader h;
    h.type = MessageType::kMatchPrefixRequest;
    h.descriptor_len = kMaxDescriptorBytes + 1;
    std::byte hdr[kFrameHeaderSize];
    encode_header(h, std::span<std::byte, kFrameHeaderSize>(hdr));
    ASSERT_TRUE(raw.send(ByteView(hdr, sizeof hdr)));
    expect_refused(raw, "descriptor_too_large");
  }
  {
    // A damaged header.
    RawClient raw(server.port());
    ASSERT_TRUE(hello(raw));
    auto f = encode_message_frame(StatsRequest{}, 3);
    (*f)[20] ^= std::byte{0x40};
    ASSERT_TRUE(raw.send(*f));
    expect_refused(raw, "header_crc_mismatch");
  }
  // The server is still up, the other client unaffected, the block intact.
  auto g = (*c)->get(ns, test_key(1), out.view());
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(g->hit);
  EXPECT_TRUE(payload_matches(test_key(1), out.view()));
  EXPECT_EQ((*c)->client_stats().broken, 0u);
  std::string log = read_all(server.log());
  EXPECT_NE(log.find("malformed frame from 127.0.0.1:"), std::string::npos) << log;
  EXPECT_NE(log.find("data_too_large"), std::string::npos);
  c->reset();
  EXPECT_EQ(server.terminate(), 0);
}

TEST(StoreService, MetricsAndHealthEndpoint) {
  fs::path dir = test_dir();
  ServerProcess server(dir, base_config(dir, false));
  ASSERT_EQ(server.start(), "");
  ASSERT_NE(server.metrics_port(), 0);
  auto c = RemoteStore::open(tcp_client_options(server.port()));
  ASSERT_TRUE((*c)->wait_connected(5000).ok());
  uint16_t ns = *(*c)->register_namespace(test_namespace());
  AlignedBuffer buf(kObj);
  fill_payload(test_key(1), buf.view());
  ASSERT_TRUE((*c)->put(ns, test_key(1), buf.view())->stored());
  ASSERT_TRUE((*c)->get(ns, test_key(1), buf.view())->hit);

  auto fetch = [&](const std::string& path) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(server.metrics_port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string out;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n";
      (void)::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
      char b[65536];
      ssize_t n;
      while ((n = ::recv(fd, b, sizeof b, 0)) > 0) out.append(b, static_cast<size_t>(n));
    }
    ::close(fd);
    return out;
  };
  // A response is counted, and a RAM hit's lease released, when the
  // server's write of it completes, which may be just after the client has
  // the bytes: look again briefly.
  std::string m = fetch("/metrics");
  for (int i = 0;
       i < 1000 && (m.find("kvtier_store_ram_leased_slots 0") == std::string::npos ||
                    m.find("kvtier_server_request_seconds_bucket{op=\"get\"") == std::string::npos);
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    m = fetch("/metrics");
  }
  EXPECT_NE(m.find("200 OK"), std::string::npos);
  EXPECT_NE(m.find("kvtier_store_hits_total{tier=\"ram\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("kvtier_server_requests_total{op=\"put\"} 1"), std::string::npos);
  EXPECT_NE(m.find("kvtier_server_request_seconds_bucket{op=\"get\""), std::string::npos);
  EXPECT_NE(m.find("kvtier_store_ram_leased_slots 0"), std::string::npos);
  std::string h = fetch("/health");
  EXPECT_NE(h.find("200 OK"), std::string::npos);
  c->reset();
  EXPECT_EQ(server.terminate(), 0);
}

}  // namespace
}  // namespace kvtier::net
