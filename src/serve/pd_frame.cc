#include "serve/pd_frame.h"

#include <bit>
#include <cstring>
#include <string>

#include "common/crc32c.h"
#include "engine/kv_content.h"

namespace kvtier::serve {

static_assert(std::endian::native == std::endian::little,
              "the PD frame is little-endian and encoded with memcpy");

namespace {

constexpr std::string_view kErrorNames[] = {
    "pd_none",
    "pd_bad_magic",
    "pd_bad_version",
    "pd_bad_reserved",
    "pd_header_checksum",
    "pd_too_many_blocks",
    "pd_payload_too_large",
    "pd_block_too_large",
    "pd_table_checksum",
    "pd_length_mismatch",
    "pd_block_checksum",
    "pd_wrong_content",
    "pd_wrong_namespace",
    "pd_truncated",
    "pd_request_mismatch",
};
static_assert(std::size(kErrorNames) == static_cast<size_t>(PdError::kCount));

template <typename T>
void put(std::byte* p, size_t off, T v) {
  std::memcpy(p + off, &v, sizeof v);
}
template <typename T>
T get(const std::byte* p, size_t off) {
  T v;
  std::memcpy(&v, p + off, sizeof v);
  return v;
}

// Header layout (offsets): magic u32 @0, version u16 @4, flags u16 @6,
// request_id u64 @8, ns digest hi u64 @16, lo u64 @24, block_count u32 @32,
// payload_bytes u64 @36, crc u32 @44 over bytes [0, 44).
constexpr size_t kHeaderCrcAt = 44;
// Ack layout: magic u32 @0, version u16 @4, error u16 @6, request_id u64 @8,
// blocks_verified u32 @16, reserved u32 @20, frame_bytes u64 @24, testbed_ns
// u64 @32, crc u32 @40 over [0, 40), reserved u32 @44.
constexpr size_t kAckCrcAt = 40;

}  // namespace

std::string_view pd_error_name(PdError e) {
  const auto i = static_cast<size_t>(e);
  return i < std::size(kErrorNames) ? kErrorNames[i] : "pd_unknown";
}

Status pd_error(PdError e, std::string_view detail) {
  std::string msg(pd_error_name(e));
  msg += ": ";
  msg += detail;
  return e == PdError::kTruncated ? Status::io_error(std::move(msg))
                                  : Status::corruption(std::move(msg));
}

PdError pd_error_of(const Status& st) {
  if (st.ok()) return PdError::kNone;
  const std::string& m = st.message();
  for (size_t i = 1; i < std::size(kErrorNames); ++i) {
    const std::string_view name = kErrorNames[i];
    if (m.size() > name.size() && m.compare(0, name.size(), name) == 0 && m[name.size()] == ':') {
      return static_cast<PdError>(i);
    }
  }
  return PdError::kNone;
}

void encode_pd_header(const PdFrameHeader& h, std::span<std::byte, kPdHeaderSize> out) {
  std::byte* p = out.data();
  put<uint32_t>(p, 0, kPdFrameMagic);
  put<uint16_t>(p, 4, kPdVersion);
  put<uint16_t>(p, 6, 0);
  put<uint64_t>(p, 8, h.request_id);
  put<uint64_t>(p, 16, h.ns_digest.hi);
  put<uint64_t>(p, 24, h.ns_digest.lo);
  put<uint32_t>(p, 32, h.block_count);
  put<uint64_t>(p, 36, h.payload_bytes);
  put<uint32_t>(p, kHeaderCrcAt, crc32c(p, kHeaderCrcAt));
}

Result<PdFrameHeader> decode_pd_header(ByteView in, const PdLimits& limits) {
  if (in.size() < kPdHeaderSize) return pd_error(PdError::kTruncated, "short frame header");
  const std::byte* p = in.data();
  if (get<uint32_t>(p, 0) != kPdFrameMagic) return pd_error(PdError::kBadMagic, "frame magic");
  // The version is checked before the CRC: a later version may lay out (and
  // checksum) its header differently.
  if (const auto v = get<uint16_t>(p, 4); v != kPdVersion) {
    return pd_error(PdError::kBadVersion, "frame version " + std::to_string(v));
  }
  if (get<uint32_t>(p, kHeaderCrcAt) != crc32c(p, kHeaderCrcAt)) {
    return pd_error(PdError::kHeaderChecksum, "frame header CRC32C");
  }
  if (get<uint16_t>(p, 6) != 0) return pd_error(PdError::kBadReserved, "frame flags not zero");
  PdFrameHeader h;
  h.request_id = get<uint64_t>(p, 8);
  h.ns_digest.hi = get<uint64_t>(p, 16);
  h.ns_digest.lo = get<uint64_t>(p, 24);
  h.block_count = get<uint32_t>(p, 32);
  h.payload_bytes = get<uint64_t>(p, 36);
  if (h.block_count > limits.max_blocks) {
    return pd_error(PdError::kTooManyBlocks, std::to_string(h.block_count) + " blocks, limit " +
                                                 std::to_string(limits.max_blocks));
  }
  if (h.payload_bytes > limits.max_payload_bytes ||
      h.payload_bytes > uint64_t{h.block_count} * limits.max_block_bytes) {
    return pd_error(PdError::kPayloadTooLarge, std::to_string(h.payload_bytes) +
                                                   " payload bytes in " +
                                                   std::to_string(h.block_count) + " blocks");
  }
  return h;
}

void encode_pd_table(std::span<const PdBlockEntry> entries, std::vector<std::byte>* out) {
  const size_t start = out->size();
  out->resize(start + pd_table_bytes(static_cast<uint32_t>(entries.size())));
  std::byte* p = out->data() + start;
  for (size_t i = 0; i < entries.size(); ++i) {
    const size_t o = i * kPdBlockEntrySize;
    put<uint64_t>(p, o, entries[i].key.hi);
    put<uint64_t>(p, o + 8, entries[i].key.lo);
    put<uint32_t>(p, o + 16, entries[i].length);
    put<uint32_t>(p, o + 20, entries[i].crc);
  }
  const size_t body = entries.size() * kPdBlockEntrySize;
  put<uint32_t>(p, body, crc32c(p, body));
}

Result<std::vector<PdBlockEntry>> decode_pd_table(ByteView in, const PdFrameHeader& h,
                                                  const PdLimits& limits) {
  if (h.block_count > limits.max_blocks) {
    return pd_error(PdError::kTooManyBlocks, "block count over the limit");
  }
  if (in.size() != pd_table_bytes(h.block_count)) {
    return pd_error(PdError::kTruncated, "block table length");
  }
  const std::byte* p = in.data();
  const size_t body = size_t{h.block_count} * kPdBlockEntrySize;
  if (get<uint32_t>(p, body) != crc32c(p, body)) {
    return pd_error(PdError::kTableChecksum, "block table CRC32C");
  }
  std::vector<PdBlockEntry> entries(h.block_count);
  uint64_t sum = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const size_t o = i * kPdBlockEntrySize;
    auto& e = entries[i];
    e.key.hi = get<uint64_t>(p, o);
    e.key.lo = get<uint64_t>(p, o + 8);
    e.length = get<uint32_t>(p, o + 16);
    e.crc = get<uint32_t>(p, o + 20);
    if (e.length > limits.max_block_bytes) {
      return pd_error(PdError::kBlockTooLarge,
                      "block " + std::to_string(i) + " of " + std::to_string(e.length) + " bytes");
    }
    sum += e.length;  // at most 2^16 x 2^32: no overflow
  }
  if (sum != h.payload_bytes) {
    return pd_error(PdError::kLengthMismatch, "blocks hold " + std::to_string(sum) +
                                                  " bytes, header says " +
                                                  std::to_string(h.payload_bytes));
  }
  return entries;
}

Status check_pd_block(const PdBlockEntry& e, ByteView bytes, bool verify_content) {
  if (bytes.size() != e.length) return pd_error(PdError::kTruncated, "block bytes");
  if (crc32c(bytes) != e.crc) {
    return pd_error(PdError::kBlockChecksum, "block " + e.key.to_hex() + " CRC32C");
  }
  if (verify_content && !engine::verify_kv_block(e.key, bytes)) {
    return pd_error(PdError::kWrongContent, "block " + e.key.to_hex() + " is not its key's KV");
  }
  return Status::ok_status();
}

void encode_pd_ack(const PdAck& a, std::span<std::byte, kPdAckSize> out) {
  std::byte* p = out.data();
  std::memset(p, 0, kPdAckSize);
  put<uint32_t>(p, 0, kPdAckMagic);
  put<uint16_t>(p, 4, kPdVersion);
  put<uint16_t>(p, 6, static_cast<uint16_t>(a.error));
  put<uint64_t>(p, 8, a.request_id);
  put<uint32_t>(p, 16, a.blocks_verified);
  put<uint64_t>(p, 24, a.frame_bytes);
  put<uint64_t>(p, 32, a.testbed_ns);
  put<uint32_t>(p, kAckCrcAt, crc32c(p, kAckCrcAt));
}

Result<PdAck> decode_pd_ack(ByteView in) {
  if (in.size() < kPdAckSize) return pd_error(PdError::kTruncated, "short ack");
  const std::byte* p = in.data();
  if (get<uint32_t>(p, 0) != kPdAckMagic) return pd_error(PdError::kBadMagic, "ack magic");
  if (get<uint16_t>(p, 4) != kPdVersion) return pd_error(PdError::kBadVersion, "ack version");
  if (get<uint32_t>(p, kAckCrcAt) != crc32c(p, kAckCrcAt)) {
    return pd_error(PdError::kHeaderChecksum, "ack CRC32C");
  }
  if (get<uint32_t>(p, 20) != 0 || get<uint32_t>(p, 44) != 0) {
    return pd_error(PdError::kBadReserved, "ack reserved fields not zero");
  }
  PdAck a;
  const auto err = get<uint16_t>(p, 6);
  if (err >= static_cast<uint16_t>(PdError::kCount)) {
    return pd_error(PdError::kBadReserved, "ack error code " + std::to_string(err));
  }
  a.error = static_cast<PdError>(err);
  a.request_id = get<uint64_t>(p, 8);
  a.blocks_verified = get<uint32_t>(p, 16);
  a.frame_bytes = get<uint64_t>(p, 24);
  a.testbed_ns = get<uint64_t>(p, 32);
  return a;
}

std::vector<std::byte> encode_pd_frame(uint64_t request_id, const kv::Key128& ns_digest,
                                       std::span<const kv::Key128> keys,
                                       std::span<const ByteView> blocks) {
  std::vector<std::byte> out = encode_pd_head(request_id, ns_digest, keys, blocks);
  for (const auto& b : blocks) out.insert(out.end(), b.begin(), b.end());
  return out;
}

std::vector<std::byte> encode_pd_head(uint64_t request_id, const kv::Key128& ns_digest,
                                      std::span<const kv::Key128> keys,
                                      std::span<const ByteView> blocks) {
  PdFrameHeader h;
  h.request_id = request_id;
  h.ns_digest = ns_digest;
  h.block_count = static_cast<uint32_t>(keys.size());
  std::vector<PdBlockEntry> entries(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    entries[i] = {keys[i], static_cast<uint32_t>(blocks[i].size()), crc32c(blocks[i])};
    h.payload_bytes += blocks[i].size();
  }
  std::vector<std::byte> out(kPdHeaderSize);
  encode_pd_header(h, std::span<std::byte, kPdHeaderSize>(out.data(), kPdHeaderSize));
  encode_pd_table(entries, &out);
  return out;
}

Result<PdDecodedFrame> decode_pd_frame(ByteView in, const PdLimits& limits,
                                       const kv::Key128* expected_ns, bool verify_content) {
  PdDecodedFrame f;
  auto h = decode_pd_header(in, limits);
  if (!h.ok()) return h.status();
  f.header = *h;
  if (expected_ns && !(f.header.ns_digest == *expected_ns)) {
    return pd_error(PdError::kWrongNamespace, "frame namespace " + f.header.ns_digest.to_hex());
  }
  size_t at = kPdHeaderSize;
  const uint64_t table = pd_table_bytes(f.header.block_count);
  if (in.size() - at < table) return pd_error(PdError::kTruncated, "block table");
  auto entries = decode_pd_table(in.subspan(at, table), f.header, limits);
  if (!entries.ok()) return entries.status();
  f.entries = std::move(*entries);
  at += table;
  if (in.size() - at < f.header.payload_bytes) return pd_error(PdError::kTruncated, "payload");
  for (const auto& e : f.entries) {
    KVTIER_RETURN_IF_ERROR(check_pd_block(e, in.subspan(at, e.length), verify_content));
    at += e.length;
  }
  f.frame_bytes = at;
  return f;
}

}  // namespace kvtier::serve
