#include "blk/stack/faulty_device.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "blk/dev/mem_device.h"
#include "blk/testing/test_util.h"

namespace kvtier::blk {
namespace {

using std::chrono::milliseconds;
using testing::Completions;
using testing::fill_pattern;
using Clock = std::chrono::steady_clock;

bool all_zero(ByteView v) {
  return std::all_of(v.begin(), v.end(), [](std::byte b) { return b == std::byte{0}; });
}

TEST(FaultyDeviceTest, PassThrough) {
  auto mem = std::make_shared<MemDevice>(1 << 20, 4096, 512);
  FaultyDevice dev(mem);
  EXPECT_EQ(dev.block_size(), 4096u);
  EXPECT_EQ(dev.buffer_alignment(), 512u);
  EXPECT_EQ(dev.capacity(), 1u << 20);
  EXPECT_EQ(dev.name(), "faulty(mem)");
  AlignedBuffer w(8192), r(8192);
  fill_pattern(w.view(), 1);
  ASSERT_TRUE(dev.write_sync(4096, w.view()).ok());
  ASSERT_TRUE(dev.read_sync(4096, r.view()).ok());
  EXPECT_EQ(std::memcmp(w.data(), r.data(), 8192), 0);
  ASSERT_TRUE(dev.flush_sync().ok());
  ASSERT_TRUE(dev.trim_sync(0, 4096).ok());
  EXPECT_EQ(dev.read_sync(1, r.view()).code(), StatusCode::kInvalidArgument);
  const DeviceStats s = dev.stats();
  EXPECT_EQ(s.reads, 1u);
  EXPECT_EQ(s.writes, 1u);
  EXPECT_EQ(s.flushes, 1u);
  EXPECT_EQ(s.trims, 1u);
}

int count_read_errors(FaultyDevice& dev, int n, std::vector<bool>* pattern) {
  AlignedBuffer b(4096);
  int errors = 0;
  for (int i = 0; i < n; ++i) {
    Status st = dev.read_sync(0, b.view());
    if (!st.ok()) {
      EXPECT_EQ(st.code(), StatusCode::kIoError);
      ++errors;
    }
    if (pattern != nullptr) pattern->push_back(st.ok());
  }
  return errors;
}

TEST(FaultyDeviceTest, ErrorRateIsSeededAndCounted) {
  auto mem = std::make_shared<MemDevice>(1 << 20);
  FaultyDevice a(mem, /*seed=*/7);
  FaultyDevice b(mem, /*seed=*/7);
  a.set_read_error_rate(0.3);
  b.set_read_error_rate(0.3);
  std::vector<bool> pa, pb;
  const int ea = count_read_errors(a, 1000, &pa);
  const int eb = count_read_errors(b, 1000, &pb);
  EXPECT_GT(ea, 200);
  EXPECT_LT(ea, 400);
  EXPECT_EQ(ea, eb);
  EXPECT_EQ(pa, pb) << "same seed must give the same fault sequence";
  EXPECT_EQ(a.fault_counters().read_errors, static_cast<uint64_t>(ea));
  EXPECT_EQ(a.fault_counters().write_errors, 0u);
  EXPECT_EQ(a.stats().errors, static_cast<uint64_t>(ea));

  // Writes are unaffected by the read rate; a write rate of 1 fails them all
  // without touching the inner device.
  AlignedBuffer w(4096);
  fill_pattern(w.view(), 2);
  EXPECT_TRUE(a.write_sync(0, w.view()).ok());
  a.set_write_error_rate(1.0);
  EXPECT_EQ(a.write_sync(4096, w.view()).code(), StatusCode::kIoError);
  EXPECT_TRUE(all_zero(mem->raw().subspan(4096, 4096)));
  EXPECT_EQ(a.fault_counters().write_errors, 1u);
  a.clear_faults();
  EXPECT_EQ(count_read_errors(a, 100, nullptr), 0);
}

TEST(FaultyDeviceTest, RangeFaults) {
  auto mem = std::make_shared<MemDevice>(1 << 20);
  FaultyDevice dev(mem);
  dev.add_fault_range(8192 + 100, 1);  // a single byte inside block 2
  AlignedBuffer b(3 * 4096);
  fill_pattern(b.view(), 3);
  EXPECT_EQ(dev.write_sync(4096, b.view()).code(), StatusCode::kIoError);  // blocks 1-3
  EXPECT_TRUE(all_zero(mem->raw()));
  EXPECT_EQ(dev.read_sync(8192, b.subview(0, 4096)).code(), StatusCode::kIoError);
  EXPECT_EQ(dev.trim_sync(0, 3 * 4096).code(), StatusCode::kIoError);
  // Neighbours are fine.
  EXPECT_TRUE(dev.write_sync(4096, b.subview(0, 4096)).ok());
  EXPECT_TRUE(dev.read_sync(12288, b.subview(0, 4096)).ok());
  EXPECT_TRUE(dev.flush_sync().ok());
  EXPECT_EQ(dev.fault_counters().range_errors, 3u);
  dev.clear_fault_ranges();
  EXPECT_TRUE(dev.read_sync(8192, b.subview(0, 4096)).ok());
}

TEST(FaultyDeviceTest, LatencyDelaysCompletionWithoutBlockingCaller) {
  auto mem = std::make_shared<MemDevice>(1 << 20);
  FaultyDevice dev(mem);
  // Long enough that the line after read() runs before the completion on any
  // machine: the caller must not have slept through the latency.
  dev.set_latency(milliseconds(500));
  AlignedBuffer b(4096);
  Completions c;
  std::atomic<bool> submit_returned{false};
  std::atomic<bool> completed_after_return{false};
  Clock::time_point done_at;
  const auto start = Clock::now();
  dev.read(0, b.view(), [&](Status st) {
    done_at = Clock::now();
    completed_after_return = submit_returned.load();
    c.done(st);
  });
  submit_returned = true;
  EXPECT_EQ(dev.pending_delayed(), 1u) << "the request waits in the device, not in the caller";
  ASSERT_TRUE(c.wait_for(1));
  EXPECT_TRUE(completed_after_return) << "the caller must not sleep";
  EXPECT_EQ(c.failed(), 0u);
  EXPECT_GE(done_at - start, milliseconds(500));
  EXPECT_EQ(dev.fault_counters().delayed, 1u);

  // Injected errors are delayed too.
  dev.set_latency(milliseconds(50));
  dev.set_fail_all(true);
  const auto start2 = Clock::now();
  Status st = dev.flush_sync();
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_GE(Clock::now() - start2, milliseconds(50));
}

TEST(FaultyDeviceTest, HangModeAndDestructorCancels) {
  auto mem = std::make_shared<MemDevice>(1 << 20);
  Completions c;
  AlignedBuffer w(4096);
  fill_pattern(w.view(), 4);
  const auto start = Clock::now();
  {
    FaultyDevice dev(mem);
    dev.set_hang(true);  // an hour
    dev.write(0, w.view(), [&](Status st) { c.done(st); });
    dev.flush([&](Status st) { c.done(st); });
    EXPECT_FALSE(c.wait_for(1, milliseconds(50)));
    EXPECT_EQ(dev.pending_delayed(), 2u);
    EXPECT_EQ(dev.fault_counters().hung, 2u);
    // The write itself reached the device; only its completion is held.
    EXPECT_EQ(std::memcmp(mem->raw().data(), w.data(), 4096), 0);
  }
  ASSERT_EQ(c.count(), 2u) << "destructor must complete hung requests";
  EXPECT_EQ(c.failed(), 2u);
  EXPECT_EQ(c.last_error().code(), StatusCode::kUnavailable);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30)) << "not the hour of the hang";
}

TEST(FaultyDeviceTest, ReleaseHung) {
  auto mem = std::make_shared<MemDevice>(1 << 20);
  FaultyDevice dev(mem);
  dev.set_hang(true, std::chrono::seconds(30));
  AlignedBuffer b(4096);
  Completions c;
  dev.read(0, b.view(), [&](Status st) { c.done(st); });
  EXPECT_EQ(c.count(), 0u);
  dev.set_hang(false);
  dev.release_hung();
  EXPECT_EQ(c.count(), 1u);
  EXPECT_EQ(c.failed(), 0u);
  EXPECT_EQ(dev.pending_delayed(), 0u);
  EXPECT_TRUE(dev.read_sync(0, b.view()).ok());
}

TEST(FaultyDeviceTest, DestructorDeliversLatencyDelayedCompletions) {
  auto mem = std::make_shared<MemDevice>(1 << 20);
  Completions c;
  AlignedBuffer b(4096);
  {
    FaultyDevice dev(mem);
    dev.set_latency(std::chrono::seconds(30));
    for (int i = 0; i < 5; ++i) dev.read(0, b.view(), [&](Status st) { c.done(st); });
  }
  EXPECT_EQ(c.count(), 5u);
  EXPECT_EQ(c.failed(), 0u);
}

TEST(FaultyDeviceTest, TornWriteKeepsOnlyFirstBlocks) {
  auto mem = std::make_shared<MemDevice>(1 << 20);
  FaultyDevice dev(mem);
  AlignedBuffer w(8 * 4096);
  fill_pattern(w.view(), 5);
  dev.set_torn_writes(3, /*count=*/1);
  ASSERT_TRUE(dev.write_sync(4096, w.view()).ok()) << "a torn write reports success";
  EXPECT_EQ(std::memcmp(mem->raw().data() + 4096, w.data(), 3 * 4096), 0);
  EXPECT_TRUE(all_zero(mem->raw().subspan(4 * 4096, 5 * 4096)));
  EXPECT_TRUE(all_zero(mem->raw().first(4096)));
  EXPECT_EQ(dev.fault_counters().torn_writes, 1u);

  // The one-shot tear is used up: the next write is whole.
  ASSERT_TRUE(dev.write_sync(4096, w.view()).ok());
  EXPECT_EQ(std::memcmp(mem->raw().data() + 4096, w.data(), w.size()), 0);

  // Zero blocks kept: nothing reaches the device.
  dev.set_torn_writes(0);
  ASSERT_TRUE(dev.write_sync(64 * 4096, w.view()).ok());
  EXPECT_TRUE(all_zero(mem->raw().subspan(64 * 4096, w.size())));
  dev.clear_torn_writes();
  ASSERT_TRUE(dev.write_sync(64 * 4096, w.view()).ok());
  EXPECT_EQ(std::memcmp(mem->raw().data() + 64 * 4096, w.data(), w.size()), 0);
  EXPECT_EQ(dev.fault_counters().torn_writes, 2u);
}

TEST(FaultyDeviceTest, FailAll) {
  auto mem = std::make_shared<MemDevice>(1 << 20);
  FaultyDevice dev(mem);
  dev.set_fail_all(true);
  AlignedBuffer b(4096);
  fill_pattern(b.view(), 6);
  EXPECT_EQ(dev.write_sync(0, b.view()).code(), StatusCode::kIoError);
  EXPECT_EQ(dev.read_sync(0, b.view()).code(), StatusCode::kIoError);
  EXPECT_EQ(dev.flush_sync().code(), StatusCode::kIoError);
  EXPECT_EQ(dev.trim_sync(0, 4096).code(), StatusCode::kIoError);
  EXPECT_EQ(dev.fault_counters().fail_all_errors, 4u);
  EXPECT_TRUE(all_zero(mem->raw()));
  EXPECT_EQ(mem->stats().flushes, 0u);
  dev.set_fail_all(false);
  EXPECT_TRUE(dev.write_sync(0, b.view()).ok());
}

// Settings change while other threads submit; nothing is lost.
TEST(FaultyDeviceTest, ConcurrentUse) {
  auto mem = std::make_shared<MemDevice>(1 << 20);
  FaultyDevice dev(mem, 3);
  dev.set_read_error_rate(0.5);
  dev.set_latency(std::chrono::microseconds(200));
  Completions c;
  constexpr int kThreads = 4, kPerThread = 200;
  std::vector<std::thread> threads;
  std::vector<AlignedBuffer> bufs;
  for (int t = 0; t < kThreads; ++t) bufs.emplace_back(4096);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        dev.read(t * 4096ull, bufs[t].view(), [&](Status st) { c.done(st); });
        if (i == kPerThread / 2) dev.set_latency(std::chrono::microseconds(0));
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(c.wait_for(kThreads * kPerThread));
  EXPECT_EQ(c.failed(), dev.fault_counters().read_errors);
  EXPECT_GT(c.failed(), 0u);
}

}  // namespace
}  // namespace kvtier::blk
