// kvtier-blockd end to end: the real daemon process, driven by the real
// `kvtier blk` CLI through the gRPC API. Volumes on O_DIRECT files; the
// daemon is SIGKILLed and restarted and must come back with the same
// volumes, arrays, partitions, QoS and data; malformed requests are refused
// with clear errors; /metrics shows every volume. NVMe/TCP exports are
// created through the CLI and read and written with kvtier's own NVMe/TCP
// host (NvmeTcpDevice), across a SIGKILL and restart of the daemon. A second
// daemon's export is consumed as a remote volume and mirrored with a local
// file; that daemon is SIGKILLed (the array keeps serving, the remote volume
// says reconnecting) and restarted (the remote volume reconnects by itself).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/buffer.h"
#include "daemon_harness.h"
#include "nvmf/dhchap.h"
#include "nvmf/host_device.h"

namespace {

namespace fs = std::filesystem;
using namespace kvtier::testing;  // NOLINT

std::string random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class BlockdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(KVTIER_BLOCKD_TEST_DIR) /
           ("blockd-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    config_ = dir_ / "blockd.json";
    d_ = start_daemon(config_);
  }
  void TearDown() override {
    stop_daemon(d_, SIGTERM);
    fs::remove_all(dir_);
  }
  // Creates file volumes f0..f<n-1> of `mib` MiB each.
  void make_files(int n, int mib) {
    for (int i = 0; i < n; ++i) {
      auto r = cli(d_, "create-file f" + std::to_string(i) + " --path " +
                           (dir_ / ("f" + std::to_string(i))).string() + " --size-mib " +
                           std::to_string(mib));
      ASSERT_EQ(r.code, 0) << r.err;
    }
  }
  void write_data(const std::string& vol, uint64_t off, const std::string& data) {
    const fs::path f = dir_ / "in.bin";
    std::ofstream(f, std::ios::binary) << data;
    auto r = cli(d_, "write " + vol + " --offset " + std::to_string(off) + " --file " + f.string());
    ASSERT_EQ(r.code, 0) << r.err;
  }
  std::string read_data(const std::string& vol, uint64_t off, size_t len) {
    const fs::path f = dir_ / "out.bin";
    auto r = cli(d_, "read " + vol + " --offset " + std::to_string(off) + " --length " +
                         std::to_string(len) + " --file " + f.string());
    EXPECT_EQ(r.code, 0) << r.err;
    return read_file(f);
  }

  fs::path dir_;
  fs::path config_;
  Daemon d_;
};

TEST_F(BlockdTest, KilledDaemonComesBackWithSameVolumesAndData) {
  make_files(4, 8);
  if (HasFatalFailure()) return;
  auto r =
      cli(d_, "create-array r5 --level raid5 --member f0 --member f1 --member f2 --strip-kib 16");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("online"), std::string::npos) << r.out;
  r = cli(d_, "create-partition p0 --parent r5 --offset-mib 1 --length-mib 4");
  ASSERT_EQ(r.code, 0) << r.err;
  r = cli(d_, "qos p0 --read-iops 5000 --write-mbps 200 --burst 0.2");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string data = random_bytes(1 << 20, 1);
  write_data("p0", 64 << 10, data);
  if (HasFatalFailure()) return;
  EXPECT_EQ(read_data("p0", 64 << 10, data.size()), data);

  // SIGKILL: no clean shutdown at all.
  stop_daemon(d_, SIGKILL);
  d_ = start_daemon(config_);
  r = cli(d_, "list --json");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* name : {"\"f0\"", "\"f3\"", "\"r5\"", "\"p0\""}) {
    EXPECT_NE(r.out.find(name), std::string::npos) << name << " missing after restart:\n" << r.out;
  }
  EXPECT_EQ(r.out.find("unavailable"), std::string::npos) << r.out;
  r = cli(d_, "show p0 --json");
  ASSERT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("\"read_iops\": \"5000\""), std::string::npos) << r.out;
  r = cli(d_, "show r5");
  EXPECT_NE(r.out.find("state     online"), std::string::npos) << r.out;
  EXPECT_EQ(read_data("p0", 64 << 10, data.size()), data);

  // Fail a member, replace it with f3, rebuild, then a clean restart.
  r = cli(d_, "fail-member r5 --slot 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("degraded"), std::string::npos) << r.out;
  EXPECT_EQ(read_data("p0", 64 << 10, data.size()), data);
  r = cli(d_, "replace r5 --slot 1 --device f3");
  ASSERT_EQ(r.code, 0) << r.err;
  for (int i = 0; i < 200; ++i) {
    r = cli(d_, "show r5");
    if (r.out.find("state     online") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(r.out.find("state     online"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("f3"), std::string::npos) << r.out;
  EXPECT_EQ(stop_daemon(d_, SIGTERM), 0);
  d_ = start_daemon(config_);
  r = cli(d_, "show r5");
  EXPECT_NE(r.out.find("state     online"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("f3"), std::string::npos) << r.out;
  EXPECT_EQ(read_data("p0", 64 << 10, data.size()), data);
  // f1 left the array and can be deleted; f0 cannot.
  EXPECT_EQ(cli(d_, "delete f1").code, 0);
  r = cli(d_, "delete f0");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("used by 'r5'"), std::string::npos) << r.err;
}

TEST_F(BlockdTest, MalformedRequestsAreRefusedClearly) {
  make_files(2, 4);
  if (HasFatalFailure()) return;
  struct Case {
    std::string args;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"create-array a --level raid7 --member f0 --member f1", "unknown RAID level"},
      {"create-array a --level raid5 --member f0 --member f1", "at least 3 members"},
      {"create-array a --level raid1 --member f0 --member nope", "no volume 'nope'"},
      {"create-array a --level raid1 --member f0 --member f0", "listed twice"},
      {"create-array a --level raid1 --member f0 --member f1 --strip-kib 3", "strip"},
      {"create-file 'bad name' --path /nonexistent/x", "volume name"},
      {"create-file f0 --path " + (dir_ / "again").string(), "exists"},
      {"create-file g --path /nonexistent-dir/x --size-mib 1", "/nonexistent-dir/x"},
      {"create-partition p --parent f0 --offset-mib 3 --length-mib 2", "past the end"},
      {"show nothing", "no volume 'nothing'"},
      {"replace f0 --slot 0 --device f1", "not a redundant array"},
      {"read f0 --offset 100 --length 4096 --file /dev/null", "block size"},
      {"read f0 --offset 0 --length 8388608 --file /dev/null", "at most"},
      {"qos f0 --burst 100", "burst"},
      {"delete nothing", "no volume"},
  };
  for (const auto& c : cases) {
    auto r = cli(d_, c.args);
    EXPECT_EQ(r.code, 1) << c.args;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << " -> " << r.err;
  }
  // Nothing above changed the config: two file volumes only.
  auto r = cli(d_, "list --json");
  EXPECT_EQ(r.out.find("\"a\""), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\"p\""), std::string::npos) << r.out;
  // A corrupt config stops the daemon at start with a message naming it.
  stop_daemon(d_, SIGTERM);
  std::ofstream(config_) << "{\"format\":\"kvtier-blockd-config\",\"version\":99,\"volumes\":[]}";
  const std::string cmd = std::string(KVTIER_BLOCKD_BIN) + " --config " + config_.string() +
                          " --socket " + socket_path_for(config_) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  char buf[1024] = {};
  const size_t k = fread(buf, 1, sizeof(buf) - 1, p);
  const int status = pclose(p);
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(std::string(buf, k).find("version 99"), std::string::npos) << buf;
  d_.pid = -1;
}

TEST_F(BlockdTest, MetricsListEveryVolumeAndArray) {
  make_files(2, 4);
  if (HasFatalFailure()) return;
  ASSERT_EQ(cli(d_, "create-array m1 --level raid1 --member f0 --member f1").code, 0);
  write_data("m1", 0, random_bytes(8192, 2));
  const std::string body = http_get(d_.metrics_port, "/metrics");
  EXPECT_NE(body.find("kvtier_blockd_volume_up{volume=\"f0\",kind=\"file\"} 1"), std::string::npos)
      << body;
  EXPECT_NE(body.find("kvtier_blockd_volume_writes_total{volume=\"m1\",kind=\"raid1\"} 1"),
            std::string::npos)
      << body;
  EXPECT_NE(body.find("kvtier_blockd_array_members{volume=\"m1\",state=\"active\"} 2"),
            std::string::npos)
      << body;
}

constexpr const char* kExportNqn = "nqn.2024-01.io.kvtier:blockd-export-test";
constexpr const char* kHostA = "nqn.2024-01.io.kvtier:host-a";
constexpr const char* kHostB = "nqn.2024-01.io.kvtier:host-b";

kvtier::Result<std::unique_ptr<kvtier::nvmf::NvmeTcpDevice>> connect_host(int port,
                                                                          const char* hostnqn) {
  using namespace std::chrono_literals;
  kvtier::nvmf::HostOptions o;
  o.port = static_cast<uint16_t>(port);
  o.subnqn = kExportNqn;
  o.hostnqn = hostnqn;
  o.io_queues = 2;
  o.io_timeout = 5000ms;
  o.reconnect_delay = 200ms;
  o.ctrl_loss_tmo = 2000ms;
  return kvtier::nvmf::NvmeTcpDevice::connect(o);
}

std::string nvme_read(kvtier::nvmf::NvmeTcpDevice& dev, uint64_t off, size_t len) {
  kvtier::AlignedBuffer b(len);
  const auto st = dev.read_sync(off, b.view());
  EXPECT_TRUE(st.ok()) << st.to_string();
  return std::string(reinterpret_cast<const char*>(b.data()), len);
}

TEST_F(BlockdTest, NvmeTcpExportServesAVolumeAndSurvivesKillAndRestart) {
  make_files(2, 16);
  if (HasFatalFailure()) return;
  const int port = free_port();
  auto r = cli(d_, std::string("export create ") + kExportNqn + " --volume f0 --port " +
                       std::to_string(port) + " --allow-host " + kHostA + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"serving\""), std::string::npos) << r.out;

  // Write through NVMe/TCP as an allowed host; read back both ways.
  const std::string data = random_bytes(1 << 20, 7);
  {
    auto dev = connect_host(port, kHostA);
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    EXPECT_EQ((*dev)->capacity(), 16u << 20);
    const auto st = (*dev)->write_sync(64 << 10, kvtier::as_bytes_view(data.data(), data.size()));
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE((*dev)->flush_sync().ok());
    EXPECT_EQ(nvme_read(**dev, 64 << 10, data.size()), data);
  }
  EXPECT_EQ(read_data("f0", 64 << 10, data.size()), data);  // the volume itself holds it

  // Deny by default: a host not listed cannot connect.
  auto denied = connect_host(port, kHostB);
  EXPECT_FALSE(denied.ok());

  // An exported volume cannot be deleted or built upon.
  r = cli(d_, "delete f0");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("exported as"), std::string::npos) << r.err;
  r = cli(d_, "create-array a --level raid1 --member f0 --member f1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("exported as"), std::string::npos) << r.err;
  // Bad requests are refused clearly.
  r = cli(d_, std::string("export create ") + kExportNqn + " --volume f1 --port " +
                  std::to_string(free_port()));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("exists"), std::string::npos) << r.err;
  r = cli(d_, "export create bad-nqn --volume f1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("must start with 'nqn.'"), std::string::npos) << r.err;
  r = cli(d_, "export create nqn.2024-01.io.kvtier:x --volume nope");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("no volume 'nope'"), std::string::npos) << r.err;
  r = cli(d_, "export create nqn.2024-01.io.kvtier:x --volume f1 --port " + std::to_string(port));
  EXPECT_EQ(r.code, 1) << "a second listener on a port in use";

  // The export's own traffic is on /metrics.
  const std::string body = http_get(d_.metrics_port, "/metrics");
  EXPECT_NE(
      body.find(std::string("kvtier_blockd_export_up{nqn=\"") + kExportNqn + "\",volume=\"f0\"} 1"),
      std::string::npos)
      << body;
  EXPECT_NE(body.find(std::string("kvtier_blockd_export_written_bytes_total{nqn=\"") + kExportNqn +
                      "\",volume=\"f0\"} 1048576"),
            std::string::npos)
      << body;

  // SIGKILL and restart: the same export on the same port with the same data.
  stop_daemon(d_, SIGKILL);
  d_ = start_daemon(config_);
  r = cli(d_, "export list --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find(kExportNqn), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"port\": " + std::to_string(port)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"serving\""), std::string::npos) << r.out;
  {
    auto dev = connect_host(port, kHostA);
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    EXPECT_EQ(nvme_read(**dev, 64 << 10, data.size()), data);
  }

  // Deleting the export frees the volume.
  r = cli(d_, std::string("export delete ") + kExportNqn);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(connect_host(port, kHostA).ok());
  r = cli(d_, "export list --json");
  EXPECT_EQ(r.out.find(kExportNqn), std::string::npos) << r.out;
  EXPECT_EQ(cli(d_, "delete f0").code, 0);
}

// Writes a DH-HMAC-CHAP secret to `path` with `mode`; returns its text.
std::string write_secret(const fs::path& path, int mode, uint8_t transform = 1) {
  const std::string s =
      kvtier::nvmf::dhchap::format_secret(*kvtier::nvmf::dhchap::generate_secret(transform, 32));
  std::ofstream(path) << s << "\n";
  fs::permissions(path, static_cast<fs::perms>(mode), fs::perm_options::replace);
  return s;
}

// An export whose host must authenticate (DH-HMAC-CHAP, both ways), created
// through the CLI from owner-only key files; the keys survive a SIGKILL and
// restart (in a config only root reads) and are never shown; the daemon's own
// remote volume authenticates to the export with the same files.
TEST_F(BlockdTest, ExportWithHostKeysAuthenticatesAcrossRestartAndRemoteVolumesUseThem) {
  make_files(1, 16);
  if (HasFatalFailure()) return;
  const int port = free_port();
  const std::string host_key = write_secret(dir_ / "host.key", 0600);
  const std::string ctrl_key = write_secret(dir_ / "ctrl.key", 0600, 3);
  write_secret(dir_ / "open.key", 0644);
  const std::string create = std::string("export create ") + kExportNqn + " --volume f0 --port " +
                             std::to_string(port) + " --allow-host " + kHostA +
                             " --host-ctrl-key " + kHostA + "=" + (dir_ / "ctrl.key").string();
  // A key file other users can read is refused before anything is sent.
  auto r = cli(d_, create + " --host-key " + kHostA + "=" + (dir_ / "open.key").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("chmod 600"), std::string::npos) << r.err;
  r = cli(d_, create + " --host-key " + kHostA + "=" + (dir_ / "host.key").string() + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("authenticated"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(host_key.substr(10, 20)), std::string::npos) << "a secret was shown";

  const auto connect = [&](const std::string& secret, const std::string& ctrl) {
    using namespace std::chrono_literals;
    kvtier::nvmf::HostOptions o;
    o.port = static_cast<uint16_t>(port);
    o.subnqn = kExportNqn;
    o.hostnqn = kHostA;
    o.reconnect_delay = 0ms;
    o.dhchap_secret = secret;
    o.dhchap_ctrl_secret = ctrl;
    return kvtier::nvmf::NvmeTcpDevice::connect(o);
  };
  const std::string data = random_bytes(256 << 10, 11);
  {
    auto dev = connect(host_key, ctrl_key);
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    ASSERT_TRUE((*dev)->write_sync(0, kvtier::as_bytes_view(data.data(), data.size())).ok());
  }
  EXPECT_EQ(connect("", "").status().code(), kvtier::StatusCode::kPermissionDenied);
  EXPECT_EQ(connect(write_secret(dir_ / "other.key", 0600), "").status().code(),
            kvtier::StatusCode::kPermissionDenied);

  // The config now holds secrets: only its owner may read it.
  EXPECT_EQ(fs::status(config_).permissions() & (fs::perms::group_all | fs::perms::others_all),
            fs::perms::none);
  stop_daemon(d_, SIGKILL);
  d_ = start_daemon(config_);
  EXPECT_EQ(connect("", "").status().code(), kvtier::StatusCode::kPermissionDenied);
  {
    auto dev = connect(host_key, ctrl_key);
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    EXPECT_EQ(nvme_read(**dev, 0, data.size()), data);
  }

  // A remote volume of this daemon on that export: refused without its
  // secret, served with it.
  const std::string remote = "create-remote r0 --port " + std::to_string(port) + " --nqn " +
                             kExportNqn + " --hostnqn " + kHostA + " --ctrl-loss-tmo 2";
  r = cli(d_, remote);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("DH-HMAC-CHAP"), std::string::npos) << r.err;
  r = cli(d_, remote + " --dhchap-secret-file " + (dir_ / "host.key").string() +
                  " --dhchap-ctrl-secret-file " + (dir_ / "ctrl.key").string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_data("r0", 0, data.size()), data);
}

// Polls `show NAME --json` until its output contains `needle` or `seconds` pass.
std::string wait_for_show(const Daemon& d, const std::string& name, const std::string& needle,
                          double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::string last;
  while (std::chrono::steady_clock::now() < end) {
    last = cli(d, "show " + name + " --json").out;
    if (last.find(needle) != std::string::npos) return last;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return last;
}

TEST_F(BlockdTest, RemoteNvmeTcpMemberReconnectsAfterItsTargetRestarts) {
  constexpr const char* kRemoteNqn = "nqn.2024-01.io.kvtier:shared-tier-0";
  // The storage node: a second daemon exporting a file volume to this daemon's host NQN.
  const fs::path node_dir = dir_ / "node";
  fs::create_directories(node_dir);
  Daemon node = start_daemon(node_dir / "blockd.json");
  ASSERT_TRUE(node.started);
  auto r = cli(node, "create-file t0 --path " + (node_dir / "t0").string() + " --size-mib 16");
  ASSERT_EQ(r.code, 0) << r.err;
  const int port = free_port();
  r = cli(node, std::string("export create ") + kRemoteNqn + " --volume t0 --port " +
                    std::to_string(port) + " --allow-host nqn.2024-01.io.kvtier:blockd");
  ASSERT_EQ(r.code, 0) << r.err;

  // Bad remote requests are refused clearly and leave nothing behind.
  r = cli(d_, "create-remote bad --nqn not-an-nqn --port " + std::to_string(port));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("is not a subsystem NQN"), std::string::npos) << r.err;
  r = cli(d_, std::string("create-remote bad --nqn ") + kRemoteNqn +
                  " --hostnqn nqn.2024-01.io.kvtier:stranger --port " + std::to_string(port));
  EXPECT_EQ(r.code, 1) << "a host NQN the target does not allow";
  EXPECT_EQ(cli(d_, "show bad").code, 1);

  // This daemon: a local file mirrored with the remote namespace.
  make_files(1, 16);
  if (HasFatalFailure()) return;
  r = cli(d_, std::string("create-remote r0 --nqn ") + kRemoteNqn + " --port " +
                  std::to_string(port) + " --reconnect-delay 0.2 --fast-io-fail-tmo 1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"kind\": \"remote\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"state\": \"online\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"capacity_bytes\": \"16777216\""), std::string::npos) << r.out;
  r = cli(d_, "create-array m --level raid1 --member f0 --member r0");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string a = random_bytes(1 << 20, 11);
  write_data("m", 0, a);
  if (HasFatalFailure()) return;
  EXPECT_EQ(read_data("m", 0, a.size()), a);

  // The storage node dies: the remote volume reconnects in the background, the
  // mirror keeps serving reads and takes writes on its local member.
  stop_daemon(node, SIGKILL);
  EXPECT_NE(wait_for_show(d_, "r0", "\"reconnecting\"", 10).find("\"reconnecting\""),
            std::string::npos);
  const std::string b = random_bytes(1 << 20, 12);
  const auto t0 = std::chrono::steady_clock::now();
  write_data("m", 1 << 20, b);
  if (HasFatalFailure()) return;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30))
      << "a write to the mirror waited on the dead member instead of failing it";
  EXPECT_EQ(read_data("m", 0, a.size()), a);
  EXPECT_EQ(read_data("m", 1 << 20, b.size()), b);
  EXPECT_NE(cli(d_, "show m --json").out.find("\"degraded\""), std::string::npos);
  std::string body = http_get(d_.metrics_port, "/metrics");
  EXPECT_NE(body.find("kvtier_blockd_remote_connected{volume=\"r0\"} 0"), std::string::npos)
      << body;

  // The node comes back on the same port: the host reconnects by itself.
  node = start_daemon(node_dir / "blockd.json");
  ASSERT_TRUE(node.started);
  const std::string shown = wait_for_show(d_, "r0", "\"reconnects\": \"1\"", 15);
  EXPECT_NE(shown.find("\"reconnects\": \"1\""), std::string::npos) << shown;
  EXPECT_EQ(shown.find("\"reconnecting\""), std::string::npos) << shown;
  body = http_get(d_.metrics_port, "/metrics");
  EXPECT_NE(body.find("kvtier_blockd_remote_connected{volume=\"r0\"} 1"), std::string::npos)
      << body;
  EXPECT_NE(body.find("kvtier_blockd_remote_reconnects_total{volume=\"r0\"} 1"), std::string::npos)
      << body;

  // This daemon restarts: the remote volume is restored from the config and
  // the mirror still returns both writes.
  stop_daemon(d_, SIGKILL);
  d_ = start_daemon(config_);
  r = cli(d_, "show r0 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"state\": \"online\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(kRemoteNqn), std::string::npos) << r.out;
  EXPECT_EQ(read_data("m", 0, a.size()), a);
  EXPECT_EQ(read_data("m", 1 << 20, b.size()), b);
  stop_daemon(d_, SIGTERM);  // before its target, so its host does not wait on reconnects
  d_ = start_daemon(config_);
  stop_daemon(node, SIGTERM);
}

TEST_F(BlockdTest, RemoteVolumeIsFailedOnceItsErrorBudgetIsSpent) {
  constexpr const char* kRemoteNqn = "nqn.2024-01.io.kvtier:shared-tier-1";
  const fs::path node_dir = dir_ / "node";
  fs::create_directories(node_dir);
  Daemon node = start_daemon(node_dir / "blockd.json");
  ASSERT_TRUE(node.started);
  auto r = cli(node, "create-file t0 --path " + (node_dir / "t0").string() + " --size-mib 8");
  ASSERT_EQ(r.code, 0) << r.err;
  const int port = free_port();
  r = cli(node, std::string("export create ") + kRemoteNqn + " --volume t0 --port " +
                    std::to_string(port) + " --allow-host nqn.2024-01.io.kvtier:blockd");
  ASSERT_EQ(r.code, 0) << r.err;

  // This daemon fails a volume after 2 I/O errors.
  stop_daemon(d_, SIGTERM);
  d_ = start_daemon(config_, {"--degraded-after", "1", "--error-budget", "2"});
  r = cli(d_, std::string("create-remote r0 --nqn ") + kRemoteNqn + " --port " +
                  std::to_string(port) + " --reconnect-delay 0.2 --fast-io-fail-tmo 0.3");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string data = random_bytes(64 << 10, 21);
  write_data("r0", 0, data);
  EXPECT_EQ(read_data("r0", 0, data.size()), data);

  stop_daemon(node, SIGKILL);
  EXPECT_NE(wait_for_show(d_, "r0", "\"reconnecting\"", 10).find("\"reconnecting\""),
            std::string::npos);
  // Each read waits at most fast_io_fail_tmo, then fails; the second error
  // spends the budget.
  const fs::path out = dir_ / "out.bin";
  const std::string read_cmd = "read r0 --offset 0 --length 4096 --file " + out.string();
  EXPECT_EQ(cli(d_, read_cmd).code, 1);
  EXPECT_EQ(cli(d_, read_cmd).code, 1);
  std::string shown = cli(d_, "show r0 --json").out;
  EXPECT_NE(shown.find("\"state\": \"failed\""), std::string::npos) << shown;
  // A failed volume refuses at once, without waiting on the transport: the
  // health layer answers ("... is failed"), not the transport's timeout.
  const auto refused = cli(d_, read_cmd);
  EXPECT_EQ(refused.code, 1);
  EXPECT_NE(refused.err.find("is failed"), std::string::npos) << refused.err;

  // The node comes back and the host reconnects, but the volume stays failed
  // until an operator acts: its errors are not forgotten silently.
  node = start_daemon(node_dir / "blockd.json");
  shown = wait_for_show(d_, "r0", "\"reconnects\": \"1\"", 15);
  EXPECT_NE(shown.find("\"reconnects\": \"1\""), std::string::npos) << shown;
  EXPECT_NE(shown.find("\"state\": \"failed\""), std::string::npos) << shown;
  stop_daemon(d_, SIGTERM);
  d_ = start_daemon(config_);
  stop_daemon(node, SIGTERM);
}

}  // namespace
