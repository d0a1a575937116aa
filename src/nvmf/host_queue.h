// The NVMe/TCP host's queue (one TCP connection with many commands in
// flight), shared by the host's files (host_device.cc, host_queue.cc) and by
// nothing else.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <span>

#include <spdlog/spdlog.h>

#include "common/crc32c.h"
#include "nvmf/host_device.h"
#include "nvmf/pdu.h"
#include "nvmf/socket_stream.h"

namespace kvtier::nvmf {

using Clock = std::chrono::steady_clock;

struct NvmeTcpDevice::Command {
  Sqe sqe{};
  ByteView out;  // data the controller pulls (R2T) or in-capsule data
  bool in_capsule = false;
  MutableByteView in;  // data the controller sends (C2HData)
  // A vectored read's buffers in order (`in` is then empty): the C2H data
  // of one command is scattered over them.
  std::vector<MutableByteView> in_parts;
  // In-capsule data the command owns (a Dataset Management range), for a
  // command that outlives its caller's stack.
  std::array<uint8_t, 16> owned_data{};
  uint32_t dw0 = 0;
  uint16_t status = 0;  // NVMe status field without the phase bit

  uint64_t in_bytes() const {
    if (in_parts.empty()) return in.size();
    uint64_t n = 0;
    for (const MutableByteView& p : in_parts) n += p.size();
    return n;
  }
};

// One TCP connection (admin or I/O queue) with many commands in flight.
// Any number of threads call exec() at once (up to the queue size; more
// wait for a free command id), and submit() sends a command without
// waiting for it. A receiver thread owned by the queue reads every PDU and
// dispatches it by command id: C2HData goes straight into the caller's
// buffers, CapsuleResp completes the command (waking exec()'s thread, or
// running submit()'s callback on the receiver thread), and an R2T is handed
// to the command's own exec() thread, or for a submit()ted command to the
// queue's data sender thread, which sends the H2CData. So the receiver
// never blocks on a send while the controller blocks on sending to us, and
// no thread waits for a submitted command.
class NvmeTcpDevice::Queue {
 public:
  // `peak` (may be null) records the most commands ever in flight on one queue.
  static Result<std::shared_ptr<Queue>> open(const HostOptions& o,
                                             std::atomic<uint32_t>* peak = nullptr);

  ~Queue() {
    shutdown();
    if (receiver_.joinable()) receiver_.join();
    {
      std::lock_guard lk(mu_);
      sender_cv_.notify_all();
    }
    if (data_sender_.joinable()) data_sender_.join();
  }

  void shutdown();

  // Runs one command and waits for it; a non-OK Status means the transport
  // failed (the queue is then unusable); NVMe errors come back in cmd.status.
  Status exec(Command& cmd);

  // Sends `cmd` and returns without waiting; `done` runs once on the
  // receiver thread with the command, OK or the transport's failure, within
  // io_timeout. A write the controller pulls with R2T has its data sent by
  // the queue's data sender thread. False, leaving `cmd` and calling
  // nothing, when no command id is free, the queue has failed, or the caller
  // is a receiver thread (see on_receiver_thread()): run the command with
  // exec() instead.
  using AsyncDone = std::function<void(Status, Command&)>;
  bool submit(std::unique_ptr<Command>& cmd, AsyncDone done);

  // Whether the connection has failed (a command timed out, a send failed,
  // the receiver stopped).
  bool failed() {
    std::lock_guard lk(mu_);
    return !failed_.ok();
  }

  // True on any queue's receiver thread. Callbacks run there, and must not
  // send (a blocked send would stop that queue's receiving) nor wait for the
  // device's state lock (a reconnect holds it while it joins receivers).
  static bool on_receiver_thread();

 private:
  struct R2t {
    uint16_t ttag;
    uint32_t offset;
    uint32_t length;
  };
  struct Slot {
    Command* cmd = nullptr;
    bool busy = false;
    bool done = false;
    uint32_t received = 0;
    Status result;
    std::vector<R2t> r2t;
    std::condition_variable cv;
    // A submit()ted command: owned here, completed by calling on_done, and
    // failed by the receiver once past its deadline.
    std::unique_ptr<Command> owned;
    AsyncDone on_done;
    Clock::time_point deadline{};
    // Threads still sending this command's capsule (submit()) or data (the
    // data sender): until zero the receiver neither completes nor frees it.
    int sending = 0;
    uint64_t serial = 0;        // tells a reused command id's commands apart
    bool capsule_sent = false;  // a submitted command's capsule is out (data may follow)
    uint32_t r2t_next = 0;      // the offset the next R2T must ask for
    Slot& operator=(Slot&& o) {
      cmd = o.cmd;
      busy = o.busy;
      done = o.done;
      received = o.received;
      result = o.result;
      r2t = std::move(o.r2t);
      owned = std::move(o.owned);
      on_done = std::move(o.on_done);
      deadline = o.deadline;
      sending = o.sending;
      serial = o.serial;
      capsule_sent = o.capsule_sent;
      r2t_next = o.r2t_next;
      return *this;
    }
  };

  Queue(int fd, const HostOptions& o);

  // Completes every outstanding command with `why`; `lk` holds mu_. Waits
  // for the receiver to stop touching caller buffers first.
  void fail_locked(std::unique_lock<std::mutex>& lk, const Status& why);

  // Takes a free command id for `cmd` (caller holds mu_); false if none.
  bool take_slot_locked(Command& cmd, uint16_t* cid);
  // The command capsule (and in-capsule data) of `cmd` under `cid`.
  Status send_capsule(const Command& cmd, uint16_t cid);
  Status send_h2c(const Command& cmd, uint16_t cid, const R2t& r);
  // A submit()ted command past its deadline (the receiver then fails the
  // connection, as exec() does for its own).
  bool async_overdue();

  // The slot a PDU names, if a command is outstanding under that id.
  Slot* slot_for(uint16_t cid);

  void complete(Slot& s, Status st);

  void receive_loop();

  // Reads PDUs until the connection fails or closes; returns why.
  Status receive_all();
  // The rest of one C2HData PDU whose header is read: its data straight
  // into the command's buffers, then the digest and SUCCESS checks.
  Status receive_c2h_data(const PduLayout& layout, ByteView header);
  // Reads `len` bytes of `cmd`'s data-in at `offset` into its buffer (or
  // the parts of a vectored read); `*crc` (when not null: data digests are
  // on) extended over them.
  Status receive_scattered(Command& cmd, uint64_t offset, uint32_t len, uint32_t* crc);
  // An R2T of a submit()ted command: queued for the data sender.
  void queue_r2t_locked(uint16_t cid, const R2t& r);
  // The data sender thread: H2CData for submitted commands' R2Ts, in order.
  void send_loop();

  Status handshake();

  std::mutex send_mu_;  // one writer of PDUs at a time
  SocketStream stream_;
  PduLimits lim_;
  uint32_t maxh2cdata_ = kMinMaxH2CData;
  std::chrono::milliseconds io_timeout_;
  std::atomic<bool> closing_{false};
  std::atomic<uint32_t>* peak_ = nullptr;

  std::mutex mu_;  // guards the slot table, free_, failed_, receiver_stopped_
  std::condition_variable slot_cv_;
  std::condition_variable recv_cv_;
  std::vector<Slot> slots_;  // indexed by command id
  std::vector<uint16_t> free_;
  Status failed_;
  bool receiver_stopped_ = false;
  std::thread receiver_;
  Clock::time_point next_overdue_check_{};  // receiver thread only
  uint64_t next_serial_ = 0;                // guarded by mu_
  struct R2tWork {
    uint16_t cid;
    uint64_t serial;
    R2t r2t;
  };
  std::deque<R2tWork> r2t_work_;  // guarded by mu_
  std::condition_variable sender_cv_;
  std::thread data_sender_;
};

}  // namespace kvtier::nvmf
