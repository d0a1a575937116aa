// NVMe/TCP initiator: queues, controller bring-up, reconnect state machine.
#include "nvmf/host_device.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

#include "common/crc32c.h"
#include "nvmf/pdu.h"
#include "nvmf/socket_stream.h"

namespace kvtier::nvmf {

using Clock = std::chrono::steady_clock;

struct NvmeTcpDevice::Command {
  Sqe sqe{};
  ByteView out;  // data the controller pulls (R2T) or in-capsule data
  bool in_capsule = false;
  MutableByteView in;  // data the controller sends (C2HData)
  uint32_t dw0 = 0;
  uint16_t status = 0;  // NVMe status field without the phase bit
};

// One TCP connection (admin or I/O queue) with many commands in flight.
// Any number of threads call exec() at once (up to the queue size; more
// wait for a free command id). A receiver thread owned by the queue reads
// every PDU and dispatches it by command id: C2HData goes straight into the
// caller's buffer, CapsuleResp completes the command, and an R2T is handed
// to the command's own thread, which sends the H2CData (so the receiver never
// blocks on a send while the controller blocks on sending to us).
class NvmeTcpDevice::Queue {
 public:
  // `peak` (may be null) records the most commands ever in flight on one queue.
  static Result<std::shared_ptr<Queue>> open(const HostOptions& o,
                                             std::atomic<uint32_t>* peak = nullptr) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return Status::io_error("nvmf host: socket failed");
    auto q = std::shared_ptr<Queue>(new Queue(fd, o));
    q->peak_ = peak;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(o.port);
    if (inet_pton(AF_INET, o.address.c_str(), &a.sin_addr) != 1) {
      return Status::invalid_argument("nvmf host: address must be IPv4: " + o.address);
    }
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
      return Status::unavailable(std::string("nvmf host: connect: ") + strerror(errno));
    }
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof err;
    if (::poll(&p, 1, int(o.io_timeout.count())) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      return Status::unavailable("nvmf host: cannot connect to " + o.address + ":" +
                                 std::to_string(o.port) +
                                 (err ? ": " + std::string(strerror(err)) : ""));
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    timeval tv{long(o.io_timeout.count() / 1000), long(o.io_timeout.count() % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    tune_socket(fd);
    KVTIER_RETURN_IF_ERROR(q->handshake());
    q->receiver_ = std::thread([p = q.get()] { p->receive_loop(); });
    return q;
  }

  ~Queue() {
    shutdown();
    if (receiver_.joinable()) receiver_.join();
  }

  void shutdown() {
    closing_ = true;
    stream_.shutdown();
  }

  // Runs one command and waits for it; a non-OK Status means the transport
  // failed (the queue is then unusable); NVMe errors come back in cmd.status.
  Status exec(Command& cmd) {
    std::unique_lock lk(mu_);
    const auto deadline = Clock::now() + io_timeout_;
    // Honour the queue size: at most slots_.size() commands in flight.
    while (free_.empty() && failed_.ok()) {
      if (slot_cv_.wait_until(lk, deadline) == std::cv_status::timeout && free_.empty()) {
        return Status::unavailable("nvmf host: no free command slot within io_timeout");
      }
    }
    if (!failed_.ok()) return failed_;
    const uint16_t cid = free_.back();
    free_.pop_back();
    Slot& s = slots_[cid];
    s = Slot{};
    s.cmd = &cmd;
    s.busy = true;
    if (peak_) {
      const uint32_t now = uint32_t(slots_.size() - free_.size());
      uint32_t seen = peak_->load();
      while (now > seen && !peak_->compare_exchange_weak(seen, now)) {
      }
    }
    lk.unlock();
    put16(&cmd.sqe[2], cid);
    HeaderBuf h;
    const uint32_t dlen = cmd.in_capsule ? uint32_t(cmd.out.size()) : 0;
    const uint32_t n = encode_capsule_cmd(cmd.sqe, dlen, lim_.hdgst, lim_.ddgst, h);
    uint8_t dd[4];
    if (dlen && lim_.ddgst) put32(dd, digest(cmd.out));
    iovec iov[3] = {{h.data(), n}, {const_cast<std::byte*>(cmd.out.data()), dlen}, {dd, 4}};
    Status st;
    {
      std::lock_guard sl(send_mu_);
      st = stream_.write_all(iov, dlen ? (lim_.ddgst ? 3 : 2) : 1);
    }
    lk.lock();
    if (!st.ok()) fail_locked(lk, st);
    for (;;) {
      if (s.done) break;
      if (!s.r2t.empty()) {
        const R2t r = s.r2t.front();
        s.r2t.erase(s.r2t.begin());
        lk.unlock();
        st = send_h2c(cmd, cid, r);
        lk.lock();
        if (!st.ok()) fail_locked(lk, st);
        continue;
      }
      if (s.cv.wait_until(lk, deadline) == std::cv_status::timeout && !s.done) {
        // The controller did not answer in time: the connection is declared
        // lost. The receiver may be writing into cmd.in, so wait until it has
        // failed every command before the buffer goes back to the caller.
        fail_locked(lk, Status::unavailable("nvmf host: command timed out (io_timeout)"));
      }
    }
    st = s.result;
    s = Slot{};
    free_.push_back(cid);
    slot_cv_.notify_one();
    return st;
  }

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
    Slot& operator=(Slot&& o) {
      cmd = o.cmd;
      busy = o.busy;
      done = o.done;
      received = o.received;
      result = o.result;
      r2t = std::move(o.r2t);
      return *this;
    }
  };

  Queue(int fd, const HostOptions& o)
      : stream_(fd), io_timeout_(o.io_timeout), slots_(std::max<uint16_t>(o.queue_size, 2) - 1) {
    lim_.hdgst = o.hdgst;
    lim_.ddgst = o.ddgst;
    lim_.max_data = 16u << 20;
    for (size_t i = slots_.size(); i-- > 0;) free_.push_back(uint16_t(i));
  }

  // Completes every outstanding command with `why`; `lk` holds mu_. Waits
  // for the receiver to stop touching caller buffers first.
  void fail_locked(std::unique_lock<std::mutex>& lk, const Status& why) {
    if (failed_.ok()) failed_ = why;
    closing_ = true;
    stream_.shutdown();
    recv_cv_.wait(lk, [&] { return receiver_stopped_; });
  }

  Status send_h2c(const Command& cmd, uint16_t cid, const R2t& r) {
    if (cmd.in_capsule || uint64_t(r.offset) + r.length > cmd.out.size()) {
      return Status::corruption("nvmf host: bad R2T");
    }
    std::lock_guard sl(send_mu_);
    for (uint32_t off = 0; off < r.length;) {
      const uint32_t chunk = std::min(r.length - off, maxh2cdata_);
      const ByteView part(cmd.out.data() + r.offset + off, chunk);
      HeaderBuf dh;
      const uint32_t hn =
          encode_data(PduType::kH2CData, {cid, r.ttag, r.offset + off, chunk},
                      off + chunk == r.length ? kFlagDataLast : 0, lim_.hdgst, lim_.ddgst, dh);
      uint8_t dg[4];
      if (lim_.ddgst) put32(dg, digest(part));
      iovec v[3] = {{dh.data(), hn}, {const_cast<std::byte*>(part.data()), chunk}, {dg, 4}};
      KVTIER_RETURN_IF_ERROR(stream_.write_all(v, lim_.ddgst ? 3 : 2));
      off += chunk;
    }
    return Status::ok_status();
  }

  // The slot a PDU names, if a command is outstanding under that id.
  Slot* slot_for(uint16_t cid) {
    std::lock_guard lk(mu_);
    if (cid >= slots_.size() || !slots_[cid].busy || slots_[cid].done) return nullptr;
    return &slots_[cid];
  }

  void complete(Slot& s, Status st) {
    std::lock_guard lk(mu_);
    s.result = std::move(st);
    s.done = true;
    s.cv.notify_all();
  }

  void receive_loop() {
    Status st = receive_all();
    std::lock_guard lk(mu_);
    if (failed_.ok()) failed_ = st.ok() ? Status::unavailable("nvmf host: queue closed") : st;
    stream_.shutdown();
    for (Slot& s : slots_) {
      if (s.busy && !s.done) {
        s.result = failed_;
        s.done = true;
        s.cv.notify_all();
      }
    }
    receiver_stopped_ = true;
    recv_cv_.notify_all();
    slot_cv_.notify_all();
  }

  // Reads PDUs until the connection fails or closes; returns why.
  Status receive_all() {
    uint8_t hdr[kShortHlen + kDigestSize];
    for (;;) {
      // Idle queues must not trip SO_RCVTIMEO: wait for a header with poll.
      pollfd p{stream_.fd(), POLLIN, 0};
      const int pr = ::poll(&p, 1, 200);
      if (closing_) return Status::unavailable("nvmf host: queue closed");
      if (pr == 0) continue;
      if (pr < 0 && errno == EINTR) continue;
      KVTIER_RETURN_IF_ERROR(stream_.read_exact(hdr, kCommonHeaderSize));
      PduError err;
      auto l = parse_common_header(as_bytes_view(hdr, 8), Direction::kControllerToHost, lim_, &err);
      if (!l.ok()) return l.status();
      if (l->ch.type == PduType::kIcResp) return Status::corruption("nvmf host: second ICResp");
      KVTIER_RETURN_IF_ERROR(stream_.read_exact(hdr + 8, l->header_bytes - 8));
      if (l->has_hdgst && !header_digest_ok(as_bytes_view(hdr, l->header_bytes), l->ch.hlen)) {
        return Status::corruption("nvmf host: header digest error");
      }
      const ByteView hv = as_bytes_view(hdr, l->ch.hlen);
      switch (l->ch.type) {
        case PduType::kC2HTermReq: {
          auto t = decode_termreq(hv);
          return Status::unavailable("nvmf host: controller terminated the connection, FES " +
                                     std::to_string(t.ok() ? t->fes : 0));
        }
        case PduType::kCapsuleResp: {
          const Cqe cqe = decode_capsule_resp(hv);
          Slot* s = slot_for(get16(&cqe[12]));
          if (!s) return Status::corruption("nvmf host: CQE for no outstanding command");
          Command& cmd = *s->cmd;
          cmd.dw0 = get32(cqe.data());
          const uint16_t status = uint16_t(get16(&cqe[14]) >> 1);
          if (status) cmd.status = status;
          if (cmd.status == 0 && s->received != cmd.in.size()) {
            return Status::corruption("nvmf host: short data-in");
          }
          complete(*s, Status::ok_status());
          break;
        }
        case PduType::kC2HData: {
          auto d = decode_data_header(hv);
          if (!d.ok()) return d.status();
          Slot* s = slot_for(d->cccid);
          if (!s) return Status::corruption("nvmf host: C2HData for no outstanding command");
          Command& cmd = *s->cmd;
          if (d->length != l->data_len || d->offset != s->received ||
              uint64_t(d->offset) + d->length > cmd.in.size()) {
            return Status::corruption("nvmf host: C2HData out of range");
          }
          // Straight into the caller's buffer: no copy on the host side.
          KVTIER_RETURN_IF_ERROR(stream_.read_exact(cmd.in.data() + d->offset, d->length));
          if (l->has_ddgst) {
            uint8_t got[4];
            KVTIER_RETURN_IF_ERROR(stream_.read_exact(got, 4));
            if (get32(got) != digest(ByteView(cmd.in.data() + d->offset, d->length))) {
              cmd.status = 0x004;  // data transfer error; the connection survives
            }
          }
          s->received += d->length;
          if (l->ch.flags & kFlagDataSuccess) {
            if (!(l->ch.flags & kFlagDataLast) || s->received != cmd.in.size()) {
              return Status::corruption("nvmf host: SUCCESS on a partial read");
            }
            complete(*s, Status::ok_status());
          }
          break;
        }
        case PduType::kR2T: {
          auto d = decode_data_header(hv);
          if (!d.ok()) return d.status();
          std::lock_guard lk(mu_);
          if (d->cccid >= slots_.size() || !slots_[d->cccid].busy || slots_[d->cccid].done) {
            return Status::corruption("nvmf host: R2T for no outstanding command");
          }
          Slot& s = slots_[d->cccid];
          if (s.cmd->in_capsule || uint64_t(d->offset) + d->length > s.cmd->out.size()) {
            return Status::corruption("nvmf host: bad R2T");
          }
          s.r2t.push_back({d->ttag, d->offset, d->length});
          s.cv.notify_all();
          break;
        }
        default:
          return Status::corruption("nvmf host: unexpected PDU");
      }
    }
  }

  Status handshake() {
    HeaderBuf h;
    IcReq r;
    r.hdgst = lim_.hdgst;
    r.ddgst = lim_.ddgst;
    const uint32_t n = encode_icreq(r, h);
    iovec iov{h.data(), n};
    KVTIER_RETURN_IF_ERROR(stream_.write_all(&iov, 1));
    uint8_t b[kIcPduSize];
    KVTIER_RETURN_IF_ERROR(stream_.read_exact(b, kIcPduSize));
    auto l = parse_common_header(as_bytes_view(b, 8), Direction::kControllerToHost, lim_);
    if (!l.ok() || l->ch.type != PduType::kIcResp) {
      return Status::corruption("nvmf host: expected ICResp");
    }
    auto resp = decode_icresp(as_bytes_view(b, kIcPduSize));
    if (!resp.ok()) return resp.status();
    if (resp->hdgst != lim_.hdgst || resp->ddgst != lim_.ddgst) {
      return Status::corruption("nvmf host: controller did not accept the digests asked for");
    }
    maxh2cdata_ = resp->maxh2cdata;
    lim_.max_data = std::max<uint32_t>(lim_.max_data, resp->maxh2cdata);
    return Status::ok_status();
  }

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
};

namespace {

Sqe make_sqe(uint8_t opc, uint32_t nsid, uint32_t sgl_len, uint8_t sgl_type = 0x5A) {
  Sqe s{};
  s[0] = opc;
  s[1] = 0x40;  // PSDT: SGL
  put32(&s[4], nsid);
  put32(&s[32], sgl_len);
  s[39] = sgl_type;
  return s;
}

Status nvme_status(uint16_t st, const char* what) {
  if (st == 0) return Status::ok_status();
  char buf[96];
  snprintf(buf, sizeof buf, "nvmf host: %s failed with status 0x%03x", what, st & 0x7FF);
  return Status::io_error(buf);
}

}  // namespace

namespace {

// Connect capsule data (1024 bytes): HOSTID derived from the host NQN (stable
// and never all zeros), CNTLID, SUBNQN, HOSTNQN.
std::vector<uint8_t> connect_data(const std::string& hostnqn, const std::string& subnqn,
                                  uint16_t cntlid) {
  std::vector<uint8_t> cd(1024, 0);
  for (int i = 0; i < 4; ++i) {
    const std::string salt = hostnqn + char('0' + i);
    put32(&cd[4 * i], crc32c(salt.data(), salt.size()) | 1);
  }
  put16(&cd[16], cntlid);
  std::memcpy(&cd[256], subnqn.data(), std::min<size_t>(255, subnqn.size()));
  std::memcpy(&cd[512], hostnqn.data(), std::min<size_t>(255, hostnqn.size()));
  return cd;
}

std::string fixed_string(const uint8_t* p, size_t n) {
  std::string s(reinterpret_cast<const char*>(p), strnlen(reinterpret_cast<const char*>(p), n));
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

}  // namespace

Result<DiscoveryLog> NvmeTcpDevice::discover(const HostOptions& o) {
  auto q = Queue::open(o);
  if (!q.ok()) return q.status();
  std::vector<uint8_t> cd = connect_data(o.hostnqn, "nqn.2014-08.org.nvmexpress.discovery", 0xFFFF);
  Command c;
  c.sqe = make_sqe(0x7F, 0, 1024, 0x01);
  c.sqe[4] = 0x01;  // Connect, admin queue, 32 entries, KATO 0 (no keep-alive)
  put16(&c.sqe[44], 31);
  c.out = as_bytes_view(cd.data(), cd.size());
  c.in_capsule = true;
  KVTIER_RETURN_IF_ERROR((*q)->exec(c));
  KVTIER_RETURN_IF_ERROR(nvme_status(c.status, "discovery Connect"));
  Command en;
  en.sqe = make_sqe(0x7F, 0, 0);
  put32(&en.sqe[44], 0x14);
  put64(&en.sqe[48], 0x460001);
  KVTIER_RETURN_IF_ERROR((*q)->exec(en));
  KVTIER_RETURN_IF_ERROR(nvme_status(en.status, "Property Set CC"));
  // Header first for the record count, then the whole page (bounded).
  auto get_log = [&](std::vector<uint8_t>& page) -> Status {
    Command g;
    g.sqe = make_sqe(0x02, 0, uint32_t(page.size()));
    const uint32_t numd = uint32_t(page.size() / 4 - 1);
    put32(&g.sqe[40], 0x70 | (numd & 0xFFFF) << 16);
    put32(&g.sqe[44], numd >> 16);
    g.in = as_mutable_view(page.data(), page.size());
    KVTIER_RETURN_IF_ERROR((*q)->exec(g));
    return nvme_status(g.status, "Get Log Page (discovery)");
  };
  std::vector<uint8_t> head(1024);
  KVTIER_RETURN_IF_ERROR(get_log(head));
  const uint64_t numrec = get64(head.data() + 8);
  if (numrec > 1000) return Status::corruption("nvmf host: discovery log claims too many records");
  std::vector<uint8_t> page(1024 * (1 + numrec));
  KVTIER_RETURN_IF_ERROR(get_log(page));
  DiscoveryLog log;
  log.generation = get64(page.data());
  for (uint64_t i = 0; i < numrec; ++i) {
    const uint8_t* e = page.data() + 1024 * (i + 1);
    DiscoveryEntry d;
    d.trtype = e[0];
    d.adrfam = e[1];
    d.subtype = e[2];
    d.portid = get16(e + 4);
    d.trsvcid = fixed_string(e + 32, 32);
    d.subnqn = fixed_string(e + 256, 256);
    d.traddr = fixed_string(e + 512, 256);
    log.entries.push_back(std::move(d));
  }
  return log;
}

NvmeTcpDevice::NvmeTcpDevice(HostOptions o) : opt_(std::move(o)) {}

Result<std::unique_ptr<NvmeTcpDevice>> NvmeTcpDevice::connect(const HostOptions& options) {
  if (options.subnqn.empty()) return Status::invalid_argument("nvmf host: subsystem NQN needed");
  if (options.io_queues == 0 || options.io_queues > 64) {
    return Status::invalid_argument("nvmf host: io_queues must be 1..64");
  }
  std::unique_ptr<NvmeTcpDevice> d(new NvmeTcpDevice(options));
  {
    std::lock_guard lk(d->state_mu_);
    KVTIER_RETURN_IF_ERROR(d->establish());
    d->up_ = true;
  }
  d->keepalive_ = std::thread([p = d.get()] { p->keepalive_loop(); });
  // Enough submitters to fill every queue; each blocks while its command is
  // in flight.
  const size_t depth = size_t(options.io_queues) * std::max<uint16_t>(options.queue_size - 1, 1);
  d->submitters_ = std::make_unique<TaskPool>(std::min<size_t>(depth, 256));
  return d;
}

NvmeTcpDevice::~NvmeTcpDevice() {
  // Requests still queued fail fast once stopping_ is set; those in flight
  // complete on the live queues. Both call back before the queues go.
  stopping_ = true;
  state_cv_.notify_all();
  submitters_.reset();
  if (keepalive_.joinable()) keepalive_.join();
  std::lock_guard lk(state_mu_);
  for (auto& q : io_) q->shutdown();
  if (admin_) admin_->shutdown();
}

std::string NvmeTcpDevice::name() const {
  return "nvme-tcp:" + opt_.address + ":" + std::to_string(opt_.port) + "/" + opt_.subnqn;
}

bool NvmeTcpDevice::connected() const {
  std::lock_guard lk(state_mu_);
  return up_;
}

Status NvmeTcpDevice::establish() {
  for (auto& q : io_) q->shutdown();
  if (admin_) admin_->shutdown();
  io_.clear();
  admin_.reset();
  auto admin = Queue::open(opt_);
  if (!admin.ok()) return admin.status();
  // Connect (admin): 1024 bytes of Connect data in the capsule.
  std::vector<uint8_t> cd(1024, 0);
  put16(&cd[16], 0xFFFF);
  // HOSTID: derived from the host NQN, so it is stable and never all zeros.
  for (int i = 0; i < 4; ++i) {
    const std::string salt = opt_.hostnqn + char('0' + i);
    put32(&cd[4 * i], crc32c(salt.data(), salt.size()) | 1);
  }
  std::memcpy(&cd[256], opt_.subnqn.data(), std::min<size_t>(255, opt_.subnqn.size()));
  std::memcpy(&cd[512], opt_.hostnqn.data(), std::min<size_t>(255, opt_.hostnqn.size()));
  auto connect_cmd = [&](uint16_t qid, uint16_t sqsize, uint32_t kato) {
    Command c;
    c.sqe = make_sqe(0x7F, 0, 1024, 0x01);
    c.sqe[4] = 0x01;
    put16(&c.sqe[42], qid);
    put16(&c.sqe[44], sqsize);
    put32(&c.sqe[48], kato);
    c.out = as_bytes_view(cd.data(), cd.size());
    c.in_capsule = true;
    return c;
  };
  Command c = connect_cmd(0, 31, uint32_t(opt_.kato.count()));
  KVTIER_RETURN_IF_ERROR((*admin)->exec(c));
  KVTIER_RETURN_IF_ERROR(nvme_status(c.status, "admin Connect"));
  cntlid_ = uint16_t(c.dw0);
  put16(&cd[16], cntlid_);
  Command en;  // Property Set CC: EN, 4 KiB pages, IOSQES 6, IOCQES 4
  en.sqe = make_sqe(0x7F, 0, 0);
  en.sqe[4] = 0x00;
  put32(&en.sqe[44], 0x14);
  put64(&en.sqe[48], 0x460001);
  KVTIER_RETURN_IF_ERROR((*admin)->exec(en));
  KVTIER_RETURN_IF_ERROR(nvme_status(en.status, "Property Set CC"));
  std::vector<uint8_t> id(4096);
  Command ic;
  ic.sqe = make_sqe(0x06, 0, 4096);
  put32(&ic.sqe[40], 0x01);
  ic.in = as_mutable_view(id.data(), id.size());
  KVTIER_RETURN_IF_ERROR((*admin)->exec(ic));
  KVTIER_RETURN_IF_ERROR(nvme_status(ic.status, "Identify controller"));
  const uint8_t mdts = id[77];
  max_transfer_ =
      mdts ? std::min<uint32_t>(4096u << std::min<uint8_t>(mdts, 12), 8u << 20) : (8u << 20);
  // IOCCSZ (16-byte units) sizes the I/O capsule: what is left after the
  // 64-byte command may carry write data, which then needs no R2T round
  // trip (the kernel host does the same).
  const uint32_t ioccsz = get32(&id[1792]);
  inline_write_max_ = ioccsz > 4 ? std::min<uint32_t>((ioccsz - 4) * 16, kMaxInlineWrite) : 0;
  Command nq;  // Set Features: Number of Queues
  nq.sqe = make_sqe(0x09, 0, 0);
  put32(&nq.sqe[40], 0x07);
  put32(&nq.sqe[44], (opt_.io_queues - 1) << 16 | (opt_.io_queues - 1));
  KVTIER_RETURN_IF_ERROR((*admin)->exec(nq));
  KVTIER_RETURN_IF_ERROR(nvme_status(nq.status, "Set Features number of queues"));
  const uint32_t granted = std::min<uint32_t>(opt_.io_queues, (nq.dw0 & 0xFFFF) + 1);
  Command ns;
  ns.sqe = make_sqe(0x06, opt_.nsid, 4096);
  ns.in = as_mutable_view(id.data(), id.size());
  KVTIER_RETURN_IF_ERROR((*admin)->exec(ns));
  KVTIER_RETURN_IF_ERROR(nvme_status(ns.status, "Identify namespace"));
  const uint64_t nsze = get64(id.data());
  const uint8_t lbads = id[128 + 4 * (id[26] & 0xF) + 2];
  if (lbads < 9 || lbads > 12 || nsze == 0) {
    return Status::failed_precondition("nvmf host: unsupported namespace format");
  }
  const uint32_t bs = 1u << lbads;
  if (block_size_ && (bs != block_size_ || nsze * bs != capacity_)) {
    return Status::failed_precondition("nvmf host: namespace changed across reconnect");
  }
  block_size_ = bs;
  capacity_ = nsze * bs;
  std::vector<std::shared_ptr<Queue>> io;
  for (uint32_t i = 1; i <= granted; ++i) {
    auto q = Queue::open(opt_, &peak_in_flight_);
    if (!q.ok()) return q.status();
    Command qc = connect_cmd(uint16_t(i), uint16_t(opt_.queue_size - 1), 0);
    KVTIER_RETURN_IF_ERROR((*q)->exec(qc));
    KVTIER_RETURN_IF_ERROR(nvme_status(qc.status, "I/O queue Connect"));
    io.push_back(std::move(q.value()));
  }
  admin_ = std::move(admin.value());
  io_ = std::move(io);
  ++generation_;
  return Status::ok_status();
}

void NvmeTcpDevice::lost(uint64_t generation, const Status& why) {
  std::lock_guard lk(state_mu_);
  if (generation != generation_ || !up_) return;
  spdlog::warn("nvmf host: connection to {} lost: {}", name(), why.to_string());
  up_ = false;
  lost_at_ = Clock::now();
  next_attempt_ = lost_at_ + opt_.reconnect_delay;
  if (opt_.reconnect_delay.count() <= 0 || opt_.ctrl_loss_tmo.count() == 0) dead_ = true;
  for (auto& q : io_) q->shutdown();
  if (admin_) admin_->shutdown();
  state_cv_.notify_all();
}

// Waits (bounded) until the controller is up, attempting reconnects when due.
Status NvmeTcpDevice::wait_until_up(std::unique_lock<std::mutex>& lk) {
  for (;;) {
    if (stopping_) return Status::unavailable("nvmf host: device closing");
    if (dead_) return Status::unavailable("nvmf host: controller lost (ctrl_loss_tmo)");
    if (up_) return Status::ok_status();
    const auto now = Clock::now();
    if (opt_.ctrl_loss_tmo.count() >= 0 && now - lost_at_ >= opt_.ctrl_loss_tmo) {
      dead_ = true;
      continue;
    }
    if (now >= next_attempt_) {
      Status st = establish();
      if (st.ok()) {
        up_ = true;
        ++reconnects_;
        spdlog::info("nvmf host: reconnected to {}", name());
        state_cv_.notify_all();
        continue;
      }
      spdlog::warn("nvmf host: reconnect to {} failed: {}", name(), st.to_string());
      next_attempt_ = Clock::now() + opt_.reconnect_delay;
      continue;
    }
    if (opt_.fast_io_fail_tmo.count() >= 0 && now - lost_at_ >= opt_.fast_io_fail_tmo) {
      return Status::unavailable("nvmf host: reconnecting; I/O failed fast (fast_io_fail_tmo)");
    }
    auto wake = next_attempt_;
    if (opt_.fast_io_fail_tmo.count() >= 0) wake = std::min(wake, lost_at_ + opt_.fast_io_fail_tmo);
    if (opt_.ctrl_loss_tmo.count() >= 0) wake = std::min(wake, lost_at_ + opt_.ctrl_loss_tmo);
    state_cv_.wait_until(lk, wake);
  }
}

Status NvmeTcpDevice::run(Command& cmd) {
  for (;;) {
    std::shared_ptr<Queue> q;
    uint64_t gen;
    {
      std::unique_lock lk(state_mu_);
      KVTIER_RETURN_IF_ERROR(wait_until_up(lk));
      q = io_[next_queue_++ % io_.size()];
      gen = generation_;
    }
    cmd.status = 0;
    Status st = q->exec(cmd);
    if (st.ok()) return nvme_status(cmd.status, "I/O command");
    lost(gen, st);  // then retry on the new connection, or fail as configured
  }
}

void NvmeTcpDevice::keepalive_loop() {
  const auto period = std::max(opt_.kato / 2, std::chrono::milliseconds(100));
  while (!stopping_) {
    std::shared_ptr<Queue> admin;
    uint64_t gen;
    {
      std::unique_lock lk(state_mu_);
      state_cv_.wait_for(lk, up_ ? period : std::chrono::milliseconds(100));
      if (stopping_) return;
      if (!up_ && !dead_) {
        // Reconnect in the background too, so the device comes back without I/O.
        if (Clock::now() >= next_attempt_) (void)wait_until_up(lk);
        continue;
      }
      if (!up_) continue;
      admin = admin_;
      gen = generation_;
    }
    Command ka;
    ka.sqe = make_sqe(0x18, 0, 0);
    Status st = admin->exec(ka);
    if (!st.ok()) lost(gen, st);
  }
}

void NvmeTcpDevice::read(uint64_t offset, MutableByteView dst, blk::IoCallback cb) {
  Status st = check_io(offset, dst.size(), dst.data());
  if (!st.ok()) return finish(st, nullptr, cb);
  submitters_->post([this, offset, dst, cb = std::move(cb)] {
    finish(
        read_blocking(offset, dst),
        [n = dst.size()](blk::DeviceStats& s) {
          s.reads++;
          s.bytes_read += n;
        },
        cb);
  });
}

void NvmeTcpDevice::write(uint64_t offset, ByteView src, blk::IoCallback cb) {
  Status st = check_io(offset, src.size(), src.data());
  if (!st.ok()) return finish(st, nullptr, cb);
  submitters_->post([this, offset, src, cb = std::move(cb)] {
    finish(
        write_blocking(offset, src),
        [n = src.size()](blk::DeviceStats& s) {
          s.writes++;
          s.bytes_written += n;
        },
        cb);
  });
}

Status NvmeTcpDevice::read_sync(uint64_t offset, MutableByteView dst) {
  Status st = check_io(offset, dst.size(), dst.data());
  if (st.ok()) st = read_blocking(offset, dst);
  finish(
      st,
      [n = dst.size()](blk::DeviceStats& s) {
        s.reads++;
        s.bytes_read += n;
      },
      [](Status) {});
  return st;
}

Status NvmeTcpDevice::write_sync(uint64_t offset, ByteView src) {
  Status st = check_io(offset, src.size(), src.data());
  if (st.ok()) st = write_blocking(offset, src);
  finish(
      st,
      [n = src.size()](blk::DeviceStats& s) {
        s.writes++;
        s.bytes_written += n;
      },
      [](Status) {});
  return st;
}

void NvmeTcpDevice::flush(blk::IoCallback cb) {
  submitters_->post([this, cb = std::move(cb)] {
    finish(
        flush_blocking(), [](blk::DeviceStats& s) { s.flushes++; }, cb);
  });
}

void NvmeTcpDevice::trim(uint64_t offset, uint64_t length, blk::IoCallback cb) {
  Status st = check_io(offset, length, nullptr);
  if (!st.ok()) return finish(st, nullptr, cb);
  submitters_->post([this, offset, length, cb = std::move(cb)] {
    finish(
        trim_blocking(offset, length), [](blk::DeviceStats& s) { s.trims++; }, cb);
  });
}

void NvmeTcpDevice::finish(const Status& st, const std::function<void(blk::DeviceStats&)>& count,
                           const blk::IoCallback& cb) {
  {
    std::lock_guard lk(stats_mu_);
    if (st.ok() && count) {
      count(stats_);
    } else if (!st.ok()) {
      stats_.errors++;
    }
  }
  cb(st);
}

Status NvmeTcpDevice::read_blocking(uint64_t offset, MutableByteView dst) {
  Status st;
  for (uint64_t done = 0; st.ok() && done < dst.size();) {
    const uint32_t n = uint32_t(std::min<uint64_t>(dst.size() - done, max_transfer_));
    Command c;
    c.sqe = make_sqe(0x02, opt_.nsid, n);
    put64(&c.sqe[40], (offset + done) / block_size_);
    put32(&c.sqe[48], n / block_size_ - 1);
    c.in = dst.subspan(done, n);
    st = run(c);
    done += n;
  }
  return st;
}

Status NvmeTcpDevice::write_blocking(uint64_t offset, ByteView src) {
  Status st;
  for (uint64_t done = 0; st.ok() && done < src.size();) {
    const uint32_t n = uint32_t(std::min<uint64_t>(src.size() - done, max_transfer_));
    Command c;
    c.in_capsule = n <= inline_write_max_;
    c.sqe = make_sqe(0x01, opt_.nsid, n, c.in_capsule ? 0x01 : 0x5A);
    put64(&c.sqe[40], (offset + done) / block_size_);
    put32(&c.sqe[48], n / block_size_ - 1);
    c.out = src.subspan(done, n);
    st = run(c);
    done += n;
  }
  return st;
}

Status NvmeTcpDevice::flush_blocking() {
  Command c;
  c.sqe = make_sqe(0x00, opt_.nsid, 0);
  return run(c);
}

Status NvmeTcpDevice::trim_blocking(uint64_t offset, uint64_t length) {
  Status st;
  for (uint64_t done = 0; st.ok() && done < length;) {
    const uint64_t blocks = std::min<uint64_t>((length - done) / block_size_, 0xFFFFFFFFu);
    uint8_t range[16] = {};
    put32(range + 4, uint32_t(blocks));
    put64(range + 8, (offset + done) / block_size_);
    Command c;
    c.sqe = make_sqe(0x09, opt_.nsid, 16, 0x01);  // ranges in the capsule, as Linux sends them
    put32(&c.sqe[44], 0x4);                       // AD: deallocate
    c.out = as_bytes_view(range, 16);
    c.in_capsule = true;
    st = run(c);
    done += blocks * block_size_;
  }
  return st;
}

blk::DeviceStats NvmeTcpDevice::stats() const {
  std::lock_guard lk(stats_mu_);
  return stats_;
}

}  // namespace kvtier::nvmf
