#include "blk/dev/uring_device.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

#include "blk/testing/test_util.h"
#include "common/fresh_pages.h"

namespace kvtier::blk {
namespace {

namespace fs = std::filesystem;
using testing::Completions;
using testing::fill_pattern;

constexpr uint64_t kDevSize = 16 << 20;

class UringDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/kvtier_uring_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << "mkdtemp " << tmpl << ": " << strerror(errno);
    dir_ = tmpl;
    path_ = dir_ + "/dev.img";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Opens a kDevSize device file; skips the test where O_DIRECT is missing.
  std::unique_ptr<UringDevice> open_dev(unsigned queue_depth = 8, bool direct = true) {
    UringOptions o;
    o.path = path_;
    o.create_size = kDevSize;
    o.queue_depth = queue_depth;
    o.direct = direct;
    auto dev = UringDevice::open(o);
    if (!dev.ok() && dev.status().code() == StatusCode::kFailedPrecondition) {
      skip_reason_ = dev.status().to_string();
      return nullptr;
    }
    EXPECT_TRUE(dev.ok()) << dev.status().to_string();
    if (!dev.ok()) return nullptr;
    return std::move(dev).value();
  }

  std::string dir_;
  std::string path_;
  std::string skip_reason_;
};

#define OPEN_OR_SKIP(var, ...)                                     \
  auto var = open_dev(__VA_ARGS__);                                \
  if (!var && !skip_reason_.empty()) GTEST_SKIP() << skip_reason_; \
  ASSERT_NE(var, nullptr)

TEST_F(UringDeviceTest, OpenErrors) {
  UringOptions o;
  EXPECT_EQ(UringDevice::open(o).status().code(), StatusCode::kInvalidArgument);  // empty path

  o.path = dir_ + "/missing";
  EXPECT_EQ(UringDevice::open(o).status().code(), StatusCode::kNotFound);

  o.path = path_;
  o.create_size = 4096;
  o.queue_depth = 0;
  EXPECT_EQ(UringDevice::open(o).status().code(), StatusCode::kInvalidArgument);

  // A file smaller than one block has capacity 0.
  {
    const int fd = ::open(path_.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, "tiny", 4), 4);
    ::close(fd);
  }
  UringOptions small;
  small.path = path_;
  auto r = UringDevice::open(small);
  ASSERT_FALSE(r.ok());
  if (r.status().code() == StatusCode::kFailedPrecondition) GTEST_SKIP() << r.status().to_string();
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find("too small"), std::string::npos);

  // A directory is neither a file nor a block device.
  UringOptions d;
  d.path = dir_;
  EXPECT_FALSE(UringDevice::open(d).ok());
}

TEST_F(UringDeviceTest, Geometry) {
  {
    // Capacity is the file size rounded down to 4096.
    const int fd = ::open(path_.c_str(), O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, 3 * 4096 + 1000), 0);
    ::close(fd);
  }
  UringOptions o;
  o.path = path_;
  auto r = UringDevice::open(o);
  if (!r.ok() && r.status().code() == StatusCode::kFailedPrecondition) {
    GTEST_SKIP() << r.status().to_string();
  }
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  UringDevice& dev = **r;
  EXPECT_EQ(dev.block_size(), 4096u);
  EXPECT_EQ(dev.buffer_alignment(), 4096u);
  EXPECT_EQ(dev.capacity(), 3u * 4096);
  EXPECT_FALSE(dev.is_block_device());
  EXPECT_TRUE(dev.uses_fixed_file());
  EXPECT_EQ(dev.name(), "uring:" + path_);
}

TEST_F(UringDeviceTest, CreateExtendsFile) {
  OPEN_OR_SKIP(dev);
  EXPECT_EQ(dev->capacity(), kDevSize);
  EXPECT_EQ(fs::file_size(path_), kDevSize);
}

TEST_F(UringDeviceTest, ArgumentErrors) {
  OPEN_OR_SKIP(dev);
  AlignedBuffer buf(2 * 4096);
  auto code = [](Status st) { return st.code(); };
  EXPECT_EQ(code(dev->write_sync(0, buf.subview(512, 4096))), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(dev->read_sync(0, buf.subview(512, 4096))), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(dev->read_sync(512, buf.subview(0, 4096))), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(dev->read_sync(0, buf.subview(0, 1024))), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(dev->read_sync(kDevSize, buf.subview(0, 4096))), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(dev->read_sync(0, buf.subview(0, 0))), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(dev->trim_sync(kDevSize - 4096, 8192)), StatusCode::kInvalidArgument);
  EXPECT_EQ(dev->stats().errors, 7u);
}

// Many concurrent writes from several threads (far more than the queue
// depth, so the backlog is used), then concurrent reads, compared byte for
// byte with what was written and with the file as seen through pread.
TEST_F(UringDeviceTest, ConcurrentRandomRoundTrip) {
  constexpr unsigned kQueueDepth = 8;
  OPEN_OR_SKIP(dev, kQueueDepth);
  constexpr uint64_t kSlot = 64 << 10;
  constexpr size_t kSlots = kDevSize / kSlot;  // 256 requests
  std::mt19937_64 rng(42);
  std::vector<uint64_t> lens(kSlots);
  for (auto& l : lens) l = (rng() % (kSlot / 4096) + 1) * 4096;
  AlignedBuffer src(kDevSize);
  fill_pattern(src.view(), 99);

  Completions writes;
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < kSlots; i += kThreads) {
        dev->write(i * kSlot, src.subview(i * kSlot, lens[i]), [&](Status st) { writes.done(st); });
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(writes.wait_for(kSlots));
  EXPECT_EQ(writes.failed(), 0u) << writes.last_error().to_string();
  EXPECT_GT(dev->backlogged_ios(), 0u);

  AlignedBuffer dst(kDevSize, 4096, true);
  Completions reads;
  for (size_t i = 0; i < kSlots; ++i) {
    dev->read(i * kSlot, dst.subview(i * kSlot, lens[i]), [&](Status st) { reads.done(st); });
  }
  ASSERT_TRUE(reads.wait_for(kSlots));
  EXPECT_EQ(reads.failed(), 0u) << reads.last_error().to_string();

  const int fd = ::open(path_.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::vector<std::byte> file(kSlot);
  for (size_t i = 0; i < kSlots; ++i) {
    ASSERT_EQ(std::memcmp(dst.data() + i * kSlot, src.data() + i * kSlot, lens[i]), 0)
        << "slot " << i;
    ASSERT_EQ(::pread(fd, file.data(), lens[i], i * kSlot), static_cast<ssize_t>(lens[i]));
    ASSERT_EQ(std::memcmp(file.data(), src.data() + i * kSlot, lens[i]), 0) << "slot " << i;
  }
  ::close(fd);

  const DeviceStats s = dev->stats();
  EXPECT_EQ(s.writes, kSlots);
  EXPECT_EQ(s.reads, kSlots);
  uint64_t total = 0;
  for (auto l : lens) total += l;
  EXPECT_EQ(s.bytes_written, total);
  EXPECT_EQ(s.bytes_read, total);
  EXPECT_EQ(s.errors, 0u);
}

// 1.5 MiB requests, the size the disk tier uses for KV blocks.
TEST_F(UringDeviceTest, LargeRequests) {
  OPEN_OR_SKIP(dev, 4);
  constexpr uint64_t kLen = 1536 << 10;
  AlignedBuffer w(kLen * 8);
  fill_pattern(w.view(), 5);
  Completions done;
  for (int i = 0; i < 8; ++i) {
    dev->write(i * kLen, w.subview(i * kLen, kLen), [&](Status st) { done.done(st); });
  }
  ASSERT_TRUE(done.wait_for(8));
  ASSERT_EQ(done.failed(), 0u) << done.last_error().to_string();
  AlignedBuffer r(kLen * 8);
  for (int i = 0; i < 8; ++i) {
    dev->read(i * kLen, r.subview(i * kLen, kLen), [&](Status st) { done.done(st); });
  }
  ASSERT_TRUE(done.wait_for(16));
  ASSERT_EQ(done.failed(), 0u) << done.last_error().to_string();
  EXPECT_EQ(std::memcmp(w.data(), r.data(), w.size()), 0);
}

TEST_F(UringDeviceTest, ReadvFillsSeveralBuffersInOneRequest) {
  OPEN_OR_SKIP(dev, 4);
  constexpr uint64_t kLen = 80 << 10;
  AlignedBuffer w(kLen);
  fill_pattern(w.view(), 9);
  ASSERT_TRUE(dev->write_sync(64 << 10, w.view()).ok());
  AlignedBuffer head(4096), body(72 << 10), tail(4096);
  const MutableByteView parts[] = {head.view(), body.view(), tail.view()};
  const uint64_t reads_before = dev->stats().reads;
  ASSERT_TRUE(dev->readv_sync(64 << 10, parts).ok());
  EXPECT_EQ(dev->stats().reads - reads_before, 1u) << "one device request";
  EXPECT_EQ(std::memcmp(head.data(), w.data(), 4096), 0);
  EXPECT_EQ(std::memcmp(body.data(), w.data() + 4096, body.size()), 0);
  EXPECT_EQ(std::memcmp(tail.data(), w.data() + 4096 + body.size(), 4096), 0);
  // More parts than one request takes: the default splits, same bytes.
  constexpr size_t kParts = UringDevice::kMaxIov + 1;
  static_assert(kParts * 4096 <= kLen);
  AlignedBuffer many(kParts * 4096);
  std::vector<MutableByteView> too_many;
  for (size_t i = 0; i < kParts; ++i) too_many.push_back(many.subview(i * 4096, 4096));
  const uint64_t before_split = dev->stats().reads;
  ASSERT_TRUE(dev->readv_sync(64 << 10, too_many).ok());
  EXPECT_EQ(dev->stats().reads - before_split, kParts);
  EXPECT_EQ(std::memcmp(many.data(), w.data(), many.size()), 0);
  // Every part follows read()'s rules; none is read when one breaks them.
  AlignedBuffer odd(8192);
  const MutableByteView bad[] = {head.view(), odd.subview(512, 4096)};
  EXPECT_EQ(dev->readv_sync(0, bad).code(), StatusCode::kInvalidArgument);
  const MutableByteView past[] = {head.view(), body.view()};
  EXPECT_EQ(dev->readv_sync(kDevSize - 4096, past).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dev->readv_sync(0, {}).code(), StatusCode::kInvalidArgument);
}

TEST_F(UringDeviceTest, RegisteredBuffers) {
  OPEN_OR_SKIP(dev);
  AlignedBuffer arena(1 << 20);
  auto idx = dev->register_buffer(arena.view());
  if (!idx.ok()) GTEST_SKIP() << "buffer registration unavailable: " << idx.status().to_string();
  EXPECT_GE(*idx, 0);
  fill_pattern(arena.subview(0, 256 << 10), 11);
  ASSERT_TRUE(dev->write_sync(1 << 20, arena.subview(0, 256 << 10)).ok());
  EXPECT_EQ(dev->fixed_buffer_ios(), 1u);
  ASSERT_TRUE(dev->read_sync(1 << 20, arena.subview(512 << 10, 256 << 10)).ok());
  EXPECT_EQ(dev->fixed_buffer_ios(), 2u);
  EXPECT_EQ(std::memcmp(arena.data(), arena.data() + (512 << 10), 256 << 10), 0);

  // A buffer outside the registered one takes the plain path.
  AlignedBuffer other(4096);
  ASSERT_TRUE(dev->read_sync(1 << 20, other.view()).ok());
  EXPECT_EQ(dev->fixed_buffer_ios(), 2u);
  EXPECT_EQ(std::memcmp(other.data(), arena.data(), 4096), 0);

  // After unregistering, the same memory goes the plain way and still works.
  ASSERT_TRUE(dev->unregister_buffer(*idx).ok());
  EXPECT_FALSE(dev->unregister_buffer(*idx).ok());
  ASSERT_TRUE(dev->read_sync(1 << 20, arena.subview(768 << 10, 4096)).ok());
  EXPECT_EQ(dev->fixed_buffer_ios(), 2u);
  EXPECT_EQ(std::memcmp(arena.data() + (768 << 10), arena.data(), 4096), 0);
  EXPECT_EQ(dev->register_buffer(MutableByteView()).status().code(), StatusCode::kInvalidArgument);
}

// What revocable direct reads rest on (kv/read_target.h): a fixed-buffer
// read writes the pages pinned at registration, so after fresh pages are
// mapped over the caller's range a late answer lands in the old pages and
// the caller's memory stays as it is. A plain read of the same late answer
// lands in whatever the range maps by then, which is why a plain direct read
// cannot be given up. A pipe stands in for a device that has not answered.
TEST(UringFixedRead, LateAnswerLandsInThePinnedPagesNotTheFreshOnes) {
  io_uring ring;
  ASSERT_EQ(io_uring_queue_init(4, &ring, 0), 0);
  if (io_uring_register_buffers_sparse(&ring, 1) != 0) {
    io_uring_queue_exit(&ring);
    GTEST_SKIP() << "no sparse registered-buffer tables";
  }
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  auto run = [&](bool fixed) {
    AlignedBuffer buf(page, page);
    std::memset(buf.data(), 0x11, page);
    if (fixed) {
      iovec iov{buf.data(), page};
      __u64 tag = 0;
      if (io_uring_register_buffers_update_tag(&ring, 0, &iov, &tag, 1) < 0) return -1;
    }
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    if (fixed) {
      io_uring_prep_read_fixed(sqe, fds[0], buf.data(), page, 0, 0);
    } else {
      io_uring_prep_read(sqe, fds[0], buf.data(), page, 0);
    }
    EXPECT_EQ(io_uring_submit(&ring), 1);
    // The read is waiting for data: take the range back.
    EXPECT_TRUE(replace_with_fresh_pages(buf.data(), page));
    std::vector<char> data(page, 0x5A);
    EXPECT_EQ(::write(fds[1], data.data(), page), static_cast<ssize_t>(page));
    io_uring_cqe* cqe = nullptr;
    EXPECT_EQ(io_uring_wait_cqe(&ring, &cqe), 0);
    EXPECT_EQ(cqe->res, static_cast<int>(page)) << "the read did complete";
    io_uring_cqe_seen(&ring, cqe);
    int landed = 0;
    for (size_t i = 0; i < page; ++i) landed += buf.data()[i] == std::byte{0x5A};
    if (fixed) {
      iovec none{nullptr, 0};
      __u64 tag = 0;
      io_uring_register_buffers_update_tag(&ring, 0, &none, &tag, 1);
    }
    return landed;
  };
  const int fixed_landed = run(true);
  ASSERT_GE(fixed_landed, 0) << "cannot register a buffer here";
  EXPECT_EQ(fixed_landed, 0) << "a fixed read wrote the fresh pages";
  EXPECT_EQ(run(false), static_cast<int>(page)) << "a plain read writes whatever is mapped";
  ::close(fds[0]);
  ::close(fds[1]);
  io_uring_queue_exit(&ring);
}

TEST_F(UringDeviceTest, FlushAndTrim) {
  OPEN_OR_SKIP(dev);
  AlignedBuffer w(64 << 10);
  fill_pattern(w.view(), 3);
  ASSERT_TRUE(dev->write_sync(0, w.view()).ok());
  ASSERT_TRUE(dev->flush_sync().ok());
  EXPECT_EQ(dev->stats().flushes, 1u);

  // Punching a hole in a file reads back as zeros.
  ASSERT_TRUE(dev->trim_sync(16 << 10, 32 << 10).ok());
  EXPECT_EQ(dev->stats().trims, 1u);
  AlignedBuffer r(64 << 10);
  ASSERT_TRUE(dev->read_sync(0, r.view()).ok());
  EXPECT_EQ(std::memcmp(r.data(), w.data(), 16 << 10), 0);
  EXPECT_TRUE(std::all_of(r.data() + (16 << 10), r.data() + (48 << 10),
                          [](std::byte b) { return b == std::byte{0}; }));
  EXPECT_EQ(std::memcmp(r.data() + (48 << 10), w.data() + (48 << 10), 16 << 10), 0);
  EXPECT_EQ(fs::file_size(path_), kDevSize);  // KEEP_SIZE
}

// If the file shrinks under the device, a read past the new end must fail:
// the short read is resubmitted, makes no progress, and is reported as an
// I/O error, never as success.
TEST_F(UringDeviceTest, ShortReadIsNeverSuccess) {
  OPEN_OR_SKIP(dev);
  ASSERT_EQ(::truncate(path_.c_str(), 1 << 20), 0);
  AlignedBuffer r(8192);
  Status st = dev->read_sync((1 << 20) - 4096, r.view());
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.to_string();
  EXPECT_GE(dev->resubmissions(), 1u);
  EXPECT_EQ(dev->stats().errors, 1u);
}

// Callbacks may submit follow-up I/O; the destructor waits for all of it.
TEST_F(UringDeviceTest, DestructorWaitsForChainedRequests) {
  OPEN_OR_SKIP(dev, 2);
  AlignedBuffer w(4096);
  fill_pattern(w.view(), 8);
  std::atomic<int> completed{0};
  constexpr int kChains = 16;
  constexpr int kDepth = 10;
  // unique_ptr::reset() nulls the pointer before deleting, so the chain
  // must hold the raw pointer.
  UringDevice* raw = dev.get();
  std::function<void(int, int)> step = [&](int chain, int n) {
    raw->write((chain * kDepth + n) * 4096ull, w.view(), [&, chain, n](Status st) {
      EXPECT_TRUE(st.ok()) << st.to_string();
      completed.fetch_add(1);
      if (n + 1 < kDepth) step(chain, n + 1);
    });
  };
  for (int c = 0; c < kChains; ++c) step(c, 0);
  dev.reset();
  EXPECT_EQ(completed.load(), kChains * kDepth);
}

TEST_F(UringDeviceTest, BufferedModeAcceptsUnalignedBuffers) {
  OPEN_OR_SKIP(dev, 8, /*direct=*/false);
  EXPECT_EQ(dev->buffer_alignment(), 1u);
  std::vector<std::byte> w(4096 + 1), r(4096 + 1);
  fill_pattern(MutableByteView(w), 4);
  ASSERT_TRUE(dev->write_sync(4096, ByteView(w).subspan(1, 4096)).ok());
  ASSERT_TRUE(dev->read_sync(4096, MutableByteView(r).subspan(1, 4096)).ok());
  EXPECT_EQ(std::memcmp(w.data() + 1, r.data() + 1, 4096), 0);
}

}  // namespace
}  // namespace kvtier::blk
