// The six DH-HMAC-CHAP messages on the wire (dhchap.h). All integers are
// little-endian; DH values are big-endian numbers of the group's size.
#include <algorithm>

#include <fmt/format.h>

#include "nvmf/dhchap.h"
#include "nvmf/pdu.h"

namespace kvtier::nvmf::dhchap {

namespace {

// auth_type: common messages (Negotiate, failures) and DH-HMAC-CHAP ones.
constexpr uint8_t kTypeCommon = 0x00;
constexpr uint8_t kTypeDhchap = 0x01;
constexpr uint8_t kIdNegotiate = 0x00;
constexpr uint8_t kIdChallenge = 0x01;
constexpr uint8_t kIdReply = 0x02;
constexpr uint8_t kIdSuccess1 = 0x03;
constexpr uint8_t kIdSuccess2 = 0x04;
constexpr uint8_t kIdFailure2 = 0xF0;
constexpr uint8_t kIdFailure1 = 0xF1;
constexpr uint8_t kAuthIdDhchap = 0x01;  // protocol descriptor AUTHID
constexpr size_t kDescriptorBytes = 64;
constexpr size_t kIdListHalf = 30;  // hash ids, then DH group ids
constexpr size_t kNegotiateBytes = 8 + kDescriptorBytes;
constexpr size_t kHeaderBytes = 16;  // Challenge, Reply, Success1, Success2
constexpr size_t kFailureBytes = 8;

Status bad(std::string what) { return Status::invalid_argument("dhchap message: " + what); }

Bytes header(uint8_t type, uint8_t id, uint16_t tid, size_t total) {
  Bytes b(total, 0);
  b[0] = type;
  b[1] = id;
  put16(&b[4], tid);
  return b;
}

void put_bytes(Bytes& b, size_t at, BytesView v) { std::copy(v.begin(), v.end(), b.begin() + at); }
Bytes take(BytesView d, size_t at, size_t n) { return Bytes(d.begin() + at, d.begin() + at + n); }

// A hash length field must be one of the three digests.
bool valid_hl(uint8_t hl) { return hl == 32 || hl == 48 || hl == 64; }
bool valid_dhvlen(uint16_t n) {
  for (uint8_t g = 0; g <= 5; ++g) {
    if (n == dh_value_bytes(DhGroup(g))) return true;
  }
  return false;
}

struct Encoder {
  Bytes operator()(const Negotiate& m) const {
    Bytes b = header(kTypeCommon, kIdNegotiate, m.tid, kNegotiateBytes);
    b[6] = m.sc_c;
    b[7] = 1;  // NAPD: one protocol descriptor
    b[8] = kAuthIdDhchap;
    const size_t halen = std::min(m.hashes.size(), kIdListHalf);
    const size_t dhlen = std::min(m.groups.size(), kIdListHalf);
    b[10] = static_cast<uint8_t>(halen);
    b[11] = static_cast<uint8_t>(dhlen);
    std::copy_n(m.hashes.begin(), halen, b.begin() + 12);
    std::copy_n(m.groups.begin(), dhlen, b.begin() + 12 + kIdListHalf);
    return b;
  }
  Bytes operator()(const Challenge& m) const {
    Bytes b = header(kTypeDhchap, kIdChallenge, m.tid, kHeaderBytes + m.c1.size() + m.dhv.size());
    b[6] = static_cast<uint8_t>(m.c1.size());
    b[8] = static_cast<uint8_t>(m.hash);
    b[9] = static_cast<uint8_t>(m.group);
    put16(&b[10], static_cast<uint16_t>(m.dhv.size()));
    put32(&b[12], m.seqnum);
    put_bytes(b, kHeaderBytes, m.c1);
    put_bytes(b, kHeaderBytes + m.c1.size(), m.dhv);
    return b;
  }
  Bytes operator()(const Reply& m) const {
    const size_t hl = m.response.size();
    Bytes b = header(kTypeDhchap, kIdReply, m.tid, kHeaderBytes + 2 * hl + m.dhv.size());
    b[6] = static_cast<uint8_t>(hl);
    b[8] = m.cvalid ? 1 : 0;
    put16(&b[10], static_cast<uint16_t>(m.dhv.size()));
    put32(&b[12], m.seqnum);
    put_bytes(b, kHeaderBytes, m.response);
    // The C2 slot is there even without a challenge (zeros): the DH value
    // always starts after two hash lengths.
    if (m.cvalid) put_bytes(b, kHeaderBytes + hl, BytesView(m.c2).first(std::min(hl, m.c2.size())));
    put_bytes(b, kHeaderBytes + 2 * hl, m.dhv);
    return b;
  }
  Bytes operator()(const Success1& m) const {
    Bytes b = header(kTypeDhchap, kIdSuccess1, m.tid, kHeaderBytes + m.hl);
    b[6] = m.hl;
    b[8] = m.rvalid ? 1 : 0;
    if (m.rvalid)
      put_bytes(b, kHeaderBytes,
                BytesView(m.response).first(std::min<size_t>(m.hl, m.response.size())));
    return b;
  }
  Bytes operator()(const Success2& m) const {
    return header(kTypeDhchap, kIdSuccess2, m.tid, kHeaderBytes);
  }
  Bytes operator()(const Failure& m) const {
    Bytes b =
        header(kTypeCommon, m.from_controller ? kIdFailure1 : kIdFailure2, m.tid, kFailureBytes);
    b[6] = 0x01;  // RESCODE: authentication failure
    b[7] = static_cast<uint8_t>(m.reason);
    return b;
  }
};

Result<Message> decode_negotiate(BytesView d, uint16_t tid) {
  if (d.size() < kNegotiateBytes) return bad(fmt::format("Negotiate of {} bytes", d.size()));
  if (d[7] != 1) return bad(fmt::format("Negotiate with {} protocol descriptors, not 1", d[7]));
  if (d[8] != kAuthIdDhchap) return bad(fmt::format("protocol descriptor AUTHID {}", d[8]));
  const uint8_t halen = d[10], dhlen = d[11];
  if (halen == 0 || halen > kIdListHalf || dhlen == 0 || dhlen > kIdListHalf) {
    return bad(fmt::format("Negotiate lists {} hashes and {} DH groups", halen, dhlen));
  }
  Negotiate m;
  m.tid = tid;
  m.sc_c = d[6];
  m.hashes = take(d, 12, halen);
  m.groups = take(d, 12 + kIdListHalf, dhlen);
  return Message(std::move(m));
}

Result<Message> decode_challenge(BytesView d, uint16_t tid) {
  const uint8_t hl = d[6];
  if (!known_hash(d[8]) || hl != digest_bytes(Hash(d[8]))) {
    return bad(fmt::format("Challenge with hash {} and length {}", d[8], hl));
  }
  if (!known_group(d[9]) || get16(&d[10]) != dh_value_bytes(DhGroup(d[9]))) {
    return bad(
        fmt::format("Challenge with DH group {} and a value of {} bytes", d[9], get16(&d[10])));
  }
  const size_t dhvlen = get16(&d[10]);
  if (d.size() < kHeaderBytes + hl + dhvlen) return bad("Challenge shorter than its fields");
  Challenge m;
  m.tid = tid;
  m.hash = Hash(d[8]);
  m.group = DhGroup(d[9]);
  m.seqnum = get32(&d[12]);
  m.c1 = take(d, kHeaderBytes, hl);
  m.dhv = take(d, kHeaderBytes + hl, dhvlen);
  return Message(std::move(m));
}

Result<Message> decode_reply(BytesView d, uint16_t tid) {
  const uint8_t hl = d[6];
  const uint16_t dhvlen = get16(&d[10]);
  if (!valid_hl(hl) || !valid_dhvlen(dhvlen) || d[8] > 1) {
    return bad(
        fmt::format("Reply with hash length {}, DH value length {}, CVALID {}", hl, dhvlen, d[8]));
  }
  if (d.size() < kHeaderBytes + 2u * hl + dhvlen) return bad("Reply shorter than its fields");
  Reply m;
  m.tid = tid;
  m.cvalid = d[8] == 1;
  m.seqnum = get32(&d[12]);
  m.response = take(d, kHeaderBytes, hl);
  m.c2 = take(d, kHeaderBytes + hl, hl);
  m.dhv = take(d, kHeaderBytes + 2u * hl, dhvlen);
  return Message(std::move(m));
}

Result<Message> decode_success1(BytesView d, uint16_t tid) {
  const uint8_t hl = d[6];
  if (!valid_hl(hl) || d[8] > 1) {
    return bad(fmt::format("Success1 with hash length {}, RVALID {}", hl, d[8]));
  }
  if (d.size() < kHeaderBytes + hl) return bad("Success1 shorter than its hash length");
  Success1 m;
  m.tid = tid;
  m.hl = hl;
  m.rvalid = d[8] == 1;
  if (m.rvalid) m.response = take(d, kHeaderBytes, hl);
  return Message(std::move(m));
}

}  // namespace

Bytes encode(const Message& m) { return std::visit(Encoder{}, m); }

Result<Message> decode(BytesView d) {
  if (d.size() < kFailureBytes) return bad(fmt::format("{} bytes", d.size()));
  const uint8_t type = d[0], id = d[1];
  const uint16_t tid = get16(&d[4]);
  if (type == kTypeCommon) {
    if (id == kIdNegotiate) return decode_negotiate(d, tid);
    if (id == kIdFailure1 || id == kIdFailure2) {
      Failure m;
      m.tid = tid;
      m.from_controller = id == kIdFailure1;
      m.reason = Reason(d[7]);
      return Message(m);
    }
    return bad(fmt::format("unknown common message {:#04x}", id));
  }
  if (type != kTypeDhchap) return bad(fmt::format("unknown auth_type {:#04x}", type));
  if (d.size() < kHeaderBytes) return bad(fmt::format("{} bytes", d.size()));
  switch (id) {
    case kIdChallenge:
      return decode_challenge(d, tid);
    case kIdReply:
      return decode_reply(d, tid);
    case kIdSuccess1:
      return decode_success1(d, tid);
    case kIdSuccess2:
      return Message(Success2{tid});
    default:
      return bad(fmt::format("unknown DH-HMAC-CHAP message {:#04x}", id));
  }
}

}  // namespace kvtier::nvmf::dhchap
