// The store protocol's decoder against malformed frames (one test per error
// class), version negotiation, the incremental decoder, and randomized damage.
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
#include "net/wire/protocol.h"

namespace kvtier::net {
namespace {

using namespace kvtier::net::testing;  // NOLINT

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
