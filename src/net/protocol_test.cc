// Store wire protocol tests: golden frames (the same hex as in
// docs/protocol-store.md, produced by an independent encoder written from the
// document), a round trip of every message, one test per class of malformed
// frame asserting its specific error, the incremental and zero-copy decoder,
// and randomized damage to valid frames and descriptors.
#include "net/protocol.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/crc32c.h"

namespace kvtier::net {
namespace {

using Bytes = std::vector<std::byte>;

Bytes unhex(std::string_view hex) {
  Bytes out;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    EXPECT_GE(hi, 0);
    EXPECT_GE(lo, 0);
    out.push_back(static_cast<std::byte>(hi * 16 + lo));
  }
  return out;
}

std::string hex(ByteView b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (std::byte x : b) {
    s.push_back(d[static_cast<uint8_t>(x) >> 4]);
    s.push_back(d[static_cast<uint8_t>(x) & 15]);
  }
  return s;
}

Bytes str_bytes(std::string_view s) {
  Bytes b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}

ProtocolError err(const Status& st) { return protocol_error_of(st); }

// Little-endian writer for hand-made frames, independent of protocol.cc.
struct Raw {
  Bytes b;
  Raw& u8(uint64_t v) { return put(v, 1); }
  Raw& u16(uint64_t v) { return put(v, 2); }
  Raw& u32(uint64_t v) { return put(v, 4); }
  Raw& u64(uint64_t v) { return put(v, 8); }
  Raw& key(uint64_t hi, uint64_t lo) { return u64(hi).u64(lo); }
  Raw& str(std::string_view s) {
    u16(s.size());
    for (char c : s) b.push_back(static_cast<std::byte>(c));
    return *this;
  }
  Raw& put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<std::byte>(v >> (8 * i)));
    return *this;
  }
};

// Every header field explicit, CRCs computed unless overridden, so a test
// can make exactly one thing wrong.
struct RawFrame {
  uint32_t magic = kFrameMagic;
  uint16_t version = 1;
  uint16_t type = 0x0001;
  uint32_t flags = 0;
  uint64_t request_id = 7;
  Bytes descriptor;
  Bytes data;
  std::optional<uint32_t> descriptor_len, data_len, descriptor_crc, data_crc, header_crc;

  Bytes header() const {
    Raw r;
    r.u32(magic).u16(version).u16(type).u32(flags);
    r.u32(descriptor_len.value_or(descriptor.size())).u64(request_id);
    r.u32(data_len.value_or(data.size()));
    r.u32(descriptor_crc.value_or(crc32c(descriptor.data(), descriptor.size())));
    r.u32(data_crc.value_or(crc32c(data.data(), data.size())));
    r.u32(header_crc.value_or(crc32c(r.b.data(), r.b.size())));
    return r.b;
  }
  Bytes bytes() const {
    Bytes out = header();
    out.insert(out.end(), descriptor.begin(), descriptor.end());
    out.insert(out.end(), data.begin(), data.end());
    return out;
  }
};

kv::Key128 key(uint64_t hi, uint64_t lo) { return kv::Key128{hi, lo}; }

// A frame decoded and its message decoded: the status of whichever failed.
Status decode_whole(ByteView bytes, Message* msg = nullptr, Bytes* data = nullptr) {
  auto f = decode_frame(bytes);
  if (!f.ok()) return f.status();
  auto m = decode_message(f->header, f->descriptor);
  if (!m.ok()) return m.status();
  if (msg) *msg = std::move(*m);
  if (data) *data = f->data;
  return Status::ok_status();
}

Bytes must_encode(const Message& m, uint64_t request_id, const Bytes& data = {}) {
  ByteView part(data);
  auto f = encode_message_frame(
      m, request_id,
      data.empty() ? std::span<const ByteView>() : std::span<const ByteView>(&part, 1));
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? *f : Bytes{};
}

// ---- Golden frames (docs/protocol-store.md, "Golden frames") ------------------------

constexpr const char* kGoldenHello =
    "4b5653500100010000000000170000000100000000000000000000003dd5b42200000000bf73b2e0"
    "01000100090070726566696c6c2d300600733363726574";
constexpr const char* kGoldenGet =
    "4b565350010004000000000016000000020000000000000000000000700ac73d000000000fb04cad"
    "0100efcdab89674523011032547698badcfe00001800";
constexpr const char* kGoldenMatch =
    "4b565350010007000000000036000000030000000000000000000000e538b399000000002b2e6e6f"
    "0100030000001111111111111111aaaaaaaaaaaaaaaa2222222222222222bbbbbbbbbbbbbbbb"
    "3333333333333333cccccccccccccccc";
constexpr const char* kGoldenGetResponse =
    "4b5653500100048000000000070000000200000000000000040000004f1c2f47310ac8929b70c541"
    "0101000400000061626364";

// The direct channel's lease answer and one-way release
// (docs/protocol-store.md, "Direct channel").
constexpr const char* kGoldenShmLeaseGetResponse =
    "4b56535001000f800000000014000000070000000000000000000000efeeafd500000000c3e1d387"
    "0101000000180002000000300000000000020000";
constexpr const char* kGoldenShmRelease =
    "4b565350010010000000000008000000080000000000000000000000a09d7b8a0000000088fe6ba5"
    "0100000000020000";

HelloRequest golden_hello() { return {1, 1, "prefill-0", "s3cret"}; }
GetRequest golden_get() {
  return {1, key(0x0123456789abcdefull, 0xfedcba9876543210ull), 1536u << 10};
}
MatchPrefixRequest golden_match() {
  return {1,
          {key(0x1111111111111111ull, 0xaaaaaaaaaaaaaaaaull),
           key(0x2222222222222222ull, 0xbbbbbbbbbbbbbbbbull),
           key(0x3333333333333333ull, 0xccccccccccccccccull)}};
}
GetResponse golden_get_response() {
  return {GetOutcome{true, kv::Tier::kRam, kv::MissReason::kNone, 4}};
}

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

// ---- Round trips ----------------------------------------------------------------------------

struct Sample {
  Message msg;
  Bytes data;
};

std::vector<Sample> samples() {
  kv::Namespace ns;
  ns.model_id = "Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8";
  ns.model_revision = "rev-7";
  ns.tokenizer_id = "qwen3-tok@1";
  ns.kv_dtype = "bf16";
  ns.kv_layout = "NHD";
  ns.tokens_per_block = 16;
  ns.tp_size = 4;
  ns.tp_rank = 3;
  ns.pp_size = 2;
  ns.pp_rank = 1;
  ns.tenant_salt = "tenant-a";
  ns.scheme = kv::KeyScheme::kSha256;
  StatsResponse stats;
  stats.counters = {{"kvtier_store_puts_total", 12}, {"kvtier_store_hits_total{tier=\"ram\"}", 7}};
  stats.json_bytes = 13;
  std::vector<Sample> s = {
      {golden_hello(), {}},
      {HelloRequest{1, 3, "", ""}, {}},
      {HelloResponse{1, "kvtier-0.1", ServerLimits{1536u << 10, 256, 8192, 1u << 20, 32u << 20}},
       {}},
      {RegisterNamespaceRequest{ns}, {}},
      {RegisterNamespaceRequest{}, {}},
      {RegisterNamespaceResponse{42}, {}},
      {PutRequest{3, key(5, 6), 5}, str_bytes("hello")},
      {PutResponse{PutOutcome{kv::PutResult::Outcome::kDeduplicated, kv::Tier::kDisk,
                              kv::RefuseReason::kNone}},
       {}},
      {PutResponse{PutOutcome{kv::PutResult::Outcome::kRefused, kv::Tier::kNone,
                              kv::RefuseReason::kAdmission}},
       {}},
      {golden_get(), {}},
      {golden_get_response(), str_bytes("abcd")},
      {GetResponse{GetOutcome{false, kv::Tier::kNone, kv::MissReason::kCorrupt, 0}}, {}},
      {BatchPutRequest{9, {{key(1, 1), 3}, {key(2, 2), 0}, {key(3, 3), 2}}}, str_bytes("abcde")},
      {BatchPutRequest{9, {}}, {}},
      {BatchPutResponse{{PutOutcome{}, PutOutcome{kv::PutResult::Outcome::kRefused, kv::Tier::kNone,
                                                  kv::RefuseReason::kIndexFull}}},
       {}},
      {BatchGetRequest{2, {{key(7, 8), 4096}, {key(9, 10), 1}}}, {}},
      {BatchGetResponse{{GetOutcome{true, kv::Tier::kDisk, kv::MissReason::kNone, 2},
                         GetOutcome{false, kv::Tier::kNone, kv::MissReason::kTimeout, 0},
                         GetOutcome{true, kv::Tier::kRam, kv::MissReason::kNone, 3}}},
       str_bytes("xyzzy")},
      {golden_match(), {}},
      {MatchPrefixRequest{1, {}}, {}},
      {MatchPrefixResponse{{kv::Tier::kRam, kv::Tier::kRam, kv::Tier::kDisk}}, {}},
      {RemoveRequest{4, key(~0ull, 1)}, {}},
      {RemoveResponse{true}, {}},
      {RemoveResponse{false}, {}},
      {PinRequest{1, 60000, {key(1, 2), key(3, 4)}}, {}},
      {PinResponse{2}, {}},
      {UnpinRequest{1, {key(1, 2)}}, {}},
      {UnpinResponse{1}, {}},
      {StatsRequest{StatsFormat::kJson}, {}},
      {stats, str_bytes("{\"puts\": 12}\n")},
      {ErrorResponse{StatusCode::kNotFound, "unknown namespace handle 9"}, {}},
  };
  return s;
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

// ---- Malformed frames: one test per class ---------------------------------------------

RawFrame raw_get() {
  RawFrame f;
  f.type = 0x0004;
  f.descriptor = Raw().u16(1).key(1, 2).u32(4096).b;
  return f;
}

// Feeds only the 40 header bytes: header errors must come before the
// decoder allocates (or waits for) anything else.
Status header_only(const RawFrame& f, FrameLimits limits = {}) {
  FrameDecoder d(limits);
  auto used = d.feed(f.header());
  EXPECT_FALSE(used.ok());
  EXPECT_EQ(d.state(), FrameDecoder::State::kFailed);
  return used.ok() ? Status::ok_status() : used.status();
}

TEST(ProtocolMalformed, BadMagic) {
  RawFrame f = raw_get();
  f.magic = 0x20544547;  // "GET " from an HTTP client
  EXPECT_EQ(err(header_only(f)), ProtocolError::kBadMagic);
  EXPECT_EQ(header_only(f).code(), StatusCode::kCorruption);
}

TEST(ProtocolMalformed, HeaderCrcMismatch) {
  RawFrame f = raw_get();
  Bytes bytes = f.bytes();
  bytes[header_offset::kRequestId] ^= std::byte{1};  // damage a field the CRC covers
  EXPECT_EQ(err(decode_frame(bytes).status()), ProtocolError::kHeaderCrcMismatch);
  f.header_crc = 0;
  EXPECT_EQ(err(header_only(f)), ProtocolError::kHeaderCrcMismatch);
}

TEST(ProtocolMalformed, UnsupportedVersion) {
  RawFrame f = raw_get();
  f.version = 2;
  EXPECT_EQ(err(header_only(f)), ProtocolError::kUnsupportedVersion);
  EXPECT_EQ(header_only(f).code(), StatusCode::kFailedPrecondition);
  f.version = 0;
  EXPECT_EQ(err(header_only(f)), ProtocolError::kUnsupportedVersion);
  // After negotiation the decoder takes only the negotiated version.
  FrameDecoder d;
  d.set_required_version(2);
  EXPECT_EQ(err(d.feed(raw_get().bytes()).status()), ProtocolError::kUnsupportedVersion);
}

TEST(ProtocolMalformed, UnknownFlags) {
  RawFrame f = raw_get();
  f.flags = 0x80000000u;
  EXPECT_EQ(err(header_only(f)), ProtocolError::kUnknownFlags);
}

TEST(ProtocolMalformed, UnknownType) {
  for (uint16_t type : {0x0000, 0x0011, 0x0042, 0x8000, 0x8010, 0x8011, 0x7FFF, 0xFFFE}) {
    RawFrame f = raw_get();
    f.type = type;
    EXPECT_EQ(err(header_only(f)), ProtocolError::kUnknownType) << type;
  }
}

TEST(ProtocolMalformed, DescriptorTooLarge) {
  RawFrame f = raw_get();
  f.descriptor_len = kMaxDescriptorBytes + 1;
  EXPECT_EQ(err(header_only(f)), ProtocolError::kDescriptorTooLarge);
  f.descriptor_len = 0xFFFFFFFFu;
  EXPECT_EQ(err(header_only(f)), ProtocolError::kDescriptorTooLarge);
  // A receiver's own, lower limit.
  f.descriptor_len = 23;
  EXPECT_EQ(err(header_only(f, FrameLimits{22, kMaxDataBytes})),
            ProtocolError::kDescriptorTooLarge);
}

TEST(ProtocolMalformed, DataTooLarge) {
  RawFrame f = raw_get();
  f.type = 0x0003;  // Put carries data
  f.data_len = kMaxDataBytes + 1;
  EXPECT_EQ(err(header_only(f)), ProtocolError::kDataTooLarge);
  f.data_len = 4097;
  EXPECT_EQ(err(header_only(f, FrameLimits{kMaxDescriptorBytes, 4096})),
            ProtocolError::kDataTooLarge);
}

TEST(ProtocolMalformed, UnexpectedData) {
  RawFrame f = raw_get();  // Get requests carry no data
  f.data = str_bytes("x");
  EXPECT_EQ(err(header_only(f)), ProtocolError::kUnexpectedData);
}

TEST(ProtocolMalformed, DescriptorCrcMismatch) {
  RawFrame f = raw_get();
  f.descriptor_crc = 0x12345678;
  EXPECT_EQ(err(decode_frame(f.bytes()).status()), ProtocolError::kDescriptorCrcMismatch);
  Bytes bytes = raw_get().bytes();
  bytes[kFrameHeaderSize + 3] ^= std::byte{0x40};
  EXPECT_EQ(err(decode_frame(bytes).status()), ProtocolError::kDescriptorCrcMismatch);
}

TEST(ProtocolMalformed, DataCrcMismatch) {
  Bytes frame = must_encode(PutRequest{1, key(1, 1), 5}, 1, str_bytes("hello"));
  frame.back() ^= std::byte{1};
  EXPECT_EQ(err(decode_frame(frame).status()), ProtocolError::kDataCrcMismatch);
  // Also when the data goes straight into the caller's buffer.
  FrameDecoder d;
  auto used = d.feed(ByteView(frame).first(frame.size() - 5));
  ASSERT_TRUE(used.ok());
  ASSERT_EQ(d.state(), FrameDecoder::State::kData);
  Bytes dest(5);
  MutableByteView part(dest);
  ASSERT_TRUE(d.set_data_destination(std::span<const MutableByteView>(&part, 1)).ok());
  EXPECT_EQ(err(d.feed(ByteView(frame).last(5)).status()), ProtocolError::kDataCrcMismatch);
}

TEST(ProtocolMalformed, TruncatedFrame) {
  Bytes frame = must_encode(PutRequest{1, key(1, 1), 5}, 1, str_bytes("hello"));
  for (size_t n : {size_t{0}, size_t{1}, kFrameHeaderSize - 1, kFrameHeaderSize,
                   kFrameHeaderSize + 10, frame.size() - 1}) {
    EXPECT_EQ(err(decode_frame(ByteView(frame).first(n)).status()), ProtocolError::kTruncatedFrame)
        << n;
  }
  EXPECT_EQ(err(decode_header(ByteView(frame).first(39)).status()), ProtocolError::kTruncatedFrame);
}

TEST(ProtocolMalformed, TrailingFrameBytes) {
  Bytes frame = must_encode(golden_get(), 1);
  frame.push_back(std::byte{0});
  EXPECT_EQ(err(decode_frame(frame).status()), ProtocolError::kTrailingFrameBytes);
}

// Wraps a hand-made descriptor in a frame with correct CRCs, so that only
// the descriptor is wrong.
Status decode_raw(uint16_t type, const Bytes& descriptor, const Bytes& data = {}) {
  RawFrame f;
  f.type = type;
  f.descriptor = descriptor;
  f.data = data;
  return decode_whole(f.bytes());
}

TEST(ProtocolMalformed, TruncatedField) {
  Bytes d = Raw().u16(1).key(1, 2).u32(4096).b;
  for (size_t n = 0; n < d.size(); ++n) {
    Status st = decode_raw(0x0004, Bytes(d.begin(), d.begin() + n));
    EXPECT_EQ(err(st), ProtocolError::kTruncatedField) << n << " " << st.to_string();
  }
  // A string whose length runs past the end.
  EXPECT_EQ(err(decode_raw(0x0001, Raw().u16(1).u16(1).u16(9).b)), ProtocolError::kTruncatedField);
}

TEST(ProtocolMalformed, TrailingBytesInDescriptor) {
  EXPECT_EQ(err(decode_raw(0x0004, Raw().u16(1).key(1, 2).u32(4096).u8(0).b)),
            ProtocolError::kTrailingBytes);
  EXPECT_EQ(err(decode_raw(0x000B, Raw().u8(1).u8(0).b)), ProtocolError::kTrailingBytes);
}

TEST(ProtocolMalformed, CountTooLarge) {
  EXPECT_EQ(err(decode_raw(0x0007, Raw().u16(1).u32(kMaxMatchKeys + 1).b)),
            ProtocolError::kCountTooLarge);
  EXPECT_EQ(err(decode_raw(0x0007, Raw().u16(1).u32(0xFFFFFFFFu).b)),
            ProtocolError::kCountTooLarge);
  EXPECT_EQ(err(decode_raw(0x0005, Raw().u16(1).u32(kMaxBatch + 1).b)),
            ProtocolError::kCountTooLarge);
  EXPECT_EQ(err(decode_raw(0x800B, Raw().u32(kMaxStatsCounters + 1).b)),
            ProtocolError::kCountTooLarge);
}

TEST(ProtocolMalformed, CountExceedsRemaining) {
  // Three keys announced, two present: refused before the vector is sized.
  EXPECT_EQ(err(decode_raw(0x0007, Raw().u16(1).u32(3).key(1, 1).key(2, 2).b)),
            ProtocolError::kCountExceedsRemaining);
  EXPECT_EQ(err(decode_raw(0x0007, Raw().u16(1).u32(kMaxMatchKeys).b)),
            ProtocolError::kCountExceedsRemaining);
  EXPECT_EQ(err(decode_raw(0x8006, Raw().u32(2).u8(1).u8(1).u8(0).u32(0).b)),
            ProtocolError::kCountExceedsRemaining);
}

TEST(ProtocolMalformed, StringTooLong) {
  std::string name(kMaxNameBytes + 1, 'n');
  EXPECT_EQ(err(decode_raw(0x0001, Raw().u16(1).u16(1).str(name).str("").b)),
            ProtocolError::kStringTooLong);
  // The length alone decides: no bytes need to follow.
  EXPECT_EQ(err(decode_raw(0xFFFF, Raw().u16(2).u16(kMaxStringBytes + 1).b)),
            ProtocolError::kStringTooLong);
}

TEST(ProtocolMalformed, BadValue) {
  struct Case {
    uint16_t type;
    Bytes descriptor;
    Bytes data;
  };
  const Case cases[] = {
      {0x8003, Raw().u8(3).u8(0).u8(0).b, {}},                     // put outcome 3
      {0x8003, Raw().u8(0).u8(3).u8(0).b, {}},                     // tier 3
      {0x8003, Raw().u8(2).u8(0).u8(6).b, {}},                     // refuse reason 6
      {0x8004, Raw().u8(2).u8(0).u8(1).u32(0).b, {}},              // hit = 2
      {0x8004, Raw().u8(0).u8(0).u8(7).u32(0).b, {}},              // miss reason 7
      {0x8004, Raw().u8(0).u8(0).u8(1).u32(1).b, {std::byte{1}}},  // a miss with bytes
      {0x8008, Raw().u8(2).b, {}},                                 // removed = 2
      {0x8007, Raw().u32(1).u8(0).b, {}},                          // matched block in no tier
      {0x000B, Raw().u8(0).b, {}},                                 // stats format 0
      {0x000B, Raw().u8(3).b, {}},                                 // stats format 3
      {0xFFFF, Raw().u16(0).str("ok?").b, {}},                     // error code OK
      {0xFFFF, Raw().u16(12).str("?").b, {}},                      // error code unknown
      {0x0001, Raw().u16(2).u16(1).str("").str("").b, {}},         // min > max
      {0x0001, Raw().u16(0).u16(1).str("").str("").b, {}},         // min 0
      {0x8001, Raw().u16(1).str("").u32(0).u32(kMaxBatch + 1).u32(1).u32(1).u32(1).b, {}},
  };
  for (const Case& c : cases) {
    Status st = decode_raw(c.type, c.descriptor, c.data);
    EXPECT_EQ(err(st), ProtocolError::kBadValue) << c.type << " " << st.to_string();
  }
}

TEST(ProtocolMalformed, WrongType) {
  auto f = decode_frame(unhex(kGoldenHello));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(err(decode_message_as<GetRequest>(f->header, f->descriptor).status()),
            ProtocolError::kWrongType);
}

TEST(ProtocolMalformed, DataLengthMismatch) {
  // Put says 5 bytes, the frame carries 4 (CRCs all correct).
  EXPECT_EQ(err(decode_raw(0x0003, Raw().u16(1).key(1, 1).u32(5).b, str_bytes("abcd"))),
            ProtocolError::kDataLengthMismatch);
  // BatchGet response hits add up to 3, the frame carries 0.
  EXPECT_EQ(err(decode_raw(0x8006, Raw().u32(1).u8(1).u8(1).u8(0).u32(3).b)),
            ProtocolError::kDataLengthMismatch);
}

TEST(ProtocolErrors, NamesAreDistinctAndRecoverable) {
  std::set<std::string_view> names;
  for (int i = 1; i < static_cast<int>(ProtocolError::kCount); ++i) {
    auto e = static_cast<ProtocolError>(i);
    names.insert(protocol_error_name(e));
    Status st(StatusCode::kInvalidArgument, std::string(protocol_error_name(e)) + ": detail");
    EXPECT_EQ(protocol_error_of(st), e);
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(ProtocolError::kCount) - 1);
  EXPECT_EQ(protocol_error_of(Status::ok_status()), ProtocolError::kNone);
  EXPECT_EQ(protocol_error_of(Status::not_found("bad_magic")), ProtocolError::kNone);
}

TEST(ProtocolVersion, Negotiation) {
  EXPECT_EQ(*negotiate_version(1, 1), 1);
  EXPECT_EQ(*negotiate_version(1, 9), kProtocolVersionMax);
  EXPECT_EQ(err(negotiate_version(2, 9).status()), ProtocolError::kUnsupportedVersion);
  EXPECT_EQ(err(negotiate_version(0, 0).status()), ProtocolError::kUnsupportedVersion);
  EXPECT_EQ(err(negotiate_version(3, 2).status()), ProtocolError::kUnsupportedVersion);
}

// ---- The stream decoder -----------------------------------------------------------

TEST(FrameDecoderTest, PipelinedFramesOneByteAtATime) {
  std::vector<Sample> all = samples();
  Bytes stream;
  for (size_t i = 0; i < all.size(); ++i) {
    Bytes f = must_encode(all[i].msg, 1000 + i, all[i].data);
    stream.insert(stream.end(), f.begin(), f.end());
  }
  FrameDecoder d;
  size_t next = 0;
  for (std::byte b : stream) {
    auto used = d.feed(ByteView(&b, 1));
    ASSERT_TRUE(used.ok()) << used.status().to_string();
    ASSERT_EQ(*used, 1u);
    if (d.state() == FrameDecoder::State::kReady) {
      Frame f = d.take_frame();
      ASSERT_LT(next, all.size());
      EXPECT_EQ(f.header.request_id, 1000 + next);
      auto m = decode_message(f.header, f.descriptor);
      ASSERT_TRUE(m.ok());
      EXPECT_EQ(*m, all[next].msg);
      EXPECT_EQ(f.data, all[next].data);
      ++next;
    }
  }
  EXPECT_EQ(next, all.size());
  EXPECT_EQ(d.state(), FrameDecoder::State::kHeader);
}

TEST(FrameDecoderTest, FeedStopsAtFrameBoundary) {
  Bytes a = must_encode(golden_get(), 1), b = must_encode(golden_hello(), 2);
  Bytes stream = a;
  stream.insert(stream.end(), b.begin(), b.end());
  FrameDecoder d;
  auto used = d.feed(stream);
  ASSERT_TRUE(used.ok());
  EXPECT_EQ(*used, a.size());
  ASSERT_EQ(d.state(), FrameDecoder::State::kReady);
  EXPECT_EQ(*d.feed(ByteView(stream).subspan(*used)), 0u);  // must take the frame first
  EXPECT_EQ(d.take_frame().header.request_id, 1u);
  used = d.feed(ByteView(stream).subspan(a.size()));
  ASSERT_TRUE(used.ok());
  EXPECT_EQ(*used, b.size());
  EXPECT_EQ(d.take_frame().header.request_id, 2u);
}

TEST(FrameDecoderTest, ZeroCopyScatterIntoCallerBuffers) {
  // A BatchGet response lands straight in three separate buffers, read
  // from the "socket" in odd-sized pieces.
  BatchGetResponse resp{{GetOutcome{true, kv::Tier::kRam, kv::MissReason::kNone, 3},
                         GetOutcome{false, kv::Tier::kNone, kv::MissReason::kNotFound, 0},
                         GetOutcome{true, kv::Tier::kDisk, kv::MissReason::kNone, 5},
                         GetOutcome{true, kv::Tier::kRam, kv::MissReason::kNone, 2}}};
  Bytes stream = must_encode(resp, 9, str_bytes("aaabbbbbcc"));
  FrameDecoder d;
  size_t pos = 0;
  Bytes b0(3), b1(5), b2(2);
  bool routed = false;
  while (d.state() != FrameDecoder::State::kReady) {
    ASSERT_NE(d.state(), FrameDecoder::State::kFailed) << d.error().to_string();
    if (d.state() == FrameDecoder::State::kData && !routed) {
      auto m = decode_message_as<BatchGetResponse>(d.header(), d.descriptor());
      ASSERT_TRUE(m.ok());
      ASSERT_EQ(m->results.size(), 4u);
      std::vector<MutableByteView> parts = {b0, MutableByteView(), b1, b2};
      ASSERT_TRUE(d.set_data_destination(parts).ok());
      routed = true;
    }
    MutableByteView w = d.wanted();
    size_t n = std::min<size_t>({w.size(), 3, stream.size() - pos});
    std::memcpy(w.data(), stream.data() + pos, n);
    pos += n;
    ASSERT_TRUE(d.advance(n).ok());
  }
  EXPECT_TRUE(routed);
  EXPECT_EQ(pos, stream.size());
  Frame f = d.take_frame();
  EXPECT_TRUE(f.data.empty());
  EXPECT_EQ(b0, str_bytes("aaa"));
  EXPECT_EQ(b1, str_bytes("bbbbb"));
  EXPECT_EQ(b2, str_bytes("cc"));
}

TEST(FrameDecoderTest, DestinationMisuseIsRejected) {
  Bytes frame = must_encode(PutRequest{1, key(1, 1), 5}, 1, str_bytes("hello"));
  FrameDecoder d;
  Bytes small(4);
  MutableByteView part(small);
  EXPECT_EQ(d.set_data_destination(std::span<const MutableByteView>(&part, 1)).code(),
            StatusCode::kFailedPrecondition);  // no frame yet
  ASSERT_TRUE(d.feed(ByteView(frame).first(frame.size() - 5)).ok());
  EXPECT_EQ(d.set_data_destination(std::span<const MutableByteView>(&part, 1)).code(),
            StatusCode::kInvalidArgument);  // 4 bytes for a 5-byte section
  EXPECT_EQ(d.state(), FrameDecoder::State::kData);
  ASSERT_TRUE(d.feed(ByteView(frame).last(5)).ok());
  EXPECT_EQ(d.take_frame().data, str_bytes("hello"));
}

TEST(FrameDecoderTest, ErrorsAreFinal) {
  RawFrame f = raw_get();
  f.magic = 0;
  FrameDecoder d;
  Status first = d.feed(f.bytes()).status();
  EXPECT_EQ(err(first), ProtocolError::kBadMagic);
  EXPECT_EQ(err(d.feed(must_encode(golden_get(), 1)).status()), ProtocolError::kBadMagic);
  EXPECT_EQ(err(d.advance(1)), ProtocolError::kBadMagic);
  EXPECT_TRUE(d.wanted().empty());
  EXPECT_EQ(d.state(), FrameDecoder::State::kFailed);
}

TEST(FrameDecoderTest, AdvancePastWantedIsAnError) {
  FrameDecoder d;
  EXPECT_FALSE(d.advance(kFrameHeaderSize + 1).ok());
  EXPECT_EQ(d.state(), FrameDecoder::State::kFailed);
}

// ---- Randomized damage ------------------------------------------------------------------

Bytes mutate(const Bytes& in, std::mt19937_64& rng) {
  Bytes b = in;
  auto pick = [&](size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng() % n); };
  switch (rng() % 6) {
    case 0:  // flip one bit
      if (!b.empty()) b[pick(b.size())] ^= std::byte{static_cast<uint8_t>(1u << (rng() % 8))};
      break;
    case 1:  // overwrite a few bytes
      for (int i = 0, n = 1 + static_cast<int>(rng() % 4); i < n && !b.empty(); ++i) {
        b[pick(b.size())] = static_cast<std::byte>(rng());
      }
      break;
    case 2:  // truncate
      b.resize(pick(b.size() + 1));
      break;
    case 3:  // append
      for (int i = 0, n = 1 + static_cast<int>(rng() % 8); i < n; ++i) {
        b.push_back(static_cast<std::byte>(rng()));
      }
      break;
    case 4: {  // delete a range
      if (b.empty()) break;
      size_t at = pick(b.size());
      size_t n = std::min(b.size() - at, 1 + pick(8));
      b.erase(b.begin() + at, b.begin() + at + n);
      break;
    }
    default: {  // insert a byte
      b.insert(b.begin() + pick(b.size() + 1), static_cast<std::byte>(rng()));
      break;
    }
  }
  return b;
}

TEST(ProtocolRandomized, DamagedFramesDecodeToTheOriginalOrFail) {
  std::mt19937_64 rng(20240611);
  std::vector<Sample> all = samples();
  std::vector<Bytes> frames;
  for (const Sample& s : all) frames.push_back(must_encode(s.msg, 77, s.data));
  size_t errors = 0, originals = 0;
  for (int iter = 0; iter < 40000; ++iter) {
    size_t i = rng() % frames.size();
    Bytes damaged = mutate(frames[i], rng);
    Message m;
    Bytes data;
    // Whole-buffer path.
    Status st = decode_whole(damaged, &m, &data);
    if (st.ok()) {
      ASSERT_EQ(m, all[i].msg) << iter;
      ASSERT_EQ(data, all[i].data) << iter;
      ++originals;
    } else {
      ASSERT_NE(err(st), ProtocolError::kNone) << st.to_string();
      ++errors;
    }
    // Stream path in random pieces: the same verdict.
    FrameDecoder d;
    size_t pos = 0;
    Status sst;
    while (pos < damaged.size() && d.state() != FrameDecoder::State::kReady) {
      size_t n = std::min<size_t>(damaged.size() - pos, 1 + rng() % 17);
      auto used = d.feed(ByteView(damaged).subspan(pos, n));
      if (!used.ok()) {
        sst = used.status();
        break;
      }
      pos += *used;
    }
    if (st.ok()) {
      ASSERT_TRUE(sst.ok());
      ASSERT_EQ(d.state(), FrameDecoder::State::kReady);
    } else if (!sst.ok()) {
      EXPECT_EQ(err(sst), err(st)) << iter;
    }
  }
  EXPECT_GT(errors, 30000u);
  EXPECT_GT(originals, 0u);  // e.g. damage to bytes a truncation then removed
}

// Decodes `d` as every message type; whatever decodes must re-encode to the
// same bytes (the encoding is canonical), whatever fails must say why.
template <size_t I = 0>
void decode_as_every_type(ByteView d, size_t& decoded) {
  if constexpr (I < std::variant_size_v<Message>) {
    using M = std::variant_alternative_t<I, Message>;
    auto r = M::decode(d);
    if (r.ok()) {
      Bytes again;
      Status st = r->encode(again);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_EQ(hex(again), hex(d)) << message_type_name(M::kType);
      ++decoded;
    } else {
      ASSERT_NE(err(r.status()), ProtocolError::kNone) << r.status().to_string();
    }
    decode_as_every_type<I + 1>(d, decoded);
  }
}

TEST(ProtocolRandomized, DamagedDescriptorsNeverCrashAndReencodeCanonically) {
  // The CRCs keep random damage away from descriptor parsing, so damage the
  // descriptors directly and decode them as every message type.
  std::mt19937_64 rng(7);
  std::vector<Bytes> descriptors;
  for (const Sample& s : samples()) {
    auto f = decode_frame(must_encode(s.msg, 1, s.data));
    ASSERT_TRUE(f.ok());
    descriptors.push_back(f->descriptor);
  }
  size_t decoded = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    Bytes d = mutate(descriptors[rng() % descriptors.size()], rng);
    decode_as_every_type(d, decoded);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(decoded, 1000u);
}

}  // namespace
}  // namespace kvtier::net
