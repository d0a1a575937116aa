// SharedArena: the memfd others receive can only be mapped read-only and
// never resized, while the owner keeps writing through its own mapping.
#include "common/shared_arena.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

namespace kvtier {
namespace {

TEST(SharedArena, OthersMapItReadOnlyAndSeeTheOwnersWrites) {
  SharedArena a(3 << 20, /*shared=*/true);
  ASSERT_TRUE(a.shareable());
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(a.data()[12345], std::byte{0});  // zero-filled
  const size_t len = a.size();
  // Another process gets a dup of the fd; a dup behaves the same here.
  int fd = ::dup(a.fd());
  ASSERT_GE(fd, 0);
  EXPECT_EQ(::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), MAP_FAILED);
  EXPECT_NE(::ftruncate(fd, 4096), 0);
  char b = 1;
  EXPECT_LT(::pwrite(fd, &b, 1, 0), 0);
  void* ro = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(ro, MAP_FAILED);
  EXPECT_NE(::mprotect(ro, len, PROT_READ | PROT_WRITE), 0);  // cannot be upgraded later
  std::memcpy(a.data() + 2000000, "kvtier", 6);               // the owner still writes
  EXPECT_EQ(std::memcmp(static_cast<char*>(ro) + 2000000, "kvtier", 6), 0);
  ::munmap(ro, len);
  ::close(fd);
}

TEST(SharedArena, PrivateArenaHasNoFd) {
  SharedArena a(1 << 20, /*shared=*/false);
  EXPECT_FALSE(a.shareable());
  EXPECT_EQ(a.fd(), -1);
  a.data()[100] = std::byte{7};
  SharedArena moved = std::move(a);
  EXPECT_EQ(moved.data()[100], std::byte{7});
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  SharedArena empty(0, true);
  EXPECT_EQ(empty.data(), nullptr);
}

}  // namespace
}  // namespace kvtier
