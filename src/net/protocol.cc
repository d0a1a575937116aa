// Store wire protocol codec; docs/protocol-store.md is the specification.
//
// Every message's layout is written once, as a fields() function template
// that runs with a Writer (encode) or a Reader (decode), so the two
// directions cannot drift apart, and the limits are enforced identically on
// both sides: an encoder never produces a frame its own decoder rejects.
#include "net/protocol.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <optional>
#include <type_traits>

#include "common/crc32c.h"

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

// ---- Little-endian primitives --------------------------------------------------

void store_le(std::byte* p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
// A key on the wire is hi then lo, each little-endian: on a little-endian
// host with Key128 laid out as {hi, lo}, a key list is copied whole.
constexpr bool kKeysAreWireLayout = std::endian::native == std::endian::little &&
                                    sizeof(kv::Key128) == 16 && offsetof(kv::Key128, hi) == 0 &&
                                    offsetof(kv::Key128, lo) == 8;

uint64_t load_le(const std::byte* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// ---- Writer and Reader -----------------------------------------------------------
//
// Both keep the first error and turn every later call into a no-op, so a
// fields() function is straight-line code without a check per field.

class Writer {
 public:
  explicit Writer(std::vector<std::byte>& out) : out_(out), start_(out.size()) {}

  void u8(const uint8_t& v, const char*) { put(v, 1); }
  void u16(const uint16_t& v, const char*) { put(v, 2); }
  void u32(const uint32_t& v, const char*) { put(v, 4); }
  void u64(const uint64_t& v, const char*) { put(v, 8); }
  void key(const kv::Key128& k, const char*) {
    put(k.hi, 8);
    put(k.lo, 8);
  }
  void boolean(const bool& b, const char*) { put(b ? 1 : 0, 1); }
  template <size_t Bytes, typename E>
  void enumeration(const E& v, uint64_t lo, uint64_t hi, const char* field) {
    auto raw = static_cast<uint64_t>(static_cast<std::underlying_type_t<E>>(v));
    if (raw < lo || raw > hi) {
      return fail(perr(ProtocolError::kBadValue,
                       std::string("cannot encode ") + field + " = " + std::to_string(raw) +
                           ": outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]"));
    }
    put(raw, Bytes);
  }
  void str(const std::string& s, uint32_t max, const char* field) {
    if (!st_.ok()) return;
    if (s.size() > max) {
      return fail(perr(ProtocolError::kStringTooLong, std::string("cannot encode ") + field +
                                                          " of " + std::to_string(s.size()) +
                                                          " bytes: limit " + std::to_string(max)));
    }
    put(s.size(), 2);
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    out_.insert(out_.end(), p, p + s.size());
  }
  template <typename T, typename Fn>
  void items(const std::vector<T>& v, uint32_t max, size_t min_item_bytes, const char* field,
             Fn&& fn) {
    if (!st_.ok()) return;
    if (v.size() > max) {
      return fail(perr(ProtocolError::kCountTooLarge, std::string("cannot encode ") + field +
                                                          " with " + std::to_string(v.size()) +
                                                          " items: limit " + std::to_string(max)));
    }
    put(v.size(), 4);
    // One allocation for the whole list rather than one growth per field.
    out_.reserve(out_.size() + v.size() * min_item_bytes);
    for (const T& x : v) {
      if (!st_.ok()) return;
      fn(const_cast<T&>(x));  // fields() is shared with the Reader; the Writer only reads
    }
  }
  // A list of keys, written in one pass over one resize: a match_prefix of
  // thousands of keys must not pay a vector growth and a call per field.
  void keys(const std::vector<kv::Key128>& v, uint32_t max, const char* field) {
    if (!st_.ok()) return;
    if (v.size() > max) {
      return fail(perr(ProtocolError::kCountTooLarge, std::string("cannot encode ") + field +
                                                          " with " + std::to_string(v.size()) +
                                                          " items: limit " + std::to_string(max)));
    }
    put(v.size(), 4);
    size_t at = out_.size();
    out_.resize(at + v.size() * 16);
    std::byte* p = out_.data() + at;
    if constexpr (kKeysAreWireLayout) {
      // A chain of 8,192 keys is 128 KiB; an empty vector's data() may be null.
      if (!v.empty()) std::memcpy(p, v.data(), v.size() * 16);
      return;
    }
    for (const kv::Key128& k : v) {
      store_le(p, k.hi, 8);
      store_le(p + 8, k.lo, 8);
      p += 16;
    }
  }
  void fail(Status st) {
    if (st_.ok()) st_ = std::move(st);
  }
  bool ok() const { return st_.ok(); }
  Status finish() {
    if (!st_.ok()) out_.resize(start_);  // a rejected encode leaves `out` as it was
    return st_;
  }

 private:
  void put(uint64_t v, size_t n) {
    if (!st_.ok()) return;
    size_t at = out_.size();
    out_.resize(at + n);
    store_le(out_.data() + at, v, n);
  }

  std::vector<std::byte>& out_;
  size_t start_;
  Status st_;
};

class Reader {
 public:
  explicit Reader(ByteView in) : in_(in) {}

  void u8(uint8_t& v, const char* f) {
    if (need(1, f)) v = static_cast<uint8_t>(get(1));
  }
  void u16(uint16_t& v, const char* f) {
    if (need(2, f)) v = static_cast<uint16_t>(get(2));
  }
  void u32(uint32_t& v, const char* f) {
    if (need(4, f)) v = static_cast<uint32_t>(get(4));
  }
  void u64(uint64_t& v, const char* f) {
    if (need(8, f)) v = get(8);
  }
  void key(kv::Key128& k, const char* f) {
    if (!need(16, f)) return;
    k.hi = get(8);
    k.lo = get(8);
  }
  void boolean(bool& b, const char* f) {
    size_t at = pos_;
    if (!need(1, f)) return;
    uint64_t raw = get(1);
    if (raw > 1) return bad_value(f, raw, 0, 1, at);
    b = raw == 1;
  }
  template <size_t Bytes, typename E>
  void enumeration(E& v, uint64_t lo, uint64_t hi, const char* f) {
    size_t at = pos_;
    if (!need(Bytes, f)) return;
    uint64_t raw = get(Bytes);
    if (raw < lo || raw > hi) return bad_value(f, raw, lo, hi, at);
    v = static_cast<E>(static_cast<std::underlying_type_t<E>>(raw));
  }
  void str(std::string& s, uint32_t max, const char* f) {
    size_t at = pos_;
    if (!need(2, f)) return;
    size_t len = get(2);
    if (len > max) {
      return fail(perr(ProtocolError::kStringTooLong,
                       std::string(f) + " at offset " + std::to_string(at) + " has " +
                           std::to_string(len) + " bytes: limit " + std::to_string(max)));
    }
    if (!need(len, f)) return;
    s.assign(reinterpret_cast<const char*>(in_.data() + pos_), len);
    pos_ += len;
  }
  // The count is checked against its limit and against the bytes left
  // (each item takes at least min_item_bytes) before anything is allocated.
  template <typename T, typename Fn>
  void items(std::vector<T>& v, uint32_t max, size_t min_item_bytes, const char* f, Fn&& fn) {
    size_t at = pos_;
    if (!need(4, f)) return;
    uint64_t n = get(4);
    if (n > max) {
      return fail(perr(ProtocolError::kCountTooLarge,
                       std::string(f) + " count " + std::to_string(n) + " at offset " +
                           std::to_string(at) + " exceeds limit " + std::to_string(max)));
    }
    size_t left = in_.size() - pos_;
    if (n * min_item_bytes > left) {
      return fail(perr(ProtocolError::kCountExceedsRemaining,
                       std::string(f) + " count " + std::to_string(n) + " at offset " +
                           std::to_string(at) + " needs at least " +
                           std::to_string(n * min_item_bytes) + " bytes, " + std::to_string(left) +
                           " left"));
    }
    v.clear();
    v.resize(n);
    for (T& x : v) {
      if (!st_.ok()) return;
      fn(x);
    }
  }
  // The Reader side of Writer::keys: the same count checks as items(), then
  // one pass.
  void keys(std::vector<kv::Key128>& v, uint32_t max, const char* f) {
    size_t at = pos_;
    if (!need(4, f)) return;
    uint64_t n = get(4);
    if (n > max) {
      return fail(perr(ProtocolError::kCountTooLarge,
                       std::string(f) + " count " + std::to_string(n) + " at offset " +
                           std::to_string(at) + " exceeds limit " + std::to_string(max)));
    }
    size_t left = in_.size() - pos_;
    if (n * 16 > left) {
      return fail(perr(ProtocolError::kCountExceedsRemaining,
                       std::string(f) + " count " + std::to_string(n) + " at offset " +
                           std::to_string(at) + " needs at least " + std::to_string(n * 16) +
                           " bytes, " + std::to_string(left) + " left"));
    }
    v.resize(n);
    const std::byte* p = in_.data() + pos_;
    if constexpr (kKeysAreWireLayout) {
      if (n > 0) std::memcpy(v.data(), p, n * 16);  // an empty vector's data() may be null
      pos_ += n * 16;
      return;
    }
    for (kv::Key128& k : v) {
      k.hi = load_le(p, 8);
      k.lo = load_le(p + 8, 8);
      p += 16;
    }
    pos_ += n * 16;
  }
  void fail(Status st) {
    if (st_.ok()) st_ = std::move(st);
  }
  bool ok() const { return st_.ok(); }
  Status finish() {
    if (st_.ok() && pos_ != in_.size()) {
      fail(perr(ProtocolError::kTrailingBytes,
                std::to_string(in_.size() - pos_) + " bytes after the last field at offset " +
                    std::to_string(pos_) + " of a " + std::to_string(in_.size()) +
                    "-byte descriptor"));
    }
    return st_;
  }

 private:
  bool need(size_t n, const char* f) {
    if (!st_.ok()) return false;
    if (in_.size() - pos_ < n) {
      fail(perr(ProtocolError::kTruncatedField,
                std::string(f) + " at offset " + std::to_string(pos_) + " needs " +
                    std::to_string(n) + " bytes, " + std::to_string(in_.size() - pos_) + " left"));
      return false;
    }
    return true;
  }
  uint64_t get(size_t n) {
    uint64_t v = load_le(in_.data() + pos_, n);
    pos_ += n;
    return v;
  }
  void bad_value(const char* f, uint64_t raw, uint64_t lo, uint64_t hi, size_t at) {
    fail(perr(ProtocolError::kBadValue, std::string(f) + " = " + std::to_string(raw) +
                                            " at offset " + std::to_string(at) + " is outside [" +
                                            std::to_string(lo) + ", " + std::to_string(hi) + "]"));
  }

  ByteView in_;
  size_t pos_ = 0;
  Status st_;
};

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

// ---- Frames ------------------------------------------------------------------

Status check_version(uint16_t v) {
  if (v >= kProtocolVersionMin && v <= kProtocolVersionMax) return Status::ok_status();
  return perr(ProtocolError::kUnsupportedVersion, "version " + std::to_string(v) + " is outside [" +
                                                      std::to_string(kProtocolVersionMin) + ", " +
                                                      std::to_string(kProtocolVersionMax) + "]");
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

Status verify_descriptor(const FrameHeader& h, ByteView descriptor) {
  if (descriptor.size() != h.descriptor_len) {
    return perr(ProtocolError::kTruncatedFrame,
                "descriptor of " + std::to_string(descriptor.size()) + " bytes, header says " +
                    std::to_string(h.descriptor_len));
  }
  uint32_t got = crc32c(descriptor);
  if (got != h.descriptor_crc) {
    return perr(ProtocolError::kDescriptorCrcMismatch,
                "header says " + hex32(h.descriptor_crc) + ", bytes give " + hex32(got));
  }
  return Status::ok_status();
}

Status verify_data(const FrameHeader& h, ByteView data) {
  if (data.size() != h.data_len) {
    return perr(ProtocolError::kTruncatedFrame, "data of " + std::to_string(data.size()) +
                                                    " bytes, header says " +
                                                    std::to_string(h.data_len));
  }
  uint32_t got = crc32c(data);
  if (got != h.data_crc) {
    return perr(ProtocolError::kDataCrcMismatch,
                "header says " + hex32(h.data_crc) + ", bytes give " + hex32(got));
  }
  return Status::ok_status();
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

// ---- Public: FrameDecoder -------------------------------------------------------------------

FrameDecoder::FrameDecoder(FrameLimits limits) : limits_(limits) {
  limits_.max_descriptor_bytes = std::min(limits_.max_descriptor_bytes, kMaxDescriptorBytes);
  limits_.max_data_bytes = std::min(limits_.max_data_bytes, kMaxDataBytes);
}

Status FrameDecoder::fail(Status st) {
  state_ = State::kFailed;
  error_ = std::move(st);
  // The partial frame is of no use any more; give its memory back now.
  std::vector<std::byte>().swap(descriptor_);
  std::vector<std::byte>().swap(data_);
  dest_.clear();
  return error_;
}

void FrameDecoder::reset() {
  state_ = State::kHeader;
  filled_ = 0;
  header_ = FrameHeader{};
  descriptor_.clear();
  data_.clear();
  dest_.clear();
  dest_part_ = dest_off_ = 0;
  data_crc_ = 0;
}

MutableByteView FrameDecoder::wanted() {
  switch (state_) {
    case State::kHeader:
      return {header_buf_ + filled_, kFrameHeaderSize - filled_};
    case State::kDescriptor:
      return {descriptor_.data() + filled_, descriptor_.size() - filled_};
    case State::kData:
      if (dest_.empty()) {
        // No destination given: the decoder keeps the data itself. data_len
        // was checked against the limit with the header.
        data_.resize(header_.data_len);
        dest_.push_back(MutableByteView(data_));
      }
      while (dest_part_ < dest_.size() && dest_off_ == dest_[dest_part_].size()) {
        ++dest_part_;
        dest_off_ = 0;
      }
      if (dest_part_ == dest_.size()) return {};
      return dest_[dest_part_].subspan(dest_off_);
    case State::kReady:
    case State::kFailed:
      break;
  }
  return {};
}

Status FrameDecoder::advance(size_t n) {
  if (state_ == State::kFailed) return error_;
  if (n == 0) return Status::ok_status();
  MutableByteView w = wanted();
  if (n > w.size()) {
    return fail(Status::invalid_argument("FrameDecoder::advance(" + std::to_string(n) +
                                         ") past the " + std::to_string(w.size()) +
                                         " bytes wanted"));
  }
  switch (state_) {
    case State::kHeader: {
      filled_ += n;
      if (filled_ < kFrameHeaderSize) return Status::ok_status();
      auto h = decode_header(ByteView(header_buf_, kFrameHeaderSize), limits_, min_version_,
                             max_version_);
      if (!h.ok()) return fail(h.status());
      header_ = *h;
      // Allocated only now, after descriptor_len passed its limit.
      descriptor_.resize(header_.descriptor_len);
      filled_ = 0;
      state_ = State::kDescriptor;
      break;
    }
    case State::kDescriptor:
      filled_ += n;
      break;
    case State::kData:
      // CRC while the bytes are still in cache, instead of a second pass.
      data_crc_ = crc32c_extend(data_crc_, w.data(), n);
      dest_off_ += n;
      filled_ += n;
      break;
    case State::kReady:
    case State::kFailed:
      break;
  }
  return settle();
}

Status FrameDecoder::settle() {
  if (state_ == State::kDescriptor && filled_ == descriptor_.size()) {
    Status st = verify_descriptor(header_, descriptor_);
    if (!st.ok()) return fail(std::move(st));
    state_ = State::kData;
    filled_ = 0;
    data_crc_ = 0;
  }
  if (state_ == State::kData && filled_ == header_.data_len) {
    if (data_crc_ != header_.data_crc) {
      return fail(perr(ProtocolError::kDataCrcMismatch, "header says " + hex32(header_.data_crc) +
                                                            ", bytes give " + hex32(data_crc_)));
    }
    state_ = State::kReady;
  }
  return Status::ok_status();
}

Status FrameDecoder::set_data_destination(std::span<const MutableByteView> parts) {
  if (state_ == State::kFailed) return error_;
  if (state_ != State::kData || filled_ != 0) {
    return Status::failed_precondition(
        "set_data_destination: only before the first data byte of a frame");
  }
  uint64_t total = 0;
  for (MutableByteView p : parts) total += p.size();
  if (total != header_.data_len) {
    return Status::invalid_argument("set_data_destination: parts hold " + std::to_string(total) +
                                    " bytes, the frame has " + std::to_string(header_.data_len));
  }
  std::vector<std::byte>().swap(data_);
  dest_.assign(parts.begin(), parts.end());
  dest_part_ = dest_off_ = 0;
  return Status::ok_status();
}

Frame FrameDecoder::take_frame() {
  Frame f;
  if (state_ != State::kReady) return f;
  f.header = header_;
  f.descriptor = std::move(descriptor_);
  f.data = std::move(data_);
  reset();
  return f;
}

Result<size_t> FrameDecoder::feed(ByteView bytes) {
  if (state_ == State::kFailed) return error_;
  size_t used = 0;
  while (used < bytes.size() && state_ != State::kReady) {
    MutableByteView w = wanted();
    size_t n = std::min(w.size(), bytes.size() - used);
    if (n == 0) break;
    std::memcpy(w.data(), bytes.data() + used, n);
    used += n;
    KVTIER_RETURN_IF_ERROR(advance(n));
  }
  return used;
}

Result<Frame> decode_frame(ByteView bytes, const FrameLimits& limits) {
  FrameDecoder d(limits);
  auto used = d.feed(bytes);
  if (!used.ok()) return used.status();
  if (d.state() != FrameDecoder::State::kReady) {
    return perr(ProtocolError::kTruncatedFrame,
                "stream ended after " + std::to_string(bytes.size()) + " bytes, inside a frame");
  }
  if (*used != bytes.size()) {
    return perr(ProtocolError::kTrailingFrameBytes, std::to_string(bytes.size() - *used) +
                                                        " bytes after a " + std::to_string(*used) +
                                                        "-byte frame");
  }
  return d.take_frame();
}

}  // namespace kvtier::net
