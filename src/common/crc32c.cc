#include "common/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>
#endif

namespace kvtier {

namespace {

// Reflected Castagnoli polynomial.
constexpr uint32_t kPoly = 0x82F63B78u;

struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  constexpr Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
    }
  }
};
constexpr Tables kTables;

uint32_t raw_portable(uint32_t reg, const uint8_t* p, size_t n) {
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    w ^= reg;
    reg = kTables.t[7][w & 0xff] ^ kTables.t[6][(w >> 8) & 0xff] ^ kTables.t[5][(w >> 16) & 0xff] ^
          kTables.t[4][(w >> 24) & 0xff] ^ kTables.t[3][(w >> 32) & 0xff] ^
          kTables.t[2][(w >> 40) & 0xff] ^ kTables.t[1][(w >> 48) & 0xff] ^ kTables.t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) reg = (reg >> 8) ^ kTables.t[0][(reg ^ *p++) & 0xff];
  return reg;
}

// Multiplies two polynomials over GF(2) modulo the CRC polynomial, in the
// reflected bit order the CRC register uses (bit 31 is x^0).
uint32_t gf2_multiply_mod(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t bit = 1u << 31; bit != 0; bit >>= 1) {
    if (a & bit) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return product;
}

// x^(8*n) mod P: the factor that moves a CRC register past n zero bytes.
uint32_t shift_factor(size_t n_bytes) {
  uint32_t result = 1u << 31;  // the polynomial "1"
  uint32_t power = 1u << 30;   // x^1
  // Square-and-multiply over the bits of 8*n.
  uint64_t e = static_cast<uint64_t>(n_bytes) * 8;
  while (e) {
    if (e & 1) result = gf2_multiply_mod(result, power);
    power = gf2_multiply_mod(power, power);
    e >>= 1;
  }
  return result;
}

#if defined(__x86_64__)
constexpr size_t kStripe = 8192;  // bytes per stream in one interleaved round

__attribute__((target("sse4.2"))) uint32_t raw_hw_serial(uint32_t reg, const uint8_t* p, size_t n) {
  uint64_t r = reg;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    r = _mm_crc32_u64(r, w);
    p += 8;
    n -= 8;
  }
  uint32_t r32 = static_cast<uint32_t>(r);
  while (n--) r32 = _mm_crc32_u8(r32, *p++);
  return r32;
}

// Three independent streams hide the instruction's 3-cycle latency; the
// partial registers are joined with a multiply by x^(8*kStripe).
__attribute__((target("sse4.2"))) uint32_t raw_hw(uint32_t reg, const uint8_t* p, size_t n) {
  static const uint32_t kShift = shift_factor(kStripe);
  while (n >= 3 * kStripe) {
    uint64_t a = reg, b = 0, c = 0;
    const uint8_t* pa = p;
    const uint8_t* pb = p + kStripe;
    const uint8_t* pc = p + 2 * kStripe;
    for (size_t i = 0; i < kStripe; i += 8) {
      uint64_t wa, wb, wc;
      std::memcpy(&wa, pa + i, 8);
      std::memcpy(&wb, pb + i, 8);
      std::memcpy(&wc, pc + i, 8);
      a = _mm_crc32_u64(a, wa);
      b = _mm_crc32_u64(b, wb);
      c = _mm_crc32_u64(c, wc);
    }
    uint32_t ab = gf2_multiply_mod(static_cast<uint32_t>(a), kShift) ^ static_cast<uint32_t>(b);
    reg = gf2_multiply_mod(ab, kShift) ^ static_cast<uint32_t>(c);
    p += 3 * kStripe;
    n -= 3 * kStripe;
  }
  return raw_hw_serial(reg, p, n);
}

bool detect_sse42() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  return (ecx & bit_SSE4_2) != 0;
}
#endif

}  // namespace

bool crc32c_hardware_available() {
#if defined(__x86_64__)
  static const bool have = detect_sse42();
  return have;
#else
  return false;
#endif
}

uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t len) {
  return ~raw_portable(~crc, static_cast<const uint8_t*>(data), len);
}

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t len) {
#if defined(__x86_64__)
  if (crc32c_hardware_available()) return ~raw_hw(~crc, static_cast<const uint8_t*>(data), len);
#endif
  return crc32c_extend_portable(crc, data, len);
}

}  // namespace kvtier
