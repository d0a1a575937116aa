// The prefill-to-decode (PD) transfer frame, version 1 (docs/pd-transfer.md):
// how a prefill replica hands a request's KV blocks to a decode replica, and
// the decode replica's acknowledgement. Pure codec, no I/O: the receiver
// (kv_transfer.h) reads the fixed header, then the block table, then the
// payload, checking each part with these functions before it reads or
// allocates the next, so that no length from the wire is trusted before it
// is bounded.
//
// Errors are Status values whose message starts with "pd_<class>:"
// (pd_error_name); pd_error_of() recovers the class.
//
// Thread-safety: stateless functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/buffer.h"
#include "common/status.h"
#include "kv/block_key.h"

namespace kvtier::serve {

constexpr uint32_t kPdFrameMagic = 0x4450564Bu;  // "KVPD" in little-endian bytes
constexpr uint32_t kPdAckMagic = 0x4150564Bu;    // "KVPA"
constexpr uint16_t kPdVersion = 1;
constexpr size_t kPdHeaderSize = 48;
constexpr size_t kPdBlockEntrySize = 24;
constexpr size_t kPdTableCrcSize = 4;
constexpr size_t kPdAckSize = 48;

// What a receiver accepts; every wire length is checked against these before
// anything is allocated for it.
struct PdLimits {
  uint32_t max_blocks = 1u << 16;
  uint32_t max_block_bytes = 4u << 20;
  uint64_t max_payload_bytes = 256ull << 20;
};

enum class PdError : uint16_t {
  kNone = 0,
  kBadMagic,         // not a PD frame (or ack)
  kBadVersion,       // a version this build does not speak
  kBadReserved,      // flags or reserved fields not zero
  kHeaderChecksum,   // header CRC32C mismatch
  kTooManyBlocks,    // block count over the receiver's limit
  kPayloadTooLarge,  // payload length over the receiver's limit
  kBlockTooLarge,    // one block's length over the limit
  kTableChecksum,    // block table CRC32C mismatch
  kLengthMismatch,   // block lengths do not add up to the header's payload length
  kBlockChecksum,    // a block's bytes do not match its CRC32C
  kWrongContent,     // a block's bytes are not its key's KV (testbed check)
  kWrongNamespace,   // the frame's namespace is not the receiver's
  kTruncated,        // the stream or buffer ended inside a frame
  kRequestMismatch,  // an ack for another request
  kCount,
};

std::string_view pd_error_name(PdError e);
PdError pd_error_of(const Status& st);
Status pd_error(PdError e, std::string_view detail);

struct PdFrameHeader {
  uint64_t request_id = 0;
  kv::Key128 ns_digest;
  uint32_t block_count = 0;
  uint64_t payload_bytes = 0;  // sum of the blocks' lengths
};

struct PdBlockEntry {
  kv::Key128 key;
  uint32_t length = 0;
  uint32_t crc = 0;  // CRC32C of the block's bytes
  friend bool operator==(const PdBlockEntry&, const PdBlockEntry&) = default;
};

struct PdAck {
  uint64_t request_id = 0;
  PdError error = PdError::kNone;
  uint32_t blocks_verified = 0;
  uint64_t frame_bytes = 0;  // bytes of the frame the receiver read
  // Receiver time spent on the testbed's content check (kv_content.h), which
  // the sender subtracts from the transfer's wall time.
  uint64_t testbed_ns = 0;
};

void encode_pd_header(const PdFrameHeader& h, std::span<std::byte, kPdHeaderSize> out);
// Checks magic, version, reserved fields, CRC and the limits.
Result<PdFrameHeader> decode_pd_header(ByteView in, const PdLimits& limits);

// Bytes of the table of `block_count` entries, with its CRC.
constexpr uint64_t pd_table_bytes(uint32_t block_count) {
  return uint64_t{block_count} * kPdBlockEntrySize + kPdTableCrcSize;
}
void encode_pd_table(std::span<const PdBlockEntry> entries, std::vector<std::byte>* out);
// `in` must be exactly pd_table_bytes(h.block_count) long (the header was
// decoded, so that length is bounded). Checks CRC, each length against the
// limit, and that the lengths add up to h.payload_bytes.
Result<std::vector<PdBlockEntry>> decode_pd_table(ByteView in, const PdFrameHeader& h,
                                                  const PdLimits& limits);

// CRC check of one block, then (when `verify_content`) the testbed's check
// that the bytes are the key's KV.
Status check_pd_block(const PdBlockEntry& e, ByteView bytes, bool verify_content);

void encode_pd_ack(const PdAck& a, std::span<std::byte, kPdAckSize> out);
Result<PdAck> decode_pd_ack(ByteView in);

// A whole frame in one buffer (tests, the fuzzer): header, table, payloads.
// The header and block table of a frame for `blocks` (one per key): what
// precedes the block bytes on the wire.
std::vector<std::byte> encode_pd_head(uint64_t request_id, const kv::Key128& ns_digest,
                                      std::span<const kv::Key128> keys,
                                      std::span<const ByteView> blocks);

std::vector<std::byte> encode_pd_frame(uint64_t request_id, const kv::Key128& ns_digest,
                                       std::span<const kv::Key128> keys,
                                       std::span<const ByteView> blocks);
struct PdDecodedFrame {
  PdFrameHeader header;
  std::vector<PdBlockEntry> entries;
  size_t frame_bytes = 0;  // bytes of `in` the frame used
};
// Decodes and checks the frame at the start of `in` in the receiver's order.
Result<PdDecodedFrame> decode_pd_frame(ByteView in, const PdLimits& limits,
                                       const kv::Key128* expected_ns, bool verify_content);

}  // namespace kvtier::serve
