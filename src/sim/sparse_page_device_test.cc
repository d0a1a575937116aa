#include "sim/sparse_page_device.h"

#include <gtest/gtest.h>

#include <cstring>

#include "common/buffer.h"

namespace kvtier::sim {
namespace {

TEST(SparsePageDevice, KeepsEachPageUpToItsLastNonZeroByte) {
  SparsePageDevice dev(1ull << 40);  // a terabyte costs nothing until written
  EXPECT_EQ(dev.capacity(), 1ull << 40);
  AlignedBuffer w(3 * 4096, 4096, /*zero=*/true);
  w.data()[0] = std::byte{1};
  w.data()[127] = std::byte{2};           // page 0 keeps 128 bytes
  w.data()[2 * 4096 + 9] = std::byte{3};  // page 2 keeps 10; page 1 is all zeros
  ASSERT_TRUE(dev.write_sync(5ull << 30, w.view()).ok());
  EXPECT_EQ(dev.pages_held(), 2u);
  EXPECT_EQ(dev.bytes_held(), 128u + 10u);

  AlignedBuffer r(3 * 4096, 4096);
  std::memset(r.data(), 0xAA, r.size());
  ASSERT_TRUE(dev.read_sync(5ull << 30, r.view()).ok());
  EXPECT_EQ(std::memcmp(r.data(), w.data(), r.size()), 0);
}

TEST(SparsePageDevice, OverwriteAndTrimFreeWhatTheyReplace) {
  SparsePageDevice dev(1 << 20);
  AlignedBuffer w(4096, 4096, /*zero=*/true);
  std::memset(w.data(), 7, 1000);
  ASSERT_TRUE(dev.write_sync(0, w.view()).ok());
  std::memset(w.data(), 0, 1000);
  w.data()[10] = std::byte{9};
  ASSERT_TRUE(dev.write_sync(0, w.view()).ok());
  EXPECT_EQ(dev.bytes_held(), 11u);
  ASSERT_TRUE(dev.write_sync(4096, w.view()).ok());
  ASSERT_TRUE(dev.trim_sync(0, 8192).ok());
  EXPECT_EQ(dev.pages_held(), 0u);
  EXPECT_EQ(dev.bytes_held(), 0u);
  AlignedBuffer r(4096, 4096);
  std::memset(r.data(), 0xAA, r.size());
  ASSERT_TRUE(dev.read_sync(0, r.view()).ok());
  for (size_t i = 0; i < r.size(); ++i) ASSERT_EQ(r.data()[i], std::byte{0}) << i;
}

TEST(SparsePageDevice, RefusesWhatTheContractRefuses) {
  SparsePageDevice dev(1 << 20);
  AlignedBuffer b(4096, 4096);
  EXPECT_FALSE(dev.read_sync(1 << 20, b.view()).ok());  // past the end
  EXPECT_FALSE(dev.write_sync(100, b.view()).ok());     // not block-aligned
  EXPECT_EQ(dev.stats().errors, 2u);
}

}  // namespace
}  // namespace kvtier::sim
