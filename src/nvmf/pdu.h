// NVMe/TCP PDU codec: the bytes of the NVMe over TCP transport (common header,
// ICReq/ICResp, CapsuleCmd/CapsuleResp, H2CData/C2HData, R2T, TermReq) and
// their CRC32C header/data digests. Every field read from the wire is checked
// against what the protocol allows before anything uses it; see
// docs/nvme-tcp.md for the layouts and the rules. Pure functions, no state:
// safe from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "common/buffer.h"
#include "common/status.h"

namespace kvtier::nvmf {

enum class PduType : uint8_t {
  kIcReq = 0x00,
  kIcResp = 0x01,
  kH2CTermReq = 0x02,
  kC2HTermReq = 0x03,
  kCapsuleCmd = 0x04,
  kCapsuleResp = 0x05,
  kH2CData = 0x06,
  kC2HData = 0x07,
  kR2T = 0x09,
};

constexpr uint8_t kFlagHdgst = 0x01;
constexpr uint8_t kFlagDdgst = 0x02;
constexpr uint8_t kFlagDataLast = 0x04;
constexpr uint8_t kFlagDataSuccess = 0x08;

constexpr uint32_t kCommonHeaderSize = 8;
constexpr uint32_t kIcPduSize = 128;
constexpr uint32_t kCapsuleCmdHlen = 72;
constexpr uint32_t kShortHlen = 24;  // CapsuleResp, H2C/C2HData, R2T, TermReq
constexpr uint32_t kDigestSize = 4;
constexpr uint32_t kSqeSize = 64;
constexpr uint32_t kCqeSize = 16;
constexpr uint32_t kTermReqMaxPlen = kShortHlen + 128;
constexpr uint32_t kMinMaxH2CData = 4096;

// Which end is receiving: a PDU type is valid only in its own direction.
enum class Direction { kHostToController, kControllerToHost };

// The fixed 8-byte header every PDU starts with.
struct CommonHeader {
  PduType type = PduType::kIcReq;
  uint8_t flags = 0;
  uint8_t hlen = 0;
  uint8_t pdo = 0;
  uint32_t plen = 0;
};

// What a connection negotiated and how much data it accepts in one PDU.
struct PduLimits {
  bool hdgst = false;             // header digests enabled (never on ICReq/ICResp/TermReq)
  bool ddgst = false;             // data digests enabled
  uint32_t max_data = 128 << 10;  // bound on the data part of any PDU
};

// Where the parts of one PDU lie, once its common header has been validated.
struct PduLayout {
  CommonHeader ch;
  uint32_t header_bytes = 0;  // hlen + header digest
  uint32_t data_offset = 0;   // == header_bytes when data is present, else 0
  uint32_t data_len = 0;
  bool has_hdgst = false;
  bool has_ddgst = false;
};

// Parses the first 8 bytes and checks type, direction, hlen, pdo, plen and
// digest flags against the limits. Any failure is kInvalidArgument with the
// field named; `fes`/`fei` get the TermReq error (status, byte offset).
struct PduError {
  uint16_t fes = 0;
  uint32_t fei = 0;
};
Result<PduLayout> parse_common_header(ByteView ch, Direction dir, const PduLimits& limits,
                                      PduError* err = nullptr);

// Checks a received header digest (bytes [hlen, hlen+4) of `header`).
bool header_digest_ok(ByteView header_with_digest, uint32_t hlen);
uint32_t digest(ByteView data);  // CRC32C, as NVMe/TCP stores it (LE on the wire)

// TermReq fatal error status values.
constexpr uint16_t kFesInvalidHeaderField = 0x01;
constexpr uint16_t kFesSequenceError = 0x02;
constexpr uint16_t kFesHeaderDigest = 0x03;
constexpr uint16_t kFesDataOutOfRange = 0x04;
constexpr uint16_t kFesDataLimitExceeded = 0x05;
constexpr uint16_t kFesUnsupportedParameter = 0x06;

struct IcReq {
  uint16_t pfv = 0;
  uint8_t hpda = 0;
  bool hdgst = false;
  bool ddgst = false;
  uint32_t maxr2t = 0;
};
struct IcResp {
  uint16_t pfv = 0;
  uint8_t cpda = 0;
  bool hdgst = false;
  bool ddgst = false;
  uint32_t maxh2cdata = 0;
};
// Header fields of H2CData, C2HData and R2T (ttag reserved in C2HData; for R2T
// offset/length are r2to/r2tl).
struct DataHeader {
  uint16_t cccid = 0;
  uint16_t ttag = 0;
  uint32_t offset = 0;
  uint32_t length = 0;
};
struct TermReq {
  uint16_t fes = 0;
  uint32_t fei = 0;
};

using Sqe = std::array<uint8_t, kSqeSize>;
using Cqe = std::array<uint8_t, kCqeSize>;

// Decoders take the whole header (hlen bytes, digest not included) of a PDU
// whose common header parse_common_header accepted; they check the fields
// specific to the type.
Result<IcReq> decode_icreq(ByteView hdr);
Result<IcResp> decode_icresp(ByteView hdr);
Result<DataHeader> decode_data_header(ByteView hdr);  // H2CData, C2HData, R2T
Result<TermReq> decode_termreq(ByteView hdr);
Sqe decode_capsule_cmd(ByteView hdr);  // the SQE at bytes 8..71
Cqe decode_capsule_resp(ByteView hdr);

// Encoders write a complete header, with the header digest appended when
// `hdgst`, into `out` and return its length. `data_len` is the length of the
// data that follows (its digest, if any, is the caller's to append).
using HeaderBuf = std::array<uint8_t, kIcPduSize + kDigestSize>;
uint32_t encode_icreq(const IcReq& r, HeaderBuf& out);
uint32_t encode_icresp(const IcResp& r, HeaderBuf& out);
uint32_t encode_capsule_cmd(const Sqe& sqe, uint32_t data_len, bool hdgst, bool ddgst,
                            HeaderBuf& out);
uint32_t encode_capsule_resp(const Cqe& cqe, bool hdgst, HeaderBuf& out);
uint32_t encode_data(PduType type, const DataHeader& h, uint8_t extra_flags, bool hdgst, bool ddgst,
                     HeaderBuf& out);  // H2CData or C2HData
uint32_t encode_r2t(const DataHeader& h, bool hdgst, HeaderBuf& out);
// TermReq: no digests; `offending` (up to 128 bytes) follows the header.
uint32_t encode_termreq(PduType type, const TermReq& t, ByteView offending, HeaderBuf& out);

// Little-endian helpers shared by the target and host.
inline uint16_t get16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
inline uint32_t get32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
inline uint64_t get64(const uint8_t* p) { return get32(p) | uint64_t(get32(p + 4)) << 32; }
inline void put16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
inline void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void put64(uint8_t* p, uint64_t v) {
  put32(p, uint32_t(v));
  put32(p + 4, uint32_t(v >> 32));
}

}  // namespace kvtier::nvmf
