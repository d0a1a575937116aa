// The target against hostile hosts: a host that stops reading with reads in
// flight, a flood of idle connections, writes whose R2T is never answered,
// keep-alive switched off, a second connection for one queue and more
// controllers than allowed. Each case checks that the target cuts off only
// the offender, within its configured bound, and counts what it did. Waits
// are on conditions with bounds far beyond the configured ones, so a busy
// machine slows these tests down but does not fail them.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "blk/dev/mem_device.h"
#include "blk/dev/uring_device.h"
#include "common/testing/eventually.h"
#include "common/testing/temp_dir.h"
#include "nvmf/host_device.h"
#include "nvmf/target.h"
#include "nvmf/testing/one_namespace.h"
#include "nvmf/testing/raw_host.h"

namespace kvtier::nvmf {
namespace {

using namespace std::chrono_literals;
using kvtier::testing::eventually;
using testing::cqe_status;
using testing::RawHost;
constexpr const char* kNqn = testing::kRawNqn;
constexpr const char* kHost = testing::kRawHostNqn;

TargetConfig base_config(std::shared_ptr<blk::BlockDevice> dev) {
  TargetConfig c = testing::one_namespace_target(std::move(dev), kNqn, kHost);
  c.maxh2cdata = 16 << 10;
  return c;
}

HostOptions host_options(uint16_t port) {
  HostOptions o = testing::host_options_for(port, kNqn, kHost);
  o.io_queues = 1;
  o.reconnect_delay = 0ms;  // a test of one connection: fail at the first loss
  return o;
}

// Admin queue connected and enabled; returns the controller id.
uint16_t enable(RawHost& h, uint32_t kato_ms = 5000) {
  EXPECT_EQ(h.handshake().size(), 128u);
  const uint16_t cntlid = h.connect(0, kHost, 0xFFFF, kato_ms);
  h.capsule(RawHost::enable_sqe(2));
  auto r = h.recv_pdu();
  EXPECT_EQ(r.size(), 24u);
  return cntlid;
}

// Get Features Keep Alive Timer (0Fh) on an admin queue.
uint32_t served_kato(RawHost& h) {
  Sqe g = RawHost::base_sqe(0x0A, 30, 0x5A, 0);
  put32(&g[40], 0x0F);
  h.capsule(g);
  auto r = h.recv_pdu();
  EXPECT_EQ(r.size(), 24u);
  return r.size() == 24 ? get32(&r[8]) : 0;
}

int thread_count() {
  std::ifstream f("/proc/self/status");
  std::string key;
  while (f >> key) {
    if (key == "Threads:") {
      int n = 0;
      f >> n;
      return n;
    }
  }
  return -1;
}

// A target on a file volume behind io_uring, whose one completion thread
// serves every connection of the volume, and a host that stops reading its
// socket with 128 reads of 128 KiB in flight (its receive buffer is tiny, so
// the target's sends stall at once).
struct StalledReader {
  static constexpr uint32_t kIo = 128 << 10;

  explicit StalledReader(uint32_t send_timeout_ms) {
    blk::UringOptions uo;
    uo.path = dir.file("vol");
    uo.create_size = 32 << 20;
    uo.direct = false;
    auto vol = blk::UringDevice::open(uo);
    EXPECT_TRUE(vol.ok()) << vol.status().to_string();
    if (!vol.ok()) return;
    TargetConfig c = base_config(std::shared_ptr<blk::BlockDevice>(std::move(vol.value())));
    c.send_timeout_ms = send_timeout_ms;
    auto t = NvmfTarget::start(c);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    if (!t.ok()) return;
    target = std::move(*t);
    admin = std::make_unique<RawHost>(target->port());
    const uint16_t cntlid = enable(*admin, /*kato_ms=*/120000);  // outlives the test
    stalled = std::make_unique<RawHost>(target->port(), /*rcvbuf=*/4096);
    stalled->handshake();
    EXPECT_EQ(stalled->connect(1, kHost, cntlid, 0, /*sqsize=*/127), cntlid);
    for (uint16_t cid = 0; cid < 128; ++cid) {
      stalled->capsule(RawHost::io_sqe(0x02, cid, uint64_t(cid % 64) * 32, 32, kIo));
    }
  }
  // Reads `n` times 128 KiB as another host; false at the first failure.
  bool other_host_reads(int n) {
    auto other = NvmeTcpDevice::connect(host_options(target->port()));
    if (!other.ok()) return false;
    AlignedBuffer buf(kIo, 4096);
    for (int i = 0; i < n; ++i) {
      if (!(*other)->read_sync(uint64_t(i % 200) * kIo, buf.view()).ok()) return false;
    }
    return true;
  }

  kvtier::testing::TempDir dir{"nvmf_slow_reader"};
  std::unique_ptr<NvmfTarget> target;
  std::unique_ptr<RawHost> admin, stalled;
};

// While the stalled host is still connected (its send timeout is far away),
// another host's reads on the same volume complete: no device completion
// waits on the stalled socket. (Sending from the completion thread, as the
// target once did, fails this: the other host's reads time out.)
TEST(TargetLimits, HostThatStopsReadingDoesNotStallOtherHosts) {
  StalledReader s(/*send_timeout_ms=*/600000);
  ASSERT_TRUE(s.target);
  EXPECT_TRUE(s.other_host_reads(256));
  EXPECT_EQ(s.target->counters().send_stalls, 0u);  // still stalled, not yet dropped
}

// With a short send timeout the stalled connection is dropped, counted, and
// the other host is served before and after.
TEST(TargetLimits, HostThatStopsReadingIsDroppedAfterTheSendTimeout) {
  StalledReader s(/*send_timeout_ms=*/500);
  ASSERT_TRUE(s.target);
  EXPECT_TRUE(eventually([&] { return s.target->counters().send_stalls == 1; }, 60s));
  EXPECT_TRUE(s.stalled->closed_by_peer());
  EXPECT_TRUE(s.other_host_reads(16));
  EXPECT_EQ(s.target->counters().send_stalls, 1u);
}

// Thousands of connections that never send ICReq: at most max_connections
// of them hold a thread at once, the rest are closed at accept, the held
// ones are dropped at the handshake deadline, and then a real host connects.
TEST(TargetLimits, ConnectionFloodIsCappedAndIdleConnectionsExpire) {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  constexpr rlim_t kWant = 5000 + 256;
  if (lim.rlim_cur < kWant && lim.rlim_max >= kWant) {
    lim.rlim_cur = kWant;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  getrlimit(RLIMIT_NOFILE, &lim);
  const int flood = int(std::min<rlim_t>(5000, lim.rlim_cur - 256));
  ASSERT_GE(flood, 512) << "RLIMIT_NOFILE too small for a flood";

  TargetConfig c = base_config(std::make_shared<blk::MemDevice>(4 << 20, 4096, 1));
  c.max_connections = 16;
  c.handshake_timeout_ms = 300;
  auto t = NvmfTarget::start(c);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  NvmfTarget& target = **t;
  const int threads_before = thread_count();

  std::vector<int> fds;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(target.port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  size_t most_live = 0;
  int most_threads = 0;
  for (int i = 0; i < flood; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ASSERT_GE(fd, 0);
    (void)::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);  // EINPROGRESS
    fds.push_back(fd);
    if (i % 64 == 63 || i == flood - 1) {
      // Paced by batches so that the kernel's accept queue (128) never
      // overflows: a connection dropped there never reaches the target, and
      // the count below must be exact.
      const uint64_t sent = uint64_t(i) + 1;
      ASSERT_TRUE(eventually(
          [&] {
            return target.counters().connections_refused + target.connections_served() >= sent;
          },
          60s))
          << "connections not accepted: " << sent;
      most_live = std::max(most_live, target.live_connections());
      most_threads = std::max(most_threads, thread_count());
    }
  }
  // Every flood connection is either refused at accept or dropped at the
  // handshake deadline; none is served.
  EXPECT_TRUE(eventually(
      [&] {
        most_live = std::max(most_live, target.live_connections());
        const TargetCounters n = target.counters();
        return n.connections_refused + n.handshake_timeouts >= uint64_t(flood);
      },
      120s));
  for (int fd : fds) ::close(fd);
  const TargetCounters n = target.counters();
  EXPECT_EQ(n.connections_refused + n.handshake_timeouts, uint64_t(flood));
  EXPECT_EQ(n.handshake_timeouts, target.connections_served());  // none was served
  EXPECT_GE(n.handshake_timeouts, 1u);
  EXPECT_GE(n.connections_refused, 1u);
  EXPECT_LE(most_live, 16u);
  // A connection thread each, at most: the flood cannot cost more threads.
  EXPECT_LE(most_threads - threads_before, 16);

  ASSERT_TRUE(eventually([&] { return target.live_connections() == 0; }, 30s));
  auto host = NvmeTcpDevice::connect(host_options(target.port()));
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  AlignedBuffer buf(4096, 4096);
  EXPECT_TRUE((*host)->read_sync(0, buf.view()).ok());
}

// Writes whose R2T is never answered hold write buffers: the target-wide
// budget refuses the write that would pass it (Command Interrupted, which a
// host retries), and the connection that owes data is dropped at the R2T
// deadline, returning its budget to everyone else.
TEST(TargetLimits, UnansweredR2tIsBoundedAndDropped) {
  auto dev = std::make_shared<blk::MemDevice>(8 << 20, 4096, 1);
  TargetConfig c = base_config(dev);
  c.max_transfer = 256 << 10;
  c.max_r2t_bytes = 1 << 20;
  c.r2t_timeout_ms = 300;
  auto t = NvmfTarget::start(c);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  NvmfTarget& target = **t;

  RawHost admin(target.port());
  const uint16_t cntlid = enable(admin);
  ASSERT_NE(cntlid, 0xFFFF);
  RawHost io(target.port());
  io.handshake();
  ASSERT_EQ(io.connect(1, kHost, cntlid), cntlid);
  constexpr uint32_t kIo = 256 << 10;
  for (uint16_t cid = 0; cid < 5; ++cid) io.capsule(RawHost::io_sqe(0x01, cid, cid * 64, 64, kIo));
  int r2ts = 0, interrupted = 0;
  for (int i = 0; i < 5; ++i) {
    auto p = io.recv_pdu();
    ASSERT_EQ(p.size(), 24u);
    if (p[0] == 0x09) ++r2ts;
    if (p[0] == 0x05) {
      const auto st = cqe_status(p);
      EXPECT_EQ(st.sc, 0x21);  // Command Interrupted
      EXPECT_FALSE(st.dnr);    // retryable
      ++interrupted;
    }
  }
  EXPECT_EQ(r2ts, 4);
  EXPECT_EQ(interrupted, 1);
  EXPECT_TRUE(io.closed_by_peer());
  EXPECT_TRUE(eventually([&] { return target.counters().r2t_timeouts == 1; }, 30s));
  EXPECT_EQ(target.counters().r2t_refused, 1u);

  // The budget is back: another host writes 256 KiB through R2T and reads it.
  auto host = NvmeTcpDevice::connect(host_options(target.port()));
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  AlignedBuffer w(kIo, 4096), r(kIo, 4096);
  for (size_t i = 0; i < kIo; ++i) w.data()[i] = std::byte(i * 13);
  ASSERT_TRUE((*host)->write_sync(1 << 20, w.view()).ok());
  ASSERT_TRUE((*host)->read_sync(1 << 20, r.view()).ok());
  EXPECT_EQ(std::memcmp(w.data(), r.data(), kIo), 0);
}

// KATO 0 (keep-alive off) is served as max_kato_ms, a tiny KATO as
// min_kato_ms, in Connect and in Set Features alike; Get Features says so.
TEST(TargetLimits, KeepAliveCannotBeSwitchedOff) {
  TargetConfig c = base_config(std::make_shared<blk::MemDevice>(4 << 20, 4096, 1));
  c.min_kato_ms = 500;
  c.max_kato_ms = 60000;
  auto t = NvmfTarget::start(c);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  RawHost off((*t)->port());
  ASSERT_NE(enable(off, 0), 0xFFFF);
  EXPECT_EQ(served_kato(off), 60000u);
  RawHost tiny((*t)->port());
  ASSERT_NE(enable(tiny, 10), 0xFFFF);
  EXPECT_EQ(served_kato(tiny), 500u);
  Sqe set = RawHost::base_sqe(0x09, 31, 0x5A, 0);
  put32(&set[40], 0x0F);
  put32(&set[44], 0);  // Set Features KATO 0
  tiny.capsule(set);
  ASSERT_EQ(tiny.recv_pdu().size(), 24u);
  EXPECT_EQ(served_kato(tiny), 60000u);
  EXPECT_EQ((*t)->counters().kato_clamped, 3u);
}

// A second connection for a queue id that is already served is refused
// (Command Sequence Error), and the first keeps working.
TEST(TargetLimits, DuplicateQueueIdIsRefused) {
  TargetConfig c = base_config(std::make_shared<blk::MemDevice>(4 << 20, 4096, 1));
  auto t = NvmfTarget::start(c);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  RawHost admin((*t)->port());
  const uint16_t cntlid = enable(admin);
  ASSERT_NE(cntlid, 0xFFFF);
  RawHost first((*t)->port()), second((*t)->port());
  first.handshake();
  second.handshake();
  ASSERT_EQ(first.connect(1, kHost, cntlid), cntlid);
  EXPECT_EQ(second.connect(1, kHost, cntlid), 0xFFFF);
  EXPECT_EQ((second.last_status() >> 1) & 0xFF, 0x0C);  // Command Sequence Error
  EXPECT_EQ((*t)->counters().duplicate_queues, 1u);
  first.capsule(RawHost::io_sqe(0x02, 9, 0, 1, 4096));
  auto d = first.recv_pdu();
  ASSERT_EQ(d.size(), 24u + 4096);
  EXPECT_EQ(d[0], 0x07);  // C2HData
}

// Admin Connects beyond max_controllers are refused as Controller Busy
// (retryable); once one controller goes, a new one is accepted.
TEST(TargetLimits, ControllerLimitRefusesThenRecovers) {
  TargetConfig c = base_config(std::make_shared<blk::MemDevice>(4 << 20, 4096, 1));
  c.max_controllers = 2;
  auto t = NvmfTarget::start(c);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto one = std::make_unique<RawHost>((*t)->port());
  RawHost two((*t)->port()), three((*t)->port());
  ASSERT_NE(enable(*one), 0xFFFF);
  ASSERT_NE(enable(two), 0xFFFF);
  three.handshake();
  EXPECT_EQ(three.connect(0, kHost), 0xFFFF);
  EXPECT_EQ((three.last_status() >> 1) & 0xFF, 0x81);  // Controller Busy
  EXPECT_EQ((three.last_status() >> 9) & 0x7, 1);      // SCT: command specific
  EXPECT_EQ(three.last_status() >> 15, 0);             // not DNR
  EXPECT_EQ((*t)->counters().controllers_refused, 1u);
  one.reset();  // its admin queue closes: the controller goes
  EXPECT_TRUE(eventually(
      [&] {
        RawHost again((*t)->port());
        again.handshake();
        return again.connect(0, kHost) != 0xFFFF;
      },
      30s));
}

// Controller ids wrap: destroying a controller that is already gone must not
// destroy the newer one that now holds its id.
TEST(TargetLimits, DestroyingAGoneControllerSparesTheOneReusingItsId) {
  TargetConfig c = base_config(std::make_shared<blk::MemDevice>(1 << 20, 4096, 1));
  c.max_controllers = 0xFFEF;
  TargetState state(c);
  const Subsystem* sub = &state.subsystems()[0];
  auto old = state.create_controller(sub, kHost, {}, 5000);
  ASSERT_TRUE(old);
  const uint16_t id = old->cntlid;
  state.destroy_controller(old);
  std::vector<std::shared_ptr<Controller>> held;
  std::shared_ptr<Controller> reuser;
  for (int i = 0; i < 0xFFEF && !reuser; ++i) {
    auto n = state.create_controller(sub, kHost, {}, 5000);
    ASSERT_TRUE(n) << i;
    if (n->cntlid == id) reuser = n;
    held.push_back(std::move(n));
  }
  ASSERT_TRUE(reuser) << "the id was never reused";
  state.destroy_controller(old);  // stale: must do nothing
  EXPECT_EQ(state.find_controller(id), reuser);
}

}  // namespace
}  // namespace kvtier::nvmf
