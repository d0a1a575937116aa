// SharedArena: one large, page-aligned, zero-filled memory range that other
// processes on this host may map read-only. It backs the store's RAM tier so
// that a same-host client can copy a block straight out of the tier (one
// copy instead of two; docs/protocol-store.md, "Direct channel").
//
// The memory is a memfd sealed against shrinking, growing and any *new*
// writable mapping or write() (F_SEAL_FUTURE_WRITE, Linux 5.1): this
// process keeps writing through the mapping it made before sealing, while a
// process handed the fd can only map it read-only and can never truncate it
// (so its mapping can never fault with SIGBUS). Where memfds or that seal
// are missing, or when sharing is not asked for, the arena is private
// anonymous memory (with transparent huge pages where the system allows:
// shmem gets none by default, which is why sharing is a choice) and
// shareable() is false.
//
// Thread-safety: immutable after construction.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvtier {

class SharedArena {
 public:
  SharedArena() = default;
  // `bytes` of zeroed memory; zero bytes is an empty arena. `shared`: back it
  // with a sealed memfd that fd() hands out.
  SharedArena(size_t bytes, bool shared);
  ~SharedArena();
  SharedArena(SharedArena&& o) noexcept;
  SharedArena& operator=(SharedArena&& o) noexcept;
  SharedArena(const SharedArena&) = delete;
  SharedArena& operator=(const SharedArena&) = delete;

  std::byte* data() const { return base_; }
  size_t size() const { return size_; }
  // The sealed memfd (owned by the arena), or -1 when not shareable.
  int fd() const { return fd_; }
  bool shareable() const { return fd_ >= 0; }

 private:
  void reset();
  std::byte* base_ = nullptr;
  size_t size_ = 0;    // bytes the caller asked for
  size_t mapped_ = 0;  // bytes mapped (whole pages)
  int fd_ = -1;
};

}  // namespace kvtier
