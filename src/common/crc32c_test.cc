#include "common/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace kvtier {
namespace {

// Known answers: the "check" value of CRC-32C and the iSCSI vectors of RFC 3720 B.4.
TEST(Crc32c, KnownVectors) {
  const std::string check = "123456789";
  EXPECT_EQ(crc32c(check.data(), check.size()), 0xE3069283u);
  std::vector<uint8_t> buf(32, 0);
  EXPECT_EQ(crc32c(buf.data(), buf.size()), 0x8A9136AAu);
  std::fill(buf.begin(), buf.end(), 0xFF);
  EXPECT_EQ(crc32c(buf.data(), buf.size()), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(crc32c(buf.data(), buf.size()), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(crc32c(buf.data(), buf.size()), 0x113FDB5Cu);
  EXPECT_EQ(crc32c_extend_portable(0, check.data(), check.size()), 0xE3069283u);
}

TEST(Crc32c, EmptyIsZero) { EXPECT_EQ(crc32c(nullptr, 0), 0u); }

// The interleaved hardware path must agree with the portable one at every
// length around its stripe boundaries, and extension must equal one pass.
TEST(Crc32c, HardwareMatchesPortableAtAllShapes) {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> data(3 * 8192 * 3 + 77);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (size_t len :
       {0ul, 1ul, 7ul, 8ul, 9ul, 24575ul, 24576ul, 24577ul, 49152ul, 50000ul, data.size()}) {
    EXPECT_EQ(crc32c(data.data(), len), crc32c_extend_portable(0, data.data(), len)) << len;
    size_t cut = len / 3;
    uint32_t a = crc32c(data.data(), cut);
    EXPECT_EQ(crc32c_extend(a, data.data() + cut, len - cut), crc32c(data.data(), len)) << len;
  }
}

TEST(Crc32c, DetectsSingleBitFlip) {
  std::vector<uint8_t> data(1 << 20, 0x5A);
  uint32_t before = crc32c(data.data(), data.size());
  data[123457] ^= 0x10;
  EXPECT_NE(before, crc32c(data.data(), data.size()));
}

}  // namespace
}  // namespace kvtier
