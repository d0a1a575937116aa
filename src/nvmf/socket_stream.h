// PduStream over a connected TCP socket (blocking I/O). The owning thread
// reads and writes; shutdown() may come from any thread.
#pragma once

#include <atomic>
#include <memory>

#include "nvmf/queue_connection.h"

namespace kvtier::nvmf {

class SocketStream : public PduStream {
 public:
  explicit SocketStream(int fd) : fd_(fd) {}
  ~SocketStream() override;
  // With a read deadline set, fails with kTimeout once it passes (polls
  // before each recv; without one, recv blocks as long as the peer waits).
  // With buffer_reads, each receive also fills the read buffer behind the
  // bytes asked for (one recvmsg with two parts): a run of small PDUs (CQEs,
  // 4 KiB data) costs one system call instead of two or three each, while a
  // large payload still lands straight in the caller's memory.
  Status read_exact(void* buf, size_t n) override;
  // Fails with kTimeout when the socket's send timeout (SO_SNDTIMEO, see
  // bound_socket_sends) passes with no byte sent, and, with
  // set_send_timeout, when the peer has not taken the whole of `iov` (one
  // PDU) once that long has passed: a peer that reads a little now and then
  // (a receive buffer the kernel trims and reopens by a few bytes) would
  // otherwise restart the socket's timeout with each byte it takes.
  Status write_all(const iovec* iov, int count) override;
  // With MSG_MORE: the kernel holds a partial segment back, so a run of
  // small PDUs (C2HData of 4 KiB reads, CQEs) leaves as full segments, one
  // push and one wake-up of the peer instead of one each. Whatever is held
  // goes out with the next write_all, or before a read_exact waits.
  Status write_more(const iovec* iov, int count) override;
  // Sends what write_more left held back (setting TCP_NODELAY pushes it).
  void push() override;
  void set_send_timeout(uint32_t ms) { send_timeout_ns_ = int64_t(ms) * 1000000; }
  void shutdown() override;
  void set_read_deadline(int64_t deadline_ns) override { read_deadline_ns_ = deadline_ns; }
  void buffer_reads(size_t bytes) override;
  int fd() const { return fd_; }
  // Bytes received and not yet read: a reader that polls the socket before
  // reading must not wait while this is non-zero.
  size_t buffered() const override { return read_end_ - read_at_; }

 private:
  // Waits for the socket to be readable within the read deadline.
  Status wait_readable();
  // write_all and write_more: all of `iov` with these sendmsg flags.
  Status send_iov(const iovec* iov, int count, int flags);

  int fd_;
  std::unique_ptr<uint8_t[]> read_buf_;  // owning thread only
  size_t read_cap_ = 0, read_at_ = 0, read_end_ = 0;
  int64_t read_deadline_ns_ = 0;   // owning thread only
  int64_t send_timeout_ns_ = 0;    // 0: only the socket's own timeout
  std::atomic<bool> held_{false};  // write_more sent since the last push
};

// Sets TCP_NODELAY, as an NVMe/TCP queue wants.
void tune_socket(int fd);
// Bounds how long a send may make no progress (SO_SNDTIMEO) and how long
// sent data may stay unacknowledged (TCP_USER_TIMEOUT).
void bound_socket_sends(int fd, uint32_t send_timeout_ms, uint32_t user_timeout_ms);

}  // namespace kvtier::nvmf
