// NVMe/TCP host: one queue's connection, commands and receiver thread.
#include "nvmf/host_queue.h"

namespace kvtier::nvmf {

namespace {
thread_local bool tl_receiver = false;  // set for good on each receiver thread
}  // namespace

bool NvmeTcpDevice::Queue::on_receiver_thread() { return tl_receiver; }

Result<std::shared_ptr<NvmeTcpDevice::Queue>> NvmeTcpDevice::Queue::open(
    const HostOptions& o, std::atomic<uint32_t>* peak) {
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
  // Wait for the connection, bounded by io_timeout. A thread that uses
  // io_uring (a store, blockd) gets task-work notifications that interrupt
  // poll with EINTR: wait again for what is left.
  pollfd p{fd, POLLOUT, 0};
  const auto connect_deadline = Clock::now() + o.io_timeout;
  int ready = 0;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(connect_deadline - Clock::now());
    ready = ::poll(&p, 1, int(std::max<int64_t>(left.count(), 0)));
    if (ready >= 0 || errno != EINTR) break;
  }
  int err = 0;
  socklen_t len = sizeof err;
  if (ready != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
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
  q->data_sender_ = std::thread([p = q.get()] { p->send_loop(); });
  return q;
}

void NvmeTcpDevice::Queue::shutdown() {
  closing_ = true;
  stream_.shutdown();
}

bool NvmeTcpDevice::Queue::take_slot_locked(Command& cmd, uint16_t* cid) {
  if (free_.empty()) return false;
  *cid = free_.back();
  free_.pop_back();
  Slot& s = slots_[*cid];
  s = Slot{};
  s.cmd = &cmd;
  s.busy = true;
  s.serial = ++next_serial_;
  if (peak_) {
    const uint32_t now = uint32_t(slots_.size() - free_.size());
    uint32_t seen = peak_->load();
    while (now > seen && !peak_->compare_exchange_weak(seen, now)) {
    }
  }
  return true;
}

Status NvmeTcpDevice::Queue::send_capsule(const Command& cmd, uint16_t cid) {
  Sqe sqe = cmd.sqe;
  put16(&sqe[2], cid);
  HeaderBuf h;
  const uint32_t dlen = cmd.in_capsule ? uint32_t(cmd.out.size()) : 0;
  const uint32_t n = encode_capsule_cmd(sqe, dlen, lim_.hdgst, lim_.ddgst, h);
  uint8_t dd[4];
  if (dlen && lim_.ddgst) put32(dd, digest(cmd.out));
  iovec iov[3] = {{h.data(), n}, {const_cast<std::byte*>(cmd.out.data()), dlen}, {dd, 4}};
  std::lock_guard sl(send_mu_);
  return stream_.write_all(iov, dlen ? (lim_.ddgst ? 3 : 2) : 1);
}

Status NvmeTcpDevice::Queue::exec(Command& cmd) {
  std::unique_lock lk(mu_);
  const auto deadline = Clock::now() + io_timeout_;
  // Honour the queue size: at most slots_.size() commands in flight.
  while (free_.empty() && failed_.ok()) {
    if (slot_cv_.wait_until(lk, deadline) == std::cv_status::timeout && free_.empty()) {
      return Status::unavailable("nvmf host: no free command slot within io_timeout");
    }
  }
  if (!failed_.ok()) return failed_;
  uint16_t cid = 0;
  take_slot_locked(cmd, &cid);
  Slot& s = slots_[cid];
  lk.unlock();
  Status st = send_capsule(cmd, cid);
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

bool NvmeTcpDevice::Queue::submit(std::unique_ptr<Command>& cmd, AsyncDone done) {
  if (on_receiver_thread()) return false;
  std::unique_lock lk(mu_);
  uint16_t cid = 0;
  if (!failed_.ok() || !take_slot_locked(*cmd, &cid)) return false;
  Slot& s = slots_[cid];
  s.deadline = Clock::now() + io_timeout_;
  s.on_done = std::move(done);
  s.owned = std::move(cmd);
  ++s.sending;  // the receiver leaves the command alone until sent
  const Command& c = *s.cmd;
  lk.unlock();
  const Status st = send_capsule(c, cid);
  lk.lock();
  --s.sending;
  s.capsule_sent = true;
  recv_cv_.notify_all();
  sender_cv_.notify_all();  // an R2T may already wait for the capsule
  // From here the receiver owns the command: it completes it, or fails it
  // when the connection goes (as a failed send makes it).
  if (!st.ok()) {
    if (failed_.ok()) failed_ = st;
    closing_ = true;
    stream_.shutdown();
  }
  return true;
}

bool NvmeTcpDevice::Queue::async_overdue() {
  const auto now = Clock::now();
  std::lock_guard lk(mu_);
  for (const Slot& s : slots_) {
    if (s.busy && !s.done && s.on_done && now >= s.deadline) return true;
  }
  return false;
}

NvmeTcpDevice::Queue::Queue(int fd, const HostOptions& o)
    : stream_(fd), io_timeout_(o.io_timeout), slots_(std::max<uint16_t>(o.queue_size, 2) - 1) {
  lim_.hdgst = o.hdgst;
  lim_.ddgst = o.ddgst;
  lim_.max_data = 16u << 20;
  for (size_t i = slots_.size(); i-- > 0;) free_.push_back(uint16_t(i));
}

void NvmeTcpDevice::Queue::fail_locked(std::unique_lock<std::mutex>& lk, const Status& why) {
  if (failed_.ok()) failed_ = why;
  closing_ = true;
  stream_.shutdown();
  recv_cv_.wait(lk, [&] { return receiver_stopped_; });
}

Status NvmeTcpDevice::Queue::send_h2c(const Command& cmd, uint16_t cid, const R2t& r) {
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

NvmeTcpDevice::Queue::Slot* NvmeTcpDevice::Queue::slot_for(uint16_t cid) {
  std::lock_guard lk(mu_);
  if (cid >= slots_.size() || !slots_[cid].busy || slots_[cid].done) return nullptr;
  return &slots_[cid];
}

void NvmeTcpDevice::Queue::complete(Slot& s, Status st) {
  std::unique_lock lk(mu_);
  if (s.on_done) {
    // A sender still sending this command's capsule or data (a target that
    // answers early): the buffer stays the caller's until the send ends. A
    // target that also stops reading would hold the send, and with it this
    // receiver, so past the command's deadline the connection goes.
    if (!recv_cv_.wait_until(lk, s.deadline, [&] { return s.sending == 0; })) {
      closing_ = true;
      stream_.shutdown();
      recv_cv_.wait(lk, [&] { return s.sending == 0; });
    }
    // A submit()ted command: free its id, then call back without the lock.
    AsyncDone done = std::move(s.on_done);
    std::unique_ptr<Command> cmd = std::move(s.owned);
    const auto cid = uint16_t(&s - slots_.data());
    s = Slot{};
    free_.push_back(cid);
    slot_cv_.notify_one();
    lk.unlock();
    done(std::move(st), *cmd);
    return;
  }
  s.result = std::move(st);
  s.done = true;
  s.cv.notify_all();
}

void NvmeTcpDevice::Queue::receive_loop() {
  tl_receiver = true;
  Status st = receive_all();
  std::vector<std::pair<AsyncDone, std::unique_ptr<Command>>> orphans;
  Status why;
  {
    std::unique_lock lk(mu_);
    if (failed_.ok()) failed_ = st.ok() ? Status::unavailable("nvmf host: queue closed") : st;
    why = failed_;
    closing_ = true;  // the data sender stops too
    sender_cv_.notify_all();
    stream_.shutdown();  // so a capsule still being sent fails at once
    recv_cv_.wait(lk, [&] {
      return std::none_of(slots_.begin(), slots_.end(),
                          [](const Slot& s) { return s.sending > 0; });
    });
    for (size_t cid = 0; cid < slots_.size(); ++cid) {
      Slot& s = slots_[cid];
      if (!s.busy || s.done) continue;
      if (s.on_done) {
        orphans.emplace_back(std::move(s.on_done), std::move(s.owned));
        s = Slot{};
        free_.push_back(uint16_t(cid));
        continue;
      }
      s.result = failed_;
      s.done = true;
      s.cv.notify_all();
    }
  }
  // Submitted commands learn of the failure before the receiver is counted
  // as stopped, so once fail_locked() returns, every callback has run.
  for (auto& [done, cmd] : orphans) done(why, *cmd);
  std::lock_guard lk(mu_);
  receiver_stopped_ = true;
  recv_cv_.notify_all();
  slot_cv_.notify_all();
}

Status NvmeTcpDevice::Queue::receive_c2h_data(const PduLayout& layout, ByteView header) {
  auto d = decode_data_header(header);
  if (!d.ok()) return d.status();
  Slot* s = slot_for(d->cccid);
  if (!s) return Status::corruption("nvmf host: C2HData for no outstanding command");
  Command& cmd = *s->cmd;
  const uint64_t in_bytes = cmd.in_bytes();
  if (d->length != layout.data_len || d->offset != s->received ||
      uint64_t(d->offset) + d->length > in_bytes) {
    return Status::corruption("nvmf host: C2HData out of range");
  }
  // Straight into the caller's buffers: no copy on the host side.
  uint32_t crc = 0;
  KVTIER_RETURN_IF_ERROR(
      receive_scattered(cmd, d->offset, d->length, layout.has_ddgst ? &crc : nullptr));
  if (layout.has_ddgst) {
    uint8_t got[4];
    KVTIER_RETURN_IF_ERROR(stream_.read_exact(got, 4));
    if (get32(got) != crc) cmd.status = 0x004;  // data transfer error; the connection survives
  }
  s->received += d->length;
  if (layout.ch.flags & kFlagDataSuccess) {
    if (!(layout.ch.flags & kFlagDataLast) || s->received != in_bytes) {
      return Status::corruption("nvmf host: SUCCESS on a partial read");
    }
    complete(*s, Status::ok_status());
  }
  return Status::ok_status();
}

Status NvmeTcpDevice::Queue::receive_scattered(Command& cmd, uint64_t offset, uint32_t len,
                                               uint32_t* crc) {
  const MutableByteView single = cmd.in;
  const std::span<const MutableByteView> parts =
      cmd.in_parts.empty() ? std::span<const MutableByteView>(&single, 1)
                           : std::span<const MutableByteView>(cmd.in_parts);
  uint64_t part_start = 0;
  for (const MutableByteView& part : parts) {
    if (len == 0) break;
    const uint64_t part_end = part_start + part.size();
    if (offset < part_end) {
      const uint64_t at = offset - part_start;
      const auto n = uint32_t(std::min<uint64_t>(len, part.size() - at));
      KVTIER_RETURN_IF_ERROR(stream_.read_exact(part.data() + at, n));
      if (crc) *crc = crc32c_extend(*crc, part.data() + at, n);
      offset += n;
      len -= n;
    }
    part_start = part_end;
  }
  // The caller checked the range against in_bytes(), so nothing is left.
  return len == 0 ? Status::ok_status() : Status::corruption("nvmf host: C2HData out of range");
}

void NvmeTcpDevice::Queue::queue_r2t_locked(uint16_t cid, const R2t& r) {
  r2t_work_.push_back({cid, slots_[cid].serial, r});
  sender_cv_.notify_one();
}

void NvmeTcpDevice::Queue::send_loop() {
  std::unique_lock lk(mu_);
  for (;;) {
    // Bounded so a shutdown() (which cannot take mu_) is seen soon.
    sender_cv_.wait_for(lk, std::chrono::milliseconds(200),
                        [&] { return closing_.load() || !r2t_work_.empty(); });
    if (closing_) return;
    if (r2t_work_.empty()) continue;
    const R2tWork w = r2t_work_.front();
    r2t_work_.pop_front();
    Slot& s = slots_[w.cid];
    // The command may have completed (a target that answers before it has
    // its data) or failed since; its id may even hold another command.
    if (!s.busy || s.done || !s.on_done || s.serial != w.serial) continue;
    // An R2T can beat submit() to the socket (a target may guess the id):
    // data never goes out before its command.
    sender_cv_.wait(lk, [&] { return closing_.load() || s.capsule_sent || s.serial != w.serial; });
    if (closing_) return;
    if (!s.busy || s.done || s.serial != w.serial) continue;
    ++s.sending;  // the receiver may not complete it (and free its buffer) meanwhile
    const Command& c = *s.cmd;
    lk.unlock();
    const Status st = send_h2c(c, w.cid, w.r2t);
    lk.lock();
    --s.sending;
    recv_cv_.notify_all();
    if (!st.ok()) {
      // As a failed capsule send: the receiver fails every command.
      if (failed_.ok()) failed_ = st;
      closing_ = true;
      stream_.shutdown();
      return;
    }
  }
}

Status NvmeTcpDevice::Queue::receive_all() {
  uint8_t hdr[kShortHlen + kDigestSize];
  for (;;) {
    // Idle queues must not trip SO_RCVTIMEO: wait for a header with poll,
    // unless the last receive brought one along already.
    pollfd p{stream_.fd(), POLLIN, 0};
    const int pr = stream_.buffered() > 0 ? 1 : ::poll(&p, 1, 200);
    if (closing_) return Status::unavailable("nvmf host: queue closed");
    if (Clock::now() >= next_overdue_check_) {
      next_overdue_check_ = Clock::now() + std::chrono::milliseconds(50);
      if (async_overdue()) return Status::unavailable("nvmf host: command timed out (io_timeout)");
    }
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
        if (cmd.status == 0 && s->received != cmd.in_bytes()) {
          return Status::corruption("nvmf host: short data-in");
        }
        complete(*s, Status::ok_status());
        break;
      }
      case PduType::kC2HData:
        KVTIER_RETURN_IF_ERROR(receive_c2h_data(*l, hv));
        break;
      case PduType::kR2T: {
        auto d = decode_data_header(hv);
        if (!d.ok()) return d.status();
        std::lock_guard lk(mu_);
        if (d->cccid >= slots_.size() || !slots_[d->cccid].busy || slots_[d->cccid].done) {
          return Status::corruption("nvmf host: R2T for no outstanding command");
        }
        Slot& s = slots_[d->cccid];
        // Each R2T asks for the data that follows the last one's: no
        // repeats, overlaps or empty ones, so the data owed (and queued
        // here) never exceeds the write.
        if (s.cmd->in_capsule || d->length == 0 || d->offset != s.r2t_next ||
            uint64_t(d->offset) + d->length > s.cmd->out.size()) {
          return Status::corruption("nvmf host: bad R2T");
        }
        s.r2t_next = d->offset + d->length;
        if (s.on_done) {
          queue_r2t_locked(d->cccid, {d->ttag, d->offset, d->length});
        } else {
          s.r2t.push_back({d->ttag, d->offset, d->length});
          s.cv.notify_all();
        }
        break;
      }
      default:
        return Status::corruption("nvmf host: unexpected PDU");
    }
  }
}

Status NvmeTcpDevice::Queue::handshake() {
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
  stream_.buffer_reads(kQueueReadBufferBytes);
  return Status::ok_status();
}

}  // namespace kvtier::nvmf
