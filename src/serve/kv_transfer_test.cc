#include "serve/kv_transfer.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cstring>
#include <filesystem>

#include <chrono>
#include <thread>

#include "common/testing/eventually.h"
#include "serve/testing/pd_frame_testing.h"

namespace kvtier::serve {
namespace {

using testing::test_key;
using testing::test_limits;
using testing::test_ns;

std::unique_ptr<KvTransferReceiver> start_receiver(PdLimits limits = PdLimits{}) {
  KvReceiverOptions o;
  o.limits = limits;
  o.ns_digest = test_ns();
  auto r = KvTransferReceiver::start(o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(*r) : nullptr;
}

// Connects to the receiver and, unless told not to, sends its preface.
int raw_connect(const KvTransferReceiver& rx, bool preface = true) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(rx.port());
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  if (preface) {
    std::byte p[kPdPrefaceBytes];
    std::memcpy(p, "KVPDAUTH", 8);
    std::memcpy(p + 8, &rx.token(), 16);
    EXPECT_EQ(::send(fd, p, sizeof p, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof p));
  }
  return fd;
}

void write_bytes(int fd, const std::vector<std::byte>& b) {
  size_t at = 0;
  while (at < b.size()) {
    const ssize_t w = ::send(fd, b.data() + at, b.size() - at, MSG_NOSIGNAL);
    if (w <= 0) return;  // the receiver may close before reading it all
    at += static_cast<size_t>(w);
  }
}

// Reads until the receiver closes; returns everything it sent.
std::vector<std::byte> read_to_close(int fd) {
  std::vector<std::byte> out;
  std::byte buf[256];
  for (;;) {
    const ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    if (r <= 0) return out;
    out.insert(out.end(), buf, buf + r);
  }
}

template <typename Pred>
bool wait_for(Pred p) {
  return kvtier::testing::eventually(p);
}

TEST(KvTransfer, RoundTripCountsWhatTheReceiverVerified) {
  auto rx = start_receiver();
  ASSERT_TRUE(rx);
  EXPECT_NE(rx->port(), 0);
  KvTransferSender tx;
  tx.add_receiver(rx->port(), rx->token());
  std::vector<kv::Key128> keys;
  for (uint64_t i = 0; i < 5; ++i) keys.push_back(test_key(i));
  auto a = tx.send(rx->port(), 10, test_ns(), keys, 32768);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->blocks, 5u);
  EXPECT_EQ(a->payload_bytes, 5u * 32768);
  EXPECT_EQ(a->frame_bytes, kPdHeaderSize + pd_table_bytes(5) + 5 * 32768);
  EXPECT_GT(a->wall_s, 0);
  // A second request on the same connection, with fewer blocks.
  auto b = tx.send(rx->port(), 11, test_ns(), std::span(keys).first(2), 32768);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const auto s = rx->stats();
  EXPECT_EQ(s.frames, 2u);
  EXPECT_EQ(s.blocks_verified, 7u);
  EXPECT_EQ(s.frame_bytes, a->frame_bytes + b->frame_bytes);
  EXPECT_EQ(s.payload_bytes, 7u * 32768);
  EXPECT_EQ(s.rejected_frames, 0u);
}

TEST(KvTransfer, ReceiverRejectsEachMalformedClassAndCloses) {
  auto rx = start_receiver(test_limits());
  ASSERT_TRUE(rx);
  uint64_t rejected = 0;
  for (const auto& m : testing::malformed_frames()) {
    SCOPED_TRACE(m.what);
    const int fd = raw_connect(*rx);
    write_bytes(fd, m.bytes);
    const auto reply = read_to_close(fd);
    ::close(fd);
    ASSERT_EQ(reply.size(), kPdAckSize);  // one ack, then the connection is closed
    auto ack = decode_pd_ack(reply);
    ASSERT_TRUE(ack.ok()) << ack.status().to_string();
    EXPECT_EQ(ack->error, m.expect);
    EXPECT_EQ(rx->stats().rejected_frames, ++rejected);
    EXPECT_EQ(rx->stats().last_error, m.expect);
  }
  EXPECT_EQ(rx->stats().frames, 0u);
  EXPECT_EQ(rx->stats().blocks_verified, 0u);
}

TEST(KvTransfer, ReceiverCountsAFrameCutShort) {
  auto rx = start_receiver(test_limits());
  ASSERT_TRUE(rx);
  auto f = testing::valid_frame(5, {1024, 1024});
  f.resize(f.size() - 10);
  const int fd = raw_connect(*rx);
  write_bytes(fd, f);
  ::shutdown(fd, SHUT_WR);
  EXPECT_TRUE(read_to_close(fd).empty());  // no ack for a frame that never ended
  ::close(fd);
  EXPECT_TRUE(wait_for([&] { return rx->stats().truncated == 1; }));
  EXPECT_EQ(rx->stats().frames, 0u);
}

TEST(KvTransfer, SenderReportsARefusalAndReconnects) {
  auto rx = start_receiver();
  ASSERT_TRUE(rx);
  KvTransferSender tx;
  tx.add_receiver(rx->port(), rx->token());
  const kv::Key128 keys[] = {test_key(0), test_key(1)};
  std::vector<std::byte> b0(4096), b1(4096);
  engine::fill_kv_block(keys[0], b0);
  engine::fill_kv_block(keys[0], b1);  // key 1 carries key 0's KV
  const ByteView views[] = {b0, b1};
  auto bad = tx.send_blocks(rx->port(), 1, test_ns(), keys, views);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(pd_error_of(bad.status()), PdError::kWrongContent) << bad.status().to_string();
  auto other_ns = tx.send(rx->port(), 2, kv::Key128{1, 1}, keys, 4096);
  EXPECT_EQ(pd_error_of(other_ns.status()), PdError::kWrongNamespace);
  auto good = tx.send(rx->port(), 3, test_ns(), keys, 4096);
  ASSERT_TRUE(good.ok()) << good.status().to_string();
  EXPECT_EQ(rx->stats().frames, 1u);
  EXPECT_EQ(rx->stats().rejected_frames, 2u);
}

TEST(KvTransfer, TwoSendersToOneReceiver) {
  auto rx = start_receiver();
  ASSERT_TRUE(rx);
  KvTransferSender a, b;
  a.add_receiver(rx->port(), rx->token());
  b.add_receiver(rx->port(), rx->token());
  const kv::Key128 keys[] = {test_key(3)};
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(a.send(rx->port(), i, test_ns(), keys, 8192).ok());
    ASSERT_TRUE(b.send(rx->port(), 100 + i, test_ns(), keys, 8192).ok());
  }
  EXPECT_EQ(rx->stats().frames, 8u);
}

TEST(KvTransfer, NoReceiverIsAnError) {
  uint16_t port;
  {
    auto rx = start_receiver();
    ASSERT_TRUE(rx);
    port = rx->port();
  }
  KvTransferSender tx;
  tx.add_receiver(port, kv::Key128{1, 2});
  const kv::Key128 keys[] = {test_key(0)};
  EXPECT_FALSE(tx.send(port, 1, test_ns(), keys, 4096).ok());
}

// Any local process can reach the loopback port: without the receiver's
// token it is closed unanswered and nothing it sends is read as a frame;
// too many connections at once are closed at accept; the real sender is
// served all along.
size_t open_descriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Connections that fail the preface leave neither a descriptor nor a thread
// behind, and a preface sent a byte at a time does not stretch its deadline.
TEST(KvTransfer, RefusedConnectionsLeaveNothingBehindAndThePrefaceHasOneDeadline) {
  auto rx = start_receiver(test_limits());
  ASSERT_TRUE(rx);
  const size_t before = open_descriptors();
  for (int i = 0; i < 200; ++i) {
    const int fd = raw_connect(*rx, false);
    std::vector<std::byte> junk(kPdPrefaceBytes, std::byte{0x41});
    write_bytes(fd, junk);
    EXPECT_TRUE(read_to_close(fd).empty());
    ::close(fd);
  }
  EXPECT_TRUE(wait_for([&] { return rx->stats().unauthenticated == 200; }));
  EXPECT_TRUE(wait_for([&] { return open_descriptors() <= before + 2; }))
      << open_descriptors() << " descriptors open, " << before << " before";
  // The right preface, one byte every 250 ms: it would take 6 s, and the
  // deadline is 2 s for all of it, so it is refused all the same.
  std::byte preface[kPdPrefaceBytes];
  std::memcpy(preface, "KVPDAUTH", 8);
  std::memcpy(preface + 8, &rx->token(), 16);
  const int slow = raw_connect(*rx, false);
  for (size_t i = 0; i < kPdPrefaceBytes; ++i) {
    if (::send(slow, preface + i, 1, MSG_NOSIGNAL) != 1) break;  // closed already
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  EXPECT_TRUE(wait_for([&] { return rx->stats().unauthenticated == 201; }));
  ::close(slow);
}

TEST(KvTransfer, LocalProcessesWithoutTheTokenAreClosedUnanswered) {
  auto rx = start_receiver(test_limits());
  ASSERT_TRUE(rx);
  const auto frame = testing::valid_frame(5, {1024, 1024});
  // A valid frame without the preface, and one behind a wrong token.
  const int bare = raw_connect(*rx, false);
  write_bytes(bare, frame);
  EXPECT_TRUE(read_to_close(bare).empty());
  ::close(bare);
  const int forged = raw_connect(*rx, false);
  std::vector<std::byte> wrong(kPdPrefaceBytes, std::byte{0});
  std::memcpy(wrong.data(), "KVPDAUTH", 8);
  write_bytes(forged, wrong);
  write_bytes(forged, frame);
  EXPECT_TRUE(read_to_close(forged).empty());
  ::close(forged);
  EXPECT_TRUE(wait_for([&] { return rx->stats().unauthenticated == 2; }));
  EXPECT_EQ(rx->stats().frames, 0u);
  // Silent connections past the limit are closed at once.
  std::vector<int> silent;
  for (size_t i = 0; i < kPdMaxConnections + 8; ++i) silent.push_back(raw_connect(*rx, false));
  EXPECT_TRUE(wait_for([&] { return rx->stats().over_limit >= 8; }));
  for (int fd : silent) ::close(fd);
  // Once they are gone, the legitimate sender is served.
  KvTransferSender tx;
  tx.add_receiver(rx->port(), rx->token());
  const kv::Key128 keys[] = {test_key(4)};
  bool sent = false;
  EXPECT_TRUE(wait_for([&] {
    // The receiver may not have seen the silent ones go yet (over the limit).
    if (!sent) sent = tx.send(rx->port(), 1, test_ns(), keys, 1024).ok();
    return sent;
  }));
  EXPECT_EQ(rx->stats().frames, 1u);
}

}  // namespace
}  // namespace kvtier::serve
