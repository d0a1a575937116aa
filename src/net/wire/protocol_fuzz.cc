// libFuzzer target for the store wire protocol (docs/protocol-store.md).
//
// The first input byte picks a mode:
//   0  the rest is a byte stream for FrameDecoder, fed in varying pieces,
//      some frames routed zero-copy into caller buffers;
//   1  the rest is a descriptor, decoded as every message type;
//   2  the rest is type (u16le), a split byte, descriptor and data, wrapped in
//      a frame with correct CRCs so that the fuzzer gets past the checksums
//      into the header, length and descriptor checks.
// Nothing may crash; anything that decodes must re-encode to the very same
// bytes (the encoding is canonical) and decode again to an equal value.
//
// Build and run (not part of the default build): scripts/fuzz-protocol.sh,
// which lists the sources; docs/protocol-store.md, "Fuzzing".
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "net/wire/protocol.h"

namespace {

using kvtier::ByteView;
using kvtier::MutableByteView;
using kvtier::Status;
using Bytes = std::vector<std::byte>;
namespace net = kvtier::net;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "protocol_fuzz: %s\n", what);
    std::abort();
  }
}

// A frame that decoded: its message must survive encode -> decode unchanged,
// and the encoding must reproduce the frame byte for byte.
void check_frame(const net::FrameHeader& h, ByteView descriptor, ByteView data) {
  auto m = net::decode_message(h, descriptor);
  if (!m.ok()) {
    check(net::protocol_error_of(m.status()) != net::ProtocolError::kNone, "unclassified error");
    return;
  }
  check(net::message_type_of(*m) == h.type, "decoded type differs from header type");
  Bytes original(net::kFrameHeaderSize);
  net::encode_header(
      h, std::span<std::byte, net::kFrameHeaderSize>(original.data(), net::kFrameHeaderSize));
  original.insert(original.end(), descriptor.begin(), descriptor.end());
  original.insert(original.end(), data.begin(), data.end());

  std::span<const ByteView> parts(&data, data.empty() ? 0 : 1);
  auto again = net::encode_message_frame(*m, h.request_id, parts, h.version);
  check(again.ok(), "re-encode of a decoded message failed");
  check(*again == original, "re-encoded frame differs from the original");
  auto f = net::decode_frame(*again);
  check(f.ok(), "re-encoded frame does not decode");
  auto m2 = net::decode_message(f->header, f->descriptor);
  check(m2.ok() && *m2 == *m, "re-decoded message differs");
}

void stream_mode(ByteView in) {
  net::FrameDecoder d;
  size_t pos = 0, step = 0;
  Bytes dest;
  bool routed = false;
  while (pos < in.size()) {
    if (d.state() == net::FrameDecoder::State::kData && !routed) {
      routed = true;
      // Every other frame goes zero-copy into two caller parts.
      if (d.header().request_id % 2 == 1) {
        dest.assign(d.header().data_len, std::byte{0});
        size_t half = dest.size() / 2;
        MutableByteView parts[2] = {MutableByteView(dest).first(half),
                                    MutableByteView(dest).subspan(half)};
        check(d.set_data_destination(parts).ok(), "set_data_destination refused");
      }
    }
    // wanted()/advance() rather than feed(), so that kData is seen before
    // its first byte arrives, as a socket reader sees it.
    MutableByteView w = d.wanted();
    size_t n = std::min<size_t>({in.size() - pos, w.size(), 1 + (step++ * 7) % 29});
    check(n > 0, "decoder wants nothing while not ready");
    std::memcpy(w.data(), in.data() + pos, n);
    Status st = d.advance(n);
    if (!st.ok()) {
      check(net::protocol_error_of(st) != net::ProtocolError::kNone, "unclassified stream error");
      check(d.state() == net::FrameDecoder::State::kFailed, "error without kFailed");
      return;
    }
    pos += n;
    if (d.state() == net::FrameDecoder::State::kReady) {
      net::Frame f = d.take_frame();
      ByteView data = f.data.empty() ? ByteView(dest) : ByteView(f.data);
      if (f.header.data_len == 0) data = {};
      check(data.size() == f.header.data_len, "data size differs from data_len");
      check_frame(f.header, f.descriptor, data);
      dest.clear();
      routed = false;
    }
  }
}

template <size_t I = 0>
void descriptor_mode(ByteView in) {
  if constexpr (I < std::variant_size_v<net::Message>) {
    using M = std::variant_alternative_t<I, net::Message>;
    auto r = M::decode(in);
    if (r.ok()) {
      Bytes again;
      check(r->encode(again).ok(), "re-encode of a decoded descriptor failed");
      check(again.size() == in.size() &&
                (in.empty() || std::memcmp(again.data(), in.data(), in.size()) == 0),
            "re-encoded descriptor differs");
      auto r2 = M::decode(again);
      check(r2.ok() && *r2 == *r, "re-decoded descriptor differs");
      // As a whole frame, with a data section of the implied size.
      if (r->data_bytes() <= (1u << 20)) {
        Bytes data(r->data_bytes(), std::byte{0x5a});
        ByteView part(data);
        std::span<const ByteView> parts(&part, data.empty() ? 0 : 1);
        auto frame = net::encode_message_frame(*r, 42, parts);
        check(frame.ok(), "a decodable descriptor does not frame");
        auto f = net::decode_frame(*frame);
        check(f.ok(), "framed descriptor does not decode");
        check_frame(f->header, f->descriptor, f->data);
      }
    } else {
      check(net::protocol_error_of(r.status()) != net::ProtocolError::kNone,
            "unclassified descriptor error");
    }
    descriptor_mode<I + 1>(in);
  }
}

void framed_mode(ByteView in) {
  if (in.size() < 3) return;
  auto type = static_cast<net::MessageType>(static_cast<uint16_t>(in[0]) |
                                            static_cast<uint16_t>(in[1]) << 8);
  size_t rest = in.size() - 3;
  size_t desc_len = rest * static_cast<size_t>(in[2]) / 255;
  ByteView desc = in.subspan(3, desc_len);
  ByteView data = in.subspan(3 + desc_len);
  Bytes frame;
  std::span<const ByteView> parts(&data, data.empty() ? 0 : 1);
  if (!net::encode_frame_prefix(type, 9, desc, parts, frame).ok()) return;
  frame.insert(frame.end(), data.begin(), data.end());
  auto f = net::decode_frame(frame);
  check(f.ok(), "a frame with correct CRCs and limits does not decode");
  check_frame(f->header, f->descriptor, f->data);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  if (size == 0) return 0;
  ByteView in(reinterpret_cast<const std::byte*>(bytes) + 1, size - 1);
  switch (bytes[0] % 3) {
    case 0:
      stream_mode(in);
      break;
    case 1:
      descriptor_mode(in);
      break;
    default:
      framed_mode(in);
      break;
  }
  return 0;
}
