#include "serve/pd_frame.h"

#include <gtest/gtest.h>

#include "serve/testing/pd_frame_testing.h"

namespace kvtier::serve {
namespace {

using testing::malformed_frames;
using testing::test_limits;
using testing::test_ns;
using testing::valid_frame;

TEST(PdFrame, RoundTrip) {
  const auto f = valid_frame(42, {1024, 4096, 7, 0});
  const auto ns = test_ns();
  auto d = decode_pd_frame(f, test_limits(), &ns, true);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->header.request_id, 42u);
  EXPECT_EQ(d->header.ns_digest, ns);
  ASSERT_EQ(d->header.block_count, 4u);
  EXPECT_EQ(d->header.payload_bytes, 1024u + 4096 + 7);
  EXPECT_EQ(d->frame_bytes, f.size());
  EXPECT_EQ(f.size(), kPdHeaderSize + pd_table_bytes(4) + 1024 + 4096 + 7);
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(d->entries[i].key, testing::test_key(i));
  EXPECT_EQ(d->entries[2].length, 7u);
}

TEST(PdFrame, EmptyFrameRoundTrips) {
  const auto f = valid_frame(1, {});
  auto d = decode_pd_frame(f, test_limits(), nullptr, true);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->header.block_count, 0u);
  EXPECT_EQ(d->frame_bytes, kPdHeaderSize + kPdTableCrcSize);
}

TEST(PdFrame, EachMalformedClassIsNamed) {
  const auto ns = test_ns();
  for (const auto& m : malformed_frames()) {
    SCOPED_TRACE(m.what);
    auto d = decode_pd_frame(m.bytes, test_limits(), &ns, true);
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(pd_error_of(d.status()), m.expect) << d.status().to_string();
  }
}

TEST(PdFrame, EveryPrefixIsTruncated) {
  const auto f = valid_frame(3, {100, 200});
  for (size_t n = 0; n < f.size(); ++n) {
    auto d = decode_pd_frame(ByteView(f.data(), n), test_limits(), nullptr, true);
    ASSERT_FALSE(d.ok()) << n;
    EXPECT_EQ(pd_error_of(d.status()), PdError::kTruncated) << n << " " << d.status().to_string();
  }
}

TEST(PdFrame, ContentCheckCanBeLeftToTheCaller) {
  // Without the testbed's content check only the CRC guards the bytes.
  for (const auto& m : malformed_frames()) {
    if (m.expect != PdError::kWrongContent) continue;
    EXPECT_TRUE(decode_pd_frame(m.bytes, test_limits(), nullptr, false).ok());
  }
}

TEST(PdFrame, AckRoundTripAndDamage) {
  PdAck a;
  a.request_id = 77;
  a.error = PdError::kBlockChecksum;
  a.blocks_verified = 3;
  a.frame_bytes = 123456;
  a.testbed_ns = 999;
  std::byte buf[kPdAckSize];
  encode_pd_ack(a, buf);
  auto d = decode_pd_ack(ByteView(buf, kPdAckSize));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->request_id, 77u);
  EXPECT_EQ(d->error, PdError::kBlockChecksum);
  EXPECT_EQ(d->blocks_verified, 3u);
  EXPECT_EQ(d->frame_bytes, 123456u);
  EXPECT_EQ(d->testbed_ns, 999u);
  EXPECT_EQ(pd_error_of(decode_pd_ack(ByteView(buf, kPdAckSize - 1)).status()),
            PdError::kTruncated);
  buf[10] ^= std::byte{1};
  EXPECT_EQ(pd_error_of(decode_pd_ack(ByteView(buf, kPdAckSize)).status()),
            PdError::kHeaderChecksum);
  buf[0] ^= std::byte{1};
  EXPECT_EQ(pd_error_of(decode_pd_ack(ByteView(buf, kPdAckSize)).status()), PdError::kBadMagic);
}

}  // namespace
}  // namespace kvtier::serve
