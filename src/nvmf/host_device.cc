// NVMe/TCP initiator: controller bring-up, reconnect state machine, I/O.
#include "nvmf/host_device.h"

#include "nvmf/host_queue.h"

namespace kvtier::nvmf {

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
  if (!options.dhchap_secret.empty()) {
    auto host_key = dhchap::parse_secret(options.dhchap_secret);
    if (!host_key.ok()) return host_key.status();
    d->auth_keys_ = HostAuthKeys{std::move(*host_key), std::nullopt};
    if (!options.dhchap_ctrl_secret.empty()) {
      auto ctrl_key = dhchap::parse_secret(options.dhchap_ctrl_secret);
      if (!ctrl_key.ok()) return ctrl_key.status();
      d->auth_keys_->ctrl_key = std::move(*ctrl_key);
    }
  } else if (!options.dhchap_ctrl_secret.empty()) {
    return Status::invalid_argument(
        "nvmf host: a controller secret needs the host's own secret too (DH-HMAC-CHAP)");
  }
  {
    std::lock_guard lk(d->state_mu_);
    KVTIER_RETURN_IF_ERROR(d->establish());
    d->up_ = true;
  }
  d->keepalive_ = std::thread([p = d.get()] { p->keepalive_loop(); });
  // Submitters carry only what cannot go out without a waiting thread
  // (see the top of host_device.h); each blocks while its command is in
  // flight, so more than the queues' depth would only wait for command ids.
  const size_t depth = size_t(options.io_queues) * std::max<uint16_t>(options.queue_size - 1, 1);
  d->submitters_ = std::make_unique<TaskPool>(std::min(depth, kMaxSubmitters));
  d->dispatcher_ = std::make_unique<TaskPool>(1);
  return d;
}

NvmeTcpDevice::~NvmeTcpDevice() {
  // Requests still queued fail fast once stopping_ is set; those in flight
  // complete on the live queues. Both call back before the queues go.
  // stopping_ is set under state_mu_: the keep-alive thread checks it and
  // then waits (up to kato/2) under that lock, and must not miss the wakeup.
  {
    std::lock_guard lk(state_mu_);
    stopping_ = true;
  }
  state_cv_.notify_all();
  {
    // Reads sent without a thread complete on the live queues, or within
    // io_timeout by a retry posted to the submitters (which fails fast now).
    std::unique_lock lk(async_mu_);
    async_cv_.wait(lk, [&] { return async_in_flight_ == 0; });
  }
  // Requests that callbacks issue from here on fail at once (send() checks
  // stopping_); those already handed to the dispatcher were counted above.
  dispatcher_.reset();
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

Status NvmeTcpDevice::connect_queue(Queue& q, uint16_t qid, uint16_t sqsize, uint32_t kato_ms,
                                    uint16_t cntlid, uint32_t* dw0) {
  const std::vector<uint8_t> cd = connect_data(opt_.hostnqn, opt_.subnqn, cntlid);
  Command c;
  c.sqe = make_sqe(0x7F, 0, 1024, 0x01);
  c.sqe[4] = 0x01;
  put16(&c.sqe[42], qid);
  put16(&c.sqe[44], sqsize);
  put32(&c.sqe[48], kato_ms);
  c.out = as_bytes_view(cd.data(), cd.size());
  c.in_capsule = true;
  KVTIER_RETURN_IF_ERROR(q.exec(c));
  KVTIER_RETURN_IF_ERROR(nvme_status(c.status, qid ? "I/O queue Connect" : "admin Connect"));
  if (dw0) *dw0 = c.dw0;
  return authenticate_queue(q, qid, c.dw0);
}

Status NvmeTcpDevice::authenticate_queue(Queue& q, uint16_t qid, uint32_t connect_dw0) {
  if (connect_dw0 & dhchap::kConnectAscr) {
    return Status::failed_precondition(
        "nvmf host: the controller requires a secure channel (TLS), which kvtier does not offer");
  }
  if (!(connect_dw0 & dhchap::kConnectAtr)) {
    if (auth_keys_ && auth_keys_->ctrl_key) {
      return Status::permission_denied(
          "nvmf host: the controller did not ask for authentication, so it cannot prove it "
          "holds the controller secret; refusing it");
    }
    return Status::ok_status();
  }
  if (!auth_keys_) {
    return Status::permission_denied(
        "nvmf host: the controller requires DH-HMAC-CHAP authentication; no secret is set "
        "(--dhchap-secret-file)");
  }
  AuthChannel ch;
  ch.send = [&q](dhchap::BytesView m) -> Status {
    Command c;
    c.sqe = make_sqe(0x7F, 0, uint32_t(m.size()), 0x01);
    c.sqe[4] = 0x05;  // Authentication Send
    c.sqe[41] = dhchap::kSpsp0;
    c.sqe[42] = dhchap::kSpsp1;
    c.sqe[43] = dhchap::kSecurityProtocol;
    put32(&c.sqe[44], uint32_t(m.size()));
    c.out = as_bytes_view(m.data(), m.size());
    c.in_capsule = true;
    KVTIER_RETURN_IF_ERROR(q.exec(c));
    return nvme_status(c.status, "Authentication Send");
  };
  ch.receive = [&q](uint32_t al) -> Result<dhchap::Bytes> {
    dhchap::Bytes buf(al);
    Command c;
    c.sqe = make_sqe(0x7F, 0, al);
    c.sqe[4] = 0x06;  // Authentication Receive
    c.sqe[41] = dhchap::kSpsp0;
    c.sqe[42] = dhchap::kSpsp1;
    c.sqe[43] = dhchap::kSecurityProtocol;
    put32(&c.sqe[44], al);
    c.in = as_mutable_view(buf.data(), buf.size());
    KVTIER_RETURN_IF_ERROR(q.exec(c));
    KVTIER_RETURN_IF_ERROR(nvme_status(c.status, "Authentication Receive"));
    return buf;
  };
  Status st = authenticate(ch, *auth_keys_, opt_.hostnqn, opt_.subnqn, next_auth_tid_++);
  if (!st.ok()) {
    return Status(st.code(), fmt::format("{} (queue {})", st.message(), qid));
  }
  return st;
}

Status NvmeTcpDevice::enable_and_identify(Queue& admin, uint32_t* io_queues_granted) {
  Command en;  // Property Set CC: EN, 4 KiB pages, IOSQES 6, IOCQES 4
  en.sqe = make_sqe(0x7F, 0, 0);
  en.sqe[4] = 0x00;
  put32(&en.sqe[44], 0x14);
  put64(&en.sqe[48], 0x460001);
  KVTIER_RETURN_IF_ERROR(admin.exec(en));
  KVTIER_RETURN_IF_ERROR(nvme_status(en.status, "Property Set CC"));
  std::vector<uint8_t> id(4096);
  Command ic;
  ic.sqe = make_sqe(0x06, 0, 4096);
  put32(&ic.sqe[40], 0x01);
  ic.in = as_mutable_view(id.data(), id.size());
  KVTIER_RETURN_IF_ERROR(admin.exec(ic));
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
  KVTIER_RETURN_IF_ERROR(admin.exec(nq));
  KVTIER_RETURN_IF_ERROR(nvme_status(nq.status, "Set Features number of queues"));
  *io_queues_granted = std::min<uint32_t>(opt_.io_queues, (nq.dw0 & 0xFFFF) + 1);
  Command ns;
  ns.sqe = make_sqe(0x06, opt_.nsid, 4096);
  ns.in = as_mutable_view(id.data(), id.size());
  KVTIER_RETURN_IF_ERROR(admin.exec(ns));
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
  return Status::ok_status();
}

Status NvmeTcpDevice::establish() {
  for (auto& q : io_) q->shutdown();
  if (admin_) admin_->shutdown();
  io_.clear();
  admin_.reset();
  auto admin = Queue::open(opt_);
  if (!admin.ok()) return admin.status();
  uint32_t dw0 = 0;  // the admin Connect asks for any controller (FFFFh)
  KVTIER_RETURN_IF_ERROR(connect_queue(**admin, 0, 31, uint32_t(opt_.kato.count()), 0xFFFF, &dw0));
  cntlid_ = uint16_t(dw0);
  uint32_t granted = 0;
  KVTIER_RETURN_IF_ERROR(enable_and_identify(**admin, &granted));
  std::vector<std::shared_ptr<Queue>> io;
  for (uint32_t i = 1; i <= granted; ++i) {
    auto q = Queue::open(opt_, &peak_in_flight_);
    if (!q.ok()) return q.status();
    KVTIER_RETURN_IF_ERROR(
        connect_queue(**q, uint16_t(i), uint16_t(opt_.queue_size - 1), 0, cntlid_));
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
    // No command id came free within io_timeout on a queue that is still
    // up: it is busy, not lost; fail this request alone.
    if (!q->failed()) return st;
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
      // With the predicate: stopping_ may have been set after the loop's
      // check and before this lock was taken; a bare wait would miss it and
      // hold the destructor for kato/2.
      state_cv_.wait_for(lk, up_ ? period : std::chrono::milliseconds(100),
                         [&] { return stopping_.load(); });
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

namespace {
std::function<void(blk::DeviceStats&)> counts_read(uint64_t n) {
  return [n](blk::DeviceStats& s) {
    s.reads++;
    s.bytes_read += n;
  };
}
std::function<void(blk::DeviceStats&)> counts_write(uint64_t n) {
  return [n](blk::DeviceStats& s) {
    s.writes++;
    s.bytes_written += n;
  };
}
}  // namespace

namespace {
// The pieces of one request split into commands: the request's callback
// runs once, when the last piece is done, with the first piece's failure.
class PieceJoin {
 public:
  PieceJoin(uint64_t pieces, blk::IoCallback done) : left_(pieces), done_(std::move(done)) {}
  void piece_done(const Status& st) {
    Status outcome;
    {
      std::lock_guard lk(mu_);
      if (!st.ok() && first_failure_.ok()) first_failure_ = st;
      if (--left_ > 0) return;
      outcome = first_failure_;
    }
    done_(outcome);
  }

 private:
  std::mutex mu_;
  uint64_t left_;
  Status first_failure_;
  blk::IoCallback done_;
};
}  // namespace

void NvmeTcpDevice::split_into_commands(
    uint64_t bytes, std::function<void(blk::DeviceStats&)> count, blk::IoCallback cb,
    const std::function<void(uint64_t, uint64_t, blk::IoCallback)>& send_piece) {
  blk::IoCallback done = finishing(std::move(count), std::move(cb));
  const uint64_t piece = max_transfer_.load(std::memory_order_relaxed);
  if (bytes <= piece) return send_piece(0, bytes, std::move(done));
  auto join = std::make_shared<PieceJoin>((bytes + piece - 1) / piece, std::move(done));
  for (uint64_t at = 0; at < bytes; at += piece) {
    send_piece(at, std::min(piece, bytes - at), [join](Status st) { join->piece_done(st); });
  }
}

void NvmeTcpDevice::read(uint64_t offset, MutableByteView dst, blk::IoCallback cb) {
  Status st = check_io(offset, dst.size(), dst.data());
  if (!st.ok()) return finish(st, nullptr, cb);
  split_into_commands(dst.size(), counts_read(dst.size()), std::move(cb),
                      [&](uint64_t at, uint64_t n, blk::IoCallback piece_done) {
                        send_read(offset + at, dst.subspan(at, n), std::move(piece_done));
                      });
}

void NvmeTcpDevice::send_read(uint64_t offset, MutableByteView dst, blk::IoCallback done) {
  auto cmd = std::make_unique<Command>();
  fill_read(*cmd, offset, dst);
  send(
      std::move(cmd), std::move(done), [this, offset, dst] { return read_blocking(offset, dst); },
      &async_reads_);
}

void NvmeTcpDevice::send(std::unique_ptr<Command> cmd, blk::IoCallback done,
                         std::function<Status()> blocking, std::atomic<uint64_t>* sent_async) {
  if (stopping_) {
    // The device is being destroyed: a request a callback issues now (on a
    // receiver, the dispatcher or a submitter that is draining) fails here,
    // not on a pool that may already be gone.
    done(Status::unavailable(name() + ": the device is closing"));
    return;
  }
  if (Queue::on_receiver_thread()) {
    // Issued from a completion callback: a receiver must not send (a send
    // that blocks would stop its queue's receiving), so the dispatcher
    // thread sends it, still without a thread waiting for it.
    // Counted as in flight until the dispatcher has sent it, so the
    // destructor waits for it before the dispatcher and submitters go.
    from_callbacks_.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard lk(async_mu_);
      ++async_in_flight_;
    }
    auto held = std::make_shared<std::unique_ptr<Command>>(std::move(cmd));
    dispatcher_->post(
        [this, held, done = std::move(done), blocking = std::move(blocking), sent_async]() mutable {
          send(std::move(*held), std::move(done), std::move(blocking), sent_async);
          end_async();
        });
    return;
  }
  if (try_async(cmd, done, blocking, sent_async)) return;
  post_blocking(std::move(done), std::move(blocking));
}

void NvmeTcpDevice::post_blocking(blk::IoCallback done, std::function<Status()> blocking) {
  blocking_requests_.fetch_add(1, std::memory_order_relaxed);
  submitters_->post([done = std::move(done), blocking = std::move(blocking)] { done(blocking()); });
}

blk::IoCallback NvmeTcpDevice::finishing(std::function<void(blk::DeviceStats&)> count,
                                         blk::IoCallback cb) {
  return [this, count = std::move(count), cb = std::move(cb)](Status st) { finish(st, count, cb); };
}

void NvmeTcpDevice::readv(uint64_t offset, std::span<const MutableByteView> parts,
                          blk::IoCallback cb) {
  uint64_t total = 0;
  for (const MutableByteView& p : parts) {
    Status st = check_io(offset + total, p.size(), p.data());
    if (!st.ok()) return finish(st, nullptr, cb);
    total += p.size();
  }
  if (parts.empty())
    return finish(Status::invalid_argument(name() + ": readv of nothing"), nullptr, cb);
  // One Read command for the whole range when it fits one; its C2H data is
  // scattered over the parts as it arrives.
  if (total > max_transfer_ || parts.size() > kMaxReadvParts) {
    return BlockDevice::readv(offset, parts, std::move(cb));
  }
  std::vector<MutableByteView> owned(parts.begin(), parts.end());
  auto cmd = std::make_unique<Command>();
  fill_readv(*cmd, offset, owned);
  send(
      std::move(cmd), finishing(counts_read(total), std::move(cb)),
      [this, offset, owned = std::move(owned)] { return readv_blocking(offset, owned); },
      &async_reads_);
}

bool NvmeTcpDevice::try_async(std::unique_ptr<Command>& cmd, const blk::IoCallback& done_cb,
                              std::function<Status()> retry, std::atomic<uint64_t>* sent_async) {
  if (Queue::on_receiver_thread()) return false;  // a request issued from a completion
  std::shared_ptr<Queue> q;
  uint64_t gen = 0;
  {
    std::lock_guard lk(state_mu_);
    if (!up_ || stopping_ || io_.empty()) return false;
    q = io_[next_queue_++ % io_.size()];
    gen = generation_;
    // Counted before state_mu_ is let go: the destructor, which sets
    // stopping_ under it, then waits for this command too.
    std::lock_guard alk(async_mu_);
    ++async_in_flight_;
  }
  // Counted before it is sent: its callback may run before submit returns.
  if (sent_async) sent_async->fetch_add(1, std::memory_order_relaxed);
  auto done = [this, gen, done_cb, retry](Status st, Command& c) {
    if (st.ok() && c.status != 0 && planned_past_limits(c)) {
      // Planned as one command (or with its data in the capsule) before a
      // reconnect lowered the controller's limits, and refused for it: the
      // blocking way plans again under the new limits.
      submitters_->post([done_cb, retry] { done_cb(retry()); });
    } else if (st.ok()) {
      done_cb(nvme_status(c.status, "I/O command"));
    } else {
      // The connection failed under the command: retry it the blocking way,
      // which waits for the reconnect or fails as configured. Not on the
      // receiver thread, which must never wait for state_mu_ (a reconnect
      // holds it while it joins the old receivers).
      submitters_->post([this, gen, st, done_cb, retry] {
        lost(gen, st);
        done_cb(retry());
      });
    }
    end_async();
  };
  if (q->submit(cmd, std::move(done))) return true;
  if (sent_async) sent_async->fetch_sub(1, std::memory_order_relaxed);
  end_async();
  return false;
}

bool NvmeTcpDevice::planned_past_limits(const Command& c) const {
  const uint32_t bytes = get32(&c.sqe[32]);  // the data length in the SGL descriptor
  return bytes > max_transfer_.load(std::memory_order_relaxed) ||
         (c.in_capsule && bytes > inline_write_max_.load(std::memory_order_relaxed));
}

void NvmeTcpDevice::end_async() {
  std::lock_guard lk(async_mu_);
  if (--async_in_flight_ == 0) async_cv_.notify_all();
}

void NvmeTcpDevice::fill_read(Command& c, uint64_t offset, MutableByteView dst) const {
  const auto n = uint32_t(dst.size());
  c.sqe = make_sqe(0x02, opt_.nsid, n);
  put64(&c.sqe[40], offset / block_size_);
  put32(&c.sqe[48], n / block_size_ - 1);
  c.in = dst;
}

void NvmeTcpDevice::fill_readv(Command& c, uint64_t offset,
                               const std::vector<MutableByteView>& parts) const {
  uint64_t n = 0;
  for (const MutableByteView& p : parts) n += p.size();
  c.sqe = make_sqe(0x02, opt_.nsid, uint32_t(n));
  put64(&c.sqe[40], offset / block_size_);
  put32(&c.sqe[48], uint32_t(n / block_size_ - 1));
  c.in_parts = parts;
}

void NvmeTcpDevice::fill_write(Command& c, uint64_t offset, ByteView src) const {
  const auto n = uint32_t(src.size());
  c.in_capsule = n <= inline_write_max_.load(std::memory_order_relaxed);
  c.sqe = make_sqe(0x01, opt_.nsid, n, c.in_capsule ? 0x01 : 0x5A);
  put64(&c.sqe[40], offset / block_size_);
  put32(&c.sqe[48], n / block_size_ - 1);
  c.out = src;
}

void NvmeTcpDevice::fill_trim(Command& c, uint64_t offset, uint64_t blocks) const {
  uint8_t* range = c.owned_data.data();
  std::memset(range, 0, 16);
  put32(range + 4, uint32_t(blocks));
  put64(range + 8, offset / block_size_);
  c.sqe = make_sqe(0x09, opt_.nsid, 16, 0x01);  // ranges in the capsule, as Linux sends them
  put32(&c.sqe[44], 0x4);                       // AD: deallocate
  c.out = as_bytes_view(range, 16);
  c.in_capsule = true;
}

void NvmeTcpDevice::write(uint64_t offset, ByteView src, blk::IoCallback cb) {
  Status st = check_io(offset, src.size(), src.data());
  if (!st.ok()) return finish(st, nullptr, cb);
  split_into_commands(src.size(), counts_write(src.size()), std::move(cb),
                      [&](uint64_t at, uint64_t n, blk::IoCallback piece_done) {
                        send_write(offset + at, src.subspan(at, n), std::move(piece_done));
                      });
}

void NvmeTcpDevice::send_write(uint64_t offset, ByteView src, blk::IoCallback done) {
  auto cmd = std::make_unique<Command>();
  fill_write(*cmd, offset, src);
  send(
      std::move(cmd), std::move(done), [this, offset, src] { return write_blocking(offset, src); },
      &async_writes_);
}

Status NvmeTcpDevice::read_sync(uint64_t offset, MutableByteView dst) {
  Status st = check_io(offset, dst.size(), dst.data());
  if (st.ok()) st = read_blocking(offset, dst);
  finish(st, counts_read(dst.size()), [](Status) {});
  return st;
}

Status NvmeTcpDevice::write_sync(uint64_t offset, ByteView src) {
  Status st = check_io(offset, src.size(), src.data());
  if (st.ok()) st = write_blocking(offset, src);
  finish(st, counts_write(src.size()), [](Status) {});
  return st;
}

void NvmeTcpDevice::flush(blk::IoCallback cb) {
  auto counts_flush = [](blk::DeviceStats& s) { s.flushes++; };
  auto cmd = std::make_unique<Command>();
  cmd->sqe = make_sqe(0x00, opt_.nsid, 0);
  send(
      std::move(cmd), finishing(counts_flush, std::move(cb)), [this] { return flush_blocking(); },
      nullptr);
}

void NvmeTcpDevice::trim(uint64_t offset, uint64_t length, blk::IoCallback cb) {
  Status st = check_io(offset, length, nullptr);
  if (!st.ok()) return finish(st, nullptr, cb);
  auto counts_trim = [](blk::DeviceStats& s) { s.trims++; };
  blk::IoCallback done = finishing(counts_trim, std::move(cb));
  auto blocking = [this, offset, length] { return trim_blocking(offset, length); };
  if (length / block_size_ > 0xFFFFFFFFu) {  // more than one command: the blocking way
    return post_blocking(std::move(done), blocking);
  }
  auto cmd = std::make_unique<Command>();
  fill_trim(*cmd, offset, length / block_size_);
  send(std::move(cmd), std::move(done), blocking, nullptr);
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
    fill_read(c, offset + done, dst.subspan(done, n));
    st = run(c);
    done += n;
  }
  return st;
}

Status NvmeTcpDevice::readv_blocking(uint64_t offset, const std::vector<MutableByteView>& parts) {
  uint64_t total = 0;
  for (const MutableByteView& p : parts) total += p.size();
  if (total > max_transfer_) {
    // The controller's limit shrank at a reconnect after this read was
    // planned as one command: read the parts one by one (each split to fit).
    for (const MutableByteView& p : parts) {
      KVTIER_RETURN_IF_ERROR(read_blocking(offset, p));
      offset += p.size();
    }
    return Status::ok_status();
  }
  Command c;
  fill_readv(c, offset, parts);
  return run(c);
}

Status NvmeTcpDevice::write_blocking(uint64_t offset, ByteView src) {
  Status st;
  for (uint64_t done = 0; st.ok() && done < src.size();) {
    const uint32_t n = uint32_t(std::min<uint64_t>(src.size() - done, max_transfer_));
    Command c;
    fill_write(c, offset + done, src.subspan(done, n));
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
    Command c;
    fill_trim(c, offset + done, blocks);
    st = run(c);
    done += blocks * block_size_;
  }
  return st;
}

blk::DeviceCapabilities NvmeTcpDevice::capabilities() const {
  blk::DeviceCapabilities c;
  c.direct_reads = true;
  c.vectored_reads = true;
  c.max_vectored_parts = kMaxReadvParts;
  c.alignment = buffer_alignment();
  c.max_transfer_bytes = max_transfer_;  // larger requests are split into commands
  return c;
}

blk::DeviceStats NvmeTcpDevice::stats() const {
  std::lock_guard lk(stats_mu_);
  return stats_;
}

}  // namespace kvtier::nvmf
