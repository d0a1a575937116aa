// replace_with_fresh_pages: private anonymous memory gets fresh zero pages at
// the same address; memory that others see or that is locked is left alone.
#include "common/fresh_pages.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

namespace kvtier {
namespace {

const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));

struct Mapped {
  std::byte* p = nullptr;
  size_t bytes = 0;
  Mapped(size_t n, int flags, int fd = -1) : bytes(n) {
    void* m = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, flags, fd, 0);
    EXPECT_NE(m, MAP_FAILED);
    if (m != MAP_FAILED) p = static_cast<std::byte*>(m);
  }
  ~Mapped() {
    if (p) ::munmap(p, bytes);
  }
};

bool all_are(const std::byte* p, size_t n, std::byte v) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != v) return false;
  }
  return true;
}

TEST(FreshPages, PrivateAnonymousRangeGetsZeroPagesInPlace) {
  Mapped m(8 * kPage, MAP_PRIVATE | MAP_ANONYMOUS);
  ASSERT_NE(m.p, nullptr);
  std::memset(m.p, 0x77, m.bytes);
  ASSERT_TRUE(replace_with_fresh_pages(m.p + 2 * kPage, 4 * kPage));
  EXPECT_TRUE(all_are(m.p, 2 * kPage, std::byte{0x77}));
  EXPECT_TRUE(all_are(m.p + 2 * kPage, 4 * kPage, std::byte{0}));
  EXPECT_TRUE(all_are(m.p + 6 * kPage, 2 * kPage, std::byte{0x77}));
  // Usable as before.
  std::memset(m.p + 2 * kPage, 0x12, 4 * kPage);
  EXPECT_TRUE(all_are(m.p + 2 * kPage, 4 * kPage, std::byte{0x12}));
}

TEST(FreshPages, HeapMemoryQualifies) {
  void* raw = nullptr;
  ASSERT_EQ(::posix_memalign(&raw, kPage, 16 * kPage), 0);
  auto* p = static_cast<std::byte*>(raw);
  std::memset(p, 0x33, 16 * kPage);
  EXPECT_TRUE(replace_with_fresh_pages(p + kPage, 2 * kPage));
  EXPECT_TRUE(all_are(p + kPage, 2 * kPage, std::byte{0}));
  ::free(raw);
}

TEST(FreshPages, SharedUnalignedAndLockedMemoryIsLeftAlone) {
  Mapped shared(4 * kPage, MAP_SHARED | MAP_ANONYMOUS);
  ASSERT_NE(shared.p, nullptr);
  std::memset(shared.p, 0x44, shared.bytes);
  EXPECT_FALSE(replace_with_fresh_pages(shared.p, shared.bytes));
  EXPECT_TRUE(all_are(shared.p, shared.bytes, std::byte{0x44}));

  Mapped priv(4 * kPage, MAP_PRIVATE | MAP_ANONYMOUS);
  ASSERT_NE(priv.p, nullptr);
  std::memset(priv.p, 0x55, priv.bytes);
  EXPECT_FALSE(replace_with_fresh_pages(priv.p + 16, kPage));  // not page-aligned
  EXPECT_FALSE(replace_with_fresh_pages(priv.p, kPage + 1));   // not whole pages
  EXPECT_FALSE(replace_with_fresh_pages(priv.p, 8 * kPage));   // past the mapping
  EXPECT_TRUE(all_are(priv.p, priv.bytes, std::byte{0x55}));

  if (::mlock(priv.p, kPage) == 0) {
    EXPECT_FALSE(replace_with_fresh_pages(priv.p, kPage));
    EXPECT_TRUE(all_are(priv.p, kPage, std::byte{0x55}));
    ::munlock(priv.p, kPage);
  }
}

}  // namespace
}  // namespace kvtier
