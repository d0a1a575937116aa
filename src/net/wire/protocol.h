// The store service's wire protocol: framing and message codec, and nothing
// else (no sockets, no store calls), so that the server, the client and the
// fuzzer share one definition of every byte. docs/protocol-store.md is the
// specification; the golden frames there are checked by protocol_test.cc.
//
// A frame is a fixed 40-byte little-endian header, a small descriptor (the
// message's fields) and an optional bulk data section (block bytes):
//
//   header (40) | descriptor (descriptor_len) | data (data_len)
//
// The header carries both lengths and three CRC32Cs (header, descriptor,
// data). A reader validates the header, including both lengths against hard
// limits, before it allocates anything, then reads the descriptor into a
// small buffer and the data straight into its final destination (a RAM slot,
// the caller's buffers), so block bytes are never copied twice. Every length
// and count read from the wire is checked before it is used.
//
// Errors are Status values whose message starts with a ProtocolError name
// ("bad_magic: ..."); protocol_error_of() recovers the class. A malformed
// frame means the byte stream can no longer be trusted: the connection is
// closed (docs/protocol-store.md, "Error handling").
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/buffer.h"
#include "common/status.h"
#include "kv/block_key.h"
#include "kv/namespace.h"
#include "kv/store.h"

namespace kvtier::net {

// ---- Constants -------------------------------------------------------------

// "KVSP" as bytes on the wire (0x4B 0x56 0x53 0x50).
constexpr uint32_t kFrameMagic = 0x5053564Bu;
constexpr size_t kFrameHeaderSize = 40;
// Versions this build speaks. The header layout and the Hello messages are
// frozen across versions, so any two builds can always negotiate.
constexpr uint16_t kProtocolVersionMin = 1;
constexpr uint16_t kProtocolVersionMax = 1;
constexpr uint16_t kProtocolVersion = kProtocolVersionMax;
// Header flag bits understood by this build (version 1 defines none; a set
// unknown bit is an error so a future flag can never be silently ignored).
constexpr uint32_t kKnownFlags = 0;

// Hard limits: no frame may exceed them, whatever a peer advertises. A
// server may configure lower ones (FrameLimits, HelloResponse).
constexpr uint32_t kMaxDescriptorBytes = 2u << 20;  // holds a full MatchPrefix (1 MiB of keys)
constexpr uint32_t kMaxDataBytes = 64u << 20;
constexpr uint32_t kMaxMatchKeys = 65536;   // MatchPrefix, Pin, Unpin: 1M tokens at 16/block
constexpr uint32_t kMaxBatch = 1024;        // BatchPut, BatchGet items
constexpr uint32_t kMaxStringBytes = 4096;  // namespace fields, auth token, error text
constexpr uint32_t kMaxNameBytes = 256;     // client/server names, counter names
constexpr uint32_t kMaxStatsCounters = 1024;

// ---- Errors ----------------------------------------------------------------

enum class ProtocolError : uint8_t {
  kNone = 0,
  // Frame header (checked in this order).
  kTruncatedFrame,      // the stream or buffer ended inside a frame
  kBadMagic,            // not a kvtier store frame
  kHeaderCrcMismatch,   // header bytes damaged
  kUnsupportedVersion,  // version outside what this side speaks or negotiated
  kUnknownFlags,        // a flag bit this version does not define
  kUnknownType,         // message type not defined
  kDescriptorTooLarge,  // descriptor_len over the limit
  kDataTooLarge,        // data_len over the limit
  kUnexpectedData,      // data section on a message type that has none
  // Frame body.
  kDescriptorCrcMismatch,
  kDataCrcMismatch,
  kTrailingFrameBytes,  // bytes after a frame where exactly one was expected
  // Descriptor fields.
  kTruncatedField,         // the descriptor ended inside a field
  kTrailingBytes,          // bytes after the last field
  kCountTooLarge,          // a count over its limit
  kCountExceedsRemaining,  // a count whose items cannot fit in the remaining bytes
  kStringTooLong,          // a string over its limit
  kBadValue,               // an enum, bool or combination of fields out of range
  // Frame versus message.
  kWrongType,           // decoding a frame as a message of another type
  kDataLengthMismatch,  // the descriptor implies another data length than the header
  kCount
};

// "bad_magic", "header_crc_mismatch", ... (the prefix of every protocol
// Status message).
std::string_view protocol_error_name(ProtocolError e);
// The class of a Status produced by this codec; kNone for OK or for any
// other Status.
ProtocolError protocol_error_of(const Status& st);

// ---- Message types -----------------------------------------------------------

// Requests are 0x0001..; the response to request t is 0x8000 | t. kError
// answers any request.
enum class MessageType : uint16_t {
  kHelloRequest = 0x0001,
  kRegisterNamespaceRequest = 0x0002,
  kPutRequest = 0x0003,
  kGetRequest = 0x0004,
  kBatchPutRequest = 0x0005,
  kBatchGetRequest = 0x0006,
  kMatchPrefixRequest = 0x0007,
  kRemoveRequest = 0x0008,
  kPinRequest = 0x0009,
  kUnpinRequest = 0x000A,
  kStatsRequest = 0x000B,
  kShmOfferRequest = 0x000C,
  kShmPutRequest = 0x000D,
  kShmGetRequest = 0x000E,
  kShmLeaseGetRequest = 0x000F,  // direct channel only
  kShmReleaseRequest = 0x0010,   // direct channel only; has no response
  kHelloResponse = 0x8001,
  kRegisterNamespaceResponse = 0x8002,
  kPutResponse = 0x8003,
  kGetResponse = 0x8004,
  kBatchPutResponse = 0x8005,
  kBatchGetResponse = 0x8006,
  kMatchPrefixResponse = 0x8007,
  kRemoveResponse = 0x8008,
  kPinResponse = 0x8009,
  kUnpinResponse = 0x800A,
  kStatsResponse = 0x800B,
  kShmOfferResponse = 0x800C,
  kShmPutResponse = 0x800D,
  kShmGetResponse = 0x800E,
  kShmLeaseGetResponse = 0x800F,
  kErrorResponse = 0xFFFF,
};

bool is_known_message_type(uint16_t type);
inline bool is_response(MessageType t) { return (static_cast<uint16_t>(t) & 0x8000u) != 0; }
// Whether frames of this type may carry a data section (the others must have
// data_len == 0, which the header check enforces before any allocation).
bool message_type_carries_data(MessageType t);
// "PutRequest", ...; "unknown" for anything else.
const char* message_type_name(MessageType t);

// ---- Frame header --------------------------------------------------------------

// The decoded header. magic and header_crc are not kept: encode_header
// writes them and decode_header checks them.
struct FrameHeader {
  uint16_t version = kProtocolVersion;
  MessageType type = MessageType::kErrorResponse;
  uint32_t flags = 0;
  uint32_t descriptor_len = 0;
  uint64_t request_id = 0;  // echoed by the response; lets clients pipeline
  uint32_t data_len = 0;
  uint32_t descriptor_crc = 0;  // CRC32C of the descriptor (0 when empty)
  uint32_t data_crc = 0;        // CRC32C of the data section (0 when empty)
  friend bool operator==(const FrameHeader&, const FrameHeader&) = default;
};

// Byte offsets of the header fields (docs/protocol-store.md, "Frame header").
namespace header_offset {
constexpr size_t kMagic = 0;
constexpr size_t kVersion = 4;
constexpr size_t kType = 6;
constexpr size_t kFlags = 8;
constexpr size_t kDescriptorLen = 12;
constexpr size_t kRequestId = 16;
constexpr size_t kDataLen = 24;
constexpr size_t kDescriptorCrc = 28;
constexpr size_t kDataCrc = 32;
constexpr size_t kHeaderCrc = 36;  // CRC32C of bytes [0, 36)
}  // namespace header_offset
static_assert(header_offset::kHeaderCrc + 4 == kFrameHeaderSize);

// Limits a receiver enforces; values above the hard limits are clamped to them.
struct FrameLimits {
  uint32_t max_descriptor_bytes = kMaxDescriptorBytes;
  uint32_t max_data_bytes = kMaxDataBytes;
};

// Writes the 40 header bytes, computing the header CRC.
void encode_header(const FrameHeader& h, std::span<std::byte, kFrameHeaderSize> out);
// Checks magic, header CRC, version (within [min_version, max_version]),
// flags, type, both lengths against `limits`, and that a type without a data
// section has data_len == 0. Reads the first kFrameHeaderSize bytes of `in`.
Result<FrameHeader> decode_header(ByteView in, const FrameLimits& limits = {},
                                  uint16_t min_version = kProtocolVersionMin,
                                  uint16_t max_version = kProtocolVersionMax);
Status verify_descriptor(const FrameHeader& h, ByteView descriptor);
Status verify_data(const FrameHeader& h, ByteView data);

// The version both sides speak: the highest in the intersection of the
// client's [client_min, client_max] and this build's range.
Result<uint16_t> negotiate_version(uint16_t client_min, uint16_t client_max);

// ---- Message structs -------------------------------------------------------------
//
// Each message has kType, encode() (appends its descriptor to `out`; checks
// every limit first and leaves `out` unchanged on error), decode() (parses
// exactly one descriptor: no missing and no extra bytes) and data_bytes()
// (the length of the data section the message implies). The data section
// itself is never part of the struct: it goes to and from the caller's
// buffers.

// Shared item encodings.
struct PutOutcome {  // u8 outcome, u8 tier, u8 refuse reason
  kv::PutResult::Outcome outcome = kv::PutResult::Outcome::kStored;
  kv::Tier tier = kv::Tier::kNone;
  kv::RefuseReason refuse = kv::RefuseReason::kNone;
  static PutOutcome from(const kv::PutResult& r) { return {r.outcome, r.tier, r.refuse}; }
  kv::PutResult to_result() const { return {outcome, tier, refuse}; }
  friend bool operator==(const PutOutcome&, const PutOutcome&) = default;
};

struct GetOutcome {  // u8 hit, u8 tier, u8 miss reason, u32 length; a miss has length 0
  bool hit = false;
  kv::Tier tier = kv::Tier::kNone;
  kv::MissReason miss = kv::MissReason::kNone;
  uint32_t length = 0;
  static GetOutcome from(const kv::GetResult& r) {
    return {r.hit, r.tier, r.miss, r.hit ? r.length : 0};
  }
  kv::GetResult to_result() const { return {hit, tier, miss, length}; }
  friend bool operator==(const GetOutcome&, const GetOutcome&) = default;
};

struct KeyLength {  // key, u32 length (BatchPut: object bytes; BatchGet: buffer bytes)
  kv::Key128 key;
  uint32_t length = 0;
  friend bool operator==(const KeyLength&, const KeyLength&) = default;
};

struct StatCounter {  // name, u64 value
  std::string name;
  uint64_t value = 0;
  friend bool operator==(const StatCounter&, const StatCounter&) = default;
};

// Limits a server advertises in its Hello response (each <= the hard limit).
struct ServerLimits {
  uint32_t max_object_bytes = 0;
  uint32_t max_batch = kMaxBatch;
  uint32_t max_match_keys = kMaxMatchKeys;
  uint32_t max_descriptor_bytes = kMaxDescriptorBytes;
  uint32_t max_data_bytes = kMaxDataBytes;
  friend bool operator==(const ServerLimits&, const ServerLimits&) = default;
};

#define KVTIER_NET_MESSAGE(Name)                             \
  static constexpr MessageType kType = MessageType::k##Name; \
  Status encode(std::vector<std::byte>& out) const;          \
  static Result<Name> decode(ByteView descriptor);           \
  friend bool operator==(const Name&, const Name&)

// First frame on a connection, always sent as a version-1 frame.
struct HelloRequest {
  uint16_t min_version = kProtocolVersionMin;
  uint16_t max_version = kProtocolVersionMax;
  std::string client_name;  // for logs, <= kMaxNameBytes
  std::string auth_token;   // <= kMaxStringBytes; empty when the server needs none
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(HelloRequest) = default;
};
struct HelloResponse {
  uint16_t version = kProtocolVersion;  // chosen; every later frame uses it
  std::string server_name;
  ServerLimits limits;
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(HelloResponse) = default;
};

struct RegisterNamespaceRequest {
  kv::Namespace ns;  // all fields, in the order of the canonical encoding
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(RegisterNamespaceRequest);
};
struct RegisterNamespaceResponse {
  uint16_t handle = 0;  // what every later request of this connection names
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(RegisterNamespaceResponse) = default;
};

struct PutRequest {
  uint16_t ns = 0;
  kv::Key128 key;
  uint32_t length = 0;  // object bytes in the data section
  uint64_t data_bytes() const { return length; }
  KVTIER_NET_MESSAGE(PutRequest) = default;
};
struct PutResponse {
  PutOutcome result;
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(PutResponse) = default;
};

struct GetRequest {
  uint16_t ns = 0;
  kv::Key128 key;
  uint32_t buffer_bytes = 0;  // the client's buffer; a larger object is an error
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(GetRequest) = default;
};
struct GetResponse {
  GetOutcome result;  // data section: result.length bytes
  uint64_t data_bytes() const { return result.length; }
  KVTIER_NET_MESSAGE(GetResponse) = default;
};

struct BatchPutRequest {
  uint16_t ns = 0;
  std::vector<KeyLength> items;  // data section: the objects, concatenated in order
  uint64_t data_bytes() const;
  KVTIER_NET_MESSAGE(BatchPutRequest) = default;
};
struct BatchPutResponse {
  std::vector<PutOutcome> results;  // one per item, in order
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(BatchPutResponse) = default;
};

struct BatchGetRequest {
  uint16_t ns = 0;
  std::vector<KeyLength> items;  // length = the client's buffer for that key
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(BatchGetRequest) = default;
};
struct BatchGetResponse {
  std::vector<GetOutcome> results;  // data section: the hits' bytes, concatenated in order
  uint64_t data_bytes() const;
  KVTIER_NET_MESSAGE(BatchGetResponse) = default;
};

// One round trip for a whole chain.
struct MatchPrefixRequest {
  uint16_t ns = 0;
  std::vector<kv::Key128> keys;  // <= kMaxMatchKeys
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(MatchPrefixRequest) = default;
};
struct MatchPrefixResponse {
  std::vector<kv::Tier> tiers;  // one per matched leading key; the count is tiers.size()
  uint64_t data_bytes() const { return 0; }
  // blocks, ram_blocks, disk_blocks and tiers as Store::match_prefix gives them.
  kv::MatchResult to_result() const;
  static MatchPrefixResponse from(const kv::MatchResult& r) { return {r.tiers}; }
  KVTIER_NET_MESSAGE(MatchPrefixResponse) = default;
};

struct RemoveRequest {
  uint16_t ns = 0;
  kv::Key128 key;
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(RemoveRequest) = default;
};
struct RemoveResponse {
  bool removed = false;  // whether the block was present
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(RemoveResponse) = default;
};

struct PinRequest {
  uint16_t ns = 0;
  uint64_t ttl_ms = 0;
  std::vector<kv::Key128> keys;  // <= kMaxMatchKeys
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(PinRequest) = default;
};
struct PinResponse {
  uint32_t pinned = 0;
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(PinResponse) = default;
};

struct UnpinRequest {
  uint16_t ns = 0;
  std::vector<kv::Key128> keys;  // <= kMaxMatchKeys
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(UnpinRequest) = default;
};
struct UnpinResponse {
  uint32_t unpinned = 0;
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(UnpinResponse) = default;
};

enum class StatsFormat : uint8_t { kCounters = 1, kJson = 2 };

struct StatsRequest {
  StatsFormat format = StatsFormat::kCounters;
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(StatsRequest) = default;
};
struct StatsResponse {
  std::vector<StatCounter> counters;  // filled for kCounters
  uint32_t json_bytes = 0;            // data section: UTF-8 JSON text (kJson)
  uint64_t data_bytes() const { return json_bytes; }
  KVTIER_NET_MESSAGE(StatsResponse) = default;
};

// ---- Same-host shared-memory path (docs/protocol-store.md, "Shared-memory path") ----
//
// A client on the server's host asks for an offer; the server answers with an
// abstract Unix socket name, its host's boot id and a one-time nonce. The
// client (same boot id) passes a sealed memfd with the nonce over that socket
// (net/shm/shm_area.h); from then on ShmPut and ShmGet on this connection name a
// byte range of that area instead of carrying a data section. A server with
// the path disabled answers the offer with an Error (kUnavailable).
struct ShmOfferRequest {
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(ShmOfferRequest) = default;
};
struct ShmOfferResponse {
  std::string socket_name;      // abstract Unix socket, <= kMaxNameBytes
  std::string host_id;          // the server's boot id, <= kMaxNameBytes
  kv::Key128 nonce;             // names this connection on the Unix socket
  uint64_t max_area_bytes = 0;  // the largest area the server maps
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(ShmOfferResponse) = default;
};
struct ShmPutRequest {
  uint16_t ns = 0;
  kv::Key128 key;
  uint64_t offset = 0;  // the object is area[offset, offset + length)
  uint32_t length = 0;
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(ShmPutRequest) = default;
};
struct ShmPutResponse {
  PutOutcome result;
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(ShmPutResponse) = default;
};
struct ShmGetRequest {
  uint16_t ns = 0;
  kv::Key128 key;
  uint64_t offset = 0;        // the hit's bytes go to area[offset, ...)
  uint32_t buffer_bytes = 0;  // room there; a larger object is an error
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(ShmGetRequest) = default;
};
struct ShmGetResponse {
  GetOutcome result;  // result.length bytes were written into the area
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(ShmGetResponse) = default;
};

// ---- Direct channel (docs/protocol-store.md, "Direct channel") ----
//
// A Unix stream socket a same-host client keeps open next to its TCP
// connection, answered by a server thread of its own: no TCP stack and no
// thread hand-offs on either side. Besides ShmPut and ShmGet it carries
// ShmLeaseGet, whose RAM hits are not copied by the server at all: the
// server leases the block's RAM slot and names where it lies in the RAM
// arena the client mapped read-only; the client copies it out and releases
// the lease with its next ShmLeaseGet, or with a ShmRelease (one-way: no
// response) when it has no next one soon.
enum class ShmPlacement : uint8_t {
  kNone = 0,   // a miss
  kArea = 1,   // copied into the client's area at the request's offset
  kArena = 2,  // leased in the server's RAM arena at arena_offset
};
constexpr uint32_t kMaxShmReleases = 256;
struct ShmLeaseGetRequest {
  uint16_t ns = 0;
  kv::Key128 key;
  uint64_t offset = 0;        // where a hit that is not leased goes (as ShmGet)
  uint32_t buffer_bytes = 0;  // room there and in the caller's buffer
  // Leases of earlier answers the client is done with (<= kMaxShmReleases):
  // released before this request is served, so a busy client sends no
  // separate ShmRelease.
  std::vector<uint32_t> release;
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(ShmLeaseGetRequest) = default;
};
struct ShmLeaseGetResponse {
  GetOutcome result;
  ShmPlacement placement = ShmPlacement::kNone;  // kNone exactly for a miss
  uint64_t arena_offset = 0;                     // kArena: the block's first byte
  uint32_t lease = 0;                            // kArena: what ShmRelease names
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(ShmLeaseGetResponse) = default;
};
struct ShmReleaseRequest {
  std::vector<uint32_t> leases;  // <= kMaxShmReleases
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(ShmReleaseRequest) = default;
};

// A request that could not be served (bad namespace handle, buffer too
// small, not authenticated, ...). Misses are not errors.
struct ErrorResponse {
  StatusCode code = StatusCode::kInternal;  // never kOk
  std::string message;                      // <= kMaxStringBytes
  // Clips the message to the limit; an OK status becomes kInternal.
  static ErrorResponse from_status(const Status& st);
  Status to_status() const { return Status(code, message); }
  uint64_t data_bytes() const { return 0; }
  KVTIER_NET_MESSAGE(ErrorResponse) = default;
};

#undef KVTIER_NET_MESSAGE

using Message =
    std::variant<HelloRequest, HelloResponse, RegisterNamespaceRequest, RegisterNamespaceResponse,
                 PutRequest, PutResponse, GetRequest, GetResponse, BatchPutRequest,
                 BatchPutResponse, BatchGetRequest, BatchGetResponse, MatchPrefixRequest,
                 MatchPrefixResponse, RemoveRequest, RemoveResponse, PinRequest, PinResponse,
                 UnpinRequest, UnpinResponse, StatsRequest, StatsResponse, ShmOfferRequest,
                 ShmOfferResponse, ShmPutRequest, ShmPutResponse, ShmGetRequest, ShmGetResponse,
                 ShmLeaseGetRequest, ShmLeaseGetResponse, ShmReleaseRequest, ErrorResponse>;

MessageType message_type_of(const Message& m);

// ---- Frames ------------------------------------------------------------------------

// Appends header and descriptor of a frame of `type` to `out`; the data
// section is `data` (the parts in order, possibly none), whose CRC goes in
// the header but whose bytes are NOT appended: the caller sends them from
// where they are (writev). Checks version, lengths and limits; on error
// `out` is unchanged.
Status encode_frame_prefix(MessageType type, uint64_t request_id, ByteView descriptor,
                           std::span<const ByteView> data, std::vector<std::byte>& out,
                           uint16_t version = kProtocolVersion);

// The same for a message: also checks that the data parts add up to
// msg.data_bytes().
Status encode_message_prefix(const Message& msg, uint64_t request_id,
                             std::span<const ByteView> data, std::vector<std::byte>& out,
                             uint16_t version = kProtocolVersion);

// The same with the data section's CRC32C computed by the caller, which
// has just written the bytes and checksums them while they are in cache (a
// store thread, off the I/O thread). A wrong `data_crc` makes the peer
// reject the frame; it is never checked here.
Status encode_message_prefix_with_data_crc(const Message& msg, uint64_t request_id,
                                           std::span<const ByteView> data, uint32_t data_crc,
                                           std::vector<std::byte>& out,
                                           uint16_t version = kProtocolVersion);

// A whole frame in one buffer (header, descriptor and a copy of the data):
// for tests and small messages.
Result<std::vector<std::byte>> encode_message_frame(const Message& msg, uint64_t request_id,
                                                    std::span<const ByteView> data = {},
                                                    uint16_t version = kProtocolVersion);

// Decodes the descriptor of a frame as the message its header names, and
// checks that the message implies the header's data_len.
Result<Message> decode_message(const FrameHeader& h, ByteView descriptor);

// The same for one expected type (kWrongType for any other).
template <typename M>
Result<M> decode_message_as(const FrameHeader& h, ByteView descriptor) {
  auto m = decode_message(h, descriptor);
  if (!m.ok()) return m.status();
  if (M* p = std::get_if<M>(&*m)) return std::move(*p);
  return Status::invalid_argument(std::string(protocol_error_name(ProtocolError::kWrongType)) +
                                  ": frame is a " + message_type_name(h.type) + ", not a " +
                                  message_type_name(M::kType));
}

// A complete, verified frame. `data` is empty when the data section was
// read into a caller's destination (FrameDecoder::set_data_destination).
struct Frame {
  FrameHeader header;
  std::vector<std::byte> descriptor;
  std::vector<std::byte> data;
};

// Reads frames from a byte stream incrementally, one at a time.
//
// Zero-copy use (a server or client on a socket): read from the socket into
// wanted(), then call advance(n). The header is validated as soon as its 40
// bytes are in, before anything is allocated; the descriptor is then read
// into a buffer of exactly descriptor_len bytes and verified. In kData, the
// caller may decode the descriptor (header(), descriptor()) and route the
// data section into its own buffers (set_data_destination); otherwise the
// decoder allocates one of data_len bytes. The data CRC is computed while the
// bytes arrive. In kReady, take_frame() hands the frame over and starts the
// next one.
//
// Buffered use: feed() copies from a buffer instead; it runs through kData
// without stopping, so zero-copy readers use wanted()/advance().
//
// Any error is final (the stream is out of sync): state() becomes kFailed and
// every later call returns the same Status. Single-threaded, like the
// connection that owns it.
class FrameDecoder {
 public:
  enum class State : uint8_t { kHeader, kDescriptor, kData, kReady, kFailed };

  explicit FrameDecoder(FrameLimits limits = {});
  // Not copyable: it may hold views into its own buffers.
  FrameDecoder(const FrameDecoder&) = delete;
  FrameDecoder& operator=(const FrameDecoder&) = delete;

  // Accept only `version` from now on (after Hello negotiated it).
  void set_required_version(uint16_t version) { min_version_ = max_version_ = version; }

  State state() const { return state_; }
  // Where the next stream bytes go; empty in kReady and kFailed.
  MutableByteView wanted();
  // `n` bytes (<= wanted().size()) were written into wanted().
  Status advance(size_t n);
  // Copies from `bytes` until a frame is complete or `bytes` is used up;
  // returns how many bytes it consumed.
  Result<size_t> feed(ByteView bytes);

  // The frame in progress: header valid from kDescriptor, descriptor from kData.
  const FrameHeader& header() const { return header_; }
  ByteView descriptor() const { return descriptor_; }
  // In kData before any data byte arrived: the data section goes into
  // `parts`, in order; their sizes must add up to header().data_len.
  Status set_data_destination(std::span<const MutableByteView> parts);

  // In kReady: the frame; the decoder starts on the next one.
  Frame take_frame();
  const Status& error() const { return error_; }

 private:
  Status fail(Status st);
  // Moves through stages that need no bytes (empty descriptor or data).
  Status settle();
  void reset();

  FrameLimits limits_;
  uint16_t min_version_ = kProtocolVersionMin;
  uint16_t max_version_ = kProtocolVersionMax;
  State state_ = State::kHeader;
  Status error_;
  std::byte header_buf_[kFrameHeaderSize];
  size_t filled_ = 0;  // bytes of the current stage received
  FrameHeader header_;
  std::vector<std::byte> descriptor_;
  std::vector<std::byte> data_;
  std::vector<MutableByteView> dest_;  // data destination parts (empty: data_)
  size_t dest_part_ = 0, dest_off_ = 0;
  uint32_t data_crc_ = 0;  // running CRC32C of the data received so far
};

// Exactly one frame from `bytes` (kTruncatedFrame if incomplete,
// kTrailingFrameBytes if anything follows it).
Result<Frame> decode_frame(ByteView bytes, const FrameLimits& limits = {});

}  // namespace kvtier::net
