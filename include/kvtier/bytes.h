// Byte views: non-owning spans over the caller's memory. Every store call
// that moves block bytes takes these, so a block goes between the caller's
// buffer and the store with no copy made on the caller's side.
#pragma once

#include <cstddef>
#include <span>

namespace kvtier {

using ByteView = std::span<const std::byte>;
using MutableByteView = std::span<std::byte>;

inline ByteView as_bytes_view(const void* p, size_t n) {
  return ByteView(static_cast<const std::byte*>(p), n);
}
inline MutableByteView as_mutable_view(void* p, size_t n) {
  return MutableByteView(static_cast<std::byte*>(p), n);
}

}  // namespace kvtier
