// PduStream over a connected TCP socket (blocking I/O). The owning thread
// reads and writes; shutdown() may come from any thread.
#pragma once

#include "nvmf/queue_connection.h"

namespace kvtier::nvmf {

class SocketStream : public PduStream {
 public:
  explicit SocketStream(int fd) : fd_(fd) {}
  ~SocketStream() override;
  Status read_exact(void* buf, size_t n) override;
  Status write_all(const iovec* iov, int count) override;
  void shutdown() override;
  int fd() const { return fd_; }

 private:
  int fd_;
};

// Sets TCP_NODELAY and large socket buffers, as an NVMe/TCP queue wants.
void tune_socket(int fd);

}  // namespace kvtier::nvmf
