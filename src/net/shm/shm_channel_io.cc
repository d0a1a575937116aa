#include "net/shm/shm_channel_io.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace kvtier::net {

namespace {

Status errno_status(const char* what) {
  return Status::unavailable(fmt::format("direct channel: {}: {}", what, std::strerror(errno)));
}

// Waits until `fd` is readable; `deadline` is ignored when `forever`.
Status wait_readable(int fd, bool forever, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    int ms = -1;
    if (!forever) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return Status::timeout("direct channel: no answer in time");
      ms = static_cast<int>(left.count());
    }
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, ms);
    if (r > 0) return Status::ok_status();
    if (r < 0 && errno != EINTR) return errno_status("poll");
  }
}

}  // namespace

Result<Frame> ChannelReader::read(int timeout_ms, int spin_us) {
  const bool forever = timeout_ms < 0;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::milliseconds(forever ? 0 : timeout_ms);
  const auto spin_until = start + std::chrono::microseconds(spin_us);
  for (;;) {
    if (begin_ < end_) {
      auto used = decoder_.feed(ByteView(buf_.data() + begin_, end_ - begin_));
      if (!used.ok()) return used.status();
      begin_ += *used;
      if (decoder_.state() == FrameDecoder::State::kReady) return decoder_.take_frame();
    }
    begin_ = end_ = 0;
    // A large descriptor (a key list) goes straight where the decoder wants
    // it instead of through the small buffer.
    MutableByteView direct;
    if (decoder_.state() == FrameDecoder::State::kDescriptor &&
        decoder_.wanted().size() > buf_.size()) {
      direct = decoder_.wanted();
    }
    // Try the read first: on a busy channel the bytes are usually there.
    ssize_t n = direct.empty() ? ::recv(fd_, buf_.data(), buf_.size(), MSG_DONTWAIT)
                               : ::recv(fd_, direct.data(), direct.size(), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (spin_us > 0 && std::chrono::steady_clock::now() < spin_until) continue;
      KVTIER_RETURN_IF_ERROR(wait_readable(fd_, forever, deadline));
      continue;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("read");
    }
    if (n == 0) return Status::unavailable("direct channel closed by the peer");
    if (!direct.empty()) {
      KVTIER_RETURN_IF_ERROR(decoder_.advance(static_cast<size_t>(n)));
      if (decoder_.state() == FrameDecoder::State::kReady) return decoder_.take_frame();
      continue;
    }
    end_ = static_cast<size_t>(n);
  }
}

Status channel_send(int fd, const Message& msg, uint64_t request_id) {
  thread_local std::vector<std::byte> frame;
  frame.clear();
  KVTIER_RETURN_IF_ERROR(encode_message_prefix(msg, request_id, {}, frame));
  size_t off = 0;
  while (off < frame.size()) {
    ssize_t n = ::send(fd, frame.data() + off, frame.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("write");
    }
    off += static_cast<size_t>(n);
  }
  return Status::ok_status();
}

}  // namespace kvtier::net
