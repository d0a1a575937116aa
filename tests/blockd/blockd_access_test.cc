// Who may manage kvtier-blockd, and what it will open: the real daemon
// process, its real Unix socket and the real CLI.
//  - The socket is 0600 and a caller that is not root, the daemon's user, the
//    socket's owner or a member of its group is disconnected even when the
//    socket's mode would let it connect (an unprivileged user, as root runs
//    the suite; skipped when not root).
//  - Volumes through symbolic links, "..", hard links or outside the volume
//    folder are refused, and the files they point at are neither read nor
//    changed.
//  - Exports off loopback or to any host need the daemon's switches.
//  - TCP management is mutual TLS only: no certificate, or one from another
//    CA, is refused.
//  - 5,000 connections of a stranger and 2,000 idle ones of an allowed user
//    leave the daemon serving the CLI.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "daemon_harness.h"
#include "net/wire/tls_certs.h"

namespace {

namespace fs = std::filesystem;
using namespace kvtier::testing;  // NOLINT

constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;

class BlockdAccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(KVTIER_BLOCKD_TEST_DIR) /
           ("access-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "vols");
    outside_ = dir_ / "outside";
    fs::create_directories(outside_);
    secret_ = outside_ / "secret";
    std::ofstream(secret_) << std::string(8192, 's');
    fs::permissions(secret_, fs::perms(0600));
    config_ = dir_ / "vols" / "blockd.json";
  }
  void TearDown() override {
    if (d_.pid > 0) stop_daemon(d_, SIGTERM);
    fs::remove_all(dir_);
  }
  std::string secret_text() const {
    std::ifstream in(secret_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  fs::path dir_, outside_, secret_, config_;
  Daemon d_;
};

// Connects to `socket` as `uid`/`gid` in a child process, sends HTTP/2's
// client preface and reports whether the server answered (1), closed the
// connection without a byte (0) or the connect itself failed (2); -1 when
// the child died of a signal.
int connect_as(const std::string& socket, uid_t uid, gid_t gid) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0) _exit(3);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", socket.c_str());
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) _exit(2);
    static const char preface[] =
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
    // The server may already have closed the connection: a plain write would
    // then kill this child with SIGPIPE instead of reporting "closed".
    (void)!send(fd, preface, sizeof(preface) - 1, MSG_NOSIGNAL);
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char b[64];
    const ssize_t k = read(fd, b, sizeof(b));
    _exit(k > 0 ? 1 : 0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_F(BlockdAccessTest, SocketIsOwnerOnlyAndStrangersAreDisconnected) {
  d_ = start_daemon(config_);
  ASSERT_TRUE(d_.started);
  struct stat sb {};
  ASSERT_EQ(::stat(d_.socket.c_str(), &sb), 0);
  EXPECT_TRUE(S_ISSOCK(sb.st_mode));
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  EXPECT_EQ(cli(d_, "list").code, 0);
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as an unprivileged user";

  // The file mode keeps strangers out ...
  EXPECT_EQ(connect_as(d_.socket, kNobody, kNogroup), 2);
  // ... and so do the kernel's credentials when the mode would not.
  ASSERT_EQ(::chmod(d_.socket.c_str(), 0666), 0);
  EXPECT_EQ(connect_as(d_.socket, kNobody, kNogroup), 0);
  EXPECT_EQ(connect_as(d_.socket, 0, 0), 1);
  // The legitimate caller is still served.
  auto r = cli(d_, "create-mem m0 --size-mib 1");
  EXPECT_EQ(r.code, 0) << r.err;
}

// Opens `n` connections to `socket` as `uid`/`gid` in a child process and
// holds them until all are open; returns how many connected (-1: the child
// failed).
int flood_as(const std::string& socket, uid_t uid, gid_t gid, int n) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0) _exit(255);
    rlimit rl{};
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, static_cast<rlim_t>(n) + 64);
    setrlimit(RLIMIT_NOFILE, &rl);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", socket.c_str());
    int ok = 0;
    for (int i = 0; i < n; ++i) {
      const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
      if (fd < 0) break;
      if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) ++ok;
    }
    _exit(std::min(ok / 100, 254));  // hundreds connected
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) != 255 ? WEXITSTATUS(status) * 100 : -1;
}

uint64_t refused_metric(int metrics_port) {
  const std::string body = http_get(metrics_port, "/metrics");
  const std::string name = "\nkvtier_blockd_management_refused_total ";
  const size_t at = body.find(name);
  return at == std::string::npos ? 0 : std::stoull(body.substr(at + name.size()));
}

TEST_F(BlockdAccessTest, ThousandsOfConnectionsNeitherStarveNorCrashTheDaemon) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as an unprivileged user";
  d_ = start_daemon(config_);
  ASSERT_TRUE(d_.started);
  ASSERT_EQ(::chmod(d_.socket.c_str(), 0666), 0);  // the mode no longer keeps strangers out
  // 5,000 connections of a stranger: each is refused by its credentials.
  const int connected = flood_as(d_.socket, kNobody, kNogroup, 5000);
  EXPECT_GE(connected, 5000);
  // A connect returns once the connection is queued: wait for the daemon to
  // have looked at the last ones.
  uint64_t refused = 0;
  for (int i = 0; i < 600 && refused < 5000; ++i) {
    refused = refused_metric(d_.metrics_port);
    if (refused < 5000) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GE(refused, 5000u);
  // 2,000 idle connections of an allowed user, held open while the CLI is
  // served.
  std::vector<int> held;
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  // The daemon raises its own limit to the same hard limit; leave it room.
  const int idle = static_cast<int>(std::min<rlim_t>(2000, rl.rlim_max / 2));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", d_.socket.c_str());
  for (int i = 0; i < idle; ++i) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    held.push_back(fd);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << i;
  }
  auto r = cli(d_, "create-mem m1 --size-mib 1");
  EXPECT_EQ(r.code, 0) << r.err;
  r = cli(d_, "list");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("m1"), std::string::npos) << r.out;
  for (int fd : held) ::close(fd);
  EXPECT_EQ(::kill(d_.pid, 0), 0);  // still running
}

TEST_F(BlockdAccessTest, SocketGroupMembersMayManage) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as an unprivileged user";
  d_ = start_daemon(config_, {"--socket-group", std::to_string(kNogroup)});
  ASSERT_TRUE(d_.started);
  struct stat sb {};
  ASSERT_EQ(::stat(d_.socket.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0660u);
  EXPECT_EQ(sb.st_gid, kNogroup);
  // A member of the group: served. Nobody else (another group): refused by
  // the mode first.
  EXPECT_EQ(connect_as(d_.socket, kNobody, kNogroup), 1);
  EXPECT_EQ(connect_as(d_.socket, kNobody, kNobody - 1), 2);
}

TEST_F(BlockdAccessTest, VolumesOnlyFromTheVolumeFolderNeverThroughLinks) {
  d_ = start_daemon(config_);
  ASSERT_TRUE(d_.started);
  const fs::path vols = dir_ / "vols";
  fs::create_symlink(secret_, vols / "link.img");
  fs::create_directory_symlink(outside_, vols / "linkdir");
  fs::create_hard_link(secret_, vols / "hard.img");
  struct Case {
    std::string args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"create-file a --path " + secret_.string(), "not beneath a volume directory"},
      {"create-file a --path /etc/shadow", "not beneath a volume directory"},
      {"create-file a --path " + (vols / "link.img").string(), "symbolic link"},
      {"create-file a --path " + (vols / "link.img").string() + " --size-mib 1", "symbolic link"},
      {"create-file a --path " + (vols / "linkdir" / "secret").string(), "symbolic link"},
      {"create-file a --path " + (vols / "linkdir" / "new").string() + " --size-mib 1",
       "symbolic link"},
      {"create-file a --path " + vols.string() + "/../outside/secret", "'..'"},
      {"create-file a --path " + (vols / "hard.img").string(), "hard links"},
  };
  for (const auto& c : cases) {
    auto r = cli(d_, c.args + " --buffered");
    EXPECT_EQ(r.code, 1) << c.args;
    EXPECT_NE(r.err.find("permission denied"), std::string::npos) << c.args << " -> " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << " -> " << r.err;
  }
  // Nothing was created, read or changed.
  auto r = cli(d_, "list --json");
  EXPECT_EQ(r.out.find("\"a\""), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(outside_ / "new"));
  EXPECT_EQ(secret_text(), std::string(8192, 's'));
  // A file in the folder is fine, created owner-only.
  r = cli(d_, "create-file ok --path " + (vols / "ok.img").string() + " --size-mib 1");
  ASSERT_EQ(r.code, 0) << r.err;
  struct stat sb {};
  ASSERT_EQ(::stat((vols / "ok.img").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
}

TEST_F(BlockdAccessTest, ExportsOffLoopbackOrToAnyHostNeedSwitches) {
  d_ = start_daemon(config_);
  ASSERT_TRUE(d_.started);
  ASSERT_EQ(cli(d_, "create-mem m0 --size-mib 4").code, 0);
  const std::string port = " --port " + std::to_string(free_port());
  auto r = cli(d_,
               "export create nqn.2024-01.io.kvtier:x --volume m0 --address 0.0.0.0 "
               "--allow-host nqn.2024-01.io.kvtier:h" +
                   port);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--export-address"), std::string::npos) << r.err;
  r = cli(d_, "export create nqn.2024-01.io.kvtier:x --volume m0 --allow-any-host" + port);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--allow-any-host-exports"), std::string::npos) << r.err;
  r = cli(d_, "export list --json");
  EXPECT_EQ(r.out.find("nqn.2024-01.io.kvtier:x"), std::string::npos) << r.out;
  stop_daemon(d_, SIGTERM);

  d_ = start_daemon(config_, {"--allow-any-host-exports"});
  ASSERT_TRUE(d_.started);
  r = cli(d_, "export create nqn.2024-01.io.kvtier:x --volume m0 --allow-any-host" + port);
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST_F(BlockdAccessTest, TcpManagementIsMutualTlsOnly) {
  // A CA, a server certificate for 127.0.0.1 and a client certificate it
  // signed; and a client certificate of another CA.
  auto pki = kvtier::net::write_test_pki((dir_ / "certs").string(), {"admin"});
  ASSERT_TRUE(pki.ok()) << pki.status().to_string();
  auto rogue = kvtier::net::write_test_pki((dir_ / "rogue").string(), {"admin"});
  ASSERT_TRUE(rogue.ok()) << rogue.status().to_string();
  // TCP without TLS: the daemon will not start.
  Daemon bad = try_start_daemon(config_, {"--tcp-listen", "127.0.0.1:0"});
  EXPECT_FALSE(bad.started);
  stop_daemon(bad, SIGKILL);

  d_ = start_daemon(config_, {"--tcp-listen", "127.0.0.1:0", "--tls-cert", pki->server_cert,
                              "--tls-key", pki->server_key, "--tls-client-ca", pki->ca_file});
  ASSERT_TRUE(d_.started);
  ASSERT_GT(d_.grpc_port, 0);
  const std::string server = " --server 127.0.0.1:" + std::to_string(d_.grpc_port);
  auto run = [&](const std::string& tls) {
    return cli_raw("blk list" + server + " --timeout 10 " + tls);
  };
  auto ok = run("--tls-ca " + pki->ca_file + " --tls-cert " + pki->client_cert("admin") +
                " --tls-key " + pki->client_key("admin"));
  EXPECT_EQ(ok.code, 0) << ok.err;
  auto foreign = run("--tls-ca " + pki->ca_file + " --tls-cert " + rogue->client_cert("admin") +
                     " --tls-key " + rogue->client_key("admin"));
  EXPECT_EQ(foreign.code, 1) << foreign.out;
  auto none = run("");
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("mutual TLS"), std::string::npos) << none.err;
}

}  // namespace
