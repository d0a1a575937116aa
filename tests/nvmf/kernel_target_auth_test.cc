// kvtier's NVMe/TCP host authenticating with DH-HMAC-CHAP to the Linux
// kernel's target (nvmet with configfs host keys, in a linux-nvme-peer guest):
// the right keys (both ways, SHA-512, ffdhe3072) connect and move data; a
// wrong host key, a wrong controller key and no key are refused.
//
// The tool's `target` mode sets no host keys, so the guest runs in `host`
// mode with a script that configures nvmet itself. A guest cannot be
// connected to from outside in that mode, so the script carries each
// connection out instead: it opens tunnels to this test's relay (guest
// 10.0.2.2 is the host's loopback), each piped by busybox nc into the guest's
// own nvmet port, and the relay joins each connection of kvtier's host to
// the next tunnel. Every process the test starts is killed at its end.
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/buffer.h"
#include "common/testing/temp_dir.h"
#include "nvmf/dhchap.h"
#include "nvmf/host_device.h"

namespace kvtier::nvmf {
namespace {

using namespace std::chrono_literals;
constexpr const char* kNqn = "nqn.2024-01.io.kvtier:kernel-auth-target";
constexpr const char* kHostNqn = "nqn.2024-01.io.kvtier:kernel-auth-host";
constexpr int kTunnels = 8;  // connections the test makes, with room to spare

int listen_loopback(uint16_t* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(fd, 16) != 0) {
    return -1;
  }
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

// Joins each connection on host_port() to the next tunnel the guest opened
// to tunnel_port(), copying bytes both ways until either side closes.
class Relay {
 public:
  Relay() {
    tunnel_fd_ = listen_loopback(&tunnel_port_);
    host_fd_ = listen_loopback(&host_port_);
    threads_.emplace_back([this] { accept_tunnels(); });
    threads_.emplace_back([this] { accept_hosts(); });
  }
  ~Relay() {
    stop_ = true;
    ::shutdown(tunnel_fd_, SHUT_RDWR);
    ::shutdown(host_fd_, SHUT_RDWR);
    {
      std::lock_guard lk(mu_);
      for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    std::lock_guard lk(mu_);
    for (int fd : open_) ::close(fd);
    ::close(tunnel_fd_);
    ::close(host_fd_);
  }
  bool ok() const { return tunnel_fd_ >= 0 && host_fd_ >= 0; }
  uint16_t tunnel_port() const { return tunnel_port_; }
  uint16_t host_port() const { return host_port_; }
  size_t tunnels_waiting() {
    std::lock_guard lk(mu_);
    return tunnels_.size();
  }

 private:
  void accept_tunnels() {
    for (;;) {
      const int fd = ::accept4(tunnel_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0 || stop_) return;
      std::lock_guard lk(mu_);
      open_.push_back(fd);
      tunnels_.push_back(fd);
      cv_.notify_all();
    }
  }
  void accept_hosts() {
    for (;;) {
      const int fd = ::accept4(host_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0 || stop_) return;
      std::unique_lock lk(mu_);
      open_.push_back(fd);
      if (!cv_.wait_for(lk, 60s, [&] { return stop_ || !tunnels_.empty(); }) || stop_) return;
      const int tunnel = tunnels_.front();
      tunnels_.pop_front();
      threads_.emplace_back([fd, tunnel] { copy_both_ways(fd, tunnel); });
    }
  }
  static void copy_both_ways(int a, int b) {
    std::vector<char> buf(1 << 16);
    pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    for (;;) {
      if (::poll(p, 2, 1000) < 0 && errno != EINTR) break;
      bool done = false;
      for (int i = 0; i < 2 && !done; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = ::recv(p[i].fd, buf.data(), buf.size(), 0);
        if (n <= 0) {
          done = true;
          break;
        }
        for (ssize_t sent = 0; sent < n;) {
          const ssize_t w = ::send(p[1 - i].fd, buf.data() + sent, size_t(n - sent), MSG_NOSIGNAL);
          if (w <= 0) {
            done = true;
            break;
          }
          sent += w;
        }
      }
      if (done) break;
    }
    ::shutdown(a, SHUT_RDWR);
    ::shutdown(b, SHUT_RDWR);
  }

  int tunnel_fd_ = -1, host_fd_ = -1;
  uint16_t tunnel_port_ = 0, host_port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int> tunnels_;
  std::vector<int> open_;  // every socket accepted, closed at the end
  std::vector<std::thread> threads_;
};

// The guest: nvmet on a RAM disk, the host's keys in configfs, tunnels out.
std::string guest_script(const std::string& host_key, const std::string& ctrl_key) {
  return std::string(R"(set -e
modprobe nvmet
modprobe nvmet-tcp
modprobe brd rd_nr=1 rd_size=16384
[ -d /sys/kernel/config/nvmet ] || mount -t configfs none /sys/kernel/config
N=/sys/kernel/config/nvmet
S=$N/subsystems/)") +
         kNqn + R"(
H=$N/hosts/$LNP_HOSTNQN
mkdir "$S"
echo 0 > "$S/attr_allow_any_host"
mkdir "$H"
echo ')" +
         host_key + R"(' > "$H/dhchap_key"
echo ')" +
         ctrl_key + R"(' > "$H/dhchap_ctrl_key"
echo 'hmac(sha512)' > "$H/dhchap_hash"
echo ffdhe3072 > "$H/dhchap_dhgroup"
ln -s "$H" "$S/allowed_hosts/$LNP_HOSTNQN"
mkdir "$S/namespaces/1"
printf /dev/ram0 > "$S/namespaces/1/device_path"
echo 1 > "$S/namespaces/1/enable"
P=$N/ports/1
mkdir "$P"
echo tcp > "$P/addr_trtype"
echo ipv4 > "$P/addr_adrfam"
echo 127.0.0.1 > "$P/addr_traddr"
echo 4420 > "$P/addr_trsvcid"
ln -s "$S" "$P/subsystems/)" +
         kNqn + R"("
i=0
while [ $i -lt )" +
         std::to_string(kTunnels) + R"( ]; do
  mkfifo /tmp/t$i
  nc 10.0.2.2 "$LNP_PORT" < /tmp/t$i | nc 127.0.0.1 4420 > /tmp/t$i &
  i=$((i + 1))
done
echo "kvtier-guest: READY"
sleep 600
)";
}

// `linux-nvme-peer host --no-connect --script`, its console on a pipe.
class Guest {
 public:
  Guest(const std::string& tool, uint16_t port, const std::string& script) {
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      close(out[0]);
      const std::string p = std::to_string(port);
      execl(tool.c_str(), tool.c_str(), "-q", "host", "--port", p.c_str(), "--nqn", kNqn,
            "--hostnqn", kHostNqn, "--no-connect", "--cpus", "2", "--timeout", "600", "--script",
            script.c_str(), (char*)nullptr);
      _exit(127);
    }
    close(out[1]);
    out_ = fdopen(out[0], "r");
  }
  ~Guest() {
    if (pid_ > 0) ::kill(pid_, SIGKILL), waitpid(pid_, nullptr, 0);
    if (out_) fclose(out_);
  }
  // Reads the console until `line` (true) or the guest ends (false).
  bool wait_for(const std::string& line, std::string* console) {
    char buf[1024];
    while (out_ && fgets(buf, sizeof buf, out_)) {
      *console += buf;
      if (std::string(buf).find(line) != std::string::npos) return true;
    }
    return false;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
};

HostOptions options(uint16_t port, const dhchap::Secret* host, const dhchap::Secret* ctrl) {
  HostOptions o;
  o.port = port;
  o.subnqn = kNqn;
  o.hostnqn = kHostNqn;
  o.io_queues = 1;
  o.io_timeout = 20000ms;
  o.reconnect_delay = 0ms;
  if (host) o.dhchap_secret = dhchap::format_secret(*host);
  if (ctrl) o.dhchap_ctrl_secret = dhchap::format_secret(*ctrl);
  return o;
}

TEST(NvmfKernelTargetAuth, KvtierHostAuthenticatesToTheKernelTarget) {
  const char* tool = std::getenv("LINUX_NVME_PEER");
  ASSERT_NE(tool, nullptr) << "set LINUX_NVME_PEER to the linux-nvme-peer tool";
  Relay relay;
  ASSERT_TRUE(relay.ok());
  const dhchap::Secret host_key = *dhchap::generate_secret(1, 32);
  const dhchap::Secret ctrl_key = *dhchap::generate_secret(3, 64);
  const dhchap::Secret wrong = *dhchap::generate_secret(1, 32);
  kvtier::testing::TempDir dir("kernel_auth");
  const std::string script = dir.path() + "/guest.sh";
  std::ofstream(script) << guest_script(dhchap::format_secret(host_key),
                                        dhchap::format_secret(ctrl_key));
  Guest guest(tool, relay.tunnel_port(), script);
  std::string console;
  ASSERT_TRUE(guest.wait_for("kvtier-guest: READY", &console)) << console;
  for (int i = 0; i < 600 && relay.tunnels_waiting() < size_t(kTunnels); ++i) {
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_EQ(relay.tunnels_waiting(), size_t(kTunnels)) << console;

  // Wrong keys first (one connection each: the admin queue fails).
  // The kernel target answers a wrong host response with Failure1 and tears
  // the queue down at the same time, so the refusal arrives as either.
  auto bad_host = NvmeTcpDevice::connect(options(relay.host_port(), &wrong, &ctrl_key));
  ASSERT_FALSE(bad_host.ok());
  const bool refused_by_failure1 = bad_host.status().code() == StatusCode::kPermissionDenied;
  const bool dropped_after_response =
      bad_host.status().code() == StatusCode::kUnavailable &&
      bad_host.status().message().find("after the host's DH-HMAC-CHAP response") !=
          std::string::npos;
  EXPECT_TRUE(refused_by_failure1 || dropped_after_response) << bad_host.status().to_string();
  auto bad_ctrl = NvmeTcpDevice::connect(options(relay.host_port(), &host_key, &wrong));
  EXPECT_EQ(bad_ctrl.status().code(), StatusCode::kPermissionDenied)
      << bad_ctrl.status().to_string();
  EXPECT_NE(bad_ctrl.status().message().find("controller"), std::string::npos);
  auto none = NvmeTcpDevice::connect(options(relay.host_port(), nullptr, nullptr));
  EXPECT_EQ(none.status().code(), StatusCode::kPermissionDenied) << none.status().to_string();

  std::printf("wrong host key: %s\nwrong controller key: %s\nno key: %s\n",
              bad_host.status().to_string().c_str(), bad_ctrl.status().to_string().c_str(),
              none.status().to_string().c_str());
  auto dev = NvmeTcpDevice::connect(options(relay.host_port(), &host_key, &ctrl_key));
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  EXPECT_EQ((*dev)->capacity(), 16u << 20);
  AlignedBuffer w(1 << 20), r(1 << 20);
  for (size_t i = 0; i < w.size(); ++i) w.data()[i] = std::byte(i * 131 + 7);
  ASSERT_TRUE((*dev)->write_sync(0, w.view()).ok());
  ASSERT_TRUE((*dev)->read_sync(0, r.view()).ok());
  EXPECT_EQ(std::memcmp(w.data(), r.data(), w.size()), 0);
}

}  // namespace
}  // namespace kvtier::nvmf
