// kvtier's NVMe/TCP host (NvmeTcpDevice) against the Linux kernel's target
// (nvmet-tcp in a linux-nvme-peer QEMU guest): connect, write the peer's
// pattern, read it back; SIGKILL the guest mid-run and check that I/O fails
// within fast_io_fail_tmo instead of hanging; start a new guest target on the
// same port and check that the device reconnects by itself. Every process
// this test starts is killed at the end, also on failure.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "nvmf/host_device.h"

namespace kvtier::nvmf {
namespace {

using namespace std::chrono_literals;
constexpr const char* kNqn = "nqn.2024-01.io.kvtier:kernel-target";

uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// One `linux-nvme-peer target` process; killed (SIGKILL) when destroyed.
class KernelTarget {
 public:
  KernelTarget(const std::string& tool, uint16_t port) {
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      close(out[0]);
      const std::string p = std::to_string(port);
      execl(tool.c_str(), tool.c_str(), "-q", "target", "--port", p.c_str(), "--nqn", kNqn,
            "--size-mb", "16", "--seconds", "600", (char*)nullptr);
      _exit(127);
    }
    close(out[1]);
    out_ = fdopen(out[0], "r");
  }
  ~KernelTarget() { kill_now(); }
  // Blocks until READY (true) or the tool exits / times out (false).
  bool wait_ready(std::chrono::seconds limit) {
    if (!out_) return false;
    const auto end = std::chrono::steady_clock::now() + limit;
    char line[512];
    std::string acc;
    while (std::chrono::steady_clock::now() < end) {
      if (!fgets(line, sizeof line, out_)) return false;
      if (std::string(line).rfind("READY ", 0) == 0) return true;
    }
    return false;
  }
  void kill_now() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    if (out_) fclose(out_), out_ = nullptr;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
};

// Block i of the linux-nvme-peer pattern (4096 bytes).
void pattern_block(uint64_t i, std::byte* b) {
  char head[17];
  snprintf(head, sizeof head, "LNP%012llu:", static_cast<unsigned long long>(i));
  std::memcpy(b, head, 16);
  for (int j = 16; j < 4096; ++j) b[j] = std::byte(33 + (i + j) % 94);
}

TEST(NvmfKernelTarget, WriteReadFailFastAndReconnect) {
  const char* tool = std::getenv("LINUX_NVME_PEER");
  ASSERT_NE(tool, nullptr) << "set LINUX_NVME_PEER to the linux-nvme-peer tool";
  const uint16_t port = free_port();
  auto target = std::make_unique<KernelTarget>(tool, port);
  ASSERT_TRUE(target->wait_ready(240s)) << "kernel target did not get ready";

  HostOptions o;
  o.port = port;
  o.subnqn = kNqn;
  o.io_queues = 2;
  o.kato = 5000ms;
  o.io_timeout = 5000ms;
  o.reconnect_delay = 1000ms;
  o.fast_io_fail_tmo = 2000ms;
  o.ctrl_loss_tmo = 180000ms;
  auto dev = NvmeTcpDevice::connect(o);
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  EXPECT_EQ((*dev)->capacity(), 16u << 20);

  constexpr size_t kBytes = 2 << 20;
  AlignedBuffer w(kBytes), r(kBytes);
  for (uint64_t i = 0; i < kBytes / 4096; ++i) pattern_block(i, w.data() + 4096 * i);
  ASSERT_TRUE((*dev)->write_sync(0, w.view()).ok());
  ASSERT_TRUE((*dev)->flush_sync().ok());
  ASSERT_TRUE((*dev)->read_sync(0, r.view()).ok());
  EXPECT_EQ(std::memcmp(w.data(), r.data(), kBytes), 0);

  // The guest vanishes: I/O must fail after fast_io_fail_tmo (plus the
  // detection time), never hang. The check is that it fails within 30 s, far
  // beyond those 7 s, so that a busy machine does not fail it; how soon it
  // failed is printed, not bounded.
  target->kill_now();
  const auto gone = std::chrono::steady_clock::now();
  Status st;
  while (std::chrono::steady_clock::now() - gone < 30s) {
    st = (*dev)->read_sync(0, r.subview(0, 4096));
    if (!st.ok()) break;
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
  const std::chrono::duration<double> failed_after = std::chrono::steady_clock::now() - gone;
  std::printf("I/O failed %.1f s after the target vanished\n", failed_after.count());

  // A new kernel target on the same address: the device reconnects itself.
  target = std::make_unique<KernelTarget>(tool, port);
  ASSERT_TRUE(target->wait_ready(240s));
  Status back;
  for (int i = 0; i < 60; ++i) {
    back = (*dev)->write_sync(0, w.subview(0, 65536));
    if (back.ok()) break;
    std::this_thread::sleep_for(500ms);
  }
  ASSERT_TRUE(back.ok()) << back.to_string();
  EXPECT_GE((*dev)->reconnects(), 1u);
  ASSERT_TRUE((*dev)->read_sync(0, r.subview(0, 65536)).ok());
  EXPECT_EQ(std::memcmp(w.data(), r.data(), 65536), 0);
}

}  // namespace
}  // namespace kvtier::nvmf
