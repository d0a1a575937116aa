// libFuzzer target over the NVMe/TCP host (NvmeTcpDevice): what a broken or
// malicious target sends. A scripted target on loopback answers each PDU the
// host sends with the next chunk of a valid transcript (ICResp, Connect,
// Property Set, Identify, Set Features, a blocking read, a write through R2T,
// a read and a write (R2T) with callbacks, a vectored read into two
// buffers, or a discovery log), after the fuzz input's
// edits to those chunks. The host
// runs its real sockets, threads and timeouts; ASan and UBSan watch every
// byte it writes into the caller's buffers. With no edits, the transcript
// must connect and move the expected data: the harness checks itself on
// every run. Build and run with scripts/fuzz-nvmf-host.sh.
//
// Input: byte 0 picks the scenario (bit 0: discovery instead of connect and
// I/O; bit 1: header digests; bit 2: data digests). Then 5-byte edits:
// [chunk][pos lo][pos hi][kind][value]; kind % 5: 0 set the byte at pos,
// 1 insert a byte, 2 delete a byte, 3 cut the chunk at pos, 4 repeat the
// chunk (a PDU the host did not ask for).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "nvmf/host_device.h"
#include "nvmf/pdu.h"

namespace {

using namespace kvtier;
using namespace kvtier::nvmf;

using Chunk = std::vector<uint8_t>;
// The target's answers on one connection: chunk i is sent after the host's
// i-th PDU (its ICReq is PDU 0).
using Connection = std::vector<Chunk>;

constexpr uint32_t kMaxH2CData = 16 << 10;
constexpr uint32_t kIoBytes = 8192;
constexpr uint8_t kPattern = 0x5A;

struct Digests {
  bool hdgst = false;
  bool ddgst = false;
};

void append(Chunk& c, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  c.insert(c.end(), b, b + n);
}

// The digest flags of the ICResp follow what the host asks for.
Chunk icresp(Digests d) {
  HeaderBuf h;
  IcResp r;
  r.maxh2cdata = kMaxH2CData;
  r.hdgst = d.hdgst;
  r.ddgst = d.ddgst;
  Chunk c;
  append(c, h.data(), encode_icresp(r, h));
  return c;
}

void add_resp(Chunk& c, Digests d, uint32_t dw0 = 0, uint16_t status = 0) {
  Cqe cqe{};
  put32(cqe.data(), dw0);
  put16(&cqe[12], 0);  // command id: the host's first free id, 0 here
  put16(&cqe[14], uint16_t(status << 1));
  HeaderBuf h;
  append(c, h.data(), encode_capsule_resp(cqe, d.hdgst, h));
}

// C2HData carrying `data` from `offset`; `flags` may add LAST and SUCCESS.
void add_data(Chunk& c, Digests d, const Chunk& data, uint32_t offset, uint8_t flags) {
  HeaderBuf h;
  const DataHeader dh{0, 0, offset, uint32_t(data.size())};
  append(c, h.data(), encode_data(PduType::kC2HData, dh, flags, d.hdgst, d.ddgst, h));
  append(c, data.data(), data.size());
  if (d.ddgst) {
    uint8_t dg[4];
    put32(dg, digest(ByteView(reinterpret_cast<const std::byte*>(data.data()), data.size())));
    append(c, dg, 4);
  }
}

Chunk resp(Digests d, uint32_t dw0 = 0) {
  Chunk c;
  add_resp(c, d, dw0);
  return c;
}

Chunk identify_controller(Digests d) {
  Chunk id(4096, 0);
  id[77] = 5;           // MDTS: 128 KiB
  put32(&id[1792], 4);  // IOCCSZ: the bare command, so writes take R2T
  Chunk c;
  add_data(c, d, id, 0, kFlagDataLast);
  add_resp(c, d);
  return c;
}

Chunk identify_namespace(Digests d) {
  Chunk id(4096, 0);
  put64(id.data(), 256);  // NSZE in blocks
  id[130] = 12;           // LBAF0: 4 KiB blocks
  Chunk c;
  add_data(c, d, id, 0, kFlagDataLast | kFlagDataSuccess);
  return c;
}

Chunk read_answer(Digests d) {
  Chunk half(kIoBytes / 2, kPattern);
  Chunk c;
  add_data(c, d, half, 0, 0);
  add_data(c, d, half, kIoBytes / 2, kFlagDataLast);
  add_resp(c, d);
  return c;
}

Chunk r2t(Digests d) {
  HeaderBuf h;
  Chunk c;
  append(c, h.data(), encode_r2t({0, 1, 0, kIoBytes}, d.hdgst, h));
  return c;
}

std::vector<Connection> connect_transcript(Digests d) {
  Connection admin = {icresp(d),
                      resp(d, 1),  // Connect: controller id 1
                      resp(d),     // Property Set CC.EN
                      identify_controller(d),
                      resp(d),  // Set Features: one I/O queue
                      identify_namespace(d)};
  // Blocking read, blocking write (R2T), read with a callback, write with a
  // callback (R2T answered by the data sender), vectored read.
  Connection io = {icresp(d),      resp(d), read_answer(d), r2t(d),        resp(d),
                   read_answer(d), r2t(d),  resp(d),        read_answer(d)};
  return {admin, io};
}

std::vector<Connection> discovery_transcript(Digests d) {
  Chunk head(1024, 0);
  put64(head.data(), 7);      // generation
  put64(head.data() + 8, 1);  // one record
  Chunk page(2048, 0);
  std::memcpy(page.data(), head.data(), 1024);
  uint8_t* e = page.data() + 1024;
  e[0] = 3;  // TCP
  e[1] = 1;  // IPv4
  e[2] = 2;  // NVM subsystem
  std::memcpy(e + 32, "4420", 4);
  std::memcpy(e + 256, "nqn.2024-01.io.kvtier:fuzz", 26);
  std::memcpy(e + 512, "127.0.0.1", 9);
  Chunk log1, log2;
  add_data(log1, d, head, 0, kFlagDataLast);
  add_resp(log1, d);
  add_data(log2, d, page, 0, kFlagDataLast | kFlagDataSuccess);
  return {{icresp(d), resp(d, 1), resp(d), log1, log2}};
}

// Applies the input's edits; returns how many there were.
size_t apply_edits(std::vector<Connection>& conns, const uint8_t* p, size_t n) {
  std::vector<Chunk*> chunks;
  for (auto& c : conns) {
    for (auto& ch : c) chunks.push_back(&ch);
  }
  size_t edits = 0;
  for (; n >= 5; p += 5, n -= 5, ++edits) {
    Chunk& c = *chunks[p[0] % chunks.size()];
    const size_t pos = (p[1] | size_t(p[2]) << 8) % (c.size() + 1);
    switch (p[3] % 5) {
      case 0:
        if (pos < c.size()) c[pos] = p[4];
        break;
      case 1:
        c.insert(c.begin() + long(pos), p[4]);
        break;
      case 2:
        if (pos < c.size()) c.erase(c.begin() + long(pos));
        break;
      case 3:
        c.resize(pos);
        break;
      default:
        if (c.size() < (1 << 20)) {
          const Chunk copy = c;
          c.insert(c.end(), copy.begin(), copy.end());
        }
        break;
    }
  }
  return edits;
}

bool wait_readable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, ms) == 1;
}

bool read_exact(int fd, void* buf, size_t n) {
  auto* b = static_cast<uint8_t*>(buf);
  while (n > 0) {
    if (!wait_readable(fd, 2000)) return false;
    const ssize_t r = ::recv(fd, b, n, 0);
    if (r <= 0) return false;
    b += r;
    n -= size_t(r);
  }
  return true;
}

// Serves one accepted connection: after each PDU the host sends, the next
// chunk of the script; when the script is done, the connection closes.
void serve(int fd, const Connection& script) {
  std::vector<uint8_t> pdu;
  for (const Chunk& answer : script) {
    uint8_t ch[8];
    if (!read_exact(fd, ch, 8)) break;
    const uint32_t plen = get32(ch + 4);
    if (plen < 8 || plen > (4u << 20)) break;  // the host under test is not trusted either
    pdu.resize(plen - 8);
    if (!read_exact(fd, pdu.data(), pdu.size())) break;
    if (!answer.empty() && ::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL) < 0) break;
  }
  ::close(fd);
}

// A loopback listener that serves each connection it accepts with the next
// script, each on its own thread.
class ScriptedTarget {
 public:
  explicit ScriptedTarget(std::vector<Connection> scripts) : scripts_(std::move(scripts)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(fd_, 8) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      __builtin_trap();  // the harness itself failed
    }
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~ScriptedTarget() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);  // wakes the acceptor's poll at once
    acceptor_.join();
    for (auto& t : servers_) t.join();
    ::close(fd_);
  }
  uint16_t port() const { return port_; }

 private:
  void accept_loop() {
    for (size_t next = 0; !stop_;) {
      if (!wait_readable(fd_, 1000)) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      if (next >= scripts_.size()) {
        ::close(c);  // more connections than the script has: refused
        continue;
      }
      servers_.emplace_back(serve, c, std::cref(scripts_[next++]));
    }
  }

  std::vector<Connection> scripts_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::vector<std::thread> servers_;
};

// An edited script often leaves the host waiting for bytes that never come:
// a short io_timeout keeps such runs quick. The pristine script gets a long
// one, so a busy machine cannot turn it into a false finding.
HostOptions host_options(uint16_t port, Digests d, bool pristine) {
  HostOptions o;
  o.port = port;
  o.subnqn = "nqn.2024-01.io.kvtier:fuzz";
  o.hdgst = d.hdgst;
  o.ddgst = d.ddgst;
  o.queue_size = 4;
  o.kato = std::chrono::milliseconds(600000);  // no keep-alive during a run
  o.io_timeout = std::chrono::milliseconds(pristine ? 10000 : 30);
  o.reconnect_delay = std::chrono::milliseconds(0);  // a lost connection stays lost
  o.ctrl_loss_tmo = std::chrono::milliseconds(0);
  return o;
}

// Connects, reads and writes; with no edits every step must succeed.
void run_connect(uint16_t port, Digests d, bool pristine) {
  auto dev = NvmeTcpDevice::connect(host_options(port, d, pristine));
  if (!dev.ok()) {
    if (pristine) __builtin_trap();
    return;
  }
  if (pristine && ((*dev)->block_size() != 4096 || (*dev)->capacity() != 256u * 4096)) {
    __builtin_trap();
  }
  // Exactly sized heap buffers: a byte written past them is an ASan finding.
  auto in = std::make_unique<std::byte[]>(kIoBytes);
  const Status rs = (*dev)->read_sync(0, MutableByteView(in.get(), kIoBytes));
  if (pristine && (!rs.ok() || in[kIoBytes - 1] != std::byte{kPattern})) __builtin_trap();
  auto out = std::make_unique<std::byte[]>(kIoBytes);
  std::memset(out.get(), 0x33, kIoBytes);
  const Status ws = (*dev)->write_sync(0, ByteView(out.get(), kIoBytes));
  if (pristine && !ws.ok()) __builtin_trap();
  // A read and a write with callbacks, then a vectored read: sent without a
  // waiting thread, completed (or failed, then retried and failed) from the
  // queue's receiver; the write's data goes out from the data sender.
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;
  auto call = [&](auto&& issue) {
    Status got;
    const int before = calls;
    issue([&](Status st) {
      std::lock_guard lk(mu);
      got = st;
      ++calls;
      cv.notify_all();
    });
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return calls > before; });
    return got;
  };
  const Status as =
      call([&](blk::IoCallback cb) { (*dev)->read(0, MutableByteView(in.get(), kIoBytes), cb); });
  if (pristine && (!as.ok() || (*dev)->async_reads() != 1)) __builtin_trap();
  const Status aw =
      call([&](blk::IoCallback cb) { (*dev)->write(0, ByteView(out.get(), kIoBytes), cb); });
  if (pristine && (!aw.ok() || (*dev)->async_writes() != 1)) __builtin_trap();
  auto first = std::make_unique<std::byte[]>(kIoBytes / 2);
  auto second = std::make_unique<std::byte[]>(kIoBytes / 2);
  const MutableByteView parts[] = {{first.get(), kIoBytes / 2}, {second.get(), kIoBytes / 2}};
  const Status vs = call([&](blk::IoCallback cb) { (*dev)->readv(0, parts, cb); });
  if (pristine && (!vs.ok() || (*dev)->async_reads() != 2 || first[0] != std::byte{kPattern} ||
                   second[kIoBytes / 2 - 1] != std::byte{kPattern})) {
    __builtin_trap();
  }
  dev->reset();
  if (calls != 3) __builtin_trap();  // each called back exactly once
}

void run_discovery(uint16_t port, Digests d, bool pristine) {
  auto log = NvmeTcpDevice::discover(host_options(port, d, pristine));
  if (pristine &&
      (!log.ok() || log->entries.size() != 1 || log->entries[0].traddr != "127.0.0.1")) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t mode = size ? data[0] : 0;
  const bool discovery = mode & 1;
  // The kvtier target answers digests only as asked; so does this script.
  const Digests d{bool(mode & 2), bool(mode & 4)};
  auto scripts = discovery ? discovery_transcript(d) : connect_transcript(d);
  const bool pristine = apply_edits(scripts, data + (size ? 1 : 0), size ? size - 1 : 0) == 0;
  ScriptedTarget target(std::move(scripts));
  if (discovery) {
    run_discovery(target.port(), d, pristine);
  } else {
    run_connect(target.port(), d, pristine);
  }
  return 0;
}
