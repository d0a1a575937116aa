// Shared by the store protocol's codec tests: hex helpers, a raw frame
// builder for malformed input, and one sample of every message type.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "net/wire/protocol.h"

namespace kvtier::net::testing {

using Bytes = std::vector<std::byte>;

inline Bytes unhex(std::string_view hex) {
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

inline std::string hex(ByteView b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (std::byte x : b) {
    s.push_back(d[static_cast<uint8_t>(x) >> 4]);
    s.push_back(d[static_cast<uint8_t>(x) & 15]);
  }
  return s;
}

inline Bytes str_bytes(std::string_view s) {
  Bytes b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}

inline ProtocolError err(const Status& st) { return protocol_error_of(st); }

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

inline kv::Key128 key(uint64_t hi, uint64_t lo) { return kv::Key128{hi, lo}; }

// A frame decoded and its message decoded: the status of whichever failed.
inline Status decode_whole(ByteView bytes, Message* msg = nullptr, Bytes* data = nullptr) {
  auto f = decode_frame(bytes);
  if (!f.ok()) return f.status();
  auto m = decode_message(f->header, f->descriptor);
  if (!m.ok()) return m.status();
  if (msg) *msg = std::move(*m);
  if (data) *data = f->data;
  return Status::ok_status();
}

inline Bytes must_encode(const Message& m, uint64_t request_id, const Bytes& data = {}) {
  ByteView part(data);
  auto f = encode_message_frame(
      m, request_id,
      data.empty() ? std::span<const ByteView>() : std::span<const ByteView>(&part, 1));
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? *f : Bytes{};
}

// ---- Round trips ----------------------------------------------------------------------------

// The golden frames of docs/protocol-store.md, "Golden frames".
inline constexpr const char* kGoldenHello =
    "4b5653500100010000000000170000000100000000000000000000003dd5b42200000000bf73b2e0"
    "01000100090070726566696c6c2d300600733363726574";
inline constexpr const char* kGoldenGet =
    "4b565350010004000000000016000000020000000000000000000000700ac73d000000000fb04cad"
    "0100efcdab89674523011032547698badcfe00001800";
inline constexpr const char* kGoldenMatch =
    "4b565350010007000000000036000000030000000000000000000000e538b399000000002b2e6e6f"
    "0100030000001111111111111111aaaaaaaaaaaaaaaa2222222222222222bbbbbbbbbbbbbbbb"
    "3333333333333333cccccccccccccccc";
inline constexpr const char* kGoldenGetResponse =
    "4b5653500100048000000000070000000200000000000000040000004f1c2f47310ac8929b70c541"
    "0101000400000061626364";

// The direct channel's lease answer and one-way release
// (docs/protocol-store.md, "Direct channel").
inline constexpr const char* kGoldenShmLeaseGetResponse =
    "4b56535001000f800000000014000000070000000000000000000000efeeafd500000000c3e1d387"
    "0101000000180002000000300000000000020000";
inline constexpr const char* kGoldenShmRelease =
    "4b565350010010000000000008000000080000000000000000000000a09d7b8a0000000088fe6ba5"
    "0100000000020000";

inline HelloRequest golden_hello() { return {1, 1, "prefill-0", "s3cret"}; }
inline GetRequest golden_get() {
  return {1, key(0x0123456789abcdefull, 0xfedcba9876543210ull), 1536u << 10};
}
inline MatchPrefixRequest golden_match() {
  return {1,
          {key(0x1111111111111111ull, 0xaaaaaaaaaaaaaaaaull),
           key(0x2222222222222222ull, 0xbbbbbbbbbbbbbbbbull),
           key(0x3333333333333333ull, 0xccccccccccccccccull)}};
}
inline GetResponse golden_get_response() {
  return {GetOutcome{true, kv::Tier::kRam, kv::MissReason::kNone, 4}};
}

struct Sample {
  Message msg;
  Bytes data;
};

inline std::vector<Sample> samples() {
  auto ns =
      kv::Namespace::of_model("Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8", "rev-7", "qwen3-tok@1");
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

}  // namespace kvtier::net::testing
