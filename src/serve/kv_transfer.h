// Prefill-to-decode KV transfer over loopback TCP (docs/pd-transfer.md).
//
// Each decode replica owns a KvTransferReceiver: a listener on 127.0.0.1 at
// an ephemeral port, with one thread accepting and one thread per connected
// prefill replica. A prefill replica's KvTransferSender keeps one connection
// per decode replica and sends a request's KV blocks as one PD frame
// (pd_frame.h); the receiver bounds every length before it allocates, checks
// each block's CRC32C and that its bytes are the key's KV (kv_content.h),
// and acks. Any malformed frame gets an ack naming the error class and the
// connection is closed (after a bad length the stream cannot be trusted).
//
// Who may send: any local process can connect to a loopback port, so each
// connection must open with a preface carrying the receiver's random token
// (token(), handed to senders in process: add_receiver()). A connection
// without it within kPdPrefaceTimeoutMs is closed unanswered and counted;
// at most kPdMaxConnections are served at once.
//
// Thread-safety: a receiver's stats() may be called from any thread; a
// sender belongs to one thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/buffer.h"
#include "common/status.h"
#include "kv/block_key.h"
#include "serve/pd_frame.h"

namespace kvtier::serve {

// The preface: 8 bytes "KVPDAUTH", then the receiver's 16-byte token.
constexpr size_t kPdPrefaceBytes = 24;
constexpr int kPdPrefaceTimeoutMs = 2000;
constexpr size_t kPdMaxConnections = 64;

struct KvReceiverOptions {
  PdLimits limits;
  // Frames for another namespace are refused (a decode replica serves one model).
  kv::Key128 ns_digest;
  // Check every block's bytes against its key (the testbed's KV is a
  // function of the key); the time it takes is reported in the ack.
  bool verify_content = true;
};

struct KvReceiverStats {
  uint64_t frames = 0;           // frames accepted (every block verified)
  uint64_t blocks_verified = 0;  // blocks whose CRC and content checked out
  uint64_t frame_bytes = 0;      // bytes of accepted frames (header + table + payload)
  uint64_t payload_bytes = 0;    // of which block bytes
  uint64_t rejected_frames = 0;  // malformed frames (ack with an error, connection closed)
  uint64_t truncated = 0;        // connections that ended inside a frame
  uint64_t unauthenticated = 0;  // connections closed for a missing or wrong preface
  uint64_t over_limit = 0;       // connections closed at accept: kPdMaxConnections served
  PdError last_error = PdError::kNone;
};

class KvTransferReceiver {
 public:
  static Result<std::unique_ptr<KvTransferReceiver>> start(const KvReceiverOptions& options);
  ~KvTransferReceiver();
  KvTransferReceiver(const KvTransferReceiver&) = delete;
  KvTransferReceiver& operator=(const KvTransferReceiver&) = delete;

  uint16_t port() const { return port_; }
  // What a sender must present first on each connection.
  const kv::Key128& token() const { return token_; }
  KvReceiverStats stats() const;

 private:
  explicit KvTransferReceiver(const KvReceiverOptions& options) : options_(options) {}
  void accept_loop();
  void serve(int fd);
  // Reads and checks the preface; false: close unanswered.
  bool authenticate(int fd);
  // Reads and checks one frame; false when the connection must close.
  bool serve_one(int fd, AlignedBuffer* payload, std::vector<std::byte>* table);
  void reject(int fd, uint64_t request_id, const Status& st);

  KvReceiverOptions options_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe: written once to stop the acceptor
  uint16_t port_ = 0;
  kv::Key128 token_;
  size_t serving_ = 0;  // connections being served (guarded by mu_)
  std::thread acceptor_;
  mutable std::mutex mu_;                  // guards conns_, threads_, finished_, stats_
  std::vector<int> conns_;                 // served now; each closed by its thread
  std::vector<std::thread> threads_;       // joined once finished (accept loop) or at the end
  std::vector<std::thread::id> finished_;  // threads that ended, to be joined
  KvReceiverStats stats_;
  std::atomic<bool> stopping_{false};
};

struct TransferOutcome {
  uint32_t blocks = 0;
  uint64_t frame_bytes = 0;    // bytes written to the socket
  uint64_t payload_bytes = 0;  // of which block bytes
  // From the first checksum to the ack, less the receiver's testbed content
  // check: what the transfer itself cost.
  double wall_s = 0;
  double receiver_testbed_s = 0;
};

class KvTransferSender {
 public:
  KvTransferSender() = default;
  ~KvTransferSender();
  KvTransferSender(const KvTransferSender&) = delete;
  KvTransferSender& operator=(const KvTransferSender&) = delete;

  // The token of the receiver on 127.0.0.1:`port` (KvTransferReceiver::token()).
  void add_receiver(uint16_t port, const kv::Key128& token) { tokens_[port] = token; }

  // Sends the KV of `keys` (block_bytes each, content generated from each
  // key, untimed) to the receiver on 127.0.0.1:`port` and waits for its ack.
  // An ack with an error is returned as that error.
  Result<TransferOutcome> send(uint16_t port, uint64_t request_id, const kv::Key128& ns_digest,
                               std::span<const kv::Key128> keys, uint32_t block_bytes);
  // Sends `blocks` as they are (tests: bytes that are not the key's KV).
  Result<TransferOutcome> send_blocks(uint16_t port, uint64_t request_id,
                                      const kv::Key128& ns_digest, std::span<const kv::Key128> keys,
                                      std::span<const ByteView> blocks);

 private:
  Result<int> connection(uint16_t port);
  void drop(uint16_t port);

  std::unordered_map<uint16_t, int> conns_;
  std::unordered_map<uint16_t, kv::Key128> tokens_;
  AlignedBuffer buf_;
};

}  // namespace kvtier::serve
