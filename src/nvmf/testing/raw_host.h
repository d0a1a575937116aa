// RawHost: a minimal NVMe/TCP host speaking raw PDUs (no digests), for tests
// that probe the target with what a real host would never send: a Connect
// after another for the same queue, commands it never reads the answers of,
// R2Ts it never answers.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "nvmf/pdu.h"

namespace kvtier::nvmf::testing {

constexpr const char* kRawNqn = "nqn.2024-01.io.kvtier:unit";
constexpr const char* kRawHostNqn = "nqn.2024-01.io.kvtier:unit-host";

class RawHost {
 public:
  // `rcvbuf` > 0 shrinks the socket's receive buffer before connecting (a
  // host that stops reading then stalls the target's sends early).
  explicit RawHost(uint16_t port, int rcvbuf = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    timeval tv{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~RawHost() { ::close(fd_); }
  RawHost(const RawHost&) = delete;
  RawHost& operator=(const RawHost&) = delete;

  bool connected() const { return connected_; }
  void send(const void* p, size_t n) { ASSERT_EQ(::send(fd_, p, n, MSG_NOSIGNAL), ssize_t(n)); }
  // Reads one whole PDU; empty on EOF or timeout.
  std::vector<uint8_t> recv_pdu() {
    std::vector<uint8_t> b(8);
    if (!recv_exact(b.data(), 8)) return {};
    const uint32_t plen = get32(&b[4]);
    if (plen < 8 || plen > (1u << 22)) return {};
    b.resize(plen);
    if (!recv_exact(b.data() + 8, plen - 8)) return {};
    return b;
  }
  // True once the target has closed the connection (EOF or reset), reading
  // and dropping whatever it sent before; false if it is still open after
  // `wait` (a hang, far beyond any bound under test).
  bool closed_by_peer(std::chrono::seconds wait = std::chrono::seconds(30)) {
    const auto end = std::chrono::steady_clock::now() + wait;
    std::vector<uint8_t> sink(1 << 16);
    while (std::chrono::steady_clock::now() < end) {
      const ssize_t r = ::recv(fd_, sink.data(), sink.size(), 0);
      if (r == 0) return true;
      if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
    }
    return false;
  }
  std::vector<uint8_t> handshake() {
    HeaderBuf h;
    send(h.data(), encode_icreq({}, h));
    return recv_pdu();
  }
  // Sends a capsule (SQE + optional in-capsule data).
  void capsule(const Sqe& sqe, const std::vector<uint8_t>& data = {}) {
    HeaderBuf h;
    const uint32_t n = encode_capsule_cmd(sqe, uint32_t(data.size()), false, false, h);
    send(h.data(), n);
    if (!data.empty()) send(data.data(), data.size());
  }
  // Connect for queue `qid`; returns the controller id, or 0xFFFF with the
  // status in last_status().
  uint16_t connect(uint16_t qid, const char* host, uint16_t cntlid = 0xFFFF, uint32_t kato_ms = 0,
                   uint16_t sqsize = 31) {
    Sqe s = base_sqe(0x7F, 1, 0x01, 1024);
    s[4] = 0x01;
    put16(&s[42], qid);
    put16(&s[44], sqsize);
    put32(&s[48], kato_ms);
    std::vector<uint8_t> d(1024, 0);
    put16(&d[16], cntlid);
    std::memcpy(&d[256], kRawNqn, strlen(kRawNqn));
    std::memcpy(&d[512], host, strlen(host));
    capsule(s, d);
    auto r = recv_pdu();
    if (r.size() != 24 || r[0] != 0x05) return 0xFFFF;
    status_ = get16(&r[22]);
    dw0_ = get32(&r[8]);
    return status_ ? 0xFFFF : get16(&r[8]);
  }
  static Sqe base_sqe(uint8_t opc, uint16_t cid, uint8_t sgl_type, uint32_t sgl_len) {
    Sqe s{};
    s[0] = opc;
    s[1] = 0x40;
    put16(&s[2], cid);
    put32(&s[32], sgl_len);
    s[39] = sgl_type;
    return s;
  }
  // An I/O command on namespace 1 at `slba` for `nlb` blocks, data by
  // transport (C2HData for a read, R2T for a write).
  static Sqe io_sqe(uint8_t opc, uint16_t cid, uint64_t slba, uint32_t nlb, uint32_t bytes) {
    Sqe s = base_sqe(opc, cid, 0x5A, bytes);
    put32(&s[4], 1);
    put64(&s[40], slba);
    put32(&s[48], nlb - 1);
    return s;
  }
  uint16_t last_status() const { return status_; }
  uint32_t last_dw0() const { return dw0_; }  // the last Connect's result

 private:
  bool recv_exact(uint8_t* p, size_t n) {
    while (n) {
      const ssize_t r = ::recv(fd_, p, n, 0);
      // A thread that has used io_uring gets task-work notifications that
      // interrupt a recv with a finite SO_RCVTIMEO (EINTR): not an end.
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      p += r;
      n -= size_t(r);
    }
    return true;
  }
  int fd_ = -1;
  bool connected_ = false;
  uint16_t status_ = 0;
  uint32_t dw0_ = 0;
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
