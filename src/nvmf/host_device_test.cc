// NvmeTcpDevice against kvtier's own target over loopback: data integrity on
// several queues, flush and trim, fail-fast while the target is gone and
// reconnection when a new target appears on the same port (under load).
#include "nvmf/host_device.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "blk/mem_device.h"
#include "nvmf/target.h"

namespace kvtier::nvmf {
namespace {

using namespace std::chrono_literals;
constexpr const char* kNqn = "nqn.2024-01.io.kvtier:host-test";
constexpr const char* kHost = "nqn.2024-01.io.kvtier:host-test-host";

TargetConfig target_config(std::shared_ptr<blk::BlockDevice> dev, uint16_t port) {
  TargetConfig c;
  c.port = port;
  SubsystemConfig s;
  s.nqn = kNqn;
  s.allowed_hosts = {kHost};
  s.namespaces.push_back(std::move(dev));
  c.subsystems.push_back(s);
  c.maxh2cdata = 64 << 10;
  return c;
}

HostOptions host_options(uint16_t port) {
  HostOptions o;
  o.port = port;
  o.subnqn = kNqn;
  o.hostnqn = kHost;
  o.io_queues = 2;
  o.kato = 2000ms;
  o.io_timeout = 3000ms;
  o.reconnect_delay = 200ms;
  o.fast_io_fail_tmo = 500ms;
  o.ctrl_loss_tmo = 20000ms;
  return o;
}

TEST(NvmeTcpDevice, WritesReadsFlushesTrimsThroughOwnTarget) {
  auto dev = std::make_shared<blk::MemDevice>(16 << 20, 4096, 1);
  auto t = NvmfTarget::start(target_config(dev, 0));
  ASSERT_TRUE(t.ok());
  HostOptions o = host_options((*t)->port());
  o.hdgst = o.ddgst = true;
  auto h = NvmeTcpDevice::connect(o);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ((*h)->capacity(), 16u << 20);
  EXPECT_EQ((*h)->block_size(), 4096u);
  AlignedBuffer w(3 << 20), r(3 << 20);
  for (size_t i = 0; i < w.size(); ++i) w.data()[i] = std::byte(i * 31 + (i >> 12));
  ASSERT_TRUE((*h)->write_sync(1 << 20, w.view()).ok());
  ASSERT_TRUE((*h)->flush_sync().ok());
  EXPECT_EQ(std::memcmp(dev->raw().data() + (1 << 20), w.data(), w.size()), 0);
  ASSERT_TRUE((*h)->read_sync(1 << 20, r.view()).ok());
  EXPECT_EQ(std::memcmp(r.data(), w.data(), w.size()), 0);
  ASSERT_TRUE((*h)->trim_sync(1 << 20, 1 << 20).ok());
  EXPECT_EQ(dev->raw()[(1 << 20) + 5], std::byte{0});  // MemDevice zero-fills trimmed ranges
  // Past the end: refused locally before anything is sent.
  EXPECT_FALSE((*h)->read_sync(16 << 20, r.subview(0, 4096)).ok());
}

TEST(NvmeTcpDevice, UnlistedHostCannotConnect) {
  auto dev = std::make_shared<blk::MemDevice>(1 << 20, 4096, 1);
  auto t = NvmfTarget::start(target_config(dev, 0));
  ASSERT_TRUE(t.ok());
  HostOptions o = host_options((*t)->port());
  o.hostnqn = "nqn.2024-01.io.kvtier:stranger";
  auto h = NvmeTcpDevice::connect(o);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("0x184"), std::string::npos) << h.status().message();
}

TEST(NvmeTcpDevice, FailsFastThenReconnectsWhenTargetRestartsUnderLoad) {
  auto dev = std::make_shared<blk::MemDevice>(8 << 20, 4096, 1);
  auto t = NvmfTarget::start(target_config(dev, 0));
  ASSERT_TRUE(t.ok());
  const uint16_t port = (*t)->port();
  auto h = NvmeTcpDevice::connect(host_options(port));
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  std::atomic<bool> stop{false};
  std::atomic<int> ok_ios{0}, failed_ios{0};
  std::thread load([&] {
    AlignedBuffer b(64 << 10);
    uint64_t off = 0;
    while (!stop) {
      std::memset(b.data(), int(off >> 16), b.size());
      const Status st = (*h)->write_sync(off, b.view());
      (st.ok() ? ok_ios : failed_ios)++;
      off = (off + b.size()) % (8 << 20);
    }
  });
  std::this_thread::sleep_for(300ms);
  EXPECT_GT(ok_ios.load(), 0);
  t->reset();  // the target goes away under load
  const auto gone = std::chrono::steady_clock::now();
  // I/O must fail (not hang) once fast_io_fail_tmo (500 ms) has passed.
  AlignedBuffer probe(4096);
  Status st;
  while (std::chrono::steady_clock::now() - gone < 5s) {
    st = (*h)->read_sync(0, probe.view());
    if (!st.ok()) break;
  }
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - gone, 3s);
  // A new target on the same port: the device reconnects by itself.
  auto t2 = NvmfTarget::start(target_config(dev, port));
  ASSERT_TRUE(t2.ok()) << t2.status().to_string();
  Status back;
  for (int i = 0; i < 50; ++i) {
    back = (*h)->read_sync(0, probe.view());
    if (back.ok()) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(back.ok()) << back.to_string();
  EXPECT_GE((*h)->reconnects(), 1u);
  stop = true;
  load.join();
  // Data written after the reconnect lands on the device.
  AlignedBuffer w(4096), r(4096);
  std::memset(w.data(), 0x77, 4096);
  ASSERT_TRUE((*h)->write_sync(4096 * 7, w.view()).ok());
  ASSERT_TRUE((*h)->read_sync(4096 * 7, r.view()).ok());
  EXPECT_EQ(std::memcmp(r.data(), w.data(), 4096), 0);
  EXPECT_GT(failed_ios.load() + ok_ios.load(), 0);
}

}  // namespace
}  // namespace kvtier::nvmf
