// Partition (offset translation and bounds) and HealthDevice (latency,
// error budget, states).
#include <gtest/gtest.h>

#include <cstring>

#include "blk/dev/mem_device.h"
#include "blk/stack/faulty_device.h"
#include "blk/stack/health_device.h"
#include "blk/stack/partition.h"
#include "blk/testing/test_util.h"

namespace kvtier::blk {
namespace {

TEST(PartitionTest, TranslatesAndBounds) {
  auto mem = std::make_shared<MemDevice>(1 << 20);
  auto p = Partition::create(mem, 64 << 10, 128 << 10, "p1");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->capacity(), 128u << 10);
  EXPECT_EQ((*p)->name(), "p1");
  AlignedBuffer buf(8192, 4096);
  testing::fill_pattern(buf.view(), 5);
  ASSERT_TRUE((*p)->write_sync(4096, buf.view()).ok());
  EXPECT_EQ(std::memcmp(mem->raw().data() + (64 << 10) + 4096, buf.data(), 8192), 0);
  AlignedBuffer back(8192, 4096);
  ASSERT_TRUE((*p)->read_sync(4096, back.view()).ok());
  EXPECT_EQ(std::memcmp(back.data(), buf.data(), 8192), 0);
  // The last block is the partition's; one past is not.
  EXPECT_TRUE((*p)->write_sync((128 << 10) - 4096, buf.subview(0, 4096)).ok());
  EXPECT_EQ((*p)->write_sync(128 << 10, buf.subview(0, 4096)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*p)->read_sync((128 << 10) - 4096, back.view()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*p)->stats().writes, 2u);
  EXPECT_EQ((*p)->stats().errors, 2u);
}

TEST(PartitionTest, RejectsBadRanges) {
  auto mem = std::make_shared<MemDevice>(1 << 20);
  EXPECT_FALSE(Partition::create(mem, 0, 0).ok());
  EXPECT_FALSE(Partition::create(mem, 100, 4096).ok());
  EXPECT_FALSE(Partition::create(mem, 4096, 1 << 20).ok());
  EXPECT_FALSE(Partition::create(nullptr, 0, 4096).ok());
  EXPECT_TRUE(Partition::create(mem, 0, 1 << 20).ok());
}

TEST(HealthDeviceTest, ErrorBudgetFailsDeviceAndLatencyIsRecorded) {
  auto mem = std::make_shared<MemDevice>(1 << 20);
  auto faulty = std::make_shared<FaultyDevice>(mem);
  HealthOptions o;
  o.degraded_after = 1;
  o.error_budget = 3;
  HealthDevice h(faulty, o);
  AlignedBuffer buf(4096, 4096);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(h.read_sync(0, buf.view()).ok());
  EXPECT_EQ(h.read_latency().count(), 10u);
  EXPECT_EQ(h.state(), HealthState::kOnline);
  faulty->set_fail_all(true);
  EXPECT_FALSE(h.write_sync(0, buf.view()).ok());
  EXPECT_EQ(h.state(), HealthState::kDegraded);
  EXPECT_FALSE(h.read_sync(0, buf.view()).ok());
  EXPECT_FALSE(h.read_sync(0, buf.view()).ok());
  EXPECT_EQ(h.state(), HealthState::kFailed);
  EXPECT_EQ(h.write_errors(), 1u);
  EXPECT_EQ(h.read_errors(), 2u);
  // Failed: refused without reaching the device, even once it works again.
  faulty->set_fail_all(false);
  const uint64_t inner_reads = mem->stats().reads;
  EXPECT_EQ(h.read_sync(0, buf.view()).code(), StatusCode::kIoError);
  EXPECT_EQ(mem->stats().reads, inner_reads);
  h.reset();
  EXPECT_TRUE(h.read_sync(0, buf.view()).ok());
  h.set_reconnecting(true);
  EXPECT_EQ(h.state(), HealthState::kReconnecting);
  h.set_reconnecting(false);
  EXPECT_EQ(h.state(), HealthState::kOnline);
  h.set_removed();
  EXPECT_FALSE(h.read_sync(0, buf.view()).ok());
}

}  // namespace
}  // namespace kvtier::blk
