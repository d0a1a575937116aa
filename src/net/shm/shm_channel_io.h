// Frames over a direct channel (docs/protocol-store.md, "Direct channel"):
// blocking reads and writes of whole frames on a Unix stream socket, used by
// the server's channel thread and by the client's calling thread alike.
// The frames are the store protocol's (same header, CRCs and limits); the
// channel carries no data section, so its reader refuses any frame with one,
// or with a descriptor over its limit (4 KiB unless a MatchPrefix key list
// is allowed), before reading it.
//
// Thread-safety: a ChannelReader belongs to one thread at a time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "net/wire/protocol.h"

namespace kvtier::net {

constexpr FrameLimits kChannelFrameLimits{4096, 0};

class ChannelReader {
 public:
  explicit ChannelReader(int fd, FrameLimits limits = kChannelFrameLimits)
      : fd_(fd), decoder_(limits) {}
  // The next frame. `timeout_ms` < 0 waits for ever. kTimeout when it
  // passes, kUnavailable when the peer closed the channel, a protocol error
  // for a malformed frame; after any error the channel is out of sync.
  // `spin_us`: before sleeping in poll, keep trying the read for this long
  // (an answer due in microseconds then costs no wake-up).
  Result<Frame> read(int timeout_ms, int spin_us = 0);

 private:
  int fd_;
  FrameDecoder decoder_;
  // Bytes read but not yet decoded (a release and the next request may
  // arrive in one read).
  std::array<std::byte, 1024> buf_{};
  size_t begin_ = 0, end_ = 0;
};

// Encodes `msg` as one frame and writes all of it.
Status channel_send(int fd, const Message& msg, uint64_t request_id);

}  // namespace kvtier::net
