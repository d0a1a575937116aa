// Blocking socket I/O for NVMe/TCP queues.
#include "nvmf/socket_stream.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "nvmf/target_state.h"  // monotonic_ns

namespace kvtier::nvmf {

SocketStream::~SocketStream() {
  if (fd_ >= 0) ::close(fd_);
}

void SocketStream::buffer_reads(size_t bytes) {
  if (read_buf_ || bytes == 0) return;
  read_buf_ = std::make_unique<uint8_t[]>(bytes);
  read_cap_ = bytes;
}

Status SocketStream::wait_readable() {
  for (;;) {
    if (!read_deadline_ns_) return Status::ok_status();
    const int64_t left_ms = (read_deadline_ns_ - monotonic_ns() + 999'999) / 1'000'000;
    pollfd pfd{fd_, POLLIN, 0};
    const int ready = left_ms > 0 ? ::poll(&pfd, 1, int(std::min<int64_t>(left_ms, 1 << 30))) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) return Status::timeout("nvme-tcp: the host's PDU did not arrive in time");
    return Status::ok_status();
  }
}

Status SocketStream::read_exact(void* buf, size_t n) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    if (read_at_ < read_end_) {  // what an earlier receive brought along
      const size_t take = std::min(n, read_end_ - read_at_);
      std::memcpy(p, read_buf_.get() + read_at_, take);
      read_at_ += take;
      p += take;
      n -= take;
      continue;
    }
    // Nothing is left to serve before this wait: what was held goes now.
    push();
    KVTIER_RETURN_IF_ERROR(wait_readable());
    // The bytes asked for first, then whatever follows them into the buffer.
    iovec iov[2] = {{p, n}, {read_buf_.get(), read_cap_}};
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = read_cap_ ? 2 : 1;
    const ssize_t r = ::recvmsg(fd_, &m, 0);
    if (r == 0) return Status::unavailable("nvme-tcp: peer closed the connection");
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::unavailable(std::string("nvme-tcp: recv: ") + strerror(errno));
    }
    const size_t got = size_t(r);
    if (got <= n) {
      p += got;
      n -= got;
    } else {
      read_at_ = 0;
      read_end_ = got - n;
      n = 0;
    }
  }
  return Status::ok_status();
}

Status SocketStream::write_all(const iovec* iov, int count) {
  Status st = send_iov(iov, count, MSG_NOSIGNAL);
  held_.store(false, std::memory_order_relaxed);  // this send pushed what was held
  return st;
}

Status SocketStream::write_more(const iovec* iov, int count) {
  held_.store(true, std::memory_order_relaxed);
  return send_iov(iov, count, MSG_NOSIGNAL | MSG_MORE);
}

void SocketStream::push() {
  if (!held_.exchange(false, std::memory_order_relaxed)) return;
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

Status SocketStream::send_iov(const iovec* iov_in, int count, int flags) {
  std::vector<iovec> iov(iov_in, iov_in + count);
  const int64_t give_up_ns = send_timeout_ns_ > 0 ? monotonic_ns() + send_timeout_ns_ : 0;
  size_t i = 0;
  for (bool first = true; i < iov.size(); first = false) {
    // A blocking sendmsg returns before it sent everything only when the
    // socket's timeout passed or a signal came: check the whole PDU's bound.
    if (!first && give_up_ns > 0 && monotonic_ns() >= give_up_ns) {
      return Status::timeout("nvme-tcp: the host stopped reading (a PDU not taken in time)");
    }
    msghdr m{};
    m.msg_iov = &iov[i];
    m.msg_iovlen = iov.size() - i;
    const ssize_t w = ::sendmsg(fd_, &m, flags);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return Status::timeout("nvme-tcp: the host stopped reading (send timed out)");
      }
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

void bound_socket_sends(int fd, uint32_t send_timeout_ms, uint32_t user_timeout_ms) {
  timeval tv{time_t(send_timeout_ms / 1000), suseconds_t(send_timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

}  // namespace kvtier::nvmf
