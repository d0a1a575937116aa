// BlockDevice::capabilities(): each device says what it can do, stacking
// devices answer for what lies beneath them, and a buffer registered through
// a stack really is used as a registered buffer by the device at its bottom.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "blk/dev/mem_device.h"
#include "blk/dev/uring_device.h"
#include "blk/raid/raid0.h"
#include "blk/stack/faulty_device.h"
#include "blk/stack/health_device.h"
#include "blk/stack/partition.h"
#include "blk/stack/qos_device.h"
#include "blk/testing/test_util.h"
#include "common/testing/temp_dir.h"

namespace kvtier::blk {
namespace {

constexpr uint64_t kDevBytes = 8 << 20;

class DeviceCapabilities : public ::testing::Test {
 protected:
  // A uring device on a file in the test's directory; null (and skip_ set)
  // where the filesystem has no O_DIRECT.
  std::shared_ptr<UringDevice> uring(const std::string& name) {
    UringOptions o;
    o.path = dir_.file(name);
    o.create_size = kDevBytes;
    auto dev = UringDevice::open(o);
    if (!dev.ok() && dev.status().code() == StatusCode::kFailedPrecondition) {
      skip_ = dev.status().to_string();
      return nullptr;
    }
    EXPECT_TRUE(dev.ok()) << dev.status().to_string();
    return dev.ok() ? std::shared_ptr<UringDevice>(std::move(dev).value()) : nullptr;
  }

  kvtier::testing::TempDir dir_{"caps"};
  std::string skip_;
};

// Skips where O_DIRECT is missing, or where the kernel has no sparse
// registered-buffer table (the device then rightly offers none).
#define URING_OR_SKIP(var, name)                     \
  auto var = uring(name);                            \
  if (!var && !skip_.empty()) GTEST_SKIP() << skip_; \
  ASSERT_NE(var, nullptr);                           \
  if (!var->capabilities().registered_buffers) GTEST_SKIP() << "no registered buffers here"

TEST_F(DeviceCapabilities, MemoryDeviceOffersNothingBeyondTheContract) {
  MemDevice mem(kDevBytes, 4096, 64);
  const auto c = mem.capabilities();
  EXPECT_FALSE(c.registered_buffers);
  EXPECT_FALSE(c.direct_reads);
  EXPECT_FALSE(c.vectored_reads);
  EXPECT_EQ(c.alignment, 64u);
  AlignedBuffer buf(4096);
  EXPECT_EQ(mem.register_buffer(buf.view()).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(mem.unregister_buffer(0).code(), StatusCode::kInvalidArgument);
}

TEST_F(DeviceCapabilities, UringDeviceOffersRegisteredBuffersAndDirectReads) {
  URING_OR_SKIP(dev, "u.img");
  const auto c = dev->capabilities();
  EXPECT_TRUE(c.registered_buffers);
  EXPECT_TRUE(c.direct_reads);
  EXPECT_TRUE(c.vectored_reads);
  EXPECT_EQ(c.alignment, dev->buffer_alignment());
}

// Each stacking device forwards its inner device's answers, and a buffer
// registered through it makes the uring device below use fixed-buffer I/O.
TEST_F(DeviceCapabilities, StackingDevicesForwardToTheDeviceBeneath) {
  URING_OR_SKIP(dev, "u.img");
  std::vector<std::shared_ptr<BlockDevice>> stacks;
  stacks.push_back(std::make_shared<FaultyDevice>(dev));
  stacks.push_back(std::make_shared<HealthDevice>(dev));
  QosLimits generous;
  generous.read_iops = 1'000'000;
  stacks.push_back(std::make_shared<QosDevice>(dev, generous));
  auto part = Partition::create(dev, 1 << 20, 4 << 20, "p");
  ASSERT_TRUE(part.ok()) << part.status().to_string();
  stacks.push_back(std::shared_ptr<Partition>(std::move(part).value()));

  AlignedBuffer buf(64 << 10);
  for (const auto& s : stacks) {
    SCOPED_TRACE(s->name());
    const auto c = s->capabilities();
    EXPECT_TRUE(c.registered_buffers);
    EXPECT_TRUE(c.direct_reads);
    EXPECT_EQ(c.alignment, dev->buffer_alignment());
    // Health and partition hand readv down whole; the fault injector and the
    // limiter split it into reads they can fail or throttle one by one.
    const bool forwards_readv = s.get() == stacks[1].get() || s.get() == stacks[3].get();
    EXPECT_EQ(c.vectored_reads, forwards_readv);
    auto h = s->register_buffer(buf.view());
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    const uint64_t fixed_before = dev->fixed_buffer_ios();
    ASSERT_TRUE(s->read_sync(0, buf.view()).ok());
    EXPECT_EQ(dev->fixed_buffer_ios(), fixed_before + 1);
    ASSERT_TRUE(s->unregister_buffer(*h).ok());
    ASSERT_TRUE(s->read_sync(0, buf.view()).ok());
    EXPECT_EQ(dev->fixed_buffer_ios(), fixed_before + 1);  // plain read once unregistered
  }
}

TEST_F(DeviceCapabilities, Raid0OffersRegisteredBuffersWhenEveryMemberDoes) {
  URING_OR_SKIP(a, "a.img");
  URING_OR_SKIP(b, "b.img");
  auto both = Raid0::create({a, b}, 64 << 10);
  ASSERT_TRUE(both.ok()) << both.status().to_string();
  EXPECT_TRUE((*both)->capabilities().registered_buffers);
  EXPECT_FALSE((*both)->capabilities().direct_reads);    // declined (raid0.cc)
  EXPECT_FALSE((*both)->capabilities().vectored_reads);  // readv is split into reads

  auto mixed = Raid0::create({a, std::make_shared<MemDevice>(kDevBytes, 4096, 4096)}, 64 << 10);
  ASSERT_TRUE(mixed.ok()) << mixed.status().to_string();
  EXPECT_FALSE((*mixed)->capabilities().registered_buffers);
  EXPECT_FALSE((*mixed)->capabilities().direct_reads);
}

// A read of two strips through the array, into a buffer registered with the
// array, is a fixed-buffer read on each member.
TEST_F(DeviceCapabilities, Raid0RegistersWithEveryMember) {
  URING_OR_SKIP(a, "a.img");
  URING_OR_SKIP(b, "b.img");
  auto raid = Raid0::create({a, b}, 64 << 10);
  ASSERT_TRUE(raid.ok()) << raid.status().to_string();
  AlignedBuffer buf(128 << 10);
  testing::fill_pattern(buf.view(), 7);
  ASSERT_TRUE((*raid)->write_sync(0, buf.view()).ok());
  auto h = (*raid)->register_buffer(buf.view());
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  AlignedBuffer again(128 << 10);
  ASSERT_TRUE((*raid)->read_sync(0, buf.view()).ok());
  EXPECT_EQ(a->fixed_buffer_ios(), 1u);
  EXPECT_EQ(b->fixed_buffer_ios(), 1u);
  ASSERT_TRUE((*raid)->unregister_buffer(*h).ok());
  EXPECT_EQ((*raid)->unregister_buffer(*h).code(), StatusCode::kInvalidArgument);
  // Handles are reused once free.
  auto h2 = (*raid)->register_buffer(again.view());
  ASSERT_TRUE(h2.ok());
  EXPECT_EQ(*h2, *h);
  ASSERT_TRUE((*raid)->unregister_buffer(*h2).ok());
}

// A member that cannot register makes the array refuse, and the members that
// could are left with nothing registered.
TEST_F(DeviceCapabilities, Raid0RegistrationIsAllOrNothing) {
  URING_OR_SKIP(a, "a.img");
  auto raid = Raid0::create({a, std::make_shared<MemDevice>(kDevBytes, 4096, 4096)}, 64 << 10);
  ASSERT_TRUE(raid.ok());
  AlignedBuffer buf(64 << 10);
  EXPECT_EQ((*raid)->register_buffer(buf.view()).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(a->read_sync(0, buf.view()).ok());
  EXPECT_EQ(a->fixed_buffer_ios(), 0u);
}

}  // namespace
}  // namespace kvtier::blk
