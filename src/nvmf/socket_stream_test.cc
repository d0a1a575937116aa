// SocketStream's reads over a real socket pair: what one receive brings
// along beyond the bytes asked for is kept for the next reads, in order, and
// a large read still lands in the caller's memory; deadlines and a closed
// peer behave as without the buffer.
#include "nvmf/socket_stream.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <numeric>
#include <thread>
#include <vector>

#include "nvmf/target_state.h"  // monotonic_ns

namespace kvtier::nvmf {
namespace {

struct Pair {
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    reader = std::make_unique<SocketStream>(fds[0]);
    writer = fds[1];
  }
  ~Pair() {
    if (writer >= 0) ::close(writer);
  }
  void send(const std::vector<uint8_t>& bytes) {
    size_t at = 0;
    while (at < bytes.size()) {
      const ssize_t w = ::write(writer, bytes.data() + at, bytes.size() - at);
      ASSERT_GT(w, 0);
      at += size_t(w);
    }
  }
  std::unique_ptr<SocketStream> reader;
  int writer = -1;
};

std::vector<uint8_t> counting(size_t n, uint8_t from) {
  std::vector<uint8_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

TEST(SocketStream, UnbufferedReadsTakeOnlyWhatTheyAskFor) {
  Pair p;
  p.send(counting(64, 0));
  uint8_t got[8];
  ASSERT_TRUE(p.reader->read_exact(got, sizeof got).ok());
  EXPECT_EQ(got[7], 7);
  EXPECT_EQ(p.reader->buffered(), 0u);
}

TEST(SocketStream, ABufferedReadKeepsWhatFollowsForTheNextReadsInOrder) {
  Pair p;
  p.reader->buffer_reads(4096);
  // A header, a small payload, another header and a payload larger than the
  // buffer, all on the socket before the first read.
  const auto h1 = counting(8, 1), small = counting(1000, 50), h2 = counting(24, 200);
  const auto large = counting(64 << 10, 7);
  std::vector<uint8_t> all;
  for (const auto* part : {&h1, &small, &h2}) all.insert(all.end(), part->begin(), part->end());
  p.send(all);
  std::thread big([&] { p.send(large); });

  std::vector<uint8_t> got(8);
  ASSERT_TRUE(p.reader->read_exact(got.data(), got.size()).ok());
  EXPECT_EQ(got, h1);
  // The receive that brought the header brought what follows it too.
  EXPECT_GT(p.reader->buffered(), 0u);
  got.assign(small.size(), 0);
  ASSERT_TRUE(p.reader->read_exact(got.data(), got.size()).ok());
  EXPECT_EQ(got, small);
  got.assign(h2.size(), 0);
  ASSERT_TRUE(p.reader->read_exact(got.data(), got.size()).ok());
  EXPECT_EQ(got, h2);
  got.assign(large.size(), 0);
  ASSERT_TRUE(p.reader->read_exact(got.data(), got.size()).ok());
  EXPECT_EQ(got, large);
  big.join();
  EXPECT_EQ(p.reader->buffered(), 0u);
}

TEST(SocketStream, BufferedBytesAreReadPastTheDeadlineAndAnEmptySocketTimesOut) {
  Pair p;
  p.reader->buffer_reads(4096);
  p.send(counting(16, 0));
  uint8_t got[8];
  ASSERT_TRUE(p.reader->read_exact(got, sizeof got).ok());
  ASSERT_EQ(p.reader->buffered(), 8u);
  // The deadline has passed: what is buffered is still read (no wait), and
  // a read that needs the socket fails with a timeout, not a hang.
  p.reader->set_read_deadline(monotonic_ns() - 1);
  ASSERT_TRUE(p.reader->read_exact(got, sizeof got).ok());
  EXPECT_EQ(got[0], 8);
  EXPECT_EQ(p.reader->read_exact(got, 1).code(), StatusCode::kTimeout);
}

TEST(SocketStream, APeerThatClosesEndsTheReadAfterWhatItSent) {
  Pair p;
  p.reader->buffer_reads(4096);
  p.send(counting(12, 0));
  ::close(p.writer);
  p.writer = -1;
  uint8_t got[8];
  ASSERT_TRUE(p.reader->read_exact(got, sizeof got).ok());
  // Four bytes are left: a read of eight gets them and then the close.
  EXPECT_EQ(p.reader->read_exact(got, sizeof got).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kvtier::nvmf
