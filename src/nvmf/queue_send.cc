// The send side of a target queue: whole PDUs under one mutex, the sender
// thread that carries device completions to the host, and the bound that cuts
// off a host that stops reading (see queue_connection.h).
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "common/log.h"
#include "nvmf/queue_connection.h"

namespace kvtier::nvmf {
namespace {
constexpr uint16_t kScSuccess = 0x000;
constexpr uint16_t kScInternal = 0x006;
// The largest PDU that send_pdu lets wait for the next (a 4 KiB read's
// C2HData with its header, or any CQE).
constexpr size_t kHeldPduMaxBytes = 8 << 10;
}  // namespace

Status QueueConnection::send_pdu(const iovec* iov, int count) {
  Status st;
  {
    std::lock_guard lk(send_mu_);
    if (send_stalled_) return Status::unavailable("nvme-tcp: connection cut off");
    // The receiving thread with another PDU already received goes on to
    // serve it: a small PDU may wait to leave with that one's answer. A
    // large one fills its segments anyway, and holding its tail back would
    // only delay its command's completion.
    size_t bytes = 0;
    for (int i = 0; i < count; ++i) bytes += iov[i].iov_len;
    const bool more = bytes <= kHeldPduMaxBytes && std::this_thread::get_id() == receiver_ &&
                      stream_.buffered() >= kCommonHeaderSize;
    st = more ? stream_.write_more(iov, count) : stream_.write_all(iov, count);
    if (st.code() == StatusCode::kTimeout) send_stalled_ = true;
  }
  if (st.code() == StatusCode::kTimeout) {
    // The host stopped reading: only this connection pays. Shutting the
    // socket down ends run_loop's read, and every send after this fails at
    // once, so queued completions drain without waiting.
    state_.count(TargetState::Event::kSendStall);
    spdlog::warn("nvmf: queue {}: {}; connection dropped", qid_, st.message());
    stream_.shutdown();
  }
  return st;
}

void QueueConnection::send_later(std::function<void()> send) {
  // A device that completes inline (RAM) calls back on this queue's own
  // receiving thread: sending there blocks nobody else, and saves a hand-off.
  if (sender_ && std::this_thread::get_id() != receiver_) {
    sender_->post(std::move(send));
  } else {
    send();
  }
}

void QueueConnection::finish_from_device(uint16_t cid, Status st, uint32_t buf,
                                         ByteView read_data) {
  // Device completion threads are shared by every connection of the volume:
  // nothing here may wait on this connection's socket.
  send_later([this, cid, ok = st.ok(), buf, read_data] {
    const Completion c{ok ? kScSuccess : kScInternal};
    if (ok && !read_data.empty()) {
      (void)send_data_and_complete(cid, read_data, uint32_t(read_data.size()), c);
    } else {
      (void)complete(cid, c);
    }
    if (buf != kNoBuffer) release_buffer(buf);
    end_io();
  });
}

Status QueueConnection::terminate(uint16_t fes, uint32_t fei, ByteView offending, Status why) {
  HeaderBuf h;
  const uint32_t n = encode_termreq(PduType::kC2HTermReq, {fes, fei}, offending, h);
  const size_t extra = std::min<size_t>(offending.size(), kTermReqMaxPlen - kShortHlen);
  iovec iov[2] = {{h.data(), n}, {const_cast<std::byte*>(offending.data()), extra}};
  (void)send_pdu(iov, extra ? 2 : 1);
  stream_.shutdown();
  return why;
}

Status QueueConnection::complete(uint16_t cid, const Completion& c) {
  Cqe cqe{};
  put32(cqe.data(), c.dw0);
  put32(cqe.data() + 4, c.dw1);
  put16(cqe.data() + 8, sq_flow_disabled_ ? 0xFFFF : sq_head_.load());
  put16(cqe.data() + 10, qid_);
  put16(cqe.data() + 12, cid);
  uint16_t st = 0;
  if (c.status) {
    st = uint16_t(((c.status & 0xFF) << 1) | ((c.status >> 8) & 7) << 9);
    if (!c.retryable) st = uint16_t(st | 1u << 15);  // Do Not Retry
  }
  put16(cqe.data() + 14, st);
  HeaderBuf h;
  const uint32_t n = encode_capsule_resp(cqe, limits_.hdgst, h);
  iovec iov{h.data(), n};
  return send_pdu(&iov, 1);
}

Status QueueConnection::send_data_and_complete(uint16_t cid, ByteView payload, uint32_t len,
                                               const Completion& c) {
  if (c.status != kScSuccess || len == 0) return complete(cid, c);
  std::vector<std::byte> padded;
  if (payload.size() != len) {  // deliver exactly the requested length
    padded.assign(len, std::byte{0});
    std::memcpy(padded.data(), payload.data(), std::min<size_t>(len, payload.size()));
    payload = ByteView(padded.data(), len);
  }
  // SUCCESS replaces the CapsuleResp only when SQ flow control is off and the
  // completion carries no result.
  const bool success = sq_flow_disabled_ && c.dw0 == 0 && c.dw1 == 0;
  HeaderBuf h;
  const uint32_t n = encode_data(PduType::kC2HData, {cid, 0, 0, len},
                                 uint8_t(kFlagDataLast | (success ? kFlagDataSuccess : 0)),
                                 limits_.hdgst, limits_.ddgst, h);
  uint8_t dd[4];
  if (limits_.ddgst) put32(dd, digest(payload));
  iovec iov[3] = {{h.data(), n}, {const_cast<std::byte*>(payload.data()), payload.size()}, {dd, 4}};
  KVTIER_RETURN_IF_ERROR(send_pdu(iov, limits_.ddgst ? 3 : 2));
  return success ? Status::ok_status() : complete(cid, c);
}

Status QueueConnection::send_r2t(uint16_t cid, uint16_t ttag, uint32_t offset, uint32_t length) {
  HeaderBuf h;
  const uint32_t n = encode_r2t({cid, ttag, offset, length}, limits_.hdgst, h);
  iovec iov{h.data(), n};
  return send_pdu(&iov, 1);
}

}  // namespace kvtier::nvmf
