#include "blk/dev/mem_device.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "blk/testing/test_util.h"

namespace kvtier::blk {
namespace {

bool all_zero(ByteView v) {
  return std::all_of(v.begin(), v.end(), [](std::byte b) { return b == std::byte{0}; });
}

TEST(MemDeviceTest, Geometry) {
  MemDevice dev(1 << 20, 512, 64);
  EXPECT_EQ(dev.block_size(), 512u);
  EXPECT_EQ(dev.buffer_alignment(), 64u);
  EXPECT_EQ(dev.capacity(), 1u << 20);
  EXPECT_EQ(dev.raw().size(), 1u << 20);
  // Capacity is rounded down to whole blocks.
  MemDevice odd(10000, 4096);
  EXPECT_EQ(odd.capacity(), 8192u);
}

TEST(MemDeviceTest, DefaultReadvSplitsIntoReadsAndJoins) {
  MemDevice dev(1 << 20);
  AlignedBuffer w(3 * 4096);
  testing::fill_pattern(w.view(), 3);
  ASSERT_TRUE(dev.write_sync(4096, w.view()).ok());
  AlignedBuffer a(4096), b(2 * 4096);
  const MutableByteView parts[] = {a.view(), b.view()};
  ASSERT_TRUE(dev.readv_sync(4096, parts).ok());
  EXPECT_EQ(dev.stats().reads, 2u);
  EXPECT_EQ(std::memcmp(a.data(), w.data(), 4096), 0);
  EXPECT_EQ(std::memcmp(b.data(), w.data() + 4096, 8192), 0);
  // A part past the end fails the whole call before anything is read.
  const MutableByteView past[] = {a.view(), b.view()};
  EXPECT_EQ(dev.readv_sync(dev.capacity() - 8192, past).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dev.stats().reads, 2u);
}

TEST(MemDeviceTest, RoundTrip) {
  MemDevice dev(1 << 20);
  AlignedBuffer w(3 * 4096);
  testing::fill_pattern(w.view(), 7);
  ASSERT_TRUE(dev.write_sync(8192, w.view()).ok());
  EXPECT_EQ(std::memcmp(dev.raw().data() + 8192, w.data(), w.size()), 0);
  EXPECT_TRUE(all_zero(dev.raw().first(8192)));

  AlignedBuffer r(3 * 4096, 4096, true);
  ASSERT_TRUE(dev.read_sync(8192, r.view()).ok());
  EXPECT_EQ(std::memcmp(r.data(), w.data(), w.size()), 0);

  // A read at the very end of the device works.
  AlignedBuffer tail(4096);
  ASSERT_TRUE(dev.read_sync(dev.capacity() - 4096, tail.view()).ok());

  ASSERT_TRUE(dev.flush_sync().ok());
  const DeviceStats s = dev.stats();
  EXPECT_EQ(s.writes, 1u);
  EXPECT_EQ(s.reads, 2u);
  EXPECT_EQ(s.bytes_written, 3u * 4096);
  EXPECT_EQ(s.bytes_read, 4u * 4096);
  EXPECT_EQ(s.flushes, 1u);
  EXPECT_EQ(s.errors, 0u);
}

TEST(MemDeviceTest, CompletesInline) {
  MemDevice dev(1 << 16);
  AlignedBuffer b(4096);
  bool called = false;
  dev.read(0, b.view(), [&](Status st) {
    EXPECT_TRUE(st.ok());
    called = true;
  });
  EXPECT_TRUE(called);
}

TEST(MemDeviceTest, ArgumentErrorsTouchNothing) {
  MemDevice dev(1 << 16, 4096, 4096);
  AlignedBuffer buf(4 * 4096 + 4096);
  testing::fill_pattern(buf.view(), 1);
  auto expect_invalid = [&](Status st) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  };
  // Misaligned offset, misaligned length, past capacity, straddling the end,
  // zero length, misaligned buffer.
  expect_invalid(dev.write_sync(100, buf.subview(0, 4096)));
  expect_invalid(dev.write_sync(0, buf.subview(0, 4000)));
  expect_invalid(dev.write_sync(dev.capacity(), buf.subview(0, 4096)));
  expect_invalid(dev.write_sync(dev.capacity() - 4096, buf.subview(0, 8192)));
  expect_invalid(dev.write_sync(0, ByteView()));
  expect_invalid(dev.write_sync(0, buf.subview(512, 4096)));
  expect_invalid(dev.write_sync(UINT64_MAX - 4095, buf.subview(0, 4096)));
  EXPECT_TRUE(all_zero(dev.raw())) << "a rejected write changed the device";

  expect_invalid(dev.read_sync(4096 + 1, buf.subview(0, 4096)));
  expect_invalid(dev.read_sync(0, buf.subview(0, 0)));
  expect_invalid(dev.read_sync(dev.capacity(), buf.subview(0, 4096)));
  expect_invalid(dev.trim_sync(0, 0));
  expect_invalid(dev.trim_sync(1, 4096));
  expect_invalid(dev.trim_sync(0, dev.capacity() + 4096));
  EXPECT_EQ(dev.stats().errors, 13u);
  EXPECT_EQ(dev.stats().writes, 0u);
}

TEST(MemDeviceTest, TrimZeroesRange) {
  MemDevice dev(1 << 16);
  AlignedBuffer w(4 * 4096);
  testing::fill_pattern(w.view(), 3);
  ASSERT_TRUE(dev.write_sync(0, w.view()).ok());
  ASSERT_TRUE(dev.trim_sync(4096, 8192).ok());
  EXPECT_TRUE(all_zero(dev.raw().subspan(4096, 8192)));
  EXPECT_EQ(std::memcmp(dev.raw().data(), w.data(), 4096), 0);
  EXPECT_EQ(std::memcmp(dev.raw().data() + 12288, w.data() + 12288, 4096), 0);
  EXPECT_EQ(dev.stats().trims, 1u);
}

}  // namespace
}  // namespace kvtier::blk
