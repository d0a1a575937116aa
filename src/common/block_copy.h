// copy_block: the copy a RAM-tier hit makes into a caller's buffer.
//
// Blocks are large (1.5 MiB by default). Measured on the development
// machine (AMD EPYC guest, glibc 2.36), one memcpy of 1.5 MiB moved about
// 29 GB/s from huge-page memory and 21 GB/s from 4 KiB-page shared memory,
// while the same bytes copied as 64 KiB memcpy calls moved 35-37 GB/s from
// either: glibc copies each large call with one `rep movsb`, which this CPU
// runs slower than a sequence of shorter ones. The chunk size is not
// critical (16 KiB to 512 KiB were within a few percent).
//
// The benchmarks' memcpy limit (bench/memcpy_limit.h) takes the faster of
// both ways, so a ratio against it stays a ratio against the best copy.
#pragma once

#include <cstddef>
#include <cstring>

namespace kvtier {

constexpr size_t kBlockCopyChunk = 64u << 10;

inline void copy_block(void* dst, const void* src, size_t n) {
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  while (n > kBlockCopyChunk) {
    std::memcpy(d, s, kBlockCopyChunk);
    d += kBlockCopyChunk;
    s += kBlockCopyChunk;
    n -= kBlockCopyChunk;
  }
  std::memcpy(d, s, n);
}

}  // namespace kvtier
