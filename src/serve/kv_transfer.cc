#include "serve/kv_transfer.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <string>

#include "common/crc32c.h"
#include "engine/kv_content.h"

namespace kvtier::serve {

namespace {

constexpr char kPrefaceMagic[8] = {'K', 'V', 'P', 'D', 'A', 'U', 'T', 'H'};

using Clock = std::chrono::steady_clock;

Status errno_status(const char* what) {
  return Status::io_error(std::string(what) + ": " + std::strerror(errno));
}

// Reads exactly `n` bytes. `*got` says how many arrived before an error or
// the end of the stream (0 with a non-OK status: the peer closed between
// frames).
Status read_exact(int fd, void* buf, size_t n, size_t* got) {
  auto* p = static_cast<char*>(buf);
  *got = 0;
  while (*got < n) {
    const ssize_t r = ::recv(fd, p + *got, n - *got, 0);
    if (r > 0) {
      *got += static_cast<size_t>(r);
    } else if (r == 0) {
      return pd_error(PdError::kTruncated, "connection closed");
    } else if (errno != EINTR) {
      return errno_status("recv");
    }
  }
  return Status::ok_status();
}

// Writes every byte of `iov` (at most IOV_MAX entries per call).
Status write_all(int fd, std::vector<iovec> iov) {
  size_t i = 0;
  while (i < iov.size()) {
    msghdr m{};
    m.msg_iov = &iov[i];
    m.msg_iovlen = std::min<size_t>(iov.size() - i, IOV_MAX);
    ssize_t w = ::sendmsg(fd, &m, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno_status("sendmsg");
    }
    auto left = static_cast<size_t>(w);
    while (i < iov.size() && left >= iov[i].iov_len) left -= iov[i++].iov_len;
    if (i < iov.size()) {
      iov[i].iov_base = static_cast<char*>(iov[i].iov_base) + left;
      iov[i].iov_len -= left;
    }
  }
  return Status::ok_status();
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Socket buffers that hold a whole frame of the study (about 2 MB): the
// sender writes it in one go and the receiver reads it in large pieces, with
// far fewer wake-ups than autotuned buffers that start small (about 1.4x the
// loopback rate on a 2-core VM). Set before connect / listen, so that the
// window scale is negotiated for them; the kernel caps them at its maximum.
void set_buffers(int fd) {
  int bytes = 4 << 20;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

}  // namespace

// ---------------------------------------------------------------- receiver

Result<std::unique_ptr<KvTransferReceiver>> KvTransferReceiver::start(
    const KvReceiverOptions& options) {
  std::unique_ptr<KvTransferReceiver> r(new KvTransferReceiver(options));
  r->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (r->listen_fd_ < 0) return errno_status("socket");
  set_buffers(r->listen_fd_);  // inherited by accepted connections
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;  // an ephemeral port
  if (::bind(r->listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    return errno_status("bind 127.0.0.1");
  }
  if (::listen(r->listen_fd_, 64) != 0) return errno_status("listen");
  socklen_t len = sizeof a;
  if (::getsockname(r->listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return errno_status("getsockname");
  }
  r->port_ = ntohs(a.sin_port);
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&r->token_), sizeof r->token_) != 1) {
    return Status::internal("RAND_bytes failed");
  }
  if (::pipe2(r->wake_, O_CLOEXEC) != 0) return errno_status("pipe2");
  r->acceptor_ = std::thread([p = r.get()] { p->accept_loop(); });
  return r;
}

KvTransferReceiver::~KvTransferReceiver() {
  stopping_ = true;
  if (wake_[1] >= 0) {
    const char c = 0;
    [[maybe_unused]] auto w = ::write(wake_[1], &c, 1);
  }
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    for (int fd : conns_) ::shutdown(fd, SHUT_RDWR);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();  // each closed its connection
  for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

KvReceiverStats KvTransferReceiver::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void KvTransferReceiver::accept_loop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0 || stopping_) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    set_nodelay(fd);
    std::lock_guard lock(mu_);
    // Threads that ended are joined here, so that connections that come and
    // go leave no thread behind.
    for (std::thread::id id : finished_) {
      auto it = std::find_if(threads_.begin(), threads_.end(),
                             [id](const std::thread& t) { return t.get_id() == id; });
      if (it != threads_.end()) {
        it->join();
        threads_.erase(it);
      }
    }
    finished_.clear();
    if (serving_ >= kPdMaxConnections) {
      ++stats_.over_limit;
      ::close(fd);
      continue;
    }
    ++serving_;
    // A connection is closed by its own thread, under mu_, after it stopped
    // using it (and is taken out of conns_ first, so the destructor never
    // shuts down a descriptor number that was reused).
    conns_.push_back(fd);
    threads_.emplace_back([this, fd] { serve(fd); });
  }
}

void KvTransferReceiver::serve(int fd) {
  if (authenticate(fd)) {
    AlignedBuffer payload;
    std::vector<std::byte> table;
    while (!stopping_ && serve_one(fd, &payload, &table)) {
    }
  }
  ::shutdown(fd, SHUT_RDWR);
  std::lock_guard lock(mu_);
  --serving_;
  conns_.erase(std::remove(conns_.begin(), conns_.end(), fd), conns_.end());
  ::close(fd);
  finished_.push_back(std::this_thread::get_id());
}

bool KvTransferReceiver::authenticate(int fd) {
  // The whole preface must come within one deadline (a byte at a time
  // does not stretch it); frames after it may take as long as their sender
  // needs.
  std::byte p[kPdPrefaceBytes];
  size_t got = 0;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kPdPrefaceTimeoutMs);
  while (got < sizeof p && !stopping_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd pf{fd, POLLIN, 0};
    const int r = ::poll(&pf, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    const ssize_t n = ::recv(fd, p + got, sizeof p - got, 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  const bool read = got == sizeof p;
  const bool ok = read && std::memcmp(p, kPrefaceMagic, 8) == 0 &&
                  CRYPTO_memcmp(p + 8, &token_, sizeof token_) == 0;
  if (!ok) {
    std::lock_guard lock(mu_);
    ++stats_.unauthenticated;
    return false;
  }
  return true;
}

void KvTransferReceiver::reject(int fd, uint64_t request_id, const Status& st) {
  {
    std::lock_guard lock(mu_);
    ++stats_.rejected_frames;
    stats_.last_error = pd_error_of(st);
  }
  PdAck ack;
  ack.request_id = request_id;
  ack.error = pd_error_of(st);
  std::byte out[kPdAckSize];
  encode_pd_ack(ack, out);
  [[maybe_unused]] auto w = write_all(fd, {{out, kPdAckSize}});
}

bool KvTransferReceiver::serve_one(int fd, AlignedBuffer* payload, std::vector<std::byte>* table) {
  const auto truncated = [&](size_t got) {
    if (got == 0) return false;
    std::lock_guard lock(mu_);
    ++stats_.truncated;
    stats_.last_error = PdError::kTruncated;
    return false;
  };
  std::byte hb[kPdHeaderSize];
  size_t got = 0;
  if (!read_exact(fd, hb, kPdHeaderSize, &got).ok()) return truncated(got);
  auto h = decode_pd_header(ByteView(hb, kPdHeaderSize), options_.limits);
  if (!h.ok()) {
    reject(fd, 0, h.status());
    return false;
  }
  if (!(h->ns_digest == options_.ns_digest)) {
    reject(fd, h->request_id,
           pd_error(PdError::kWrongNamespace, "frame namespace " + h->ns_digest.to_hex()));
    return false;
  }
  // The header is checked: the table's length is bounded by max_blocks and
  // the payload's by max_payload_bytes.
  table->resize(pd_table_bytes(h->block_count));
  if (!read_exact(fd, table->data(), table->size(), &got).ok()) return truncated(1);
  auto entries = decode_pd_table(*table, *h, options_.limits);
  if (!entries.ok()) {
    reject(fd, h->request_id, entries.status());
    return false;
  }
  if (payload->size() < h->payload_bytes) *payload = AlignedBuffer(h->payload_bytes);
  if (h->payload_bytes > 0 && !read_exact(fd, payload->data(), h->payload_bytes, &got).ok()) {
    return truncated(1);
  }
  Clock::duration testbed{};
  uint64_t at = 0;
  for (const auto& e : *entries) {
    const ByteView bytes(payload->data() + at, e.length);
    at += e.length;
    if (auto st = check_pd_block(e, bytes, false); !st.ok()) {
      reject(fd, h->request_id, st);
      return false;
    }
    if (!options_.verify_content) continue;
    const auto t0 = Clock::now();
    const bool same = engine::verify_kv_block(e.key, bytes);
    testbed += Clock::now() - t0;
    if (!same) {
      reject(fd, h->request_id,
             pd_error(PdError::kWrongContent, "block " + e.key.to_hex() + " is not its key's KV"));
      return false;
    }
  }
  PdAck ack;
  ack.request_id = h->request_id;
  ack.blocks_verified = h->block_count;
  ack.frame_bytes = kPdHeaderSize + table->size() + h->payload_bytes;
  ack.testbed_ns =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(testbed).count());
  {
    std::lock_guard lock(mu_);
    ++stats_.frames;
    stats_.blocks_verified += h->block_count;
    stats_.frame_bytes += ack.frame_bytes;
    stats_.payload_bytes += h->payload_bytes;
  }
  std::byte out[kPdAckSize];
  encode_pd_ack(ack, out);
  return write_all(fd, {{out, kPdAckSize}}).ok();
}

// ------------------------------------------------------------------ sender

KvTransferSender::~KvTransferSender() {
  for (auto& [port, fd] : conns_) ::close(fd);
}

Result<int> KvTransferSender::connection(uint16_t port) {
  if (auto it = conns_.find(port); it != conns_.end()) return it->second;
  auto token = tokens_.find(port);
  if (token == tokens_.end()) {
    return Status::invalid_argument("no token for the PD receiver on port " + std::to_string(port) +
                                    " (add_receiver)");
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno_status("socket");
  set_buffers(fd);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    auto st = errno_status(("connect 127.0.0.1:" + std::to_string(port)).c_str());
    ::close(fd);
    return st;
  }
  set_nodelay(fd);
  std::byte preface[kPdPrefaceBytes];
  std::memcpy(preface, kPrefaceMagic, 8);
  std::memcpy(preface + 8, &token->second, sizeof token->second);
  if (::send(fd, preface, sizeof preface, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof preface)) {
    auto st = errno_status("sending the PD preface");
    ::close(fd);
    return st;
  }
  conns_[port] = fd;
  return fd;
}

void KvTransferSender::drop(uint16_t port) {
  if (auto it = conns_.find(port); it != conns_.end()) {
    ::close(it->second);
    conns_.erase(it);
  }
}

Result<TransferOutcome> KvTransferSender::send(uint16_t port, uint64_t request_id,
                                               const kv::Key128& ns_digest,
                                               std::span<const kv::Key128> keys,
                                               uint32_t block_bytes) {
  // The KV a prefill replica would hold in HBM; generating it is testbed
  // work and is not timed.
  const size_t need = keys.size() * size_t{block_bytes};
  if (buf_.size() < need) buf_ = AlignedBuffer(need);
  std::vector<ByteView> blocks(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const MutableByteView b = buf_.subview(i * block_bytes, block_bytes);
    engine::fill_kv_block(keys[i], b);
    blocks[i] = b;
  }
  return send_blocks(port, request_id, ns_digest, keys, blocks);
}

Result<TransferOutcome> KvTransferSender::send_blocks(uint16_t port, uint64_t request_id,
                                                      const kv::Key128& ns_digest,
                                                      std::span<const kv::Key128> keys,
                                                      std::span<const ByteView> blocks) {
  if (keys.size() != blocks.size()) {
    return Status::invalid_argument("a PD frame needs one block per key");
  }
  auto fd = connection(port);
  if (!fd.ok()) return fd.status();
  const auto t0 = Clock::now();
  std::vector<std::byte> head = encode_pd_head(request_id, ns_digest, keys, blocks);
  uint64_t payload_bytes = 0;
  for (const auto& b : blocks) payload_bytes += b.size();
  std::vector<iovec> iov;
  iov.reserve(blocks.size() + 1);
  iov.push_back({head.data(), head.size()});
  for (const auto& b : blocks) {
    if (!b.empty()) iov.push_back({const_cast<std::byte*>(b.data()), b.size()});
  }
  TransferOutcome out;
  out.blocks = static_cast<uint32_t>(keys.size());
  out.payload_bytes = payload_bytes;
  out.frame_bytes = head.size() + payload_bytes;
  if (auto st = write_all(*fd, std::move(iov)); !st.ok()) {
    drop(port);
    return st;
  }
  std::byte ab[kPdAckSize];
  size_t got = 0;
  if (auto st = read_exact(*fd, ab, kPdAckSize, &got); !st.ok()) {
    drop(port);
    return st;
  }
  const auto t1 = Clock::now();
  auto ack = decode_pd_ack(ByteView(ab, kPdAckSize));
  if (!ack.ok()) {
    drop(port);
    return ack.status();
  }
  if (ack->error != PdError::kNone) {
    drop(port);  // the receiver closes after a refusal
    return pd_error(ack->error, "the decode replica refused request " + std::to_string(request_id));
  }
  if (ack->request_id != request_id || ack->frame_bytes != out.frame_bytes ||
      ack->blocks_verified != out.blocks) {
    drop(port);
    return pd_error(PdError::kRequestMismatch, "ack for request " +
                                                   std::to_string(ack->request_id) + " (" +
                                                   std::to_string(ack->frame_bytes) +
                                                   " bytes), sent " + std::to_string(request_id));
  }
  out.receiver_testbed_s = static_cast<double>(ack->testbed_ns) * 1e-9;
  out.wall_s =
      std::max(0.0, std::chrono::duration<double>(t1 - t0).count() - out.receiver_testbed_s);
  return out;
}

}  // namespace kvtier::serve
