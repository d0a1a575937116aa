// Integration tests of several store nodes, all real `kvtier store serve`
// processes. With etcd membership: a real etcd (the Debian etcd binary, on
// free loopback ports, its own data directory) that the nodes register in; a
// ClusterStore writes, reads, loses a node to SIGKILL, and sees a fourth
// node join. Without etcd: a static node list from a cluster client config,
// used through the KvStore interface and `kvtier store stats --node`.
// Every process runs in its own process group, killed by an RAII guard even
// when the test fails.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asio/ip/tcp.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "kv/test_payload.h"
#include "kvtier/kv_store.h"
#include "net/client/remote_store.h"
#include "net/cluster/cluster_config.h"
#include "net/cluster/cluster_store.h"
#include "net/cluster/etcd_client.h"
#include "net/cluster/placement.h"
#include "net/wire/tls_certs.h"

extern char** environ;

namespace kvtier::net {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kObj = 16 << 10;
constexpr uint32_t kTtlS = 2;
constexpr uint32_t kPollMs = 200;

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint16_t free_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  return a.local_endpoint().port();
}

std::string find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    fs::path p = fs::path(dir) / name;
    if (!dir.empty() && access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

// A child process in its own process group; killed (the whole group) on destruction.
class Child {
 public:
  Child() = default;
  Child(const std::vector<std::string>& args, const fs::path& log) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 2, 1);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, args[0].c_str(), &fa, &attr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
  }
  Child(Child&& o) noexcept : pid_(o.pid_) { o.pid_ = -1; }
  Child& operator=(Child&& o) noexcept {
    if (this != &o) {
      kill_group(SIGKILL);
      pid_ = o.pid_;
      o.pid_ = -1;
    }
    return *this;
  }
  ~Child() { kill_group(SIGKILL); }
  pid_t pid() const { return pid_; }
  bool running() {
    if (pid_ <= 0) return false;
    int st;
    return waitpid(pid_, &st, WNOHANG) == 0;
  }
  void kill_group(int sig) {
    if (pid_ <= 0) return;
    ::kill(-pid_, sig);
    int st;
    waitpid(pid_, &st, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

// etcd, a set of store nodes and their scratch directory; all stopped in the destructor.
class ClusterFixture {
 public:
  explicit ClusterFixture(fs::path dir) : dir_(std::move(dir)) {}

  // Starts etcd and waits until it answers a range. Empty on success. With
  // `pki`, etcd serves clients over TLS and asks for client certificates of
  // that CA (the readiness check presents `pki`'s "reader").
  std::string start_etcd(const TestPki* pki = nullptr) {
    std::string etcd = find_in_path("etcd");
    if (etcd.empty()) {
      return "the etcd binary is not installed (apt-get install etcd-server): this test needs a "
             "real etcd";
    }
    uint16_t client = free_port(), peer = free_port();
    etcd_url_ = std::string(pki ? "https" : "http") + "://127.0.0.1:" + std::to_string(client);
    std::string peer_url = "http://127.0.0.1:" + std::to_string(peer);
    std::vector<std::string> args = {etcd,
                                     "--name",
                                     "kvtier-test",
                                     "--data-dir",
                                     (dir_ / "etcd-data").string(),
                                     "--listen-client-urls",
                                     etcd_url_,
                                     "--advertise-client-urls",
                                     etcd_url_,
                                     "--listen-peer-urls",
                                     peer_url,
                                     "--initial-advertise-peer-urls",
                                     peer_url,
                                     "--initial-cluster",
                                     "kvtier-test=" + peer_url,
                                     "--log-level",
                                     "warn"};
    EtcdCredentials creds;
    if (pki) {
      for (const char* a :
           {"--cert-file", pki->server_cert.c_str(), "--key-file", pki->server_key.c_str(),
            "--trusted-ca-file", pki->ca_file.c_str(), "--client-cert-auth"}) {
        args.push_back(a);
      }
      creds.tls = {pki->ca_file, pki->client_cert("reader"), pki->client_key("reader")};
    }
    etcd_ = Child(args, dir_ / "etcd.log");
    EtcdClient c(EtcdEndpoint{"127.0.0.1", client, pki != nullptr}, 500, creds);
    auto until = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < until) {
      if (c.range_prefix("/").ok()) return "";
      if (!etcd_.running()) return "etcd exited:\n" + read_all(dir_ / "etcd.log");
      std::this_thread::sleep_for(milliseconds(50));
    }
    return "etcd not ready after 20 s:\n" + read_all(dir_ / "etcd.log");
  }

  // Starts node `id` and waits for its listening line and, when this
  // fixture runs etcd, its registration line. Empty on success.
  std::string start_node(const std::string& id) {
    nlohmann::json cfg = {{"listen", {{"address", "127.0.0.1"}, {"port", 0}}},
                          {"metrics", nullptr},
                          {"store", {{"ram_bytes", "32MiB"}, {"max_object_bytes", kObj}}}};
    if (!etcd_url_.empty()) {
      cfg["etcd"] = {{"url", etcd_url_}, {"node_id", id}, {"prefix", "test"}, {"ttl_s", kTtlS}};
      for (auto it = etcd_auth_.begin(); it != etcd_auth_.end(); ++it) cfg["etcd"][it.key()] = *it;
    }
    fs::path cfg_path = dir_ / (id + ".json");
    std::ofstream(cfg_path) << cfg.dump(2);
    fs::path log = dir_ / (id + ".log");
    nodes_[id] = Child({KVTIER_BIN, "store", "serve", "--config", cfg_path.string()}, log);
    auto until = Clock::now() + std::chrono::seconds(15);
    while (Clock::now() < until) {
      std::string text = read_all(log);
      size_t at = text.find("listening on 127.0.0.1:");
      const bool registered =
          etcd_url_.empty() || text.find("registered as /test/nodes/" + id) != std::string::npos;
      if (registered && at != std::string::npos && text.find(',', at) != std::string::npos) {
        ports_[id] = static_cast<uint16_t>(std::stoi(text.substr(at + 23)));
        return "";
      }
      if (!nodes_[id].running()) return id + " exited:\n" + text;
      std::this_thread::sleep_for(milliseconds(20));
    }
    return id + " not registered after 15 s:\n" + read_all(log);
  }

  void kill_node(const std::string& id) { nodes_[id].kill_group(SIGKILL); }
  // Extra keys of the nodes' "etcd" config (user, password_file).
  void set_etcd_auth(nlohmann::json auth) { etcd_auth_ = std::move(auth); }
  const std::string& etcd_url() const { return etcd_url_; }
  uint16_t port(const std::string& id) { return ports_[id]; }

 private:
  fs::path dir_;
  std::string etcd_url_;
  nlohmann::json etcd_auth_ = nlohmann::json::object();
  Child etcd_;
  std::map<std::string, Child> nodes_;
  std::map<std::string, uint16_t> ports_;
};

kv::Namespace test_namespace() { return kv::test_namespace("cluster-test"); }

kv::Key128 block_key(uint64_t round, uint64_t i) {
  return kv::Key128{0x6b76746965720000ull + round, i * 0x9E3779B97F4A7C15ull + 1};
}

std::vector<uint8_t> block_bytes(const kv::Key128& k) {
  std::vector<uint8_t> b(kObj);
  uint64_t x = k.hi ^ k.lo;
  for (auto& c : b) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    c = static_cast<uint8_t>(x >> 56);
  }
  return b;
}

ByteView bv(const std::vector<uint8_t>& v) {
  return ByteView(reinterpret_cast<const std::byte*>(v.data()), v.size());
}
MutableByteView mbv(std::vector<uint8_t>& v) {
  return MutableByteView(reinterpret_cast<std::byte*>(v.data()), v.size());
}

bool has_node(const ClusterStore& cs, const std::string& id) {
  for (const auto& n : cs.nodes()) {
    if (n.id == id) return true;
  }
  return false;
}

TEST(Cluster, ThreeNodesKillOneAndJoinOneWithEtcd) {
  auto t_start = Clock::now();
  fs::path dir = fs::path(KVTIER_SERVICE_TEST_DIR) / "scratch" / "cluster";
  fs::remove_all(dir);
  fs::create_directories(dir);
  ClusterFixture fx(dir);
  std::string err = fx.start_etcd();
  ASSERT_EQ(err, "");
  for (const char* id : {"n1", "n2", "n3"}) {
    err = fx.start_node(id);
    ASSERT_EQ(err, "");
  }

  ClusterStoreOptions o;
  o.etcd_url = fx.etcd_url();
  o.etcd_prefix = "test";
  o.poll_ms = kPollMs;
  // Timeouts far above a call's time on a busy machine: a live node's get
  // must be a hit. A killed node refuses at once; it never needs them.
  o.node_options.call_timeout_ms = 3000;
  o.node_options.connect_timeout_ms = 3000;
  o.node_options.reconnect_max_ms = 200;
  auto cs_r = ClusterStore::open(o);
  ASSERT_TRUE(cs_r.ok()) << cs_r.status().to_string();
  ClusterStore& cs = **cs_r;
  ASSERT_EQ(cs.nodes().size(), 3u);
  auto ns = cs.register_namespace(test_namespace());
  ASSERT_TRUE(ns.ok()) << ns.status().to_string();

  // Round 0: 300 blocks, half by single puts, half by one batch.
  constexpr size_t kBlocks = 300;
  std::vector<kv::Key128> keys;
  std::vector<std::vector<uint8_t>> data;
  std::map<std::string, size_t> per_node;
  for (size_t i = 0; i < kBlocks; ++i) {
    keys.push_back(block_key(0, i));
    data.push_back(block_bytes(keys.back()));
    ++per_node[cs.owner_of(keys.back())];
  }
  for (size_t i = 0; i < kBlocks / 2; ++i) {
    auto r = cs.put(*ns, keys[i], bv(data[i]));
    ASSERT_TRUE(r.ok() && r->stored()) << i;
  }
  std::vector<ByteView> views;
  for (size_t i = kBlocks / 2; i < kBlocks; ++i) views.push_back(bv(data[i]));
  auto br = cs.batch_put(*ns, std::span(keys).subspan(kBlocks / 2), views);
  ASSERT_TRUE(br.ok()) << br.status().to_string();
  for (const auto& r : *br) ASSERT_TRUE(r.stored());
  for (const char* id : {"n1", "n2", "n3"}) {
    EXPECT_GE(per_node[id], kBlocks / 6) << id << " got too few keys";
    // The server's own count: the blocks really went to their owner.
    RemoteStoreOptions ro;
    ro.port = fx.port(id);
    auto direct = RemoteStore::open(ro);
    ASSERT_TRUE(direct.ok());
    ASSERT_TRUE((*direct)->wait_connected(2000).ok());
    auto st = (*direct)->stats();
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st->puts, per_node[id]) << id;
  }
  // Byte-for-byte reads: singles, then one batch.
  std::vector<uint8_t> buf(kObj);
  for (size_t i = 0; i < kBlocks; ++i) {
    auto g = cs.get(*ns, keys[i], mbv(buf));
    ASSERT_TRUE(g.ok() && g->hit) << i;
    ASSERT_EQ(g->length, kObj);
    ASSERT_EQ(buf, data[i]) << i;
  }
  std::vector<std::vector<uint8_t>> bufs(kBlocks, std::vector<uint8_t>(kObj));
  std::vector<kv::BatchGetItem> items;
  for (size_t i = 0; i < kBlocks; ++i) {
    items.push_back(kv::BatchGetItem{keys[i], mbv(bufs[i])});
  }
  auto bg = cs.batch_get(*ns, items);
  ASSERT_TRUE(bg.ok());
  for (size_t i = 0; i < kBlocks; ++i) {
    ASSERT_TRUE((*bg)[i].hit) << i;
    ASSERT_EQ(bufs[i], data[i]) << i;
  }
  auto m = cs.match_prefix(*ns, keys);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->blocks, kBlocks);

  // Kill n2: its keys become misses (never errors) at once, the others stay
  // hits; n2 leaves the node set once its lease expires.
  size_t first_n2 = kBlocks;
  for (size_t i = 0; i < kBlocks; ++i) {
    if (cs.owner_of(keys[i]) == "n2") {
      first_n2 = i;
      break;
    }
  }
  ASSERT_LT(first_n2, kBlocks);
  auto t_kill = Clock::now();
  fx.kill_node("n2");
  bool dropped = false;
  double max_get_ms = 0;
  while (Clock::now() - t_kill < std::chrono::seconds(kTtlS + 25)) {
    for (size_t i = 0; i < kBlocks; i += 7) {
      std::string owner = cs.owner_of(keys[i]);
      auto t0 = Clock::now();
      auto g = cs.get(*ns, keys[i], mbv(buf));
      max_get_ms = std::max(max_get_ms,
                            std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      ASSERT_TRUE(g.ok()) << "a dead node must give misses, not errors: " << g.status().to_string();
      // Keys of a live node keep being served; the dead node's are misses.
      if (owner == "n2") {
        EXPECT_FALSE(g->hit) << i;
      } else if (owner == cs.owner_of(keys[i])) {
        Placement three({"n1", "n2", "n3"});
        if (three.node_ids()[three.owner(keys[i])] != "n2") {
          EXPECT_TRUE(g->hit) << i;
        }
      }
    }
    if (!has_node(cs, "n2")) {
      dropped = true;
      break;
    }
  }
  double drop_s = std::chrono::duration<double>(Clock::now() - t_kill).count();
  ASSERT_TRUE(dropped) << "n2 still in the node set " << drop_s << " s after SIGKILL";
  // A hang check: no get waits past its own timeouts.
  EXPECT_LE(max_get_ms, 3000 + 3000 + 2000) << "a get to a dead node took too long";
  std::printf(
      "[cluster] n2 left the node set %.2f s after SIGKILL (ttl %u s, poll %u ms); "
      "slowest get meanwhile %.0f ms\n",
      drop_s, kTtlS, kPollMs, max_get_ms);
  size_t hits = 0, misses = 0;
  for (size_t i = 0; i < kBlocks; ++i) {
    bool on_n2 = false;
    {
      // Owner before the kill: recompute with the original three nodes.
      Placement three({"n1", "n2", "n3"});
      on_n2 = three.node_ids()[three.owner(keys[i])] == "n2";
    }
    auto g = cs.get(*ns, keys[i], mbv(buf));
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    if (on_n2) {
      EXPECT_FALSE(g->hit) << "key " << i << " of the dead node";
      ++misses;
    } else {
      ASSERT_TRUE(g->hit) << "key " << i << " of a live node";
      ASSERT_EQ(buf, data[i]);
      ++hits;
    }
  }
  EXPECT_EQ(misses, per_node["n2"]);
  m = cs.match_prefix(*ns, keys);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->blocks, first_n2) << "the chain breaks at the first key of the dead node";

  // A fourth node joins and takes its share of new writes.
  err = fx.start_node("n4");
  ASSERT_EQ(err, "");
  ASSERT_TRUE(cs.refresh().ok());
  ASSERT_TRUE(has_node(cs, "n4"));
  ASSERT_EQ(cs.nodes().size(), 3u);
  std::vector<kv::Key128> keys2;
  size_t on_n4 = 0;
  for (size_t i = 0; i < kBlocks; ++i) {
    keys2.push_back(block_key(1, i));
    auto b = block_bytes(keys2.back());
    if (cs.owner_of(keys2.back()) == "n4") ++on_n4;
    auto r = cs.put(*ns, keys2.back(), bv(b));
    ASSERT_TRUE(r.ok() && r->stored()) << i;
  }
  EXPECT_GE(on_n4, kBlocks / 6);
  RemoteStoreOptions ro;
  ro.port = fx.port("n4");
  auto direct = RemoteStore::open(ro);
  ASSERT_TRUE(direct.ok());
  ASSERT_TRUE((*direct)->wait_connected(2000).ok());
  auto st = (*direct)->stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->puts, on_n4) << "n4 did not receive its share";
  for (size_t i = 0; i < kBlocks; ++i) {
    auto g = cs.get(*ns, keys2[i], mbv(buf));
    ASSERT_TRUE(g.ok() && g->hit) << i;
    ASSERT_EQ(buf, block_bytes(keys2[i])) << i;
  }
  std::printf("[cluster] n4 took %zu of %zu new blocks; whole test %.2f s\n", on_n4, kBlocks,
              std::chrono::duration<double>(Clock::now() - t_start).count());
}

}  // namespace
// Runs `kvtier store stats` with `args`; returns its exit status and stdout.
std::pair<int, std::string> run_store_stats(const std::vector<std::string>& args) {
  std::string cmd = std::string(KVTIER_BIN) + " store stats";
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// etcd with user/password auth enabled (etcdctl sets up root, a role with
// read-write on the cluster's prefix and a user for kvtier): a node registers
// and a client reads the node set with the user's password; without
// credentials, or with a wrong password, etcd refuses and the password never
// appears in an error.
TEST(Cluster, EtcdWithUserPasswordAuth) {
  fs::path dir = fs::path(KVTIER_SERVICE_TEST_DIR) / "scratch" / "cluster-etcd-auth";
  fs::remove_all(dir);
  fs::create_directories(dir);
  ClusterFixture fx(dir);
  ASSERT_EQ(fx.start_etcd(), "");
  const std::string etcdctl = find_in_path("etcdctl");
  if (etcdctl.empty()) GTEST_SKIP() << "etcdctl is not installed (apt-get install etcd-client)";
  const std::string ctl = "ETCDCTL_API=3 " + etcdctl + " --endpoints=" + fx.etcd_url() + " ";
  for (const std::string& args :
       {std::string("user add root:root-secret-1"), std::string("user grant-role root root"),
        std::string("role add kvtier-rw"),
        std::string("role grant-permission kvtier-rw --prefix=true readwrite /test/"),
        std::string("user add kvtier:kv-secret-2"), std::string("user grant-role kvtier kvtier-rw"),
        std::string("auth enable")}) {
    const std::string cmd = ctl + args + " >>" + (dir / "etcdctl.log").string() + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << read_all(dir / "etcdctl.log");
  }
  const fs::path pw = dir / "kvtier.password";
  std::ofstream(pw) << "kv-secret-2\n";
  fx.set_etcd_auth({{"user", "kvtier"}, {"password_file", pw.string()}});
  ASSERT_EQ(fx.start_node("n1"), "");

  ClusterStoreOptions o;
  o.etcd_url = fx.etcd_url();
  o.etcd_prefix = "test";
  o.etcd_user = "kvtier";
  o.etcd_password_file = pw.string();
  auto cs = ClusterStore::open(o);
  ASSERT_TRUE(cs.ok()) << cs.status().to_string();
  EXPECT_EQ((*cs)->nodes().size(), 1u);

  // No credentials: etcd refuses the read.
  ClusterStoreOptions anon = o;
  anon.etcd_user.clear();
  anon.etcd_password_file.clear();
  auto refused = ClusterStore::open(anon);
  EXPECT_FALSE(refused.ok());
  // A wrong password: refused, and never echoed.
  const fs::path wrong = dir / "wrong.password";
  std::ofstream(wrong) << "not-the-password-3\n";
  auto creds = load_etcd_credentials("kvtier", wrong.string());
  ASSERT_TRUE(creds.ok());
  auto ep = parse_etcd_url(fx.etcd_url());
  ASSERT_TRUE(ep.ok());
  EtcdClient bad(*ep, 2000, *creds);
  auto r = bad.range_prefix("/test/");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().find("not-the-password-3"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("kvtier"), std::string::npos) << r.status().message();
}

// etcd behind mutual TLS (its client port https, client certificates of one
// CA required): a node registers with its own certificate; a node whose
// node_id is not its certificate's name refuses to start; a client reads
// the node set with a certificate, and without one, or over plain HTTP, it
// cannot.
TEST(Cluster, EtcdOverMutualTlsAndNodeIdentity) {
  fs::path dir = fs::path(KVTIER_SERVICE_TEST_DIR) / "scratch" / "cluster-etcd-tls";
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto pki = write_test_pki((dir / "pki").string(), {"n1", "reader"});
  ASSERT_TRUE(pki.ok()) << pki.status().to_string();
  ClusterFixture fx(dir);
  ASSERT_EQ(fx.start_etcd(&*pki), "");
  fx.set_etcd_auth({{"ca_file", pki->ca_file},
                    {"cert_file", pki->client_cert("n1")},
                    {"key_file", pki->client_key("n1")}});
  ASSERT_EQ(fx.start_node("n1"), "");
  // n1's certificate cannot register another node.
  const std::string impostor = fx.start_node("n2");
  EXPECT_NE(impostor.find("common name"), std::string::npos) << impostor;

  ClusterStoreOptions o;
  o.etcd_url = fx.etcd_url();
  o.etcd_prefix = "test";
  o.etcd_tls = {pki->ca_file, pki->client_cert("reader"), pki->client_key("reader")};
  auto cs = ClusterStore::open(o);
  ASSERT_TRUE(cs.ok()) << cs.status().to_string();
  ASSERT_EQ((*cs)->nodes().size(), 1u);
  EXPECT_EQ((*cs)->nodes()[0].id, "n1");
  // No client certificate: etcd refuses the handshake.
  ClusterStoreOptions anon = o;
  anon.etcd_tls.cert_file.clear();
  anon.etcd_tls.key_file.clear();
  EXPECT_FALSE(ClusterStore::open(anon).ok());
  // Plain HTTP to etcd's TLS port: no answer that parses.
  ClusterStoreOptions plain = o;
  plain.etcd_url = "http" + o.etcd_url.substr(5);
  plain.etcd_tls = {};
  EXPECT_FALSE(ClusterStore::open(plain).ok());
}

TEST(Cluster, StaticThreeNodesWithoutEtcdKillOne) {
  fs::path dir = fs::path(KVTIER_SERVICE_TEST_DIR) / "scratch" / "cluster-static";
  fs::remove_all(dir);
  fs::create_directories(dir);
  ClusterFixture fx(dir);  // no etcd: the nodes only listen
  std::vector<std::string> addresses;
  for (const char* id : {"n1", "n2", "n3"}) {
    ASSERT_EQ(fx.start_node(id), "");
    addresses.push_back("127.0.0.1:" + std::to_string(fx.port(id)));
  }
  // The cluster client config a user writes: ids for two nodes, the third
  // named by its address alone.
  nlohmann::json cfg = {{"nodes",
                         {{{"id", "n1"}, {"address", addresses[0]}},
                          {{"id", "n2"}, {"address", addresses[1]}},
                          addresses[2]}},
                        {"call_timeout_ms", 3000},
                        {"connect_timeout_ms", 3000}};
  auto opts = parse_cluster_client_config(cfg.dump());
  ASSERT_TRUE(opts.ok()) << opts.status().to_string();
  opts->node_options.reconnect_max_ms = 200;
  const std::string n3 = addresses[2];
  auto cs_r = ClusterStore::open(*opts);
  ASSERT_TRUE(cs_r.ok()) << cs_r.status().to_string();
  ClusterStore& cs = **cs_r;
  ASSERT_EQ(cs.nodes().size(), 3u);
  KvStore* client = &cs;  // through the interface every engine uses
  auto ns = client->register_namespace(test_namespace());
  ASSERT_TRUE(ns.ok()) << ns.status().to_string();

  // Through KvStore: one batch_put, then batch_get and match.
  constexpr size_t kBlocks = 240;
  std::vector<kv::Key128> keys;
  std::vector<std::vector<uint8_t>> data;
  std::vector<ByteView> views;
  std::map<std::string, size_t> per_node;
  for (size_t i = 0; i < kBlocks; ++i) {
    keys.push_back(block_key(7, i));
    data.push_back(block_bytes(keys.back()));
    ++per_node[cs.owner_of(keys.back())];
  }
  for (const auto& d : data) views.push_back(bv(d));
  auto br = client->batch_put(*ns, keys, views);
  ASSERT_TRUE(br.ok()) << br.status().to_string();
  for (const auto& r : *br) ASSERT_TRUE(r.stored());
  for (const std::string& id : std::vector<std::string>{"n1", "n2", n3}) {
    EXPECT_GE(per_node[id], kBlocks / 6) << id << " got too few keys";
  }
  auto m = client->match_prefix(*ns, keys);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->blocks, kBlocks);

  // Stats: every node answers; the sum is the cluster's, each node's its own.
  auto st = cs.cluster_stats();
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_EQ(st->nodes, 3u);
  EXPECT_EQ(st->answered, 3u);
  EXPECT_EQ(st->total.puts, kBlocks);
  ASSERT_EQ(st->per_node.size(), 3u);
  for (const auto& n : st->per_node) {
    ASSERT_TRUE(n.status.ok()) << n.node.id;
    EXPECT_EQ(n.stats.puts, per_node[n.node.id]) << n.node.id;
  }
  auto total = client->stats();
  ASSERT_TRUE(total.ok());
  EXPECT_EQ(total->puts, kBlocks);
  auto [rc_all, out_all] =
      run_store_stats({"--node", addresses[0], "--node", addresses[1], "--node", addresses[2],
                       "--json", "--timeout-ms", "5000"});
  EXPECT_EQ(rc_all, 0) << out_all;
  auto j_all = nlohmann::json::parse(out_all, nullptr, false);
  ASSERT_FALSE(j_all.is_discarded()) << out_all;
  EXPECT_EQ(j_all["answered"], 3);
  EXPECT_EQ(j_all["total"]["kvtier_store_puts_total"], kBlocks);

  // Kill n2: its keys miss (never an error), the other nodes' keys are
  // served byte for byte; stats counts two answering nodes.
  fx.kill_node("n2");
  std::vector<std::vector<uint8_t>> bufs(kBlocks, std::vector<uint8_t>(kObj));
  std::vector<kv::BatchGetItem> items;
  for (size_t i = 0; i < kBlocks; ++i) items.push_back(kv::BatchGetItem{keys[i], mbv(bufs[i])});
  auto bg = client->batch_get(*ns, items);
  ASSERT_TRUE(bg.ok()) << "a dead node must give misses, not errors: " << bg.status().to_string();
  size_t hits = 0, misses = 0, first_n2 = kBlocks;
  for (size_t i = 0; i < kBlocks; ++i) {
    if (cs.owner_of(keys[i]) == "n2") {
      EXPECT_FALSE((*bg)[i].hit) << "key " << i << " of the dead node";
      first_n2 = std::min(first_n2, i);
      ++misses;
    } else {
      ASSERT_TRUE((*bg)[i].hit) << "key " << i << " of a live node";
      ASSERT_EQ(bufs[i], data[i]) << i;
      ++hits;
    }
  }
  EXPECT_EQ(misses, per_node["n2"]);
  EXPECT_EQ(hits, kBlocks - per_node["n2"]);
  m = client->match_prefix(*ns, keys);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->blocks, first_n2) << "the chain breaks at the first key of the dead node";
  st = cs.cluster_stats();
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_EQ(st->nodes, 3u) << "a static list keeps the dead node in the set";
  EXPECT_EQ(st->answered, 2u);
  EXPECT_EQ(st->total.puts, kBlocks - per_node["n2"]);
  for (const auto& n : st->per_node) EXPECT_EQ(n.status.ok(), n.node.id != "n2") << n.node.id;
  auto [rc_some, out_some] =
      run_store_stats({"--node", addresses[0], "--node", addresses[1], "--node", addresses[2],
                       "--json", "--timeout-ms", "5000"});
  EXPECT_EQ(rc_some, 3) << "some nodes answered: exit 3\n" << out_some;
  auto j_some = nlohmann::json::parse(out_some, nullptr, false);
  ASSERT_FALSE(j_some.is_discarded()) << out_some;
  EXPECT_EQ(j_some["nodes"], 3);
  EXPECT_EQ(j_some["answered"], 2);
  EXPECT_EQ(j_some["total"]["kvtier_store_puts_total"], kBlocks - per_node["n2"]);
}

}  // namespace kvtier::net
