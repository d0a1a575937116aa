// NVMe/TCP PDU codec: validation of received headers and encoding of sent ones.
#include "nvmf/pdu.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/crc32c.h"

namespace kvtier::nvmf {
namespace {

const uint8_t* u8(ByteView v) { return reinterpret_cast<const uint8_t*>(v.data()); }

Status bad(PduError* err, uint16_t fes, uint32_t fei, const std::string& what) {
  if (err) *err = {fes, fei};
  return Status::invalid_argument("nvme-tcp: " + what);
}

bool direction_allows(PduType t, Direction dir) {
  switch (t) {
    case PduType::kIcReq:
    case PduType::kH2CTermReq:
    case PduType::kCapsuleCmd:
    case PduType::kH2CData:
      return dir == Direction::kHostToController;
    case PduType::kIcResp:
    case PduType::kC2HTermReq:
    case PduType::kCapsuleResp:
    case PduType::kC2HData:
    case PduType::kR2T:
      return dir == Direction::kControllerToHost;
  }
  return false;
}

uint32_t expected_hlen(PduType t) {
  switch (t) {
    case PduType::kIcReq:
    case PduType::kIcResp:
      return kIcPduSize;
    case PduType::kCapsuleCmd:
      return kCapsuleCmdHlen;
    default:
      return kShortHlen;
  }
}

void put_ch(HeaderBuf& out, PduType type, uint8_t flags, uint8_t hlen, uint8_t pdo, uint32_t plen) {
  out[0] = uint8_t(type);
  out[1] = flags;
  out[2] = hlen;
  out[3] = pdo;
  put32(&out[4], plen);
}

// Appends the header digest after `hlen` bytes when asked; returns header bytes.
uint32_t finish_header(HeaderBuf& out, uint32_t hlen, bool hdgst) {
  if (!hdgst) return hlen;
  put32(&out[hlen], crc32c(out.data(), hlen));
  return hlen + kDigestSize;
}

}  // namespace

uint32_t digest(ByteView data) { return crc32c(data); }

bool header_digest_ok(ByteView h, uint32_t hlen) {
  if (h.size() < hlen + kDigestSize) return false;
  return get32(u8(h) + hlen) == crc32c(h.data(), hlen);
}

Result<PduLayout> parse_common_header(ByteView chv, Direction dir, const PduLimits& lim,
                                      PduError* err) {
  if (chv.size() < kCommonHeaderSize) return bad(err, kFesInvalidHeaderField, 0, "short header");
  const uint8_t* p = u8(chv);
  PduLayout l;
  l.ch.type = PduType(p[0]);
  l.ch.flags = p[1];
  l.ch.hlen = p[2];
  l.ch.pdo = p[3];
  l.ch.plen = get32(p + 4);
  const uint8_t t = p[0];
  if (t > 0x09 || t == 0x08 || !direction_allows(l.ch.type, dir)) {
    return bad(err, kFesInvalidHeaderField, 0, "unexpected PDU type " + std::to_string(t));
  }
  const uint32_t hlen = expected_hlen(l.ch.type);
  if (l.ch.hlen != hlen) {
    return bad(err, kFesInvalidHeaderField, 2, "bad hlen " + std::to_string(l.ch.hlen));
  }
  const uint8_t known_flags = (l.ch.type == PduType::kC2HData)   ? 0x0F
                              : (l.ch.type == PduType::kH2CData) ? 0x07
                                                                 : 0x03;
  if (l.ch.flags & ~known_flags) return bad(err, kFesInvalidHeaderField, 1, "unknown flags");
  const uint32_t plen = l.ch.plen;

  // PDUs that never carry digests: ICReq/ICResp and TermReq.
  if (hlen == kIcPduSize) {
    if (l.ch.flags != 0 || l.ch.pdo != 0 || plen != kIcPduSize) {
      return bad(err, kFesInvalidHeaderField, 4, "bad ICReq/ICResp header");
    }
    l.header_bytes = hlen;
    return l;
  }
  if (l.ch.type == PduType::kH2CTermReq || l.ch.type == PduType::kC2HTermReq) {
    if (l.ch.flags != 0 || l.ch.pdo != 0 || plen < hlen || plen > kTermReqMaxPlen) {
      return bad(err, kFesInvalidHeaderField, 4, "bad TermReq header");
    }
    l.header_bytes = hlen;
    l.data_len = plen - hlen;  // the offending header, not checksummed
    if (l.data_len) l.data_offset = hlen;
    return l;
  }

  // Digest flags must match what the connection negotiated.
  const bool hd = l.ch.flags & kFlagHdgst;
  if (hd != lim.hdgst) return bad(err, kFesInvalidHeaderField, 1, "header digest flag mismatch");
  l.has_hdgst = hd;
  l.header_bytes = hlen + (hd ? kDigestSize : 0);
  const bool dd = l.ch.flags & kFlagDdgst;
  if (plen < l.header_bytes) return bad(err, kFesInvalidHeaderField, 4, "plen below header");

  const bool may_carry_data = l.ch.type == PduType::kCapsuleCmd || l.ch.type == PduType::kH2CData ||
                              l.ch.type == PduType::kC2HData;
  const bool must_carry_data = l.ch.type == PduType::kH2CData || l.ch.type == PduType::kC2HData;
  if (plen == l.header_bytes) {
    if (must_carry_data) return bad(err, kFesInvalidHeaderField, 4, "data PDU without data");
    if (l.ch.pdo != 0 || dd) return bad(err, kFesInvalidHeaderField, 3, "pdo/ddgst without data");
    if (l.ch.flags & (kFlagDataLast | kFlagDataSuccess)) {
      if (!may_carry_data) return bad(err, kFesInvalidHeaderField, 1, "data flags without data");
    }
    return l;
  }
  if (!may_carry_data) return bad(err, kFesInvalidHeaderField, 4, "plen too long for type");
  // Data follows the header directly: we negotiate CPDA/HPDA 0, never pad.
  if (l.ch.pdo != l.header_bytes) {
    return bad(err, kFesInvalidHeaderField, 3, "pdo " + std::to_string(l.ch.pdo));
  }
  if (dd != lim.ddgst) return bad(err, kFesInvalidHeaderField, 1, "data digest flag mismatch");
  l.has_ddgst = dd;
  const uint64_t tail = uint64_t(l.header_bytes) + (dd ? kDigestSize : 0);
  if (plen <= tail) return bad(err, kFesInvalidHeaderField, 4, "plen leaves no data");
  l.data_len = uint32_t(plen - tail);
  if (l.data_len > lim.max_data) {
    return bad(err, kFesDataLimitExceeded, 4, "data length " + std::to_string(l.data_len));
  }
  l.data_offset = l.header_bytes;
  return l;
}

namespace {

// ICReq and ICResp share one layout (NVMe/TCP 3.6.2.2-3): PFV, a PDU data
// alignment (HPDA / CPDA), the digest flags and a 32-bit limit (MAXR2T /
// MAXH2CDATA). `pda` and `limit` name the fields of the one being decoded;
// `check` judges its own fields, after PFV and before the digest bits.
template <typename Ic, typename Check>
Result<Ic> decode_ic(ByteView hdr, const char* what, uint8_t Ic::*pda, uint32_t Ic::*limit,
                     Check&& check) {
  const std::string prefix = std::string("nvme-tcp: ") + what;
  if (hdr.size() < kIcPduSize)
    return Status::invalid_argument("nvme-tcp: short " + std::string(what));
  const uint8_t* p = u8(hdr);
  Ic r;
  r.pfv = get16(p + 8);
  r.*pda = p[10];
  r.hdgst = p[11] & 1;
  r.ddgst = p[11] & 2;
  r.*limit = get32(p + 12);
  if (r.pfv != 0) return Status::invalid_argument(prefix + " pfv " + std::to_string(r.pfv));
  KVTIER_RETURN_IF_ERROR(check(r));
  if (p[11] & ~3u) return Status::invalid_argument(prefix + " unknown digest bits");
  return r;
}

template <typename Ic>
uint32_t encode_ic(const Ic& r, PduType type, uint8_t pda, uint32_t limit, HeaderBuf& out) {
  out.fill(0);
  put_ch(out, type, 0, kIcPduSize, 0, kIcPduSize);
  put16(&out[8], r.pfv);
  out[10] = pda;
  out[11] = uint8_t((r.hdgst ? 1 : 0) | (r.ddgst ? 2 : 0));
  put32(&out[12], limit);
  return kIcPduSize;
}

}  // namespace

Result<IcReq> decode_icreq(ByteView hdr) {
  return decode_ic<IcReq>(hdr, "ICReq", &IcReq::hpda, &IcReq::maxr2t, [](const IcReq& r) {
    if (r.hpda > 31) return Status::invalid_argument("nvme-tcp: ICReq hpda out of range");
    return Status::ok_status();
  });
}

Result<IcResp> decode_icresp(ByteView hdr) {
  return decode_ic<IcResp>(hdr, "ICResp", &IcResp::cpda, &IcResp::maxh2cdata, [](const IcResp& r) {
    if (r.cpda != 0) return Status::invalid_argument("nvme-tcp: unsupported cpda");
    if (r.maxh2cdata < kMinMaxH2CData || r.maxh2cdata % 4 != 0) {
      return Status::invalid_argument("nvme-tcp: invalid maxh2cdata");
    }
    return Status::ok_status();
  });
}

Result<DataHeader> decode_data_header(ByteView hdr) {
  if (hdr.size() < kShortHlen) return Status::invalid_argument("nvme-tcp: short data header");
  const uint8_t* p = u8(hdr);
  DataHeader h;
  h.cccid = get16(p + 8);
  h.ttag = get16(p + 10);
  h.offset = get32(p + 12);
  h.length = get32(p + 16);
  if (h.length == 0) return Status::invalid_argument("nvme-tcp: zero data length");
  if (uint64_t(h.offset) + h.length > UINT32_MAX) {
    return Status::invalid_argument("nvme-tcp: data offset overflow");
  }
  return h;
}

Result<TermReq> decode_termreq(ByteView hdr) {
  if (hdr.size() < kShortHlen) return Status::invalid_argument("nvme-tcp: short TermReq");
  const uint8_t* p = u8(hdr);
  return TermReq{get16(p + 8), get32(p + 10)};
}

Sqe decode_capsule_cmd(ByteView hdr) {
  Sqe s{};
  if (hdr.size() >= kCapsuleCmdHlen) std::memcpy(s.data(), u8(hdr) + 8, kSqeSize);
  return s;
}

Cqe decode_capsule_resp(ByteView hdr) {
  Cqe c{};
  if (hdr.size() >= kShortHlen) std::memcpy(c.data(), u8(hdr) + 8, kCqeSize);
  return c;
}

uint32_t encode_icreq(const IcReq& r, HeaderBuf& out) {
  return encode_ic(r, PduType::kIcReq, r.hpda, r.maxr2t, out);
}

uint32_t encode_icresp(const IcResp& r, HeaderBuf& out) {
  return encode_ic(r, PduType::kIcResp, r.cpda, r.maxh2cdata, out);
}

uint32_t encode_capsule_cmd(const Sqe& sqe, uint32_t data_len, bool hdgst, bool ddgst,
                            HeaderBuf& out) {
  out.fill(0);
  const uint32_t hb = kCapsuleCmdHlen + (hdgst ? kDigestSize : 0);
  const bool dd = ddgst && data_len > 0;
  const uint8_t flags = uint8_t((hdgst ? kFlagHdgst : 0) | (dd ? kFlagDdgst : 0));
  put_ch(out, PduType::kCapsuleCmd, flags, kCapsuleCmdHlen, data_len ? uint8_t(hb) : 0,
         hb + data_len + (dd ? kDigestSize : 0));
  std::memcpy(&out[8], sqe.data(), kSqeSize);
  return finish_header(out, kCapsuleCmdHlen, hdgst);
}

uint32_t encode_capsule_resp(const Cqe& cqe, bool hdgst, HeaderBuf& out) {
  out.fill(0);
  put_ch(out, PduType::kCapsuleResp, hdgst ? kFlagHdgst : 0, kShortHlen, 0,
         kShortHlen + (hdgst ? kDigestSize : 0));
  std::memcpy(&out[8], cqe.data(), kCqeSize);
  return finish_header(out, kShortHlen, hdgst);
}

uint32_t encode_data(PduType type, const DataHeader& h, uint8_t extra_flags, bool hdgst, bool ddgst,
                     HeaderBuf& out) {
  out.fill(0);
  const uint32_t hb = kShortHlen + (hdgst ? kDigestSize : 0);
  const uint8_t flags = uint8_t(extra_flags | (hdgst ? kFlagHdgst : 0) | (ddgst ? kFlagDdgst : 0));
  put_ch(out, type, flags, kShortHlen, uint8_t(hb), hb + h.length + (ddgst ? kDigestSize : 0));
  put16(&out[8], h.cccid);
  put16(&out[10], h.ttag);
  put32(&out[12], h.offset);
  put32(&out[16], h.length);
  return finish_header(out, kShortHlen, hdgst);
}

uint32_t encode_r2t(const DataHeader& h, bool hdgst, HeaderBuf& out) {
  out.fill(0);
  put_ch(out, PduType::kR2T, hdgst ? kFlagHdgst : 0, kShortHlen, 0,
         kShortHlen + (hdgst ? kDigestSize : 0));
  put16(&out[8], h.cccid);
  put16(&out[10], h.ttag);
  put32(&out[12], h.offset);
  put32(&out[16], h.length);
  return finish_header(out, kShortHlen, hdgst);
}

uint32_t encode_termreq(PduType type, const TermReq& t, ByteView offending, HeaderBuf& out) {
  out.fill(0);
  const uint32_t n = uint32_t(std::min<size_t>(offending.size(), kTermReqMaxPlen - kShortHlen));
  put_ch(out, type, 0, kShortHlen, 0, kShortHlen + n);
  put16(&out[8], t.fes);
  put32(&out[10], t.fei);
  // The caller sends `offending` (first n bytes) after these 24 bytes.
  return kShortHlen;
}

}  // namespace kvtier::nvmf
