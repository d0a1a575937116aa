// Store wire protocol tests: golden frames (the same hex as in
// docs/protocol-store.md, produced by an independent encoder written from the
// document), a round trip of every message, and what the encoder refuses.
// Malformed frames, the incremental decoder and randomized damage are in
// protocol_malformed_test.cc.
#include "net/wire/protocol.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "net/testing/protocol_test_util.h"

namespace kvtier::net {
namespace {

using namespace kvtier::net::testing;  // NOLINT

// ---- Golden frames (docs/protocol-store.md, "Golden frames") ------------------------

void expect_golden(const Message& m, uint64_t rid, const Bytes& data, const char* golden) {
  EXPECT_EQ(hex(must_encode(m, rid, data)), golden);
  Bytes bytes = unhex(golden);
  Message back;
  Bytes back_data;
  ASSERT_TRUE(decode_whole(bytes, &back, &back_data).ok());
  EXPECT_EQ(back, m);
  EXPECT_EQ(back_data, data);
  EXPECT_EQ(decode_frame(bytes)->header.request_id, rid);
}

TEST(ProtocolGolden, Hello) { expect_golden(golden_hello(), 1, {}, kGoldenHello); }
TEST(ProtocolGolden, Get) { expect_golden(golden_get(), 2, {}, kGoldenGet); }
TEST(ProtocolGolden, MatchPrefixThreeKeys) { expect_golden(golden_match(), 3, {}, kGoldenMatch); }
TEST(ProtocolGolden, ShmLeaseGetResponseAndRelease) {
  ShmLeaseGetResponse lease{GetOutcome{true, kv::Tier::kRam, kv::MissReason::kNone, 1536u << 10},
                            ShmPlacement::kArena, 0x30000000, 512};
  expect_golden(lease, 7, {}, kGoldenShmLeaseGetResponse);
  expect_golden(ShmReleaseRequest{{512}}, 8, {}, kGoldenShmRelease);
}
TEST(ProtocolGolden, GetResponseWithData) {
  expect_golden(golden_get_response(), 2, str_bytes("abcd"), kGoldenGetResponse);
}

// The server checksums a get's block on its store thread and hands the CRC
// in: the frame must be the golden one, byte for byte; a wrong CRC must give
// a frame the decoder refuses.
TEST(ProtocolGolden, GetResponseWithPrecomputedDataCrc) {
  Bytes data = str_bytes("abcd");
  ByteView part(data.data(), data.size());
  std::vector<std::byte> prefix;
  ASSERT_TRUE(encode_message_prefix_with_data_crc(golden_get_response(), 2,
                                                  std::span<const ByteView>(&part, 1), crc32c(part),
                                                  prefix)
                  .ok());
  Bytes whole(prefix.begin(), prefix.end());
  whole.insert(whole.end(), data.begin(), data.end());
  EXPECT_EQ(hex(whole), kGoldenGetResponse);

  prefix.clear();
  ASSERT_TRUE(encode_message_prefix_with_data_crc(golden_get_response(), 2,
                                                  std::span<const ByteView>(&part, 1),
                                                  crc32c(part) ^ 1, prefix)
                  .ok());
  Bytes bad(prefix.begin(), prefix.end());
  bad.insert(bad.end(), data.begin(), data.end());
  Message back;
  Bytes back_data;
  EXPECT_FALSE(decode_whole(bad, &back, &back_data).ok());
}

TEST(ProtocolGolden, HeaderFieldsAtDocumentedOffsets) {
  FrameHeader h;
  h.version = 1;
  h.type = MessageType::kBatchGetResponse;
  h.flags = 0;
  h.descriptor_len = 0x11223344;
  h.request_id = 0x0102030405060708ull;
  h.data_len = 0x55667788;
  h.descriptor_crc = 0x99aabbcc;
  h.data_crc = 0xddeeff00;
  std::array<std::byte, kFrameHeaderSize> buf{};
  encode_header(h, buf);
  RawFrame raw;
  raw.type = 0x8006;
  raw.request_id = h.request_id;
  raw.descriptor_len = h.descriptor_len;
  raw.data_len = h.data_len;
  raw.descriptor_crc = h.descriptor_crc;
  raw.data_crc = h.data_crc;
  EXPECT_EQ(hex(buf), hex(raw.header()));
  auto back = decode_header(buf, FrameLimits{UINT32_MAX, UINT32_MAX});
  // Both lengths exceed the hard limits, which decode_header enforces even
  // when the caller's limits are larger.
  EXPECT_EQ(err(back.status()), ProtocolError::kDescriptorTooLarge);
  h.descriptor_len = 12;
  h.data_len = 99;
  encode_header(h, buf);
  auto ok = decode_header(buf);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(*ok, h);
}

TEST(ProtocolRoundTrip, EveryMessageType) {
  std::set<MessageType> seen;
  uint64_t rid = 100;
  for (const Sample& s : samples()) {
    SCOPED_TRACE(message_type_name(message_type_of(s.msg)));
    Bytes frame = must_encode(s.msg, rid, s.data);
    Message back;
    Bytes data;
    Status st = decode_whole(frame, &back, &data);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(back, s.msg);
    EXPECT_EQ(data, s.data);
    EXPECT_EQ(decode_frame(frame)->header.request_id, rid);
    // The encoding is canonical: decoding and encoding again gives the same bytes.
    EXPECT_EQ(hex(must_encode(back, rid, data)), hex(frame));
    seen.insert(message_type_of(s.msg));
    ++rid;
  }
  EXPECT_EQ(seen.size(), 23u);  // 11 requests, 11 responses, Error
}

// Empty key lists (found by the fuzzer: the whole-list copy must not be
// handed an empty vector's null data()).
TEST(ProtocolRoundTrip, EmptyKeyLists) {
  for (const Message& m : {Message(MatchPrefixRequest{1, {}}), Message(PinRequest{1, 10, {}}),
                           Message(UnpinRequest{1, {}})}) {
    Bytes frame = must_encode(m, 7, {});
    Message back;
    Bytes data;
    ASSERT_TRUE(decode_whole(frame, &back, &data).ok());
    EXPECT_EQ(back, m);
  }
}

TEST(ProtocolRoundTrip, DecodeAsTypedMessage) {
  Bytes frame = must_encode(golden_get(), 5);
  auto f = decode_frame(frame);
  ASSERT_TRUE(f.ok());
  auto get = decode_message_as<GetRequest>(f->header, f->descriptor);
  ASSERT_TRUE(get.ok());
  EXPECT_EQ(*get, golden_get());
}

TEST(ProtocolRoundTrip, AtTheLimits) {
  MatchPrefixRequest match{1, {}};
  for (uint32_t i = 0; i < kMaxMatchKeys; ++i) match.keys.push_back(key(i, ~uint64_t{i}));
  BatchGetRequest batch{1, {}};
  for (uint32_t i = 0; i < kMaxBatch; ++i) batch.items.push_back({key(i + 1, i), 1u << 20});
  HelloRequest hello{1, 1, std::string(kMaxNameBytes, 'n'), std::string(kMaxStringBytes, 't')};
  PinRequest pin{1, ~0ull, match.keys};
  for (const Message& m : std::vector<Message>{match, batch, hello, pin}) {
    Bytes frame = must_encode(m, 1);
    Message back;
    ASSERT_TRUE(decode_whole(frame, &back).ok());
    EXPECT_EQ(back, m);
  }
  // A full data section.
  Bytes big(kMaxDataBytes, std::byte{0x5a});
  Message put = PutRequest{1, key(1, 1), kMaxDataBytes};
  Bytes frame = must_encode(put, 1, big);
  EXPECT_EQ(frame.size(), kFrameHeaderSize + 2 + 16 + 4 + kMaxDataBytes);
  Message back;
  Bytes data;
  ASSERT_TRUE(decode_whole(frame, &back, &data).ok());
  EXPECT_EQ(back, put);
  EXPECT_TRUE(data == big);
}

TEST(ProtocolRoundTrip, ConversionsToStoreResults) {
  kv::MatchResult r =
      MatchPrefixResponse{{kv::Tier::kRam, kv::Tier::kDisk, kv::Tier::kRam}}.to_result();
  EXPECT_EQ(r.blocks, 3u);
  EXPECT_EQ(r.ram_blocks, 2u);
  EXPECT_EQ(r.disk_blocks, 1u);
  kv::GetResult g;
  g.hit = false;
  g.miss = kv::MissReason::kEvicted;
  g.length = 77;  // normalized away: a miss carries no bytes
  EXPECT_EQ(GetOutcome::from(g).length, 0u);
  kv::PutResult p{kv::PutResult::Outcome::kRefused, kv::Tier::kNone, kv::RefuseReason::kNoSpace};
  EXPECT_EQ(PutOutcome::from(p).to_result().refuse, kv::RefuseReason::kNoSpace);
}

TEST(ProtocolRoundTrip, ErrorFromStatusClipsAtCharacterBoundary) {
  // 4095 ASCII bytes then a 3-byte character straddling the limit.
  std::string text(kMaxStringBytes - 1, 'x');
  text += "\xE2\x82\xAC tail";
  ErrorResponse e = ErrorResponse::from_status(Status::not_found(text));
  EXPECT_EQ(e.code, StatusCode::kNotFound);
  EXPECT_EQ(e.message, std::string(kMaxStringBytes - 1, 'x'));
  Message back;
  ASSERT_TRUE(decode_whole(must_encode(e, 1), &back).ok());
  EXPECT_EQ(std::get<ErrorResponse>(back).to_status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ErrorResponse::from_status(Status::ok_status()).code, StatusCode::kInternal);
}

// ---- Encoding refuses what decoding would reject ---------------------------------------

void expect_encode_error(const Message& m, const Bytes& data, ProtocolError want) {
  Bytes out = str_bytes("prefix");
  ByteView part(data);
  Status st = encode_message_prefix(
      m, 1, data.empty() ? std::span<const ByteView>() : std::span<const ByteView>(&part, 1), out);
  EXPECT_EQ(err(st), want) << st.to_string();
  EXPECT_EQ(out, str_bytes("prefix"));  // unchanged
}

TEST(ProtocolEncode, RejectsOverLimitAndInconsistentMessages) {
  expect_encode_error(HelloRequest{1, 1, std::string(kMaxNameBytes + 1, 'n'), ""}, {},
                      ProtocolError::kStringTooLong);
  expect_encode_error(HelloRequest{2, 1, "", ""}, {}, ProtocolError::kBadValue);
  MatchPrefixRequest match{1, std::vector<kv::Key128>(kMaxMatchKeys + 1)};
  expect_encode_error(match, {}, ProtocolError::kCountTooLarge);
  expect_encode_error(BatchPutRequest{1, std::vector<KeyLength>(kMaxBatch + 1)}, {},
                      ProtocolError::kCountTooLarge);
  expect_encode_error(PutRequest{1, key(1, 1), 4}, str_bytes("abc"),
                      ProtocolError::kDataLengthMismatch);
  expect_encode_error(GetRequest{}, str_bytes("abc"), ProtocolError::kDataLengthMismatch);
  expect_encode_error(GetResponse{GetOutcome{false, kv::Tier::kNone, kv::MissReason::kNotFound, 3}},
                      str_bytes("abc"), ProtocolError::kBadValue);
  expect_encode_error(MatchPrefixResponse{{kv::Tier::kNone}}, {}, ProtocolError::kBadValue);
  expect_encode_error(PutResponse{PutOutcome{static_cast<kv::PutResult::Outcome>(9),
                                             kv::Tier::kNone, kv::RefuseReason::kNone}},
                      {}, ProtocolError::kBadValue);
  expect_encode_error(ErrorResponse{StatusCode::kOk, "fine"}, {}, ProtocolError::kBadValue);
  expect_encode_error(HelloResponse{1, "", ServerLimits{0, kMaxBatch + 1, 1, 1, 1}}, {},
                      ProtocolError::kBadValue);
  expect_encode_error(BatchPutRequest{1, {{key(1, 1), kMaxDataBytes}, {key(1, 2), 1}}}, {},
                      ProtocolError::kDataTooLarge);

  Bytes out;
  Bytes one = str_bytes("x");
  ByteView part(one);
  EXPECT_EQ(err(encode_frame_prefix(MessageType::kHelloRequest, 1, {},
                                    std::span<const ByteView>(&part, 1), out)),
            ProtocolError::kUnexpectedData);
  EXPECT_EQ(err(encode_frame_prefix(static_cast<MessageType>(0x0042), 1, {}, {}, out)),
            ProtocolError::kUnknownType);
  EXPECT_EQ(err(encode_frame_prefix(MessageType::kHelloRequest, 1, {}, {}, out, 2)),
            ProtocolError::kUnsupportedVersion);
  Bytes huge(kMaxDescriptorBytes + 1);
  EXPECT_EQ(err(encode_frame_prefix(MessageType::kStatsResponse, 1, huge, {}, out)),
            ProtocolError::kDescriptorTooLarge);
  EXPECT_TRUE(out.empty());
}

TEST(ProtocolEncode, GatherWriteOfSeveralDataParts) {
  // BatchPut objects stay where they are; the prefix carries their CRC.
  Bytes a = str_bytes("abc"), b = str_bytes("de");
  std::vector<ByteView> parts = {a, b};
  BatchPutRequest req{1, {{key(1, 1), 3}, {key(2, 2), 2}}};
  Bytes prefix;
  ASSERT_TRUE(encode_message_prefix(req, 11, parts, prefix).ok());
  Bytes stream = prefix;
  stream.insert(stream.end(), a.begin(), a.end());
  stream.insert(stream.end(), b.begin(), b.end());
  Message back;
  Bytes data;
  ASSERT_TRUE(decode_whole(stream, &back, &data).ok());
  EXPECT_EQ(back, Message(req));
  EXPECT_EQ(data, str_bytes("abcde"));
}

}  // namespace
}  // namespace kvtier::net
