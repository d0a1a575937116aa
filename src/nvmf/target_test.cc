// NvmfTarget over real loopback sockets, driven by a raw PDU client: the
// handshake, the allow-list, I/O through in-capsule and R2T writes and C2H
// reads, protocol errors answered with C2HTermReq without harming other
// connections, and keep-alive expiry.
#include "nvmf/target.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "blk/dev/mem_device.h"
#include "nvmf/pdu.h"
#include "nvmf/testing/raw_host.h"

namespace kvtier::nvmf {
namespace {

using testing::RawHost;
constexpr const char* kNqn = testing::kRawNqn;
constexpr const char* kHost = testing::kRawHostNqn;

class TargetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TargetConfig c;
    c.port = 0;
    SubsystemConfig s;
    s.nqn = kNqn;
    s.allowed_hosts = {kHost};
    dev_ = std::make_shared<blk::MemDevice>(8 << 20, 4096, 1);
    s.namespaces.push_back(dev_);
    c.subsystems.push_back(s);
    c.maxh2cdata = 16 << 10;
    c.min_kato_ms = 100;  // KeepAliveExpiryDestroysController asks for 300
    auto t = NvmfTarget::start(c);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    target_ = std::move(t.value());
  }
  // Admin queue connected and enabled; returns the controller id.
  uint16_t enable(RawHost& h, uint32_t kato_ms = 0) {
    EXPECT_EQ(h.handshake().size(), 128u);
    const uint16_t cntlid = h.connect(0, kHost, 0xFFFF, kato_ms);
    h.capsule(RawHost::enable_sqe(2));
    auto r = h.recv_pdu();
    EXPECT_EQ(r.size(), 24u);
    EXPECT_EQ(get16(&r[22]), 0);
    return cntlid;
  }
  std::shared_ptr<blk::MemDevice> dev_;
  std::unique_ptr<NvmfTarget> target_;
};

TEST_F(TargetTest, IcRespFollowsLinuxRules) {
  RawHost h(target_->port());
  ASSERT_TRUE(h.connected());
  auto r = h.handshake();
  ASSERT_EQ(r.size(), 128u);
  auto resp = decode_icresp(as_bytes_view(r.data(), r.size()));
  ASSERT_TRUE(resp.ok()) << resp.status().to_string();
  EXPECT_EQ(resp->cpda, 0);
  EXPECT_EQ(resp->maxh2cdata, 16u << 10);
  EXPECT_FALSE(resp->hdgst);
}

TEST_F(TargetTest, UnlistedHostIsRefused) {
  RawHost h(target_->port());
  h.handshake();
  EXPECT_EQ(h.connect(0, "nqn.2024-01.io.kvtier:stranger"), 0xFFFF);
  // SCT 1 (fabrics), SC 0x84 (invalid host), DNR.
  EXPECT_EQ(h.last_status(), uint16_t(0x84 << 1 | 1 << 9 | 1 << 15));
}

TEST_F(TargetTest, WritesByCapsuleAndR2TThenReadsBack) {
  RawHost admin(target_->port());
  const uint16_t cntlid = enable(admin);
  ASSERT_NE(cntlid, 0xFFFF);
  RawHost io(target_->port());
  io.handshake();
  ASSERT_EQ(io.connect(1, kHost, cntlid), cntlid);
  // 4 KiB in-capsule write to LBA 1.
  std::vector<uint8_t> a(4096, 0x5A);
  Sqe w = RawHost::base_sqe(0x01, 7, 0x01, 4096);
  put32(&w[4], 1);
  put32(&w[40], 1);
  io.capsule(w, a);
  auto r = io.recv_pdu();
  ASSERT_EQ(r.size(), 24u);
  EXPECT_EQ(get16(&r[20]), 7);
  EXPECT_EQ(get16(&r[22]), 0);
  // 32 KiB write to LBA 2 through R2T, sent as two H2CData PDUs (MAXH2CDATA 16 KiB).
  Sqe w2 = RawHost::base_sqe(0x01, 8, 0x5A, 32768);
  put32(&w2[4], 1);
  put32(&w2[40], 2);
  put32(&w2[48], 7);
  io.capsule(w2);
  auto r2t = io.recv_pdu();
  ASSERT_EQ(r2t.size(), 24u);
  ASSERT_EQ(r2t[0], 0x09);
  auto d = decode_data_header(as_bytes_view(r2t.data(), 24));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->length, 32768u);
  std::vector<uint8_t> b(32768);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(i * 7);
  for (uint32_t off = 0; off < 32768; off += 16384) {
    HeaderBuf h;
    const uint32_t n = encode_data(PduType::kH2CData, {8, d->ttag, off, 16384},
                                   off ? kFlagDataLast : 0, false, false, h);
    io.send(h.data(), n);
    io.send(b.data() + off, 16384);
  }
  r = io.recv_pdu();
  ASSERT_EQ(r.size(), 24u);
  EXPECT_EQ(get16(&r[22]), 0);
  // The device holds both writes.
  auto raw = dev_->raw();
  EXPECT_EQ(std::memcmp(raw.data() + 4096, a.data(), 4096), 0);
  EXPECT_EQ(std::memcmp(raw.data() + 8192, b.data(), b.size()), 0);
  // Read LBAs 1..9 back through C2HData.
  Sqe rd = RawHost::base_sqe(0x02, 9, 0x5A, 36864);
  put32(&rd[4], 1);
  put32(&rd[40], 1);
  put32(&rd[48], 8);
  io.capsule(rd);
  auto c2h = io.recv_pdu();
  ASSERT_EQ(c2h.size(), 24u + 36864);
  EXPECT_EQ(c2h[0], 0x07);
  EXPECT_TRUE(c2h[1] & kFlagDataLast);
  EXPECT_EQ(std::memcmp(c2h.data() + 24, a.data(), 4096), 0);
  EXPECT_EQ(std::memcmp(c2h.data() + 24 + 4096, b.data(), b.size()), 0);
  r = io.recv_pdu();  // SQ flow control on: a CapsuleResp follows
  ASSERT_EQ(r.size(), 24u);
  EXPECT_EQ(get16(&r[22]), 0);
  // A read past the end: LBA out of range (SC 0x80), connection still fine.
  Sqe oob = RawHost::base_sqe(0x02, 10, 0x5A, 4096);
  put32(&oob[4], 1);
  put32(&oob[40], 2048);
  io.capsule(oob);
  r = io.recv_pdu();
  ASSERT_EQ(r.size(), 24u);
  EXPECT_EQ(get16(&r[22]) >> 1 & 0xFF, 0x80);
}

TEST_F(TargetTest, MalformedPduGetsTermReqAndSparesOtherConnections) {
  RawHost good(target_->port());
  const uint16_t cntlid = enable(good);
  ASSERT_NE(cntlid, 0xFFFF);
  RawHost bad(target_->port());
  bad.handshake();
  const uint8_t junk[8] = {0x04, 0, 24, 0, 24, 0, 0, 0};  // capsule with hlen 24
  bad.send(junk, sizeof junk);
  auto t = bad.recv_pdu();
  ASSERT_GE(t.size(), 24u);
  EXPECT_EQ(t[0], 0x03);
  EXPECT_EQ(get16(&t[8]), kFesInvalidHeaderField);
  EXPECT_TRUE(bad.closed_by_peer());
  // The other controller still answers.
  good.capsule(RawHost::base_sqe(0x18, 5, 0x5A, 0));
  auto r = good.recv_pdu();
  ASSERT_EQ(r.size(), 24u);
  EXPECT_EQ(get16(&r[20]), 5);
}

TEST_F(TargetTest, KeepAliveExpiryDestroysController) {
  RawHost h(target_->port());
  const uint16_t cntlid = enable(h, 300);
  ASSERT_NE(cntlid, 0xFFFF);
  EXPECT_TRUE(h.closed_by_peer());  // waits for the expiry, however busy the machine
  // An I/O queue can no longer join the expired controller.
  RawHost io(target_->port());
  io.handshake();
  EXPECT_EQ(io.connect(1, kHost, cntlid), 0xFFFF);
}

// Async Event Requests are held (AERL + 1 = 4 of them), a fifth is refused
// with "limit exceeded", and an Abort of a held one completes it with ABORT
// REQUESTED before the Abort itself completes saying it was aborted.
TEST_F(TargetTest, AsyncEventRequestsAreHeldLimitedAndAbortable) {
  RawHost h(target_->port());
  ASSERT_NE(enable(h), 0xFFFF);
  for (uint16_t cid = 10; cid < 14; ++cid) h.capsule(RawHost::base_sqe(0x0C, cid, 0x5A, 0));
  h.capsule(RawHost::base_sqe(0x0C, 14, 0x5A, 0));
  auto r = h.recv_pdu();  // only the fifth is answered
  ASSERT_EQ(r.size(), 24u);
  EXPECT_EQ(get16(&r[20]), 14);
  EXPECT_EQ((get16(&r[22]) >> 1) & 0xFF, 0x05);  // SC: AER limit exceeded
  EXPECT_EQ((get16(&r[22]) >> 9) & 0x7, 1);      // SCT: command specific
  Sqe abort = RawHost::base_sqe(0x08, 20, 0x5A, 0);
  put32(&abort[40], uint32_t(12) << 16);  // SQID 0, CID 12
  h.capsule(abort);
  r = h.recv_pdu();
  ASSERT_EQ(r.size(), 24u);
  EXPECT_EQ(get16(&r[20]), 12);
  EXPECT_EQ((get16(&r[22]) >> 1) & 0xFF, 0x07);  // ABORT REQUESTED
  r = h.recv_pdu();
  ASSERT_EQ(r.size(), 24u);
  EXPECT_EQ(get16(&r[20]), 20);
  EXPECT_EQ(get16(&r[22]) >> 1, 0);
  EXPECT_EQ(get32(&r[8]) & 1, 0u);  // dw0 bit 0 clear: aborted
  // Keep Alive still answered: the queue is intact.
  h.capsule(RawHost::base_sqe(0x18, 21, 0x5A, 0));
  r = h.recv_pdu();
  ASSERT_EQ(r.size(), 24u);
  EXPECT_EQ(get16(&r[20]), 21);
}

}  // namespace
}  // namespace kvtier::nvmf
