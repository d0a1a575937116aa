#include "common/shared_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <new>
#include <utility>

#include <spdlog/spdlog.h>

namespace kvtier {

namespace {

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

size_t round_up(size_t bytes, size_t unit) { return (bytes + unit - 1) / unit * unit; }

// A sealed memfd mapped read/write, or -1 (and nothing mapped) on failure.
int map_sealed_memfd(size_t bytes, std::byte** base) {
  int fd = ::memfd_create("kvtier-ram-tier", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ::close(fd);
    return -1;
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    ::close(fd);
    return -1;
  }
  // After the mapping: F_SEAL_FUTURE_WRITE forbids writable mappings made
  // from now on, not the one above.
  constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL;
  if (::fcntl(fd, F_ADD_SEALS, kSeals) != 0) {
    ::munmap(p, bytes);
    ::close(fd);
    return -1;
  }
  *base = static_cast<std::byte*>(p);
  return fd;
}

}  // namespace

SharedArena::SharedArena(size_t bytes, bool shared) : size_(bytes) {
  if (bytes == 0) return;
  if (shared) {
    mapped_ = round_up(bytes, static_cast<size_t>(::sysconf(_SC_PAGESIZE)));
    fd_ = map_sealed_memfd(mapped_, &base_);
    if (fd_ >= 0) return;
    spdlog::warn("shared arena: no sealed memfd on this kernel; the RAM tier is not shared");
  }
  mapped_ = round_up(bytes, 2u << 20);
  void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  ::madvise(p, mapped_, MADV_HUGEPAGE);
  base_ = static_cast<std::byte*>(p);
}

SharedArena::~SharedArena() { reset(); }

SharedArena::SharedArena(SharedArena&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      mapped_(std::exchange(o.mapped_, 0)),
      fd_(std::exchange(o.fd_, -1)) {}

SharedArena& SharedArena::operator=(SharedArena&& o) noexcept {
  if (this != &o) {
    reset();
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    mapped_ = std::exchange(o.mapped_, 0);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

void SharedArena::reset() {
  if (base_ != nullptr) ::munmap(base_, mapped_);
  if (fd_ >= 0) ::close(fd_);
  base_ = nullptr;
  size_ = mapped_ = 0;
  fd_ = -1;
}

}  // namespace kvtier
