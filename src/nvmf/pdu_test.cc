// PDU codec: golden bytes of encoded headers and rejection of every field
// that breaks the protocol's rules.
#include "nvmf/pdu.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvtier::nvmf {
namespace {

ByteView bv(const HeaderBuf& h, size_t n) { return as_bytes_view(h.data(), n); }
ByteView bv(const std::vector<uint8_t>& v) { return as_bytes_view(v.data(), v.size()); }

TEST(Pdu, IcRespGoldenBytes) {
  HeaderBuf h;
  ASSERT_EQ(encode_icresp({0, 0, true, false, 0x20000}, h), 128u);
  const std::vector<uint8_t> head = {0x01, 0x00, 0x80, 0x00, 0x80, 0x00, 0x00, 0x00,
                                     0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x02, 0x00};
  EXPECT_EQ(std::vector<uint8_t>(h.begin(), h.begin() + 16), head);
  for (size_t i = 16; i < 128; ++i) EXPECT_EQ(h[i], 0) << i;
  auto r = decode_icresp(bv(h, 128));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->hdgst);
  EXPECT_FALSE(r->ddgst);
  EXPECT_EQ(r->maxh2cdata, 0x20000u);
}

TEST(Pdu, LinuxIcReqAccepted) {
  std::vector<uint8_t> icreq(128, 0);
  icreq[0] = 0x00, icreq[2] = 128, icreq[4] = 128, icreq[11] = 3;
  auto l = parse_common_header(bv(icreq), Direction::kHostToController, {});
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_EQ(l->header_bytes, 128u);
  auto r = decode_icreq(bv(icreq));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->hdgst && r->ddgst);
  icreq[8] = 1;  // pfv 1 is unknown
  EXPECT_FALSE(decode_icreq(bv(icreq)).ok());
  icreq[8] = 0;
  icreq[10] = 32;  // hpda beyond 31
  EXPECT_FALSE(decode_icreq(bv(icreq)).ok());
}

TEST(Pdu, CapsuleRespWithHeaderDigestGoldenBytes) {
  Cqe cqe{};
  cqe[12] = 0x07;  // CID 7
  HeaderBuf h;
  ASSERT_EQ(encode_capsule_resp(cqe, true, h), 28u);
  const std::vector<uint8_t> ch = {0x05, 0x01, 0x18, 0x00, 0x1c, 0x00, 0x00, 0x00};
  EXPECT_EQ(std::vector<uint8_t>(h.begin(), h.begin() + 8), ch);
  // The digest is CRC32C of the 24 header bytes, little-endian; flipping one
  // header bit must break it.
  EXPECT_TRUE(header_digest_ok(bv(h, 28), 24));
  h[20] ^= 1;
  EXPECT_FALSE(header_digest_ok(bv(h, 28), 24));
}

TEST(Pdu, Crc32cOfKnownVector) {
  const char* s = "123456789";  // CRC32C check value from RFC 3720
  EXPECT_EQ(digest(as_bytes_view(s, 9)), 0xE3069283u);
}

TEST(Pdu, C2HDataLayout) {
  HeaderBuf h;
  const uint32_t n = encode_data(PduType::kC2HData, {9, 0, 0, 4096}, kFlagDataLast, true, true, h);
  ASSERT_EQ(n, 28u);
  EXPECT_EQ(h[0], 0x07);
  EXPECT_EQ(h[1], kFlagHdgst | kFlagDdgst | kFlagDataLast);
  EXPECT_EQ(h[3], 28);                      // pdo: right after the digest
  EXPECT_EQ(get32(&h[4]), 28u + 4096 + 4);  // plen
  EXPECT_EQ(get16(&h[8]), 9);               // cccid
  EXPECT_EQ(get32(&h[16]), 4096u);          // datal
  PduLimits lim{true, true, 1 << 20};
  auto l = parse_common_header(bv(h, 8), Direction::kControllerToHost, lim);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_EQ(l->data_len, 4096u);
  EXPECT_EQ(l->data_offset, 28u);
  // The same PDU is not valid towards the controller.
  EXPECT_FALSE(parse_common_header(bv(h, 8), Direction::kHostToController, lim).ok());
}

TEST(Pdu, CapsuleCmdInCapsuleData) {
  Sqe sqe{};
  sqe[0] = 0x01;
  HeaderBuf h;
  ASSERT_EQ(encode_capsule_cmd(sqe, 512, false, false, h), 72u);
  EXPECT_EQ(h[3], 72);
  EXPECT_EQ(get32(&h[4]), 72u + 512);
  auto l = parse_common_header(bv(h, 8), Direction::kHostToController, {false, false, 8192});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->data_len, 512u);
}

struct BadHeader {
  const char* what;
  std::vector<uint8_t> ch;
  PduLimits lim;
  uint16_t fes;
};

TEST(Pdu, RejectsMalformedHeaders) {
  const PduLimits plain{false, false, 8192};
  const PduLimits hd{true, false, 8192};
  const std::vector<BadHeader> cases = {
      {"unknown type 0x08", {0x08, 0, 24, 0, 24, 0, 0, 0}, plain, kFesInvalidHeaderField},
      {"type 0x7f", {0x7f, 0, 24, 0, 24, 0, 0, 0}, plain, kFesInvalidHeaderField},
      {"R2T towards controller", {0x09, 0, 24, 0, 24, 0, 0, 0}, plain, kFesInvalidHeaderField},
      {"capsule hlen 24", {0x04, 0, 24, 0, 24, 0, 0, 0}, plain, kFesInvalidHeaderField},
      {"ICReq plen 129", {0x00, 0, 128, 0, 129, 0, 0, 0}, plain, kFesInvalidHeaderField},
      {"ICReq with digest flag", {0x00, 1, 128, 0, 128, 0, 0, 0}, plain, kFesInvalidHeaderField},
      {"plen below hlen", {0x04, 0, 72, 0, 40, 0, 0, 0}, plain, kFesInvalidHeaderField},
      {"missing header digest", {0x04, 0, 72, 0, 72, 0, 0, 0}, hd, kFesInvalidHeaderField},
      {"unexpected header digest", {0x04, 1, 72, 0, 76, 0, 0, 0}, plain, kFesInvalidHeaderField},
      {"pdo with padding", {0x04, 0, 72, 80, 200, 0, 0, 0}, plain, kFesInvalidHeaderField},
      {"data beyond limit", {0x04, 0, 72, 72, 0x48, 0x30, 0, 0}, plain, kFesDataLimitExceeded},
      {"H2CData without data", {0x06, 0, 24, 0, 24, 0, 0, 0}, plain, kFesInvalidHeaderField},
      {"plen 4 GiB", {0x06, 0, 24, 24, 0xff, 0xff, 0xff, 0xff}, plain, kFesDataLimitExceeded},
      {"SUCCESS on H2CData", {0x06, 0x08, 24, 24, 28, 0, 0, 0}, plain, kFesInvalidHeaderField},
      {"TermReq too long", {0x02, 0, 24, 0, 200, 0, 0, 0}, plain, kFesInvalidHeaderField},
      {"data digest flag not negotiated",
       {0x06, 2, 24, 24, 32, 0, 0, 0},
       plain,
       kFesInvalidHeaderField},
  };
  for (const auto& c : cases) {
    PduError err;
    auto l = parse_common_header(bv(c.ch), Direction::kHostToController, c.lim, &err);
    EXPECT_FALSE(l.ok()) << c.what;
    EXPECT_EQ(err.fes, c.fes) << c.what;
  }
}

TEST(Pdu, DataHeaderRejectsZeroLengthAndOverflow) {
  std::vector<uint8_t> h(24, 0);
  EXPECT_FALSE(decode_data_header(bv(h)).ok());
  put32(&h[12], 0xFFFFFF00u);
  put32(&h[16], 0x1000);
  EXPECT_FALSE(decode_data_header(bv(h)).ok());
  put32(&h[12], 0);
  auto d = decode_data_header(bv(h));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->length, 0x1000u);
}

TEST(Pdu, TermReqCarriesAtMost128OffendingBytes) {
  std::vector<uint8_t> junk(300, 0xAB);
  HeaderBuf h;
  ASSERT_EQ(encode_termreq(PduType::kC2HTermReq, {kFesHeaderDigest, 0}, bv(junk), h), 24u);
  EXPECT_EQ(h[0], 0x03);
  EXPECT_EQ(get32(&h[4]), 24u + 128);
  EXPECT_EQ(get16(&h[8]), kFesHeaderDigest);
}

}  // namespace
}  // namespace kvtier::nvmf
