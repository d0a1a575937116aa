#include "common/buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace kvtier {

namespace {
constexpr size_t kMmapThreshold = 2u << 20;
}

AlignedBuffer::AlignedBuffer(size_t size, size_t alignment, bool zero) : size_(size) {
  if (size == 0) return;
  if (size >= kMmapThreshold && alignment <= 4096) {
    // mmap gives page-aligned, already-zero memory and lets us ask for THP.
    size_t len = align_up(size, 2u << 20);
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    madvise(p, len, MADV_HUGEPAGE);
    data_ = static_cast<std::byte*>(p);
    mapped_ = len;
    if (zero) std::memset(data_, 0, size);  // already zero: this faults the pages in
    return;
  }
  void* p = std::aligned_alloc(alignment, align_up(size, alignment));
  if (p == nullptr) throw std::bad_alloc();
  data_ = static_cast<std::byte*>(p);
  if (zero) std::memset(data_, 0, size);
}

AlignedBuffer::~AlignedBuffer() {
  if (data_ == nullptr) return;
  if (mapped_ != 0) {
    munmap(data_, mapped_);
  } else {
    std::free(data_);
  }
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    this->~AlignedBuffer();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

}  // namespace kvtier
