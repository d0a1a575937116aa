// Byte buffers. AlignedBuffer owns memory aligned for O_DIRECT I/O; ByteView and
// MutableByteView are non-owning views that never free what they point at.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>

#include "kvtier/bytes.h"

namespace kvtier {

constexpr size_t kDirectIoAlignment = 4096;

constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
constexpr uint64_t align_down(uint64_t v, uint64_t a) { return v / a * a; }
constexpr bool is_aligned(uint64_t v, uint64_t a) { return v % a == 0; }
inline bool is_aligned_ptr(const void* p, uint64_t a) {
  return reinterpret_cast<uintptr_t>(p) % a == 0;
}

// An owning, aligned, zero-initialised-on-request heap buffer. Move-only.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Allocates `size` bytes aligned to `alignment` (a power of two). Large
  // buffers use huge pages when the kernel has them (madvise).
  explicit AlignedBuffer(size_t size, size_t alignment = kDirectIoAlignment, bool zero = false);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept { *this = std::move(other); }
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  MutableByteView view() { return {data_, size_}; }
  ByteView view() const { return {data_, size_}; }
  MutableByteView subview(size_t off, size_t len) { return {data_ + off, len}; }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // non-zero when the memory came from mmap
};

}  // namespace kvtier
