// NvmeTcpDevice: a remote NVMe/TCP namespace as a kvtier BlockDevice (the
// initiator side). It connects an admin queue and N I/O queues, sends Keep
// Alive, and when the connection is lost reconnects with the kernel's
// semantics: a new attempt every reconnect_delay until ctrl_loss_tmo; I/O
// waits for the reconnect but fails with kUnavailable once fast_io_fail_tmo
// has passed since the loss (and everything fails after ctrl_loss_tmo). Every
// socket wait is bounded by io_timeout, so no call ever hangs.
//
// Threads: requests may be submitted from any thread and return at once.
// While the device is up and a queue has a free command id, a request (read,
// vectored read, write, flush, trim) is sent by the caller's thread itself on
// a queue picked round robin, and its callback runs on that queue's receiver
// thread (the thread that placed its C2H data straight into the caller's
// buffers): no thread waits for it. A read or write larger than one command
// is split into commands of max_transfer bytes, all sent at once the same
// way, and called back when the last is done. A write the controller pulls
// with R2T has its data sent by the queue's data sender thread. What cannot
// go out that way (requests while reconnecting or with every command id
// taken, and the retry of a command whose connection failed) runs on one of
// the device's submitter threads, each of which blocks while its command is in flight; there are
// kMaxSubmitters of them at most (fewer for a smaller total queue depth):
// they carry what overflows, not the device's queue depth. A request that a
// completion callback issues is sent by the device's dispatcher thread (a
// receiver thread must not send), the same way. A queue keeps up
// to queue_size - 1 commands in flight, told apart by command id. A
// keep-alive thread owns the admin queue's periodic traffic.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "blk/block_device.h"
#include "common/task_pool.h"
#include "nvmf/auth_host.h"

namespace kvtier::nvmf {

struct HostOptions {
  std::string address = "127.0.0.1";
  uint16_t port = 4420;
  std::string subnqn;
  std::string hostnqn = "nqn.2024-01.io.kvtier:host";
  uint32_t nsid = 1;
  // Sized for the store: a disk tier keeps read_depth (32) reads of a batch
  // in flight, and several replicas' batches run at once. Four queues of 63
  // commands loaded E's disk hits at 1.14x the rate of one queue of 31 in
  // the main job (docs/benchmarks.md, 2026-12-07).
  uint32_t io_queues = 4;
  uint16_t queue_size = 64;
  bool hdgst = false;
  bool ddgst = false;
  std::chrono::milliseconds kato{5000};
  std::chrono::milliseconds io_timeout{10000};
  std::chrono::milliseconds reconnect_delay{1000};
  std::chrono::milliseconds ctrl_loss_tmo{60000};  // negative: retry forever
  std::chrono::milliseconds fast_io_fail_tmo{-1};  // negative: I/O waits until ctrl loss
  // DH-HMAC-CHAP secrets ("DHHC-1:..." as nvme-cli prints them; empty: none).
  // With the host's, every queue authenticates when the controller asks;
  // with the controller's too, the controller must prove itself, and one
  // that does not ask for authentication at all is refused.
  std::string dhchap_secret;
  std::string dhchap_ctrl_secret;
};

// One entry of a discovery log page (what `nvme discover` prints).
struct DiscoveryEntry {
  uint8_t trtype = 0;   // 3: TCP
  uint8_t adrfam = 0;   // 1: IPv4
  uint8_t subtype = 0;  // 2: NVM subsystem, 3: discovery
  uint16_t portid = 0;
  std::string trsvcid;  // port
  std::string traddr;
  std::string subnqn;
};
struct DiscoveryLog {
  uint64_t generation = 0;
  std::vector<DiscoveryEntry> entries;
};

class NvmeTcpDevice : public blk::BlockDevice {
 public:
  // Reads the discovery log of the target at options.address:port through its
  // discovery controller (options.subnqn is ignored; hostnqn is sent).
  static Result<DiscoveryLog> discover(const HostOptions& options);
  // Connects (admin + I/O queues) and identifies the namespace.
  static Result<std::unique_ptr<NvmeTcpDevice>> connect(const HostOptions& options);
  ~NvmeTcpDevice() override;

  std::string name() const override;
  uint32_t block_size() const override { return block_size_; }
  uint32_t buffer_alignment() const override { return 1; }
  uint64_t capacity() const override { return capacity_; }
  void read(uint64_t offset, MutableByteView dst, blk::IoCallback cb) override;
  void write(uint64_t offset, ByteView src, blk::IoCallback cb) override;
  void flush(blk::IoCallback cb) override;
  void trim(uint64_t offset, uint64_t length, blk::IoCallback cb) override;
  // One Read command for the whole range (when it fits one and has at most
  // kMaxReadvParts parts), its data scattered over the parts.
  void readv(uint64_t offset, std::span<const MutableByteView> parts, blk::IoCallback cb) override;
  static constexpr size_t kMaxReadvParts = 256;
  // A caller that waits anyway runs its command on its own thread, without
  // the hand-off to a submitter.
  Status read_sync(uint64_t offset, MutableByteView dst) override;
  Status write_sync(uint64_t offset, ByteView src) override;
  blk::DeviceStats stats() const override;
  // Reads land straight in the caller's buffers (C2H data is received into
  // them) and vectored reads are one command; no registered buffers, so the
  // disk tier still stages its reads.
  blk::DeviceCapabilities capabilities() const override;

  uint64_t reconnects() const { return reconnects_; }
  // Reads (plain or vectored) and writes sent by the caller's thread with no
  // thread waiting for them.
  // A request split into several commands counts each.
  uint64_t async_reads() const { return async_reads_; }
  uint64_t async_writes() const { return async_writes_; }
  // Commands (or whole requests) handed to a submitter thread instead,
  // retries after a failed connection not counted.
  uint64_t blocking_requests() const { return blocking_requests_; }
  // Commands issued from a completion callback (sent by the dispatcher; a
  // request split into several commands counts each).
  uint64_t from_callbacks() const { return from_callbacks_; }
  static constexpr size_t kMaxSubmitters = 32;
  // The most commands that were ever in flight at once on one I/O queue.
  uint32_t peak_in_flight() const { return peak_in_flight_; }
  bool connected() const;

 private:
  class Queue;
  struct Command;
  explicit NvmeTcpDevice(HostOptions o);
  Status establish();  // connects every queue; caller holds state_mu_
  // The steps of establish(): one queue's Connect to controller `cntlid`
  // (FFFFh: any; `dw0` gets the answer), and the admin queue's enable,
  // Identify and Set Features (sizes, limits, queues granted).
  Status connect_queue(Queue& q, uint16_t qid, uint16_t sqsize, uint32_t kato_ms, uint16_t cntlid,
                       uint32_t* dw0 = nullptr);
  Status enable_and_identify(Queue& admin, uint32_t* io_queues_granted);
  // The DH-HMAC-CHAP transaction of queue `qid` after a Connect that asked
  // for it (or refused because the controller did not ask and should have).
  Status authenticate_queue(Queue& q, uint16_t qid, uint32_t connect_dw0);
  Status run(Command& cmd);
  // Sends `cmd` without a waiting thread (see the top of this file),
  // counted in `sent_async` (may be null): `done` gets its outcome, and if
  // its connection fails the command is redone by `retry` on a submitter. False, leaving `cmd`,
  // when it cannot; the caller then takes the blocking path.
  bool try_async(std::unique_ptr<Command>& cmd, const blk::IoCallback& done,
                 std::function<Status()> retry, std::atomic<uint64_t>* sent_async = nullptr);
  // Sends a request of `bytes` as commands of at most max_transfer_ bytes:
  // `send_piece(at, n, piece_done)` sends the piece at `at`, and once every
  // piece's piece_done has run the request is finished (counted with
  // `count`, `cb` called) with the first failure.
  void split_into_commands(
      uint64_t bytes, std::function<void(blk::DeviceStats&)> count, blk::IoCallback cb,
      const std::function<void(uint64_t, uint64_t, blk::IoCallback)>& send_piece);
  // One command's read or write: without a waiting thread if it can,
  // else on a submitter.
  void send_read(uint64_t offset, MutableByteView dst, blk::IoCallback done);
  void send_write(uint64_t offset, ByteView src, blk::IoCallback done);
  // Sends `cmd` without a waiting thread if it can (counted in
  // `sent_async`, may be null), else runs `blocking` on a submitter; one
  // issued on a receiver thread is handed to the dispatcher first.
  void send(std::unique_ptr<Command> cmd, blk::IoCallback done, std::function<Status()> blocking,
            std::atomic<uint64_t>* sent_async);
  // Runs `blocking` on a submitter, then `done` with its outcome.
  void post_blocking(blk::IoCallback done, std::function<Status()> blocking);
  // The callback that finishes a request: finish(st, count, cb).
  blk::IoCallback finishing(std::function<void(blk::DeviceStats&)> count, blk::IoCallback cb);
  void end_async();  // one command sent by try_async is done
  // One command's SQE and buffers: a Read of `dst` (or of `parts`, in
  // order), a Write of `src` (in the capsule when it fits), a Dataset
  // Management deallocate of `blocks` blocks. Each at most max_transfer_.
  void fill_read(Command& c, uint64_t offset, MutableByteView dst) const;
  void fill_readv(Command& c, uint64_t offset, const std::vector<MutableByteView>& parts) const;
  void fill_write(Command& c, uint64_t offset, ByteView src) const;
  void fill_trim(Command& c, uint64_t offset, uint64_t blocks) const;
  // The blocking bodies of read/write/flush/trim, run by a submitter.
  Status read_blocking(uint64_t offset, MutableByteView dst);
  Status readv_blocking(uint64_t offset, const std::vector<MutableByteView>& parts);
  Status write_blocking(uint64_t offset, ByteView src);
  Status flush_blocking();
  Status trim_blocking(uint64_t offset, uint64_t length);
  // Counts the request (with `count` when it succeeded) and calls back.
  void finish(const Status& st, const std::function<void(blk::DeviceStats&)>& count,
              const blk::IoCallback& cb);
  Status run_once(Command& cmd);
  void lost(uint64_t generation, const Status& why);  // caller holds no lock
  Status wait_until_up(std::unique_lock<std::mutex>& lk);
  // Whether `c` passes the limits now in force (a reconnect may have lowered
  // them since it was planned).
  bool planned_past_limits(const Command& c) const;
  void keepalive_loop();

  HostOptions opt_;
  uint32_t block_size_ = 0;
  uint64_t capacity_ = 0;
  // Set from Identify at each (re)connect while I/O goes on: atomics, read
  // once per request.
  std::atomic<uint32_t> max_transfer_{0};
  // Writes up to this many bytes go in the command capsule (0: never).
  static constexpr uint32_t kMaxInlineWrite = 128u << 10;
  std::atomic<uint32_t> inline_write_max_{0};
  uint16_t cntlid_ = 0;
  std::optional<HostAuthKeys> auth_keys_;   // parsed from opt_'s secrets
  std::atomic<uint16_t> next_auth_tid_{0};  // transaction ids, one per queue's transaction

  mutable std::mutex state_mu_;  // guards the fields below and (re)connection
  std::condition_variable state_cv_;
  bool up_ = false;
  bool dead_ = false;  // ctrl_loss_tmo passed: the device fails everything
  std::chrono::steady_clock::time_point lost_at_{};
  std::chrono::steady_clock::time_point next_attempt_{};
  std::shared_ptr<Queue> admin_;
  std::vector<std::shared_ptr<Queue>> io_;
  uint64_t generation_ = 0;  // bumped on each successful (re)connect

  std::atomic<uint32_t> next_queue_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> reconnects_{0};
  std::atomic<uint64_t> async_reads_{0};
  std::atomic<uint64_t> async_writes_{0};
  std::atomic<uint64_t> blocking_requests_{0};
  std::atomic<uint64_t> from_callbacks_{0};
  std::atomic<uint32_t> peak_in_flight_{0};
  std::thread keepalive_;
  mutable std::mutex stats_mu_;
  blk::DeviceStats stats_;
  // Commands sent by try_async and not yet called back; the destructor
  // waits for them before the submitters (which retry failed ones) go.
  std::mutex async_mu_;
  std::condition_variable async_cv_;
  uint64_t async_in_flight_ = 0;
  // Sends the requests that completion callbacks issue (a receiver thread
  // must not send); it may block on a socket, never on a command.
  std::unique_ptr<TaskPool> dispatcher_;
  // Last member: destroyed first, so every posted request has run (and
  // called back) before the queues and the rest of the device go.
  std::unique_ptr<TaskPool> submitters_;
};

}  // namespace kvtier::nvmf
