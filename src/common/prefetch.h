// prefetch_for_read: starts loading the cache line at `p`, so that a walk
// over many cold hash-table slots overlaps their misses.
//
// Why not __builtin_prefetch alone: GCC 12 at -O2 deletes it when the address
// is an element of a std::vector (seen in the study runner's first-touch map
// and the HBM pool's table: no prefetch instruction in the binary). An asm
// statement is never deleted, and a prefetch cannot fault, whatever `p` is.
#pragma once

namespace kvtier {

inline void prefetch_for_read(const void* p) {
#if defined(__x86_64__)
  asm volatile("prefetcht0 (%0)" : : "r"(p));
#else
  __builtin_prefetch(p);
#endif
}

}  // namespace kvtier
