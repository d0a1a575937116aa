// NvmeTcpDevice against kvtier's own target over loopback: data integrity on
// several queues, flush and trim, fail-fast while the target is gone and
// reconnection when a new target appears on the same port (under load).
#include "nvmf/host_device.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "blk/dev/mem_device.h"
#include "blk/stack/faulty_device.h"
#include "blk/testing/test_util.h"
#include "common/testing/eventually.h"
#include "nvmf/target.h"
#include "nvmf/testing/one_namespace.h"

namespace kvtier::nvmf {
namespace {

using namespace std::chrono_literals;
using kvtier::testing::eventually;
constexpr const char* kNqn = "nqn.2024-01.io.kvtier:host-test";
constexpr const char* kHost = "nqn.2024-01.io.kvtier:host-test-host";

TargetConfig target_config(std::shared_ptr<blk::BlockDevice> dev, uint16_t port) {
  TargetConfig c = testing::one_namespace_target(std::move(dev), kNqn, kHost, port);
  c.maxh2cdata = 64 << 10;
  return c;
}

HostOptions host_options(uint16_t port) {
  HostOptions o = testing::host_options_for(port, kNqn, kHost);
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

// A target serving `dev`, and a host connected to it over one I/O queue
// (destroyed host first).
struct OneQueueSetup {
  std::unique_ptr<NvmfTarget> target;
  std::unique_ptr<NvmeTcpDevice> host;
};

void connect_one_queue(std::shared_ptr<blk::BlockDevice> dev, OneQueueSetup& setup,
                       bool digests = false) {
  auto t = NvmfTarget::start(target_config(std::move(dev), 0));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  setup.target = std::move(*t);
  HostOptions o = host_options(setup.target->port());
  o.io_queues = 1;
  o.hdgst = o.ddgst = digests;
  auto h = NvmeTcpDevice::connect(o);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  setup.host = std::move(*h);
}

// Reads of one command go out from the caller's thread and call back from
// the queue's receiver: counted as such, one at a time; a read issued from
// inside a callback goes out the same way through the dispatcher thread (no
// submitter waits for it); and a device destroyed with reads in flight
// calls every one back, once, first.
TEST(NvmeTcpDevice, ReadsGoOutWithoutAThreadEachAndAllCallBack) {
  auto dev = std::make_shared<blk::MemDevice>(16 << 20, 4096, 1);
  for (size_t i = 0; i < dev->raw().size(); ++i) dev->raw()[i] = std::byte(i * 7 + (i >> 12));
  OneQueueSetup setup;
  connect_one_queue(dev, setup);
  if (HasFatalFailure()) return;
  NvmeTcpDevice& host = *setup.host;
  auto matches = [&](const AlignedBuffer& b, uint64_t off) {
    return std::memcmp(b.data(), dev->raw().data() + off, b.size()) == 0;
  };
  AlignedBuffer buf(64 << 10);
  blk::testing::Completions reads;
  for (int i = 0; i < 20; ++i) {
    host.read(uint64_t(i) << 16, buf.view(), [&](Status st) { reads.done(st); });
    ASSERT_TRUE(reads.wait_for(i + 1)) << "read " << i << " never called back";
    ASSERT_EQ(reads.failed(), 0u) << reads.last_error().to_string();
    EXPECT_TRUE(matches(buf, uint64_t(i) << 16)) << i;
  }
  EXPECT_EQ(host.async_reads(), 20u);

  AlignedBuffer inner(4096);
  blk::testing::Completions inner_read;
  host.read(0, buf.view(), [&](Status) {
    host.read(8192, inner.view(), [&](Status st) { inner_read.done(st); });
  });
  ASSERT_TRUE(inner_read.wait_for(1)) << "the read issued from a callback never called back";
  EXPECT_EQ(inner_read.failed(), 0u) << inner_read.last_error().to_string();
  EXPECT_TRUE(matches(inner, 8192));
  EXPECT_EQ(host.from_callbacks(), 1u);
  EXPECT_EQ(host.async_reads(), 22u);
  EXPECT_EQ(host.blocking_requests(), 0u);

  // Each callback issues one more read, which may find the device being
  // destroyed: it is called back too (sent, or failed at once), before the
  // destructor returns.
  std::atomic<int> called{0}, inner_called{0};
  std::vector<AlignedBuffer> bufs, inner_bufs;
  for (int i = 0; i < 32; ++i) bufs.emplace_back(64 << 10), inner_bufs.emplace_back(4096);
  for (int i = 0; i < 32; ++i) {
    host.read(uint64_t(i) << 16, bufs[i].view(), [&, i](Status) {
      called.fetch_add(1);
      host.read(uint64_t(i) << 16, inner_bufs[i].view(),
                [&](Status) { inner_called.fetch_add(1); });
    });
  }
  setup.host.reset();
  EXPECT_EQ(called.load(), 32);
  EXPECT_EQ(inner_called.load(), 32);
}

// Writes of one command go out from the caller's thread too: small ones in
// the capsule, large ones (over the target's 128 KiB in-capsule size, pulled
// with R2T in 64 KiB H2CData PDUs) with their data sent by the queue's data
// sender; flush and trim the same way. With data digests on, every byte
// lands where it belongs.
TEST(NvmeTcpDevice, WritesFlushesAndTrimsGoOutWithoutAThreadEach) {
  auto dev = std::make_shared<blk::MemDevice>(16 << 20, 4096, 1);
  OneQueueSetup setup;
  connect_one_queue(dev, setup, /*digests=*/true);
  if (HasFatalFailure()) return;
  NvmeTcpDevice& host = *setup.host;
  constexpr size_t kSmall = 16 << 10, kLarge = 320 << 10;
  AlignedBuffer w(8 * (kSmall + kLarge));
  for (size_t i = 0; i < w.size(); ++i) w.data()[i] = std::byte(i * 13 + (i >> 12) + 1);
  blk::testing::Completions writes;
  uint64_t at = 0;
  for (int i = 0; i < 8; ++i) {  // all sent before any is waited for
    host.write(at, w.subview(at, kSmall), [&](Status st) { writes.done(st); });
    at += kSmall;
    host.write(at, w.subview(at, kLarge), [&](Status st) { writes.done(st); });
    at += kLarge;
  }
  ASSERT_TRUE(writes.wait_for(16)) << "a write never called back";
  ASSERT_EQ(writes.failed(), 0u) << writes.last_error().to_string();
  EXPECT_EQ(host.async_writes(), 16u);
  EXPECT_EQ(std::memcmp(dev->raw().data(), w.data(), w.size()), 0);

  blk::testing::Completions others;
  host.flush([&](Status st) { others.done(st); });
  host.trim(0, 64 << 10, [&](Status st) { others.done(st); });
  ASSERT_TRUE(others.wait_for(2));
  ASSERT_EQ(others.failed(), 0u) << others.last_error().to_string();
  EXPECT_EQ(dev->raw()[100], std::byte{0});  // MemDevice zero-fills trimmed ranges
  EXPECT_EQ(dev->raw()[(64 << 10) + 100], w.data()[(64 << 10) + 100]);
  EXPECT_EQ(host.stats().writes, 16u);
  EXPECT_EQ(host.stats().trims, 1u);
}

// A read or write larger than one command is split into commands that all
// go out at once without a thread waiting for any, and calls back once,
// when the last is done; one issued from a completion callback too.
TEST(NvmeTcpDevice, LargeRequestsAreSplitIntoCommandsSentWithoutAThreadEach) {
  auto dev = std::make_shared<blk::MemDevice>(16 << 20, 4096, 1);
  auto faulty = std::make_shared<blk::FaultyDevice>(dev);
  OneQueueSetup setup;
  connect_one_queue(faulty, setup);
  if (HasFatalFailure()) return;
  NvmeTcpDevice& host = *setup.host;
  const uint64_t mt = host.capabilities().max_transfer_bytes;
  ASSERT_GT(mt, 0u);
  ASSERT_LE(4 * mt, 8u << 20) << "the test's namespace is too small for this max transfer";
  const uint64_t size = 3 * mt + 4096;  // four commands, the last of one block
  AlignedBuffer w(size), r(size), r2(size);
  for (size_t i = 0; i < w.size(); ++i) w.data()[i] = std::byte(i * 11 + (i >> 12) + 3);
  blk::testing::Completions done;
  host.write(4096, w.view(), [&](Status st) { done.done(st); });
  ASSERT_TRUE(done.wait_for(1)) << "the large write never called back";
  ASSERT_EQ(done.failed(), 0u) << done.last_error().to_string();
  EXPECT_EQ(host.async_writes(), 4u);
  EXPECT_EQ(std::memcmp(dev->raw().data() + 4096, w.data(), size), 0);
  EXPECT_EQ(host.stats().writes, 1u);  // one request, however many commands
  EXPECT_EQ(host.stats().bytes_written, size);

  host.read(4096, r.view(), [&](Status st) {
    done.done(st);
    host.read(4096, r2.view(), [&](Status st2) { done.done(st2); });
  });
  ASSERT_TRUE(done.wait_for(3)) << "a large read never called back";
  ASSERT_EQ(done.failed(), 0u) << done.last_error().to_string();
  EXPECT_EQ(std::memcmp(r.data(), w.data(), size), 0);
  EXPECT_EQ(std::memcmp(r2.data(), w.data(), size), 0);
  EXPECT_EQ(host.async_reads(), 8u);
  // The inner read's four commands were issued on the receiver thread.
  EXPECT_EQ(host.from_callbacks(), 4u);
  EXPECT_EQ(host.blocking_requests(), 0u);
  EXPECT_EQ(host.stats().reads, 2u);

  // One piece failing fails the request, which calls back once.
  faulty->add_fault_range(4096 + 2 * mt, 4096);
  host.read(4096, r.view(), [&](Status st) { done.done(st); });
  ASSERT_TRUE(done.wait_for(4));
  EXPECT_EQ(done.failed(), 1u);
  EXPECT_EQ(done.count(), 4u);
  EXPECT_EQ(host.stats().errors, 1u);
  EXPECT_EQ(host.stats().reads, 2u);
  EXPECT_TRUE(host.connected());
}

// A vectored read is one Read command whose data is scattered over the
// parts (with data digests across part boundaries).
TEST(NvmeTcpDevice, VectoredReadIsOneCommandScatteredOverTheParts) {
  auto dev = std::make_shared<blk::MemDevice>(16 << 20, 4096, 1);
  for (size_t i = 0; i < dev->raw().size(); ++i) dev->raw()[i] = std::byte(i * 29 + (i >> 12));
  OneQueueSetup setup;
  connect_one_queue(dev, setup, /*digests=*/true);
  if (HasFatalFailure()) return;
  NvmeTcpDevice& host = *setup.host;
  EXPECT_TRUE(host.capabilities().vectored_reads);
  AlignedBuffer a(4096), b(200 << 10), c(8192);
  const MutableByteView parts[] = {a.view(), b.view(), c.view()};
  const uint64_t off = 3 << 20;
  const uint64_t device_reads = dev->stats().reads;
  ASSERT_TRUE(host.readv_sync(off, parts).ok());
  EXPECT_EQ(dev->stats().reads - device_reads, 1u);
  EXPECT_EQ(host.async_reads(), 1u);
  EXPECT_EQ(std::memcmp(a.data(), dev->raw().data() + off, a.size()), 0);
  EXPECT_EQ(std::memcmp(b.data(), dev->raw().data() + off + a.size(), b.size()), 0);
  EXPECT_EQ(std::memcmp(c.data(), dev->raw().data() + off + a.size() + b.size(), c.size()), 0);

  // Past the end in its last part: refused before anything is sent.
  EXPECT_FALSE(host.readv_sync((16 << 20) - a.size() - b.size(), parts).ok());
  EXPECT_EQ(dev->stats().reads - device_reads, 1u);
}

// One submitter, one I/O queue, a namespace whose every completion takes
// 100 ms: of 16 reads and 16 writes posted at once, the host keeps at least 8
// in flight together (a count, not a time: how fast is `kvtier bench nvmf`'s
// business). Each read returns its own block, so out-of-order completions
// reach the right callers.
TEST(NvmeTcpDevice, OneSubmitterKeepsTheQueueDepthInTheDevice) {
  auto mem = std::make_shared<blk::MemDevice>(1 << 20, 4096, 1);
  for (size_t i = 0; i < mem->raw().size(); ++i) mem->raw()[i] = std::byte(i / 4096 + 1);
  auto slow = std::make_shared<blk::FaultyDevice>(mem);
  slow->set_latency(100ms);
  OneQueueSetup setup;
  connect_one_queue(slow, setup);
  if (HasFatalFailure()) return;
  NvmeTcpDevice& host = *setup.host;

  constexpr int kOps = 16;
  std::vector<AlignedBuffer> reads, writes;
  for (int i = 0; i < kOps; ++i) {
    reads.emplace_back(4096);
    writes.emplace_back(4096);
    std::memset(writes.back().data(), 0xA0 + i, 4096);
  }
  std::mutex mu;
  std::condition_variable cv;
  int done = 0, failed = 0;
  auto cb = [&](Status st) {
    std::lock_guard lk(mu);
    ++done;
    if (!st.ok()) ++failed;
    cv.notify_all();
  };
  for (int i = 0; i < kOps; ++i) {
    host.read(uint64_t(i) * 4096, reads[i].view(), cb);
    host.write(uint64_t(128 + i) * 4096, writes[i].view(), cb);
  }
  {
    std::unique_lock lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, 10s, [&] { return done == 2 * kOps; }));
  }
  EXPECT_EQ(failed, 0);
  for (int i = 0; i < kOps; ++i) {
    EXPECT_EQ(reads[i].data()[0], std::byte(i + 1)) << i;
    EXPECT_EQ(reads[i].data()[4095], std::byte(i + 1)) << i;
    EXPECT_EQ(mem->raw()[(128 + i) * 4096 + 7], std::byte(0xA0 + i)) << i;
  }
  EXPECT_GE(host.peak_in_flight(), 8u);
}

// A device error fails only the command that hit it; the queue goes on.
TEST(NvmeTcpDevice, DeviceErrorFailsOnlyThatCommand) {
  auto mem = std::make_shared<blk::MemDevice>(1 << 20, 4096, 1);
  auto faulty = std::make_shared<blk::FaultyDevice>(mem);
  auto t = NvmfTarget::start(target_config(faulty, 0));
  ASSERT_TRUE(t.ok());
  auto h = NvmeTcpDevice::connect(host_options((*t)->port()));
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  AlignedBuffer b(4096);
  faulty->set_read_error_rate(1.0);
  EXPECT_FALSE((*h)->read_sync(0, b.view()).ok());
  faulty->set_read_error_rate(0.0);
  EXPECT_TRUE((*h)->read_sync(0, b.view()).ok());
  EXPECT_TRUE((*h)->write_sync(4096, b.view()).ok());
  EXPECT_TRUE((*h)->connected());
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
  EXPECT_TRUE(eventually([&] { return ok_ios.load() > 0; }));
  t->reset();  // the target goes away under load
  const auto gone = std::chrono::steady_clock::now();
  // I/O must fail (not hang) once fast_io_fail_tmo (500 ms) has passed.
  AlignedBuffer probe(4096);
  Status st;
  while (std::chrono::steady_clock::now() - gone < 20s) {
    st = (*h)->read_sync(0, probe.view());
    if (!st.ok()) break;
  }
  // kUnavailable is the fast-fail answer (the 3 s io_timeout would say
  // kTimeout); the time bound only tells it from a hang.
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - gone, 15s);
  // A new target on the same port: the device reconnects by itself.
  auto t2 = NvmfTarget::start(target_config(dev, port));
  ASSERT_TRUE(t2.ok()) << t2.status().to_string();
  Status back;
  eventually(
      [&] {
        back = (*h)->read_sync(0, probe.view());
        return back.ok();
      },
      20s);
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

// Fills `b` with bytes that depend on the owner, a generation and the offset,
// so a buffer delivered to the wrong command or offset is noticed.
void fill(AlignedBuffer& b, uint32_t owner, uint32_t gen, uint64_t off) {
  for (size_t i = 0; i < b.size(); ++i) {
    b.data()[i] = std::byte((owner * 131 + gen * 17 + (off + i) * 7 + ((off + i) >> 9)) & 0xFF);
  }
}

// 24 threads share ONE I/O queue of 8 entries: commands are pipelined (more
// than one in flight), the queue size is honoured (never more than 7), and
// in-capsule 4 KiB writes, R2T writes of several H2CData PDUs (128 KiB over
// a 64 KiB MAXH2CDATA) and reads all land byte for byte, with digests on.
TEST(NvmeTcpDevice, ManyConcurrentCommandsOnOneQueueAreByteExact) {
  constexpr uint32_t kThreads = 24, kStripe = 512 << 10;
  auto dev = std::make_shared<blk::MemDevice>(kThreads * kStripe, 4096, 1);
  auto t = NvmfTarget::start(target_config(dev, 0));
  ASSERT_TRUE(t.ok());
  HostOptions o = host_options((*t)->port());
  o.io_queues = 1;
  o.queue_size = 8;
  o.hdgst = o.ddgst = true;
  auto h = NvmeTcpDevice::connect(o);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  std::atomic<int> errors{0}, mismatches{0};
  std::vector<std::thread> th;
  for (uint32_t id = 0; id < kThreads; ++id) {
    th.emplace_back([&, id] {
      const uint64_t base = uint64_t(id) * kStripe;
      for (uint32_t gen = 0; gen < 6; ++gen) {
        const uint32_t io = (gen + id) % 2 ? 4096 : (128 << 10);
        for (uint64_t off = 0; off + io <= kStripe; off += io * 3) {
          AlignedBuffer w(io), r(io);
          fill(w, id, gen, base + off);
          if (!(*h)->write_sync(base + off, w.view()).ok()) errors++;
          if (!(*h)->read_sync(base + off, r.view()).ok()) errors++;
          if (std::memcmp(w.data(), r.data(), io) != 0) mismatches++;
        }
      }
    });
  }
  for (auto& x : th) x.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_GT((*h)->peak_in_flight(), 1u);
  EXPECT_LE((*h)->peak_in_flight(), 7u);
  // The device holds what was written, too (not only what the host cached).
  AlignedBuffer all(kThreads * kStripe);
  ASSERT_TRUE((*h)->read_sync(0, all.view()).ok());
  EXPECT_EQ(std::memcmp(all.data(), dev->raw().data(), all.size()), 0);
}

// Commands in flight on one queue when the target goes away: every call
// returns (fails fast or completes after the reconnect) within a bound, none
// hangs, and every thread's data is right once a new target is up.
TEST(NvmeTcpDevice, CommandsInFlightSurviveTargetRestart) {
  constexpr uint32_t kThreads = 16, kStripe = 256 << 10;
  auto dev = std::make_shared<blk::MemDevice>(kThreads * kStripe, 4096, 1);
  auto t = NvmfTarget::start(target_config(dev, 0));
  ASSERT_TRUE(t.ok());
  const uint16_t port = (*t)->port();
  HostOptions o = host_options(port);
  o.io_queues = 1;
  auto h = NvmeTcpDevice::connect(o);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  std::atomic<bool> stop{false};
  std::atomic<int> ok_ios{0}, failed_ios{0};
  std::atomic<int64_t> longest_ms{0};
  std::vector<std::thread> th;
  for (uint32_t id = 0; id < kThreads; ++id) {
    th.emplace_back([&, id] {
      AlignedBuffer b(64 << 10);
      for (uint64_t n = 0; !stop; ++n) {
        const uint64_t off = uint64_t(id) * kStripe + (n * b.size()) % kStripe;
        const auto t0 = std::chrono::steady_clock::now();
        const Status st = n % 2 ? (*h)->read_sync(off, b.view()) : (*h)->write_sync(off, b.view());
        const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now() - t0)
                               .count();
        int64_t seen = longest_ms;
        while (ms > seen && !longest_ms.compare_exchange_weak(seen, ms)) {
        }
        (st.ok() ? ok_ios : failed_ios)++;
      }
    });
  }
  EXPECT_TRUE(eventually([&] { return ok_ios.load() > 0; }));
  t->reset();  // the target goes away with commands in flight
  EXPECT_TRUE(eventually([&] { return failed_ios.load() > 0; }));  // fast_io_fail_tmo is 500 ms
  auto t2 = NvmfTarget::start(target_config(dev, port));
  ASSERT_TRUE(t2.ok()) << t2.status().to_string();
  const int at_restart = ok_ios;
  EXPECT_TRUE(eventually([&] { return ok_ios.load() >= at_restart + 100; }, 30s));
  stop = true;
  for (auto& x : th) x.join();
  // io_timeout is 3 s: no call may wait for ever (twice that covers a busy
  // machine; a hang would be the target's whole absence).
  EXPECT_LT(longest_ms.load(), 8000);
  EXPECT_GE((*h)->reconnects(), 1u);
  // Every stripe written and read back through the new connection, in parallel.
  std::atomic<int> bad{0};
  th.clear();
  for (uint32_t id = 0; id < kThreads; ++id) {
    th.emplace_back([&, id] {
      AlignedBuffer w(kStripe), r(kStripe);
      fill(w, id, 99, uint64_t(id) * kStripe);
      if (!(*h)->write_sync(uint64_t(id) * kStripe, w.view()).ok() ||
          !(*h)->read_sync(uint64_t(id) * kStripe, r.view()).ok() ||
          std::memcmp(w.data(), r.data(), kStripe) != 0 ||
          std::memcmp(dev->raw().data() + uint64_t(id) * kStripe, w.data(), kStripe) != 0) {
        bad++;
      }
    });
  }
  for (auto& x : th) x.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace kvtier::nvmf
