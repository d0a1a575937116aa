// RawHost: nvmf::RawConnection for tests, to the unit tests' subsystem as
// their host, with a send that must succeed.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "nvmf/pdu.h"
#include "nvmf/raw_connection.h"

namespace kvtier::nvmf::testing {

constexpr const char* kRawNqn = "nqn.2024-01.io.kvtier:unit";
constexpr const char* kRawHostNqn = "nqn.2024-01.io.kvtier:unit-host";

class RawHost : public RawConnection {
 public:
  using RawConnection::RawConnection;

  void send(const void* p, size_t n) { ASSERT_TRUE(RawConnection::send(p, n)); }
  void capsule(const Sqe& sqe, const std::vector<uint8_t>& data = {}) {
    ASSERT_TRUE(RawConnection::capsule(sqe, data));
  }
  // Connect to kRawNqn as `host`.
  uint16_t connect(uint16_t qid, const char* host, uint16_t cntlid = 0xFFFF, uint32_t kato_ms = 0,
                   uint16_t sqsize = 31) {
    return RawConnection::connect(qid, kRawNqn, host, cntlid, kato_ms, sqsize);
  }
};

// The status field of a CapsuleResp (bytes 22..23), decoded.
struct CqeStatus {
  uint8_t sc = 0, sct = 0;
  bool dnr = false;
};
inline CqeStatus cqe_status(const std::vector<uint8_t>& resp) {
  const uint16_t s = get16(&resp[22]);
  return {uint8_t(s >> 1), uint8_t((s >> 9) & 7), bool(s >> 15)};
}

}  // namespace kvtier::nvmf::testing
