// Internals of the store wire codec, shared by its files (protocol.cc,
// message_codec.cc, frame_decoder.cc) and by nothing else: error helpers,
// little-endian primitives, and the Writer and Reader that every message's
// fields() runs with.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "net/wire/protocol.h"

namespace kvtier::net::detail {

// A protocol error as a Status: the error's name, then `detail`.
Status perr(ProtocolError e, const std::string& detail);
std::string hex32(uint32_t v);
// A version this build speaks, or kUnsupportedVersion.
Status check_version(uint16_t v);

// ---- Little-endian primitives --------------------------------------------------

inline void store_le(std::byte* p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
// A key on the wire is hi then lo, each little-endian: on a little-endian
// host with Key128 laid out as {hi, lo}, a key list is copied whole.
constexpr bool kKeysAreWireLayout = std::endian::native == std::endian::little &&
                                    sizeof(kv::Key128) == 16 && offsetof(kv::Key128, hi) == 0 &&
                                    offsetof(kv::Key128, lo) == 8;

inline uint64_t load_le(const std::byte* p, size_t n) {
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
    if (!length_fits(s.size(), max, ProtocolError::kStringTooLong, field, "of", "bytes")) return;
    put(s.size(), 2);
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    out_.insert(out_.end(), p, p + s.size());
  }
  template <typename T, typename Fn>
  void items(const std::vector<T>& v, uint32_t max, size_t min_item_bytes, const char* field,
             Fn&& fn) {
    if (!length_fits(v.size(), max, ProtocolError::kCountTooLarge, field, "with", "items")) return;
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
    if (!length_fits(v.size(), max, ProtocolError::kCountTooLarge, field, "with", "items")) return;
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
  // False (and the encode failed) after an earlier failure or when a string or
  // list of `size` `unit` is over its field's limit ("cannot encode keys with
  // 9000 items: limit 8192").
  bool length_fits(size_t size, uint32_t max, ProtocolError error, const char* field,
                   const char* preposition, const char* unit) {
    if (!st_.ok()) return false;
    if (size <= max) return true;
    fail(perr(error, std::string("cannot encode ") + field + " " + preposition + " " +
                         std::to_string(size) + " " + unit + ": limit " + std::to_string(max)));
    return false;
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
  // Reads a 4-byte item count and checks it against its limit and against
  // the bytes left (each item takes at least min_item_bytes), so that nothing
  // is allocated for a count the message cannot hold. False when the reader
  // has failed.
  bool count(uint32_t max, size_t min_item_bytes, const char* f, uint64_t& n) {
    size_t at = pos_;
    if (!need(4, f)) return false;
    n = get(4);
    if (n > max) {
      fail(perr(ProtocolError::kCountTooLarge, std::string(f) + " count " + std::to_string(n) +
                                                   " at offset " + std::to_string(at) +
                                                   " exceeds limit " + std::to_string(max)));
      return false;
    }
    size_t left = in_.size() - pos_;
    if (n * min_item_bytes > left) {
      fail(perr(ProtocolError::kCountExceedsRemaining,
                std::string(f) + " count " + std::to_string(n) + " at offset " +
                    std::to_string(at) + " needs at least " + std::to_string(n * min_item_bytes) +
                    " bytes, " + std::to_string(left) + " left"));
      return false;
    }
    return true;
  }
  template <typename T, typename Fn>
  void items(std::vector<T>& v, uint32_t max, size_t min_item_bytes, const char* f, Fn&& fn) {
    uint64_t n = 0;
    if (!count(max, min_item_bytes, f, n)) return;
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
    uint64_t n = 0;
    if (!count(max, 16, f, n)) return;
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

}  // namespace kvtier::net::detail
