// Store wire protocol: errors, message types, the frame header and version
// negotiation. docs/protocol-store.md is the specification; the messages'
// codec is message_codec.cc, the incremental decoder frame_decoder.cc.
#include "net/wire/protocol.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/crc32c.h"
#include "net/wire/codec_detail.h"

namespace kvtier::net {
namespace {

// ---- Errors -----------------------------------------------------------------

constexpr std::string_view kErrorNames[] = {
    "none",
    "truncated_frame",
    "bad_magic",
    "header_crc_mismatch",
    "unsupported_version",
    "unknown_flags",
    "unknown_type",
    "descriptor_too_large",
    "data_too_large",
    "unexpected_data",
    "descriptor_crc_mismatch",
    "data_crc_mismatch",
    "trailing_frame_bytes",
    "truncated_field",
    "trailing_bytes",
    "count_too_large",
    "count_exceeds_remaining",
    "string_too_long",
    "bad_value",
    "wrong_type",
    "data_length_mismatch",
};
static_assert(std::size(kErrorNames) == static_cast<size_t>(ProtocolError::kCount));

}  // namespace

namespace detail {

Status perr(ProtocolError e, const std::string& detail) {
  StatusCode code = StatusCode::kInvalidArgument;
  switch (e) {
    case ProtocolError::kTruncatedFrame:
    case ProtocolError::kBadMagic:
    case ProtocolError::kHeaderCrcMismatch:
    case ProtocolError::kDescriptorCrcMismatch:
    case ProtocolError::kDataCrcMismatch:
      code = StatusCode::kCorruption;  // damaged or foreign bytes
      break;
    case ProtocolError::kUnsupportedVersion:
      code = StatusCode::kFailedPrecondition;  // a well-formed frame we cannot speak
      break;
    default:
      break;
  }
  std::string msg(protocol_error_name(e));
  msg += ": ";
  msg += detail;
  return Status(code, std::move(msg));
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

Status check_version(uint16_t v) {
  if (v >= kProtocolVersionMin && v <= kProtocolVersionMax) return Status::ok_status();
  return perr(ProtocolError::kUnsupportedVersion, "version " + std::to_string(v) + " is outside [" +
                                                      std::to_string(kProtocolVersionMin) + ", " +
                                                      std::to_string(kProtocolVersionMax) + "]");
}

}  // namespace detail

using detail::hex32;
using detail::load_le;
using detail::perr;
using detail::store_le;

// ---- Public: errors and types ----------------------------------------------------

std::string_view protocol_error_name(ProtocolError e) {
  auto i = static_cast<size_t>(e);
  return i < std::size(kErrorNames) ? kErrorNames[i] : "unknown";
}

ProtocolError protocol_error_of(const Status& st) {
  if (st.ok()) return ProtocolError::kNone;
  const std::string& msg = st.message();
  for (size_t i = 1; i < std::size(kErrorNames); ++i) {
    std::string_view name = kErrorNames[i];
    if (msg.size() > name.size() && msg.compare(0, name.size(), name) == 0 &&
        msg[name.size()] == ':') {
      return static_cast<ProtocolError>(i);
    }
  }
  return ProtocolError::kNone;
}

bool is_known_message_type(uint16_t type) {
  uint16_t base = type & 0x7FFFu;
  if (type == static_cast<uint16_t>(MessageType::kErrorResponse)) return true;
  // ShmRelease is one-way: there is no response type for it.
  if (type == (static_cast<uint16_t>(MessageType::kShmReleaseRequest) | 0x8000u)) return false;
  return base >= static_cast<uint16_t>(MessageType::kHelloRequest) &&
         base <= static_cast<uint16_t>(MessageType::kShmReleaseRequest);
}

bool message_type_carries_data(MessageType t) {
  switch (t) {
    case MessageType::kPutRequest:
    case MessageType::kBatchPutRequest:
    case MessageType::kGetResponse:
    case MessageType::kBatchGetResponse:
    case MessageType::kStatsResponse:
      return true;
    default:
      return false;
  }
}

const char* message_type_name(MessageType t) {
  switch (t) {
    case MessageType::kHelloRequest:
      return "HelloRequest";
    case MessageType::kRegisterNamespaceRequest:
      return "RegisterNamespaceRequest";
    case MessageType::kPutRequest:
      return "PutRequest";
    case MessageType::kGetRequest:
      return "GetRequest";
    case MessageType::kBatchPutRequest:
      return "BatchPutRequest";
    case MessageType::kBatchGetRequest:
      return "BatchGetRequest";
    case MessageType::kMatchPrefixRequest:
      return "MatchPrefixRequest";
    case MessageType::kRemoveRequest:
      return "RemoveRequest";
    case MessageType::kPinRequest:
      return "PinRequest";
    case MessageType::kUnpinRequest:
      return "UnpinRequest";
    case MessageType::kStatsRequest:
      return "StatsRequest";
    case MessageType::kHelloResponse:
      return "HelloResponse";
    case MessageType::kRegisterNamespaceResponse:
      return "RegisterNamespaceResponse";
    case MessageType::kPutResponse:
      return "PutResponse";
    case MessageType::kGetResponse:
      return "GetResponse";
    case MessageType::kBatchPutResponse:
      return "BatchPutResponse";
    case MessageType::kBatchGetResponse:
      return "BatchGetResponse";
    case MessageType::kMatchPrefixResponse:
      return "MatchPrefixResponse";
    case MessageType::kRemoveResponse:
      return "RemoveResponse";
    case MessageType::kPinResponse:
      return "PinResponse";
    case MessageType::kUnpinResponse:
      return "UnpinResponse";
    case MessageType::kStatsResponse:
      return "StatsResponse";
    case MessageType::kShmOfferRequest:
      return "ShmOfferRequest";
    case MessageType::kShmOfferResponse:
      return "ShmOfferResponse";
    case MessageType::kShmPutRequest:
      return "ShmPutRequest";
    case MessageType::kShmPutResponse:
      return "ShmPutResponse";
    case MessageType::kShmGetRequest:
      return "ShmGetRequest";
    case MessageType::kShmGetResponse:
      return "ShmGetResponse";
    case MessageType::kShmLeaseGetRequest:
      return "ShmLeaseGetRequest";
    case MessageType::kShmLeaseGetResponse:
      return "ShmLeaseGetResponse";
    case MessageType::kShmReleaseRequest:
      return "ShmReleaseRequest";
    case MessageType::kErrorResponse:
      return "ErrorResponse";
  }
  return "unknown";
}

// ---- Public: header ------------------------------------------------------------------

void encode_header(const FrameHeader& h, std::span<std::byte, kFrameHeaderSize> out) {
  namespace o = header_offset;
  std::byte* p = out.data();
  store_le(p + o::kMagic, kFrameMagic, 4);
  store_le(p + o::kVersion, h.version, 2);
  store_le(p + o::kType, static_cast<uint16_t>(h.type), 2);
  store_le(p + o::kFlags, h.flags, 4);
  store_le(p + o::kDescriptorLen, h.descriptor_len, 4);
  store_le(p + o::kRequestId, h.request_id, 8);
  store_le(p + o::kDataLen, h.data_len, 4);
  store_le(p + o::kDescriptorCrc, h.descriptor_crc, 4);
  store_le(p + o::kDataCrc, h.data_crc, 4);
  store_le(p + o::kHeaderCrc, crc32c(p, o::kHeaderCrc), 4);
}

Result<FrameHeader> decode_header(ByteView in, const FrameLimits& limits, uint16_t min_version,
                                  uint16_t max_version) {
  namespace o = header_offset;
  if (in.size() < kFrameHeaderSize) {
    return perr(ProtocolError::kTruncatedFrame, "header needs " + std::to_string(kFrameHeaderSize) +
                                                    " bytes, got " + std::to_string(in.size()));
  }
  const std::byte* p = in.data();
  // Magic before the CRC: a foreign protocol (HTTP, TLS) on the port is then
  // reported as what it is, not as damage.
  auto magic = static_cast<uint32_t>(load_le(p + o::kMagic, 4));
  if (magic != kFrameMagic) {
    return perr(ProtocolError::kBadMagic,
                "got " + hex32(magic) + ", expected " + hex32(kFrameMagic));
  }
  // The CRC before every other field, so that the checks below see the
  // bytes the sender wrote and their errors point at a sender bug.
  auto want_crc = static_cast<uint32_t>(load_le(p + o::kHeaderCrc, 4));
  uint32_t got_crc = crc32c(p, o::kHeaderCrc);
  if (want_crc != got_crc) {
    return perr(ProtocolError::kHeaderCrcMismatch,
                "header says " + hex32(want_crc) + ", bytes give " + hex32(got_crc));
  }
  FrameHeader h;
  h.version = static_cast<uint16_t>(load_le(p + o::kVersion, 2));
  auto type = static_cast<uint16_t>(load_le(p + o::kType, 2));
  h.type = static_cast<MessageType>(type);
  h.flags = static_cast<uint32_t>(load_le(p + o::kFlags, 4));
  h.descriptor_len = static_cast<uint32_t>(load_le(p + o::kDescriptorLen, 4));
  h.request_id = load_le(p + o::kRequestId, 8);
  h.data_len = static_cast<uint32_t>(load_le(p + o::kDataLen, 4));
  h.descriptor_crc = static_cast<uint32_t>(load_le(p + o::kDescriptorCrc, 4));
  h.data_crc = static_cast<uint32_t>(load_le(p + o::kDataCrc, 4));

  if (h.version < min_version || h.version > max_version) {
    return perr(ProtocolError::kUnsupportedVersion,
                "frame version " + std::to_string(h.version) + ", accepted [" +
                    std::to_string(min_version) + ", " + std::to_string(max_version) + "]");
  }
  if ((h.flags & ~kKnownFlags) != 0) {
    return perr(ProtocolError::kUnknownFlags,
                "flags " + hex32(h.flags) + ", known " + hex32(kKnownFlags));
  }
  if (!is_known_message_type(type)) {
    return perr(ProtocolError::kUnknownType, "message type " + hex32(type));
  }
  uint32_t max_desc = std::min(limits.max_descriptor_bytes, kMaxDescriptorBytes);
  if (h.descriptor_len > max_desc) {
    return perr(ProtocolError::kDescriptorTooLarge,
                "descriptor_len " + std::to_string(h.descriptor_len) + " exceeds limit " +
                    std::to_string(max_desc));
  }
  uint32_t max_data = std::min(limits.max_data_bytes, kMaxDataBytes);
  if (h.data_len > max_data) {
    return perr(ProtocolError::kDataTooLarge, "data_len " + std::to_string(h.data_len) +
                                                  " exceeds limit " + std::to_string(max_data));
  }
  if (h.data_len > 0 && !message_type_carries_data(h.type)) {
    return perr(ProtocolError::kUnexpectedData, std::string(message_type_name(h.type)) +
                                                    " with data_len " + std::to_string(h.data_len));
  }
  return h;
}

namespace {

// One section of a frame (`what`: descriptor or data) against the length and
// CRC its header gives.
Status verify_section(ByteView bytes, const char* what, uint64_t want_len, uint32_t want_crc,
                      ProtocolError crc_error) {
  if (bytes.size() != want_len) {
    return perr(ProtocolError::kTruncatedFrame,
                std::string(what) + " of " + std::to_string(bytes.size()) + " bytes, header says " +
                    std::to_string(want_len));
  }
  const uint32_t got = crc32c(bytes);
  if (got != want_crc) {
    return perr(crc_error, "header says " + hex32(want_crc) + ", bytes give " + hex32(got));
  }
  return Status::ok_status();
}

}  // namespace

Status verify_descriptor(const FrameHeader& h, ByteView descriptor) {
  return verify_section(descriptor, "descriptor", h.descriptor_len, h.descriptor_crc,
                        ProtocolError::kDescriptorCrcMismatch);
}

Status verify_data(const FrameHeader& h, ByteView data) {
  return verify_section(data, "data", h.data_len, h.data_crc, ProtocolError::kDataCrcMismatch);
}

Result<uint16_t> negotiate_version(uint16_t client_min, uint16_t client_max) {
  uint16_t lo = std::max(client_min, kProtocolVersionMin);
  uint16_t hi = std::min(client_max, kProtocolVersionMax);
  if (client_min == 0 || client_min > client_max || lo > hi) {
    return perr(ProtocolError::kUnsupportedVersion,
                "client speaks [" + std::to_string(client_min) + ", " + std::to_string(client_max) +
                    "], this side [" + std::to_string(kProtocolVersionMin) + ", " +
                    std::to_string(kProtocolVersionMax) + "]");
  }
  return hi;
}

}  // namespace kvtier::net
