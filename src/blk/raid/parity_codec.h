// ParityCodec: the parity arithmetic of RAID5 (P) and RAID6 (P and Q) on top of
// ISA-L's erasure-code kernels. A stripe is k data shards and m parity shards
// (m = 1 or 2) of equal length; parity rows come from ISA-L's Reed-Solomon
// generator (row k: all ones = P, the XOR; row k+1: 2^i = the classic RAID6
// Q), so any k of the k + m shards rebuild the others.
//
// Immutable after construction; encode() and reconstruct() may run on any
// number of threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"

namespace kvtier::blk {

class ParityCodec {
 public:
  // k >= 1 data shards, 1 <= m <= 2 parity shards, k + m <= 255.
  ParityCodec(int k, int m);

  int data_shards() const { return k_; }
  int parity_shards() const { return m_; }

  // parity[j] (j < m) = row k + j of the generator applied to data[0..k).
  void encode(size_t len, const std::byte* const* data, std::byte* const* parity) const;

  // shards[0..k+m) point at buffers of `len` bytes; those whose index is in
  // `missing` are rewritten from the others. At most m may be missing.
  Status reconstruct(size_t len, std::byte* const* shards, const std::vector<int>& missing) const;

 private:
  int k_;
  int m_;
  std::vector<unsigned char> matrix_;         // (k + m) x k generator
  std::vector<unsigned char> encode_tables_;  // ISA-L tables for the m parity rows
};

}  // namespace kvtier::blk
