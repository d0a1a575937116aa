#include "blk/raid/parity_codec.h"

#include <fmt/format.h>
#include <isa-l/erasure_code.h>

#include <algorithm>
#include <cassert>

namespace kvtier::blk {

ParityCodec::ParityCodec(int k, int m) : k_(k), m_(m) {
  assert(k >= 1 && m >= 1 && m <= 2 && k + m <= 255);
  matrix_.resize(static_cast<size_t>(k + m) * k);
  gf_gen_rs_matrix(matrix_.data(), k + m, k);
  encode_tables_.resize(static_cast<size_t>(32) * k * m);
  ec_init_tables(k, m, matrix_.data() + static_cast<size_t>(k) * k, encode_tables_.data());
}

void ParityCodec::encode(size_t len, const std::byte* const* data, std::byte* const* parity) const {
  // ISA-L takes non-const pointers but only reads the sources.
  std::vector<unsigned char*> src(k_), dst(m_);
  for (int i = 0; i < k_; ++i) {
    src[i] = reinterpret_cast<unsigned char*>(const_cast<std::byte*>(data[i]));
  }
  for (int j = 0; j < m_; ++j) dst[j] = reinterpret_cast<unsigned char*>(parity[j]);
  ec_encode_data(static_cast<int>(len), k_, m_, const_cast<unsigned char*>(encode_tables_.data()),
                 src.data(), dst.data());
}

Status ParityCodec::reconstruct(size_t len, std::byte* const* shards,
                                const std::vector<int>& missing) const {
  if (missing.empty()) return Status::ok_status();
  if (static_cast<int>(missing.size()) > m_) {
    return Status::io_error(
        fmt::format("{} shards missing, parity covers only {}", missing.size(), m_));
  }
  const int n = k_ + m_;
  std::vector<bool> is_missing(n, false);
  for (int i : missing) {
    if (i < 0 || i >= n) return Status::internal(fmt::format("shard index {} out of range", i));
    is_missing[i] = true;
  }
  // The first k surviving shards and the rows of the generator that made them.
  std::vector<int> survivors;
  for (int i = 0; i < n && static_cast<int>(survivors.size()) < k_; ++i) {
    if (!is_missing[i]) survivors.push_back(i);
  }
  std::vector<unsigned char> sub(static_cast<size_t>(k_) * k_), inv(static_cast<size_t>(k_) * k_);
  for (int r = 0; r < k_; ++r) {
    std::copy_n(&matrix_[static_cast<size_t>(survivors[r]) * k_], k_,
                &sub[static_cast<size_t>(r) * k_]);
  }
  if (gf_invert_matrix(sub.data(), inv.data(), k_) != 0) {
    return Status::internal("parity generator submatrix is singular");
  }
  // Row for a missing shard i, expressed over the survivors: data shard i is
  // row i of the inverse; parity shard i is generator row i times the inverse.
  const int rows = static_cast<int>(missing.size());
  std::vector<unsigned char> decode(static_cast<size_t>(rows) * k_);
  for (int r = 0; r < rows; ++r) {
    const int i = missing[r];
    for (int c = 0; c < k_; ++c) {
      unsigned char v = 0;
      if (i < k_) {
        v = inv[static_cast<size_t>(i) * k_ + c];
      } else {
        for (int l = 0; l < k_; ++l) {
          v ^= gf_mul(matrix_[static_cast<size_t>(i) * k_ + l],
                      inv[static_cast<size_t>(l) * k_ + c]);
        }
      }
      decode[static_cast<size_t>(r) * k_ + c] = v;
    }
  }
  std::vector<unsigned char> tables(static_cast<size_t>(32) * k_ * rows);
  ec_init_tables(k_, rows, decode.data(), tables.data());
  std::vector<unsigned char*> src(k_), dst(rows);
  for (int r = 0; r < k_; ++r) src[r] = reinterpret_cast<unsigned char*>(shards[survivors[r]]);
  for (int r = 0; r < rows; ++r) dst[r] = reinterpret_cast<unsigned char*>(shards[missing[r]]);
  ec_encode_data(static_cast<int>(len), k_, rows, tables.data(), src.data(), dst.data());
  return Status::ok_status();
}

}  // namespace kvtier::blk
