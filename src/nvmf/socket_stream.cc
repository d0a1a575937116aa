// Blocking socket I/O for NVMe/TCP queues.
#include "nvmf/socket_stream.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace kvtier::nvmf {

SocketStream::~SocketStream() {
  if (fd_ >= 0) ::close(fd_);
}

Status SocketStream::read_exact(void* buf, size_t n) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    const ssize_t r = ::recv(fd_, p, n, 0);
    if (r == 0) return Status::unavailable("nvme-tcp: peer closed the connection");
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::unavailable(std::string("nvme-tcp: recv: ") + strerror(errno));
    }
    p += r;
    n -= size_t(r);
  }
  return Status::ok_status();
}

Status SocketStream::write_all(const iovec* iov_in, int count) {
  std::vector<iovec> iov(iov_in, iov_in + count);
  size_t i = 0;
  while (i < iov.size()) {
    msghdr m{};
    m.msg_iov = &iov[i];
    m.msg_iovlen = iov.size() - i;
    const ssize_t w = ::sendmsg(fd_, &m, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::unavailable(std::string("nvme-tcp: send: ") + strerror(errno));
    }
    size_t left = size_t(w);
    while (i < iov.size() && left >= iov[i].iov_len) left -= iov[i++].iov_len;
    if (i < iov.size()) {
      iov[i].iov_base = static_cast<uint8_t*>(iov[i].iov_base) + left;
      iov[i].iov_len -= left;
    }
  }
  return Status::ok_status();
}

void SocketStream::shutdown() { ::shutdown(fd_, SHUT_RDWR); }

void tune_socket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace kvtier::nvmf
