// QosDevice: limits held over a window, bursts bounded, directions
// independent, combined limits shared.
//
// Two forms. The unit form (2 s windows, run beside other tests) asserts only
// what no amount of machine load can break: never more than the bucket
// allows, and at least half of it. The `long` form (KVTIER_QOS_WINDOW_S=10,
// run serially) also holds the rate within 5% of the limit.
#include "blk/stack/qos_device.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "blk/dev/mem_device.h"
#include "blk/testing/test_util.h"
#include "common/clock.h"

namespace kvtier::blk {
namespace {

double window_seconds() {
  const char* w = std::getenv("KVTIER_QOS_WINDOW_S");
  return w ? std::atof(w) : 2.0;
}

// The long form: a window was asked for, and the test runs alone.
bool timed_form() { return std::getenv("KVTIER_QOS_WINDOW_S") != nullptr; }

// Keeps `depth` requests of `bytes` outstanding in one direction for
// `seconds`, and counts what was admitted (completed) inside the window.
struct Driver {
  Driver(BlockDevice& dev, bool write, uint64_t bytes, int depth)
      : dev(dev), write(write), bytes(bytes), depth(depth) {}

  BlockDevice& dev;
  bool write;
  uint64_t bytes;
  int depth;
  std::atomic<uint64_t> done{0};
  std::mutex mu;
  std::condition_variable cv;
  int outstanding = 0;
  AlignedBuffer buf{1 << 20, 4096};

  void run(double seconds) {
    const uint64_t end = now_ns() + static_cast<uint64_t>(seconds * 1e9);
    uint64_t slot = 0;
    while (now_ns() < end) {
      {
        std::unique_lock lk(mu);
        cv.wait_for(lk, std::chrono::milliseconds(1), [&] { return outstanding < depth; });
        if (outstanding >= depth) continue;
        ++outstanding;
      }
      const uint64_t off = (slot++ % 64) * bytes;
      auto cb = [this, end](Status st) {
        if (st.ok() && now_ns() <= end) done.fetch_add(1);
        std::lock_guard lk(mu);
        --outstanding;
        cv.notify_all();
      };
      if (write) {
        dev.write(off, ByteView(buf.data(), bytes), cb);
      } else {
        dev.read(off, MutableByteView(buf.data(), bytes), cb);
      }
    }
    std::unique_lock lk(mu);
    cv.wait_for(lk, std::chrono::seconds(5), [&] { return outstanding == 0; });
  }
};

// `expected` is what the bucket admits at most over the window: its rate for
// the window plus the burst it started with. Going over it is a bug whatever
// the load (2% covers the moments between the device's start and the
// window's). Falling short only means the driver was not scheduled, so the
// unit form asks for half, the timed form for 95%.
void expect_within(double measured, double expected, const char* what) {
  EXPECT_LE(measured, expected * 1.02)
      << what << ": measured " << measured << " expected at most " << expected;
  const double floor = timed_form() ? 0.95 : 0.5;
  EXPECT_GE(measured, expected * floor)
      << what << ": measured " << measured << " expected at least " << floor << " x " << expected;
}

TEST(QosDeviceTest, WriteBytesPerSecondHeldInWindow) {
  auto mem = std::make_shared<MemDevice>(64 << 20);
  QosLimits l;
  l.write_bps = 40'000'000;
  QosDevice q(mem, l);
  const double w = window_seconds();
  Driver d{q, true, 64 << 10, 8};
  d.run(w);
  const double bytes = static_cast<double>(d.done.load()) * (64 << 10);
  // Rate over the window plus the bucket that started full (0.1 s of rate).
  expect_within(bytes, 40e6 * w + 4e6, "write bytes");
}

TEST(QosDeviceTest, ReadIopsHeldInWindow) {
  auto mem = std::make_shared<MemDevice>(64 << 20);
  QosLimits l;
  l.read_iops = 3000;
  QosDevice q(mem, l);
  const double w = window_seconds();
  Driver d{q, false, 4096, 16};
  d.run(w);
  expect_within(static_cast<double>(d.done.load()), 3000 * w + 300, "read iops");
}

TEST(QosDeviceTest, CombinedIopsSharedByReadsAndWrites) {
  auto mem = std::make_shared<MemDevice>(64 << 20);
  QosLimits l;
  l.total_iops = 2000;
  QosDevice q(mem, l);
  const double w = window_seconds();
  Driver r{q, false, 4096, 8};
  Driver wr{q, true, 4096, 8};
  std::thread t([&] { wr.run(w); });
  r.run(w);
  t.join();
  const double total = static_cast<double>(r.done.load() + wr.done.load());
  expect_within(total, 2000 * w + 200, "combined iops");
  // Neither direction starves (a quarter each when the test runs alone; a
  // tenth when a busy machine may hold one driver thread back).
  const double share = timed_form() ? 4 : 10;
  EXPECT_GT(r.done.load(), total / share);
  EXPECT_GT(wr.done.load(), total / share);
}

TEST(QosDeviceTest, BurstIsBoundedThenRateApplies) {
  auto mem = std::make_shared<MemDevice>(64 << 20);
  QosLimits l;
  l.read_iops = 1000;
  l.burst_seconds = 0.1;  // 100 requests of burst
  QosDevice q(mem, l);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // idle: bucket full, capped
  AlignedBuffer buf(4096, 4096);
  testing::Completions c;
  // Completions that ran on this thread were admitted at submit (inline);
  // the rest were released later by the device's dispatcher.
  const auto me = std::this_thread::get_id();
  std::atomic<uint64_t> inline_done{0};
  const uint64_t t0 = now_ns();
  for (int i = 0; i < 300; ++i) {
    q.read(0, buf.view(), [&c, &inline_done, me](Status st) {
      if (std::this_thread::get_id() == me) inline_done.fetch_add(1);
      c.done(st);
    });
  }
  const double submit_s = static_cast<double>(now_ns() - t0) * 1e-9;
  // The burst went through at once, and beyond it only what the rate
  // refilled while this loop ran (nothing, unless the thread was held up).
  EXPECT_GE(inline_done.load(), 100u);
  EXPECT_LE(inline_done.load(), 101u + static_cast<uint64_t>(submit_s * 1000));
  ASSERT_TRUE(c.wait_for(300));
  // The other 200 at 1000/s: at least 0.2 s (less the refill's rounding).
  const double secs = static_cast<double>(now_ns() - t0) * 1e-9;
  EXPECT_GE(secs, 0.19);
  EXPECT_EQ(c.failed(), 0u);
}

TEST(QosDeviceTest, ThrottledWritesDoNotHoldUpReads) {
  auto mem = std::make_shared<MemDevice>(64 << 20);
  QosLimits l;
  l.write_iops = 1;  // 5 writes take 4 s: still queued below however slow this thread is
  l.burst_seconds = 0;
  QosDevice q(mem, l);
  AlignedBuffer buf(4096, 4096);
  testing::Completions writes, reads;
  for (int i = 0; i < 5; ++i) q.write(0, buf.view(), [&](Status st) { writes.done(st); });
  EXPECT_LT(writes.count(), 5u);
  for (int i = 0; i < 100; ++i) q.read(0, buf.view(), [&](Status st) { reads.done(st); });
  EXPECT_EQ(reads.count(), 100u);  // unlimited direction: inline
  EXPECT_GT(q.qos_stats().queued_now, 0u);
  // Raising the limit releases the queue.
  l.write_iops = 0;
  q.set_limits(l);
  EXPECT_TRUE(writes.wait_for(5));
}

TEST(QosDeviceTest, CloseFailsQueuedRequests) {
  auto mem = std::make_shared<MemDevice>(1 << 20);
  AlignedBuffer buf(4096, 4096);
  testing::Completions c;
  {
    QosLimits l;
    l.read_iops = 1;
    l.burst_seconds = 0;
    QosDevice q(mem, l);
    for (int i = 0; i < 5; ++i) q.read(0, buf.view(), [&](Status st) { c.done(st); });
  }
  EXPECT_EQ(c.count(), 5u);
  EXPECT_GE(c.failed(), 3u);
}

}  // namespace
}  // namespace kvtier::blk
