// One NVMe/TCP queue (admin or I/O) on the target side: the ICReq/ICResp
// handshake, then a loop that receives PDUs, checks every field, executes
// commands against the namespace's BlockDevice and sends C2HData, R2T and
// CapsuleResp PDUs. One thread owns a QueueConnection and runs run(); other
// threads may only call close_now() (through TargetState).
//
// I/O commands are asynchronous all the way to the device: the receiving
// thread submits Read, Write (in-capsule or once its last H2CData is in),
// Write Zeroes and Flush with the device's callback API and goes on reading
// PDUs. The device's callback never sends: it hands the C2HData and the
// completion to the queue's sender thread, so a host that stops reading its
// socket stalls only its own sender, never the device's completion thread
// that every connection of the volume shares; the stalled send times out
// (send_timeout_ms) and drops this connection. Sends are serialized by one
// mutex (whole PDUs, never interleaved). At most SQ size
// commands are in the device at once (a host that sends more gets an error
// for the excess), each with its own buffer from a pool, and run() returns only
// after every callback has run, so none outlives the connection. Admin
// commands, Dataset Management and the flush of every namespace stay
// synchronous: they are rare and small.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "common/buffer.h"
#include "common/task_pool.h"
#include "nvmf/auth_target.h"
#include "nvmf/pdu.h"
#include "nvmf/target_state.h"

namespace kvtier::nvmf {

// The byte stream under a queue: a TCP socket, or memory in the fuzzer.
class PduStream {
 public:
  virtual ~PduStream() = default;
  virtual Status read_exact(void* buf, size_t n) = 0;
  virtual Status write_all(const iovec* iov, int count) = 0;
  virtual void shutdown() = 0;  // unblocks a pending read from another thread
  // Reads fail with kTimeout after this monotonic_ns() instant; 0: no deadline.
  virtual void set_read_deadline(int64_t deadline_ns) { (void)deadline_ns; }
  // From now on, reads may take up to `bytes` more than asked from the
  // transport and keep them for the next read (fewer system calls when
  // PDUs are small). Called once the connection is established.
  virtual void buffer_reads(size_t bytes) { (void)bytes; }
  // Bytes received and not yet read (see buffer_reads).
  virtual size_t buffered() const { return 0; }
  // As write_all, for a PDU that others will follow at once (its thread has
  // more PDUs to serve): the transport may hold it back to go out with
  // them, until the next write_all, or until a read has to wait.
  virtual Status write_more(const iovec* iov, int count) { return write_all(iov, count); }
  // Sends now whatever write_more left held. The writing thread calls it
  // before it blocks anywhere but in read_exact (which pushes by itself).
  virtual void push() {}
};

// The read buffer of an established queue (PduStream::buffer_reads): room
// for a few 4 KiB data PDUs or hundreds of CQEs per receive; per connection,
// so small beside the target's cap on connections.
inline constexpr size_t kQueueReadBufferBytes = 16 << 10;

// A capsule's in-capsule data, wherever it was received.
using CapsuleData = std::span<const uint8_t>;

class QueueConnection : public Closable {
 public:
  QueueConnection(TargetState& state, PduStream& stream);
  ~QueueConnection() override;

  // Serves the queue until the peer disconnects, a protocol error ends it
  // (after a C2HTermReq) or close_now() is called. Returns why it ended.
  Status run();
  void close_now() override { stream_.shutdown(); }

 private:
  struct PendingWrite {  // a write waiting for its H2CData after an R2T
    uint16_t cid = 0;
    uint32_t nsid = 0;
    uint64_t offset = 0;
    uint32_t received = 0;
    uint32_t length = 0;      // bytes of the transfer (the buffer may be larger)
    uint32_t buf = 0;         // index into bufs_
    int64_t deadline_ns = 0;  // when the host must have sent all of it
  };
  struct Completion {
    uint16_t status = 0;  // (SCT << 8 | SC)
    uint32_t dw0 = 0;
    uint32_t dw1 = 0;
    bool retryable = false;  // sent without Do Not Retry
  };

  static constexpr uint32_t kNoBuffer = UINT32_MAX;

  Status handshake();
  Status run_loop();
  // The read deadline for the next PDU: Connect's until connected, then the
  // oldest R2T's while writes wait for data, else none.
  void update_read_deadline();
  // Counts why run_loop ended when a bound cut it short.
  void count_end(const Status& why);
  // Reads an H2CData PDU's data straight into its write's buffer.
  Status receive_h2c(const PduLayout& l, const uint8_t* hdr);
  // Buffers of max_transfer bytes, one per command in the device.
  uint32_t acquire_buffer(size_t bytes);
  void release_buffer(uint32_t index);
  // Accounting of commands in the device: begin_io refuses beyond SQ size.
  bool begin_io();
  void end_io();
  void wait_idle();
  // Submits a write of buffer `buf` and completes `cid` when it is done.
  void submit_write(blk::BlockDevice& dev, uint16_t cid, uint64_t offset, uint32_t buf,
                    uint32_t length);
  Status serve_pdu(const PduLayout& l, const uint8_t* hdr, CapsuleData data, bool data_digest_ok);
  Status handle_capsule(const Sqe& sqe, CapsuleData data, bool data_digest_ok);
  Completion fabrics(const Sqe& sqe, CapsuleData data);
  Completion connect(const Sqe& sqe, CapsuleData data);
  // Authentication Send and Receive (DH-HMAC-CHAP, auth_target.h); a failed
  // transaction ends the connection after its Failure1.
  Status authentication(const Sqe& sqe, CapsuleData data);
  // Sets up authentication for a host that must authenticate; returns the
  // ATR bit for the Connect's answer.
  uint32_t require_authentication(const std::string& subnqn, const std::string& hostnqn);
  Status admin(const Sqe& sqe, CapsuleData data);
  Status io(const Sqe& sqe, CapsuleData data);
  // io's commands: Read, Write and Write Zeroes on namespace `nsid`, and
  // Dataset Management (deallocate).
  Status read_or_write(blk::BlockDevice& dev, const Sqe& sqe, CapsuleData data, uint32_t nsid);
  Status deallocate(blk::BlockDevice& dev, const Sqe& sqe, CapsuleData data);
  Completion get_features(const Sqe& sqe);
  Completion set_features(const Sqe& sqe);

  // Sends `payload` as C2HData (trimmed or zero-padded to the SGL length) and
  // then the completion (or the SUCCESS flag in place of it).
  Status send_data_and_complete(uint16_t cid, ByteView payload, uint32_t sgl_len,
                                const Completion& c);
  Status complete(uint16_t cid, const Completion& c);
  Status send_r2t(uint16_t cid, uint16_t ttag, uint32_t offset, uint32_t length);
  Status terminate(uint16_t fes, uint32_t fei, ByteView offending, Status why);
  // Sends one whole PDU; a send that times out cuts the connection off.
  Status send_pdu(const iovec* iov, int count);
  // Runs a device completion's sends on the sender thread (inline when the
  // queue has none: the admin queue, whose commands are synchronous).
  void send_later(std::function<void()> send);
  // Completes a command from a device callback: its data (a read's buffer
  // `buf`, or none) and its completion go out on the sender thread, and then
  // the buffer and the in-flight slot are released.
  void finish_from_device(uint16_t cid, Status st, uint32_t buf, ByteView read_data);

  TargetState& state_;
  PduStream& stream_;
  PduLimits limits_;
  uint16_t qid_ = 0;
  bool connected_ = false;
  bool sq_flow_disabled_ = false;
  uint16_t sq_size_ = 0;              // entries (1's based)
  std::atomic<uint16_t> sq_head_{0};  // read by completions on device threads
  std::shared_ptr<Controller> ctrl_;
  std::unique_ptr<TargetAuth> auth_;          // set when the host must authenticate this queue
  std::map<uint16_t, PendingWrite> pending_;  // by TTAG
  uint16_t next_ttag_ = 0;
  std::mutex send_mu_;  // one sender of PDUs at a time
  std::atomic<bool> send_stalled_{false};
  std::unique_ptr<TaskPool> sender_;  // I/O queues: sends of device completions
  std::thread::id receiver_;          // the thread in run()
  int64_t read_deadline_ns_ = 0;      // as last given to the stream
  int64_t connect_deadline_ns_ = 0;
  std::mutex io_mu_;  // guards in_flight_ and the buffer pool
  std::condition_variable io_cv_;
  uint32_t in_flight_ = 0;
  std::vector<std::unique_ptr<AlignedBuffer>> bufs_;
  std::vector<uint32_t> free_bufs_;
  // I/O queues: the pooled buffer that the current capsule's data was
  // received into (kNoBuffer: none, or its data is in run_loop's vector). An
  // in-capsule write takes it for the device as it is, without a copy;
  // run_loop releases it if nothing did. Receiving thread only.
  uint32_t capsule_buf_ = kNoBuffer;
  // Async Event Requests held on the admin queue (no event is ever raised):
  // completed with ABORT REQUESTED when the host aborts them, dropped with the
  // connection at teardown.
  std::vector<uint16_t> held_aers_;
};

}  // namespace kvtier::nvmf
