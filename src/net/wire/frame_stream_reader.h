// FrameStreamReader: reads store-protocol frames from a stream socket
// (plain TCP or TLS) with as few copies as the protocol allows. Used by both
// ends of a connection: StoreServer and RemoteStore.
#pragma once

#include <array>
#include <asio.hpp>
#include <cstdint>
#include <memory>
#include <span>
#include <system_error>
#include <vector>

#include "common/buffer.h"
#include "common/status.h"
#include "net/wire/protocol.h"
#include "net/wire/tls.h"

namespace kvtier::net {

// Reads frames from a stream socket through a FrameDecoder without copying
// block bytes: headers and descriptors go through a small read-ahead buffer
// (so many small pipelined frames cost one read), while a data section is
// read with one scatter read straight into its destination parts, with the
// read-ahead buffer appended to catch the next frame's first bytes. Only when
// a data section starts inside the read-ahead window are those bytes (at most
// kReadAhead) copied once. Shared by StoreServer and RemoteStore; owned by one
// connection, used from its strand only.
class FrameStreamReader {
 public:
  static constexpr size_t kReadAhead = 4096;
  // Destination parts per scatter read (below IOV_MAX, and asio's limit of 64).
  static constexpr size_t kMaxReadParts = 32;
  using Socket = NetStream;

  explicit FrameStreamReader(FrameLimits limits = {});
  // Replaces the decoder (new limits, and from now on only `version`); bytes
  // already read ahead are kept. Call between frames only.
  void reset(FrameLimits limits, uint16_t version);

  FrameDecoder& decoder() { return *decoder_; }
  // Reads until the header and descriptor of the next frame are in
  // (decoder state kData or kReady). A socket error gives ec; a malformed
  // frame gives a protocol Status (and ec empty).
  asio::awaitable<Status> read_head(Socket& socket, std::error_code& ec);
  // In kData: the data section goes to `parts` (sizes add up to data_len).
  Status set_data_destination(std::span<const MutableByteView> parts);
  // Reads the data section (into the decoder's own buffer when no
  // destination was set); the decoder ends in kReady.
  asio::awaitable<Status> read_data(Socket& socket, std::error_code& ec);
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  // Moves read-ahead bytes into the decoder while it wants header or
  // descriptor bytes (or, with `data`, data bytes).
  Status pump(bool data);

  std::unique_ptr<FrameDecoder> decoder_;
  std::array<std::byte, kReadAhead> ahead_;
  size_t ahead_pos_ = 0, ahead_len_ = 0;
  std::vector<MutableByteView> parts_;  // data destination, as given
  size_t data_done_ = 0;                // data bytes received so far
  uint64_t bytes_read_ = 0;
};

}  // namespace kvtier::net
