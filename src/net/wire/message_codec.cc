// Store wire protocol: the messages' codec; docs/protocol-store.md is the
// specification.
//
// Every message's layout is written once, as a fields() function template
// that runs with a Writer (encode) or a Reader (decode), so the two
// directions cannot drift apart, and the limits are enforced identically on
// both sides: an encoder never produces a frame its own decoder rejects.
#include <algorithm>
#include <cstddef>
#include <optional>
#include <type_traits>
#include <variant>

#include "common/crc32c.h"
#include "net/wire/codec_detail.h"
#include "net/wire/protocol.h"

namespace kvtier::net {

using detail::check_version;
using detail::hex32;
using detail::perr;
using detail::Reader;
using detail::Writer;

namespace {

// ---- Field layouts (docs/protocol-store.md, "Messages") -------------------------

constexpr uint64_t kMaxTier = static_cast<uint64_t>(kv::Tier::kDisk);
constexpr uint64_t kMaxMiss = static_cast<uint64_t>(kv::MissReason::kCount) - 1;
constexpr uint64_t kMaxRefuse = static_cast<uint64_t>(kv::RefuseReason::kCount) - 1;
constexpr uint64_t kMaxOutcome = static_cast<uint64_t>(kv::PutResult::Outcome::kRefused);
constexpr size_t kKeyBytes = 16;

// The wire values are these enums' values: a renumbering in kv must show
// up here as a build failure, not as a silent protocol change.
static_assert(static_cast<int>(kv::Tier::kNone) == 0 && static_cast<int>(kv::Tier::kRam) == 1 &&
              static_cast<int>(kv::Tier::kDisk) == 2);
static_assert(static_cast<int>(kv::PutResult::Outcome::kStored) == 0 &&
              static_cast<int>(kv::PutResult::Outcome::kDeduplicated) == 1 &&
              static_cast<int>(kv::PutResult::Outcome::kRefused) == 2);
static_assert(static_cast<int>(kv::MissReason::kNotFound) == 1 &&
              static_cast<int>(kv::MissReason::kTimeout) == 6 && kMaxMiss == 6);
static_assert(static_cast<int>(kv::RefuseReason::kNoSpace) == 1 &&
              static_cast<int>(kv::RefuseReason::kAdmission) == 4 &&
              static_cast<int>(kv::RefuseReason::kQuota) == 5 && kMaxRefuse == 5);
static_assert(static_cast<int>(StatusCode::kInvalidArgument) == 1 &&
              static_cast<int>(StatusCode::kInternal) == 11);
static_assert(static_cast<int>(kv::KeyScheme::kXxh3_128) == 1 &&
              static_cast<int>(kv::KeyScheme::kSha256) == 2);

template <typename Io>
void put_outcome(Io& io, PutOutcome& o) {
  io.template enumeration<1>(o.outcome, 0, kMaxOutcome, "put.outcome");
  io.template enumeration<1>(o.tier, 0, kMaxTier, "put.tier");
  io.template enumeration<1>(o.refuse, 0, kMaxRefuse, "put.refuse");
}
constexpr size_t kPutOutcomeBytes = 3;

template <typename Io>
void get_outcome(Io& io, GetOutcome& o) {
  io.boolean(o.hit, "get.hit");
  io.template enumeration<1>(o.tier, 0, kMaxTier, "get.tier");
  io.template enumeration<1>(o.miss, 0, kMaxMiss, "get.miss");
  io.u32(o.length, "get.length");
}
constexpr size_t kGetOutcomeBytes = 7;

template <typename Io>
void key_length(Io& io, KeyLength& kl) {
  io.key(kl.key, "item.key");
  io.u32(kl.length, "item.length");
}
constexpr size_t kKeyLengthBytes = kKeyBytes + 4;

template <typename Io>
void key_list(Io& io, std::vector<kv::Key128>& keys) {
  io.keys(keys, kMaxMatchKeys, "keys");
}

template <typename Io>
void fields(Io& io, HelloRequest& m) {
  io.u16(m.min_version, "min_version");
  io.u16(m.max_version, "max_version");
  io.str(m.client_name, kMaxNameBytes, "client_name");
  io.str(m.auth_token, kMaxStringBytes, "auth_token");
}
template <typename Io>
void fields(Io& io, HelloResponse& m) {
  io.u16(m.version, "version");
  io.str(m.server_name, kMaxNameBytes, "server_name");
  io.u32(m.limits.max_object_bytes, "max_object_bytes");
  io.u32(m.limits.max_batch, "max_batch");
  io.u32(m.limits.max_match_keys, "max_match_keys");
  io.u32(m.limits.max_descriptor_bytes, "max_descriptor_bytes");
  io.u32(m.limits.max_data_bytes, "max_data_bytes");
}
template <typename Io>
void fields(Io& io, RegisterNamespaceRequest& m) {
  // The order of Namespace's canonical encoding (docs/block-keys.md).
  kv::Namespace& ns = m.ns;
  io.str(ns.model_id, kMaxStringBytes, "model_id");
  io.str(ns.model_revision, kMaxStringBytes, "model_revision");
  io.str(ns.tokenizer_id, kMaxStringBytes, "tokenizer_id");
  io.str(ns.kv_dtype, kMaxStringBytes, "kv_dtype");
  io.str(ns.kv_layout, kMaxStringBytes, "kv_layout");
  io.u32(ns.tokens_per_block, "tokens_per_block");
  io.u32(ns.tp_size, "tp_size");
  io.u32(ns.tp_rank, "tp_rank");
  io.u32(ns.pp_size, "pp_size");
  io.u32(ns.pp_rank, "pp_rank");
  io.str(ns.tenant_salt, kMaxStringBytes, "tenant_salt");
  // Any value passes here; Namespace::validate() on the server judges it.
  io.template enumeration<1>(ns.scheme, 0, 255, "scheme");
}
template <typename Io>
void fields(Io& io, RegisterNamespaceResponse& m) {
  io.u16(m.handle, "handle");
}
template <typename Io>
void fields(Io& io, PutRequest& m) {
  io.u16(m.ns, "ns");
  io.key(m.key, "key");
  io.u32(m.length, "length");
}
template <typename Io>
void fields(Io& io, PutResponse& m) {
  put_outcome(io, m.result);
}
template <typename Io>
void fields(Io& io, GetRequest& m) {
  io.u16(m.ns, "ns");
  io.key(m.key, "key");
  io.u32(m.buffer_bytes, "buffer_bytes");
}
template <typename Io>
void fields(Io& io, GetResponse& m) {
  get_outcome(io, m.result);
}
template <typename Io>
void fields(Io& io, BatchPutRequest& m) {
  io.u16(m.ns, "ns");
  io.items(m.items, kMaxBatch, kKeyLengthBytes, "items",
           [&](KeyLength& kl) { key_length(io, kl); });
}
template <typename Io>
void fields(Io& io, BatchPutResponse& m) {
  io.items(m.results, kMaxBatch, kPutOutcomeBytes, "results",
           [&](PutOutcome& o) { put_outcome(io, o); });
}
template <typename Io>
void fields(Io& io, BatchGetRequest& m) {
  io.u16(m.ns, "ns");
  io.items(m.items, kMaxBatch, kKeyLengthBytes, "items",
           [&](KeyLength& kl) { key_length(io, kl); });
}
template <typename Io>
void fields(Io& io, BatchGetResponse& m) {
  io.items(m.results, kMaxBatch, kGetOutcomeBytes, "results",
           [&](GetOutcome& o) { get_outcome(io, o); });
}
template <typename Io>
void fields(Io& io, MatchPrefixRequest& m) {
  io.u16(m.ns, "ns");
  key_list(io, m.keys);
}
template <typename Io>
void fields(Io& io, MatchPrefixResponse& m) {
  // Only present blocks are listed, so kNone is not a valid tier here.
  io.items(m.tiers, kMaxMatchKeys, 1, "tiers",
           [&](kv::Tier& t) { io.template enumeration<1>(t, 1, kMaxTier, "tier"); });
}
template <typename Io>
void fields(Io& io, RemoveRequest& m) {
  io.u16(m.ns, "ns");
  io.key(m.key, "key");
}
template <typename Io>
void fields(Io& io, RemoveResponse& m) {
  io.boolean(m.removed, "removed");
}
template <typename Io>
void fields(Io& io, PinRequest& m) {
  io.u16(m.ns, "ns");
  io.u64(m.ttl_ms, "ttl_ms");
  key_list(io, m.keys);
}
template <typename Io>
void fields(Io& io, PinResponse& m) {
  io.u32(m.pinned, "pinned");
}
template <typename Io>
void fields(Io& io, UnpinRequest& m) {
  io.u16(m.ns, "ns");
  key_list(io, m.keys);
}
template <typename Io>
void fields(Io& io, UnpinResponse& m) {
  io.u32(m.unpinned, "unpinned");
}
template <typename Io>
void fields(Io& io, StatsRequest& m) {
  io.template enumeration<1>(m.format, 1, 2, "format");
}
template <typename Io>
void fields(Io&, ShmOfferRequest&) {}
template <typename Io>
void fields(Io& io, ShmOfferResponse& m) {
  io.str(m.socket_name, kMaxNameBytes, "socket_name");
  io.str(m.host_id, kMaxNameBytes, "host_id");
  io.key(m.nonce, "nonce");
  io.u64(m.max_area_bytes, "max_area_bytes");
}
template <typename Io>
void fields(Io& io, ShmPutRequest& m) {
  io.u16(m.ns, "ns");
  io.key(m.key, "key");
  io.u64(m.offset, "offset");
  io.u32(m.length, "length");
}
template <typename Io>
void fields(Io& io, ShmPutResponse& m) {
  put_outcome(io, m.result);
}
// ShmGet and ShmLeaseGet requests share their fields.
template <typename Io, typename M>
void shm_get_fields(Io& io, M& m) {
  io.u16(m.ns, "ns");
  io.key(m.key, "key");
  io.u64(m.offset, "offset");
  io.u32(m.buffer_bytes, "buffer_bytes");
}
template <typename Io>
void fields(Io& io, ShmGetRequest& m) {
  shm_get_fields(io, m);
}
template <typename Io>
void fields(Io& io, ShmGetResponse& m) {
  get_outcome(io, m.result);
}
template <typename Io>
void lease_list(Io& io, std::vector<uint32_t>& leases, const char* name) {
  io.items(leases, kMaxShmReleases, 4, name, [&](uint32_t& l) { io.u32(l, "lease"); });
}
template <typename Io>
void fields(Io& io, ShmLeaseGetRequest& m) {
  shm_get_fields(io, m);
  lease_list(io, m.release, "release");
}
template <typename Io>
void fields(Io& io, ShmLeaseGetResponse& m) {
  get_outcome(io, m.result);
  io.template enumeration<1>(m.placement, 0, static_cast<uint64_t>(ShmPlacement::kArena),
                             "placement");
  io.u64(m.arena_offset, "arena_offset");
  io.u32(m.lease, "lease");
}
template <typename Io>
void fields(Io& io, ShmReleaseRequest& m) {
  lease_list(io, m.leases, "leases");
}
template <typename Io>
void fields(Io& io, StatsResponse& m) {
  io.items(m.counters, kMaxStatsCounters, 2 + 8, "counters", [&](StatCounter& c) {
    io.str(c.name, kMaxNameBytes, "counter.name");
    io.u64(c.value, "counter.value");
  });
  io.u32(m.json_bytes, "json_bytes");
}
template <typename Io>
void fields(Io& io, ErrorResponse& m) {
  io.template enumeration<2>(m.code, 1, static_cast<uint64_t>(StatusCode::kInternal), "code");
  io.str(m.message, kMaxStringBytes, "message");
}

// ---- Rules across fields ---------------------------------------------------------
//
// Checked after decoding and before encoding.

template <typename M>
Status check(const M&) {
  return Status::ok_status();
}

Status bad_value(const std::string& detail) { return perr(ProtocolError::kBadValue, detail); }

Status check_data_bytes(uint64_t n, const char* what) {
  if (n <= kMaxDataBytes) return Status::ok_status();
  return perr(ProtocolError::kDataTooLarge, std::string(what) + " add up to " + std::to_string(n) +
                                                " data bytes: limit " +
                                                std::to_string(kMaxDataBytes));
}

Status check_get_outcome(const GetOutcome& o) {
  // A miss carries no bytes; otherwise a reader would take garbage as a block.
  if (!o.hit && o.length != 0) {
    return bad_value("a miss with length " + std::to_string(o.length));
  }
  return Status::ok_status();
}

Status check(const HelloRequest& m) {
  if (m.min_version == 0 || m.min_version > m.max_version) {
    return bad_value("version range [" + std::to_string(m.min_version) + ", " +
                     std::to_string(m.max_version) + "] is empty or starts at 0");
  }
  return Status::ok_status();
}
Status check(const HelloResponse& m) {
  if (m.version == 0) return bad_value("chosen version 0");
  const ServerLimits& l = m.limits;
  if (l.max_object_bytes > kMaxDataBytes || l.max_batch > kMaxBatch ||
      l.max_match_keys > kMaxMatchKeys || l.max_descriptor_bytes > kMaxDescriptorBytes ||
      l.max_data_bytes > kMaxDataBytes) {
    return bad_value("server limits exceed the protocol's hard limits");
  }
  return Status::ok_status();
}
Status check(const PutRequest& m) { return check_data_bytes(m.length, "put length"); }
Status check(const GetResponse& m) {
  KVTIER_RETURN_IF_ERROR(check_get_outcome(m.result));
  return check_data_bytes(m.result.length, "get length");
}
Status check(const BatchPutRequest& m) { return check_data_bytes(m.data_bytes(), "item lengths"); }
Status check(const BatchGetResponse& m) {
  for (const GetOutcome& o : m.results) KVTIER_RETURN_IF_ERROR(check_get_outcome(o));
  return check_data_bytes(m.data_bytes(), "hit lengths");
}
Status check(const ShmPutRequest& m) { return check_data_bytes(m.length, "shm put length"); }
Status check(const ShmGetResponse& m) {
  KVTIER_RETURN_IF_ERROR(check_get_outcome(m.result));
  return check_data_bytes(m.result.length, "shm get length");
}
Status check(const ShmLeaseGetResponse& m) {
  KVTIER_RETURN_IF_ERROR(check_get_outcome(m.result));
  KVTIER_RETURN_IF_ERROR(check_data_bytes(m.result.length, "shm lease get length"));
  // A hit says where its bytes are; a miss names no place and no lease.
  if (m.result.hit != (m.placement != ShmPlacement::kNone)) {
    return bad_value("placement " + std::to_string(static_cast<int>(m.placement)) + " for a " +
                     (m.result.hit ? "hit" : "miss"));
  }
  if (m.placement != ShmPlacement::kArena && (m.arena_offset != 0 || m.lease != 0)) {
    return bad_value("arena_offset or lease set on a block that is not leased");
  }
  return Status::ok_status();
}
Status check(const StatsResponse& m) { return check_data_bytes(m.json_bytes, "json_bytes"); }

template <typename M>
Status encode_message(const M& m, std::vector<std::byte>& out) {
  KVTIER_RETURN_IF_ERROR(check(m));
  Writer w(out);
  fields(w, const_cast<M&>(m));  // the Writer only reads
  return w.finish();
}

template <typename M>
Result<M> decode_descriptor(ByteView descriptor) {
  M m;
  Reader r(descriptor);
  fields(r, m);
  KVTIER_RETURN_IF_ERROR(r.finish());
  KVTIER_RETURN_IF_ERROR(check(m));
  return m;
}

// The frame whose descriptor already sits in out[at + kFrameHeaderSize, end):
// checks it and writes its header at `at`; on error truncates out to `at`.
Status finish_frame(MessageType type, uint64_t request_id, std::span<const ByteView> data,
                    std::vector<std::byte>& out, size_t at, uint16_t version,
                    std::optional<uint32_t> known_data_crc = std::nullopt) {
  auto fail = [&](Status st) {
    out.resize(at);
    return st;
  };
  Status st = check_version(version);
  if (!st.ok()) return fail(std::move(st));
  if (!is_known_message_type(static_cast<uint16_t>(type))) {
    return fail(perr(ProtocolError::kUnknownType,
                     "cannot encode type " + hex32(static_cast<uint16_t>(type))));
  }
  size_t desc_len = out.size() - at - kFrameHeaderSize;
  if (desc_len > kMaxDescriptorBytes) {
    return fail(perr(ProtocolError::kDescriptorTooLarge,
                     "cannot encode a " + std::to_string(desc_len) + "-byte descriptor: limit " +
                         std::to_string(kMaxDescriptorBytes)));
  }
  uint64_t data_len = 0;
  for (ByteView part : data) data_len += part.size();
  if (data_len > kMaxDataBytes) {
    return fail(perr(ProtocolError::kDataTooLarge, "cannot encode " + std::to_string(data_len) +
                                                       " data bytes: limit " +
                                                       std::to_string(kMaxDataBytes)));
  }
  if (data_len > 0 && !message_type_carries_data(type)) {
    return fail(perr(ProtocolError::kUnexpectedData,
                     std::string(message_type_name(type)) + " has no data section"));
  }
  uint32_t data_crc = 0;
  if (known_data_crc) {
    data_crc = *known_data_crc;
  } else {
    for (ByteView part : data) data_crc = crc32c_extend(data_crc, part.data(), part.size());
  }

  FrameHeader h;
  h.version = version;
  h.type = type;
  h.flags = 0;
  h.descriptor_len = static_cast<uint32_t>(desc_len);
  h.request_id = request_id;
  h.data_len = static_cast<uint32_t>(data_len);
  h.descriptor_crc = crc32c(out.data() + at + kFrameHeaderSize, desc_len);
  h.data_crc = data_crc;
  encode_header(h, std::span<std::byte, kFrameHeaderSize>(out.data() + at, kFrameHeaderSize));
  return Status::ok_status();
}

template <typename M>
Result<Message> decode_as_message(ByteView descriptor) {
  auto m = decode_descriptor<M>(descriptor);
  if (!m.ok()) return m.status();
  return Message(std::move(*m));
}

}  // namespace

// ---- Public: messages -------------------------------------------------------------

#define KVTIER_NET_DEFINE_CODEC(Name)                                                           \
  Status Name::encode(std::vector<std::byte>& out) const { return encode_message(*this, out); } \
  Result<Name> Name::decode(ByteView descriptor) { return decode_descriptor<Name>(descriptor); }

KVTIER_NET_DEFINE_CODEC(HelloRequest)
KVTIER_NET_DEFINE_CODEC(HelloResponse)
KVTIER_NET_DEFINE_CODEC(RegisterNamespaceRequest)
KVTIER_NET_DEFINE_CODEC(RegisterNamespaceResponse)
KVTIER_NET_DEFINE_CODEC(PutRequest)
KVTIER_NET_DEFINE_CODEC(PutResponse)
KVTIER_NET_DEFINE_CODEC(GetRequest)
KVTIER_NET_DEFINE_CODEC(GetResponse)
KVTIER_NET_DEFINE_CODEC(BatchPutRequest)
KVTIER_NET_DEFINE_CODEC(BatchPutResponse)
KVTIER_NET_DEFINE_CODEC(BatchGetRequest)
KVTIER_NET_DEFINE_CODEC(BatchGetResponse)
KVTIER_NET_DEFINE_CODEC(MatchPrefixRequest)
KVTIER_NET_DEFINE_CODEC(MatchPrefixResponse)
KVTIER_NET_DEFINE_CODEC(RemoveRequest)
KVTIER_NET_DEFINE_CODEC(RemoveResponse)
KVTIER_NET_DEFINE_CODEC(PinRequest)
KVTIER_NET_DEFINE_CODEC(PinResponse)
KVTIER_NET_DEFINE_CODEC(UnpinRequest)
KVTIER_NET_DEFINE_CODEC(UnpinResponse)
KVTIER_NET_DEFINE_CODEC(StatsRequest)
KVTIER_NET_DEFINE_CODEC(StatsResponse)
KVTIER_NET_DEFINE_CODEC(ShmOfferRequest)
KVTIER_NET_DEFINE_CODEC(ShmOfferResponse)
KVTIER_NET_DEFINE_CODEC(ShmPutRequest)
KVTIER_NET_DEFINE_CODEC(ShmPutResponse)
KVTIER_NET_DEFINE_CODEC(ShmGetRequest)
KVTIER_NET_DEFINE_CODEC(ShmGetResponse)
KVTIER_NET_DEFINE_CODEC(ShmLeaseGetRequest)
KVTIER_NET_DEFINE_CODEC(ShmLeaseGetResponse)
KVTIER_NET_DEFINE_CODEC(ShmReleaseRequest)
KVTIER_NET_DEFINE_CODEC(ErrorResponse)
#undef KVTIER_NET_DEFINE_CODEC

bool operator==(const RegisterNamespaceRequest& a, const RegisterNamespaceRequest& b) {
  const kv::Namespace& x = a.ns;
  const kv::Namespace& y = b.ns;
  return x.model_id == y.model_id && x.model_revision == y.model_revision &&
         x.tokenizer_id == y.tokenizer_id && x.kv_dtype == y.kv_dtype &&
         x.kv_layout == y.kv_layout && x.tokens_per_block == y.tokens_per_block &&
         x.tp_size == y.tp_size && x.tp_rank == y.tp_rank && x.pp_size == y.pp_size &&
         x.pp_rank == y.pp_rank && x.tenant_salt == y.tenant_salt && x.scheme == y.scheme;
}

uint64_t BatchPutRequest::data_bytes() const {
  uint64_t n = 0;
  for (const KeyLength& kl : items) n += kl.length;
  return n;
}

uint64_t BatchGetResponse::data_bytes() const {
  uint64_t n = 0;
  for (const GetOutcome& o : results) n += o.length;
  return n;
}

kv::MatchResult MatchPrefixResponse::to_result() const {
  kv::MatchResult r;
  r.blocks = tiers.size();
  for (kv::Tier t : tiers) (t == kv::Tier::kRam ? r.ram_blocks : r.disk_blocks)++;
  r.tiers = tiers;
  return r;
}

ErrorResponse ErrorResponse::from_status(const Status& st) {
  ErrorResponse e;
  e.code = st.ok() ? StatusCode::kInternal : st.code();
  e.message = st.message();
  if (e.message.size() > kMaxStringBytes) {
    size_t cut = kMaxStringBytes;
    // Back off to a UTF-8 character boundary so the text stays valid.
    while (cut > 0 && (static_cast<unsigned char>(e.message[cut]) & 0xC0) == 0x80) --cut;
    e.message.resize(cut);
  }
  return e;
}

MessageType message_type_of(const Message& m) {
  return std::visit([](const auto& x) { return std::decay_t<decltype(x)>::kType; }, m);
}

// ---- Public: frames ---------------------------------------------------------------------

Status encode_frame_prefix(MessageType type, uint64_t request_id, ByteView descriptor,
                           std::span<const ByteView> data, std::vector<std::byte>& out,
                           uint16_t version) {
  size_t at = out.size();
  if (descriptor.size() > kMaxDescriptorBytes) {
    return perr(ProtocolError::kDescriptorTooLarge,
                "cannot encode a " + std::to_string(descriptor.size()) +
                    "-byte descriptor: limit " + std::to_string(kMaxDescriptorBytes));
  }
  out.resize(at + kFrameHeaderSize);
  out.insert(out.end(), descriptor.begin(), descriptor.end());
  return finish_frame(type, request_id, data, out, at, version);
}

namespace {
Status encode_message_prefix_impl(const Message& msg, uint64_t request_id,
                                  std::span<const ByteView> data, std::vector<std::byte>& out,
                                  uint16_t version, std::optional<uint32_t> data_crc) {
  size_t at = out.size();
  uint64_t data_len = 0;
  for (ByteView part : data) data_len += part.size();
  return std::visit(
      [&](const auto& m) -> Status {
        using M = std::decay_t<decltype(m)>;
        // The descriptor is encoded in place after room for the header, so
        // it is never copied.
        out.resize(at + kFrameHeaderSize);
        Status st = m.encode(out);
        if (!st.ok()) {
          out.resize(at);
          return st;
        }
        if (data_len != m.data_bytes()) {
          out.resize(at);
          return perr(ProtocolError::kDataLengthMismatch,
                      std::string(message_type_name(M::kType)) + " implies " +
                          std::to_string(m.data_bytes()) + " data bytes, " +
                          std::to_string(data_len) + " given");
        }
        return finish_frame(M::kType, request_id, data, out, at, version, data_crc);
      },
      msg);
}
}  // namespace

Status encode_message_prefix(const Message& msg, uint64_t request_id,
                             std::span<const ByteView> data, std::vector<std::byte>& out,
                             uint16_t version) {
  return encode_message_prefix_impl(msg, request_id, data, out, version, std::nullopt);
}

Status encode_message_prefix_with_data_crc(const Message& msg, uint64_t request_id,
                                           std::span<const ByteView> data, uint32_t data_crc,
                                           std::vector<std::byte>& out, uint16_t version) {
  return encode_message_prefix_impl(msg, request_id, data, out, version, data_crc);
}

Result<std::vector<std::byte>> encode_message_frame(const Message& msg, uint64_t request_id,
                                                    std::span<const ByteView> data,
                                                    uint16_t version) {
  std::vector<std::byte> out;
  KVTIER_RETURN_IF_ERROR(encode_message_prefix(msg, request_id, data, out, version));
  for (ByteView part : data) out.insert(out.end(), part.begin(), part.end());
  return out;
}

Result<Message> decode_message(const FrameHeader& h, ByteView descriptor) {
  Result<Message> m = Status::internal("unreachable");
  switch (h.type) {
#define KVTIER_NET_CASE(Name)                \
  case MessageType::k##Name:                 \
    m = decode_as_message<Name>(descriptor); \
    break;
    KVTIER_NET_CASE(HelloRequest)
    KVTIER_NET_CASE(HelloResponse)
    KVTIER_NET_CASE(RegisterNamespaceRequest)
    KVTIER_NET_CASE(RegisterNamespaceResponse)
    KVTIER_NET_CASE(PutRequest)
    KVTIER_NET_CASE(PutResponse)
    KVTIER_NET_CASE(GetRequest)
    KVTIER_NET_CASE(GetResponse)
    KVTIER_NET_CASE(BatchPutRequest)
    KVTIER_NET_CASE(BatchPutResponse)
    KVTIER_NET_CASE(BatchGetRequest)
    KVTIER_NET_CASE(BatchGetResponse)
    KVTIER_NET_CASE(MatchPrefixRequest)
    KVTIER_NET_CASE(MatchPrefixResponse)
    KVTIER_NET_CASE(RemoveRequest)
    KVTIER_NET_CASE(RemoveResponse)
    KVTIER_NET_CASE(PinRequest)
    KVTIER_NET_CASE(PinResponse)
    KVTIER_NET_CASE(UnpinRequest)
    KVTIER_NET_CASE(UnpinResponse)
    KVTIER_NET_CASE(StatsRequest)
    KVTIER_NET_CASE(StatsResponse)
    KVTIER_NET_CASE(ShmOfferRequest)
    KVTIER_NET_CASE(ShmOfferResponse)
    KVTIER_NET_CASE(ShmPutRequest)
    KVTIER_NET_CASE(ShmPutResponse)
    KVTIER_NET_CASE(ShmGetRequest)
    KVTIER_NET_CASE(ShmGetResponse)
    KVTIER_NET_CASE(ShmLeaseGetRequest)
    KVTIER_NET_CASE(ShmLeaseGetResponse)
    KVTIER_NET_CASE(ShmReleaseRequest)
    KVTIER_NET_CASE(ErrorResponse)
#undef KVTIER_NET_CASE
    default:
      return perr(ProtocolError::kUnknownType,
                  "message type " + hex32(static_cast<uint16_t>(h.type)));
  }
  if (!m.ok()) return m;
  uint64_t implied = std::visit([](const auto& x) { return x.data_bytes(); }, *m);
  if (implied != h.data_len) {
    return perr(ProtocolError::kDataLengthMismatch,
                std::string(message_type_name(h.type)) + " descriptor implies " +
                    std::to_string(implied) + " data bytes, header says " +
                    std::to_string(h.data_len));
  }
  return m;
}

}  // namespace kvtier::net
