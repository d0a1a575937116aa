#include "nvmf/raw_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kvtier::nvmf {

RawConnection::RawConnection(uint16_t port, int rcvbuf, std::chrono::seconds timeout) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd_ < 0) return;
  if (rcvbuf > 0) setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  timeval tv{static_cast<time_t>(timeout.count()), 0};
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

RawConnection::~RawConnection() {
  if (fd_ >= 0) ::close(fd_);
}

bool RawConnection::send(const void* p, size_t n) {
  return fd_ >= 0 && ::send(fd_, p, n, MSG_NOSIGNAL) == ssize_t(n);
}

bool RawConnection::recv_exact(uint8_t* p, size_t n) {
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

std::vector<uint8_t> RawConnection::recv_pdu() {
  std::vector<uint8_t> b(8);
  if (!recv_exact(b.data(), 8)) return {};
  const uint32_t plen = get32(&b[4]);
  if (plen < 8 || plen > (1u << 22)) return {};
  b.resize(plen);
  if (!recv_exact(b.data() + 8, plen - 8)) return {};
  return b;
}

bool RawConnection::closed_by_peer(std::chrono::seconds wait) {
  const auto end = std::chrono::steady_clock::now() + wait;
  std::vector<uint8_t> sink(1 << 16);
  while (std::chrono::steady_clock::now() < end) {
    const ssize_t r = ::recv(fd_, sink.data(), sink.size(), 0);
    if (r == 0) return true;
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
  }
  return false;
}

std::vector<uint8_t> RawConnection::handshake() {
  HeaderBuf h;
  if (!send(h.data(), encode_icreq({}, h))) return {};
  return recv_pdu();
}

bool RawConnection::capsule(const Sqe& sqe, const std::vector<uint8_t>& data) {
  HeaderBuf h;
  const uint32_t n = encode_capsule_cmd(sqe, uint32_t(data.size()), false, false, h);
  return send(h.data(), n) && (data.empty() || send(data.data(), data.size()));
}

uint16_t RawConnection::connect(uint16_t qid, const std::string& subnqn, const std::string& hostnqn,
                                uint16_t cntlid, uint32_t kato_ms, uint16_t sqsize) {
  Sqe s = base_sqe(0x7F, 1, 0x01, 1024);
  s[4] = 0x01;  // Fabrics Connect
  put16(&s[42], qid);
  put16(&s[44], sqsize);
  put32(&s[48], kato_ms);
  std::vector<uint8_t> d(1024, 0);
  put16(&d[16], cntlid);
  std::memcpy(&d[256], subnqn.data(), std::min<size_t>(subnqn.size(), 255));
  std::memcpy(&d[512], hostnqn.data(), std::min<size_t>(hostnqn.size(), 255));
  status_ = 0xFFFF;
  if (!capsule(s, d)) return 0xFFFF;
  auto r = recv_pdu();
  if (r.size() != 24 || r[0] != 0x05) return 0xFFFF;
  status_ = get16(&r[22]);
  dw0_ = get32(&r[8]);
  return status_ ? 0xFFFF : get16(&r[8]);
}

Sqe RawConnection::base_sqe(uint8_t opc, uint16_t cid, uint8_t sgl_type, uint32_t sgl_len) {
  Sqe s{};
  s[0] = opc;
  s[1] = 0x40;  // data described by an SGL
  put16(&s[2], cid);
  put32(&s[32], sgl_len);
  s[39] = sgl_type;
  return s;
}

Sqe RawConnection::enable_sqe(uint16_t cid) {
  Sqe s = base_sqe(0x7F, cid, 0x5A, 0);
  s[4] = 0x00;              // Fabrics Property Set
  put32(&s[44], 0x14);      // CC
  put64(&s[48], 0x460001);  // IOCQES 4, IOSQES 6, EN
  return s;
}

Sqe RawConnection::io_sqe(uint8_t opc, uint16_t cid, uint64_t slba, uint32_t nlb, uint32_t bytes) {
  Sqe s = base_sqe(opc, cid, 0x5A, bytes);
  put32(&s[4], 1);
  put64(&s[40], slba);
  put32(&s[48], nlb - 1);
  return s;
}

}  // namespace kvtier::nvmf
