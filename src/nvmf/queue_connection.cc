// Target side of one NVMe/TCP queue (see queue_connection.h for the
// threading: I/O commands go to the device asynchronously and complete from
// its callbacks).
#include "nvmf/queue_connection.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "common/log.h"
#include "nvmf/admin_pages.h"

namespace kvtier::nvmf {
namespace {

// Status values (SCT << 8 | SC).
constexpr uint16_t kScSuccess = 0x000;
constexpr uint16_t kScInvalidOpcode = 0x001;
constexpr uint16_t kScInvalidField = 0x002;
constexpr uint16_t kScDataTransferError = 0x004;
constexpr uint16_t kScInternal = 0x006;
constexpr uint16_t kScAbortRequested = 0x007;
constexpr uint16_t kScAerLimitExceeded = 0x105;  // SCT 1 (command specific)
constexpr size_t kMaxHeldAers = 4;               // Identify AERL is 3 (0's based)
constexpr uint16_t kScInvalidNamespace = 0x00B;
constexpr uint16_t kScSequenceError = 0x00C;
constexpr uint16_t kScSglLengthInvalid = 0x00F;
constexpr uint16_t kScSglTypeInvalid = 0x011;
constexpr uint16_t kScLbaOutOfRange = 0x080;
constexpr uint16_t kScFabricsIncompatibleFormat = 0x180;
constexpr uint16_t kScFabricsInvalidParam = 0x182;
constexpr uint16_t kScFabricsControllerBusy = 0x181;
constexpr uint16_t kScFabricsInvalidHost = 0x184;
constexpr uint16_t kScAuthRequired = 0x191;        // SCT 1: authentication required
constexpr uint16_t kScCommandInterrupted = 0x021;  // retryable: the R2T budget is spent

constexpr uint8_t kSglInCapsule = 0x01;  // Data Block, Offset
constexpr uint8_t kSglTransport = 0x5A;  // Transport Data Block, Transport
constexpr uint32_t kAdminInCapsule = 8192;
constexpr uint32_t kConnectDataSize = 1024;
// Command buffers: page-aligned, which every O_DIRECT device here accepts.
constexpr size_t kBufferAlignment = 4096;

uint32_t dw(const Sqe& s, int i) { return get32(s.data() + 4 * i); }
uint16_t cid_of(const Sqe& s) { return get16(s.data() + 2); }
uint8_t sgl_type(const Sqe& s) { return s[39]; }
uint32_t sgl_len(const Sqe& s) { return get32(s.data() + 32); }
uint64_t sgl_addr(const Sqe& s) { return get64(s.data() + 24); }

std::string bounded_string(const uint8_t* p, size_t width, bool* terminated) {
  const size_t n = strnlen(reinterpret_cast<const char*>(p), width);
  *terminated = n < width;
  return std::string(reinterpret_cast<const char*>(p), n);
}

}  // namespace

QueueConnection::QueueConnection(TargetState& state, PduStream& stream)
    : state_(state), stream_(stream) {}

QueueConnection::~QueueConnection() {
  if (!ctrl_) return;
  {
    std::lock_guard lk(ctrl_->mu);
    auto it = ctrl_->queues.find(qid_);
    if (it != ctrl_->queues.end() && it->second == this) ctrl_->queues.erase(it);
  }
  // The admin queue carries the controller: when it goes, the controller and
  // its I/O queues go with it.
  if (qid_ == 0) state_.destroy_controller(ctrl_);
}

Status QueueConnection::handshake() {
  const int64_t handshake_ns = int64_t(state_.config().handshake_timeout_ms) * 1'000'000;
  read_deadline_ns_ = monotonic_ns() + handshake_ns;
  stream_.set_read_deadline(read_deadline_ns_);
  uint8_t buf[kIcPduSize];
  KVTIER_RETURN_IF_ERROR(stream_.read_exact(buf, kCommonHeaderSize));
  PduError err;
  auto l = parse_common_header(as_bytes_view(buf, 8), Direction::kHostToController, {}, &err);
  if (!l.ok() || l->ch.type != PduType::kIcReq) {
    return terminate(l.ok() ? kFesSequenceError : err.fes, err.fei, as_bytes_view(buf, 8),
                     l.ok() ? Status::invalid_argument("nvme-tcp: expected ICReq") : l.status());
  }
  KVTIER_RETURN_IF_ERROR(stream_.read_exact(buf + 8, kIcPduSize - 8));
  auto req = decode_icreq(as_bytes_view(buf, kIcPduSize));
  if (!req.ok()) {
    return terminate(kFesInvalidHeaderField, 8, as_bytes_view(buf, kIcPduSize), req.status());
  }
  // We never pad (CPDA 0); a host that wants its data aligned is refused.
  if (req->hpda != 0) {
    return terminate(kFesUnsupportedParameter, 10, as_bytes_view(buf, kIcPduSize),
                     Status::invalid_argument("nvme-tcp: HPDA other than 0 is not supported"));
  }
  const auto& cfg = state_.config();
  limits_.hdgst = req->hdgst;
  limits_.ddgst = req->ddgst;
  limits_.max_data = std::max({cfg.in_capsule_data, kAdminInCapsule, cfg.maxh2cdata});
  IcResp resp{0, 0, req->hdgst, req->ddgst, cfg.maxh2cdata};
  HeaderBuf h;
  const uint32_t n = encode_icresp(resp, h);
  iovec iov{h.data(), n};
  KVTIER_RETURN_IF_ERROR(send_pdu(&iov, 1));
  connect_deadline_ns_ = monotonic_ns() + handshake_ns;  // Connect comes next
  // Only now: a connection that never sends its ICReq holds no buffer.
  stream_.buffer_reads(kQueueReadBufferBytes);
  return Status::ok_status();
}

Status QueueConnection::run() {
  receiver_ = std::this_thread::get_id();
  Status st = run_loop();
  // A last answer (an authentication's Failure1) may be held: it goes out
  // before the connection is torn down.
  stream_.push();
  count_end(st);
  // Writes still waiting for their data never get it; commands in the device
  // call back into this object: wait for them, and for their sends.
  for (auto& [ttag, w] : pending_) {
    state_.release_r2t(w.length);
    release_buffer(w.buf);
    end_io();
  }
  pending_.clear();
  wait_idle();
  sender_.reset();
  return st;
}

void QueueConnection::count_end(const Status& why) {
  if (why.code() != StatusCode::kTimeout || send_stalled_) return;  // stalls count at the send
  state_.count(connected_ ? TargetState::Event::kR2tTimeout
                          : TargetState::Event::kHandshakeTimeout);
  spdlog::warn("nvmf: connection dropped: {}",
               connected_ ? "an R2T's data did not arrive in time" : "no ICReq/Connect in time");
}

void QueueConnection::update_read_deadline() {
  int64_t deadline = 0;
  if (!connected_ || (auth_ && !auth_->authenticated())) {
    deadline = connect_deadline_ns_;  // also bounds authentication
  } else {
    for (const auto& [ttag, w] : pending_) {
      if (deadline == 0 || w.deadline_ns < deadline) deadline = w.deadline_ns;
    }
  }
  if (deadline == read_deadline_ns_) return;
  read_deadline_ns_ = deadline;
  stream_.set_read_deadline(deadline);
}

Status QueueConnection::run_loop() {
  KVTIER_RETURN_IF_ERROR(handshake());
  uint8_t hdr[kIcPduSize + kDigestSize];
  std::vector<uint8_t> data;
  for (;;) {
    update_read_deadline();
    KVTIER_RETURN_IF_ERROR(stream_.read_exact(hdr, kCommonHeaderSize));
    PduError err;
    auto l =
        parse_common_header(as_bytes_view(hdr, 8), Direction::kHostToController, limits_, &err);
    if (!l.ok()) return terminate(err.fes, err.fei, as_bytes_view(hdr, 8), l.status());
    if (l->ch.type == PduType::kIcReq) {
      return terminate(kFesSequenceError, 0, as_bytes_view(hdr, 8),
                       Status::invalid_argument("nvme-tcp: second ICReq"));
    }
    KVTIER_RETURN_IF_ERROR(stream_.read_exact(hdr + 8, l->header_bytes - 8));
    if (l->has_hdgst && !header_digest_ok(as_bytes_view(hdr, l->header_bytes), l->ch.hlen)) {
      return terminate(kFesHeaderDigest, 0, as_bytes_view(hdr, l->ch.hlen),
                       Status::corruption("nvme-tcp: header digest error"));
    }
    if (l->ch.type == PduType::kH2CData) {
      KVTIER_RETURN_IF_ERROR(receive_h2c(*l, hdr));
      continue;
    }
    // An I/O queue's in-capsule data (a write's, bounded by the PDU's
    // checks) goes into a pooled buffer the device can take as it is; the
    // admin queue's (Connect, authentication) into a vector.
    uint8_t* dst = nullptr;
    if (qid_ != 0 && l->ch.type == PduType::kCapsuleCmd && l->data_len > 0) {
      capsule_buf_ = acquire_buffer(l->data_len);
      dst = reinterpret_cast<uint8_t*>(bufs_[capsule_buf_]->data());
    } else {
      data.resize(l->data_len);
      dst = data.data();
    }
    const CapsuleData received(dst, l->data_len);
    bool ddgst_ok = true;
    Status st;
    if (l->data_len) {
      st = stream_.read_exact(dst, l->data_len);
      if (st.ok() && l->has_ddgst) {
        uint8_t d[4];
        st = stream_.read_exact(d, 4);
        if (st.ok()) ddgst_ok = get32(d) == digest(as_bytes_view(dst, l->data_len));
      }
    }
    if (st.ok()) st = serve_pdu(*l, hdr, received, ddgst_ok);
    if (capsule_buf_ != kNoBuffer) {  // not taken by a write
      release_buffer(capsule_buf_);
      capsule_buf_ = kNoBuffer;
    }
    KVTIER_RETURN_IF_ERROR(st);
  }
}

Status QueueConnection::serve_pdu(const PduLayout& l, const uint8_t* hdr, CapsuleData data,
                                  bool ddgst_ok) {
  const ByteView h = as_bytes_view(hdr, l.ch.hlen);
  switch (l.ch.type) {
    case PduType::kH2CTermReq:
      stream_.shutdown();
      return Status::unavailable("nvme-tcp: host sent H2CTermReq");
    case PduType::kCapsuleCmd: {
      const uint32_t cap = qid_ == 0 ? kAdminInCapsule : state_.config().in_capsule_data;
      if (data.size() > std::max(cap, kConnectDataSize)) {
        return terminate(kFesDataLimitExceeded, 4, h,
                         Status::invalid_argument("nvme-tcp: in-capsule data too large"));
      }
      return handle_capsule(decode_capsule_cmd(h), data, ddgst_ok);
    }
    default:
      return terminate(kFesInvalidHeaderField, 0, h,
                       Status::invalid_argument("nvme-tcp: unexpected PDU"));
  }
}

Status QueueConnection::handle_capsule(const Sqe& sqe, CapsuleData data, bool ddgst_ok) {
  const uint16_t cid = cid_of(sqe);
  if (sq_size_) sq_head_.store(uint16_t((sq_head_.load() + 1) % sq_size_));
  if (ctrl_) ctrl_->last_keepalive_ns = monotonic_ns();
  if (!ddgst_ok) return complete(cid, {kScDataTransferError});
  // Only SGLs (PSDT 01b) and only the two descriptor forms Linux sends.
  if ((sqe[1] & 0xC0) != 0x40) return complete(cid, {kScInvalidField});
  const uint8_t t = sgl_type(sqe);
  if (!data.empty()) {
    if (t != kSglInCapsule || sgl_addr(sqe) != 0 || sgl_len(sqe) != data.size()) {
      return complete(cid, {kScSglLengthInvalid});
    }
  } else if (t != kSglTransport && t != kSglInCapsule) {
    return complete(cid, {kScSglTypeInvalid});
  } else if (t == kSglInCapsule && sgl_len(sqe) != 0) {
    return complete(cid, {kScSglLengthInvalid});
  }
  const bool auth_command = sqe[0] == 0x7F && (sqe[4] == 0x05 || sqe[4] == 0x06);
  if (auth_command) return authentication(sqe, data);
  // Until its host has authenticated, a queue serves nothing else.
  if (auth_ && !auth_->authenticated()) return complete(cid, {kScAuthRequired});
  if (sqe[0] == 0x7F) {
    // Connect may be its own completion: fabrics() returns what to send.
    return complete(cid, fabrics(sqe, data));
  }
  if (!connected_) return complete(cid, {kScSequenceError});
  return qid_ == 0 ? admin(sqe, data) : io(sqe, data);
}

QueueConnection::Completion QueueConnection::fabrics(const Sqe& sqe, CapsuleData data) {
  const uint8_t fctype = sqe[4];
  if (fctype == 0x01) return connect(sqe, data);
  if (!connected_) return {kScSequenceError};
  if (fctype != 0x00 && fctype != 0x04) return {kScInvalidOpcode};
  if (qid_ != 0) return {kScInvalidField};
  const uint8_t size = sqe[40] & 7;
  const uint32_t ofst = get32(sqe.data() + 44);
  std::lock_guard lk(ctrl_->mu);
  if (fctype == 0x04) {  // Property Get
    uint64_t v = 0;
    switch (ofst) {
      case 0x00:
        v = capabilities(state_.config());
        break;
      case 0x08:
        v = kNvmeVersion;
        break;
      case 0x14:
        v = ctrl_->cc;
        break;
      case 0x1C:
        v = ctrl_->csts;
        break;
      default:
        return {kScInvalidField};
    }
    if ((size == 1) != (ofst == 0x00)) return {kScInvalidField};
    return {kScSuccess, uint32_t(v), uint32_t(v >> 32)};
  }
  // Property Set: only CC is writable.
  if (ofst != 0x14 || size != 0) return {kScInvalidField};
  const uint32_t cc = uint32_t(get64(sqe.data() + 48));
  const bool en = cc & 1;
  const uint32_t shn = (cc >> 14) & 3;
  ctrl_->cc = cc;
  uint32_t csts = en ? 1 : 0;  // RDY follows EN at once: nothing to set up
  if (shn) csts |= 2u << 2;    // SHST: shutdown complete (writes are synchronous)
  ctrl_->csts = csts;
  return {kScSuccess};
}

QueueConnection::Completion QueueConnection::connect(const Sqe& sqe, CapsuleData data) {
  if (connected_) return {kScSequenceError};
  if (data.size() != kConnectDataSize) return {kScSglLengthInvalid};
  const uint16_t recfmt = get16(sqe.data() + 40);
  const uint16_t qid = get16(sqe.data() + 42);
  const uint16_t sqsize = get16(sqe.data() + 44);  // 0's based
  const uint8_t cattr = sqe[46];
  const uint32_t kato = get32(sqe.data() + 48);
  const auto& cfg = state_.config();
  if (recfmt != 0) return {kScFabricsIncompatibleFormat};
  if (sqsize < 1 || sqsize >= cfg.queue_depth) return {kScFabricsInvalidParam, 44};
  std::array<uint8_t, 16> hostid;
  std::memcpy(hostid.data(), data.data(), 16);
  const uint16_t cntlid = get16(data.data() + 16);
  bool t1, t2;
  const std::string subnqn = bounded_string(data.data() + 256, 256, &t1);
  const std::string hostnqn = bounded_string(data.data() + 512, 256, &t2);
  if (!t1 || subnqn.empty()) return {kScFabricsInvalidParam, (1u << 16) | 256};
  if (!t2 || hostnqn.empty()) return {kScFabricsInvalidParam, (1u << 16) | 512};

  if (qid == 0) {
    const Subsystem* sub = nullptr;
    if (subnqn != kDiscoveryNqn) {
      sub = state_.find_subsystem(subnqn);
      if (!sub) {
        spdlog::warn("nvmf: Connect to unknown subsystem {} from {}", subnqn, hostnqn);
        return {kScFabricsInvalidParam, (1u << 16) | 256};
      }
      if (!sub->host_allowed(hostnqn)) {
        spdlog::warn("nvmf: host {} is not allowed on {}", hostnqn, subnqn);
        return {kScFabricsInvalidHost};
      }
    }
    if (cntlid != 0xFFFF && cntlid != 0xFFFE) return {kScFabricsInvalidParam, (1u << 16) | 16};
    auto c = state_.create_controller(sub, hostnqn, hostid, kato);
    if (!c) {
      spdlog::warn("nvmf: controller limit reached, Connect from {} refused", hostnqn);
      return {kScFabricsControllerBusy, 0, 0, /*retryable=*/true};
    }
    {
      std::lock_guard lk(c->mu);
      c->queues[0] = this;
    }
    ctrl_ = std::move(c);
    spdlog::info("nvmf: controller {} for {} from {}", ctrl_->cntlid, subnqn, hostnqn);
  } else {
    auto c = state_.find_controller(cntlid);
    if (!c || c->is_discovery() || c->hostnqn != hostnqn || c->hostid != hostid ||
        c->subsystem->config.nqn != subnqn) {
      return {kScFabricsInvalidParam, (1u << 16) | 16};
    }
    std::lock_guard lk(c->mu);
    const uint16_t granted = c->io_queues_granted ? c->io_queues_granted : cfg.max_io_queues;
    if (!(c->cc & 1) || qid > granted) return {kScFabricsInvalidParam, 42};
    if (c->queues.count(qid)) {  // two connections may not serve one queue
      state_.count(TargetState::Event::kDuplicateQueue);
      spdlog::warn("nvmf: second Connect for queue {} of controller {} refused", qid, cntlid);
      return {kScSequenceError};
    }
    c->queues[qid] = this;
    ctrl_ = std::move(c);
    sender_ = std::make_unique<TaskPool>(1);
  }
  qid_ = qid;
  sq_size_ = uint16_t(sqsize + 1);
  sq_flow_disabled_ = cattr & 0x04;
  connected_ = true;
  return {kScSuccess, ctrl_->cntlid | require_authentication(subnqn, hostnqn)};
}

uint32_t QueueConnection::require_authentication(const std::string& subnqn,
                                                 const std::string& hostnqn) {
  const HostAuthConfig* a = ctrl_->is_discovery() ? nullptr : ctrl_->subsystem->auth_for(hostnqn);
  if (!a) return 0;
  auth_ = std::make_unique<TargetAuth>(*a, subnqn, hostnqn);
  // The transaction must end within the handshake bound, as Connect had to.
  connect_deadline_ns_ = monotonic_ns() + int64_t(state_.config().handshake_timeout_ms) * 1'000'000;
  return dhchap::kConnectAtr;
}

Status QueueConnection::authentication(const Sqe& sqe, CapsuleData data) {
  const uint16_t cid = cid_of(sqe);
  if (!connected_) return complete(cid, {kScSequenceError});
  if (!auth_) return complete(cid, {kScInvalidField});  // this host needs no authentication
  const uint32_t length = get32(sqe.data() + 44);       // TL (Send) or AL (Receive)
  if (sqe[43] != dhchap::kSecurityProtocol || sqe[41] != dhchap::kSpsp0 ||
      sqe[42] != dhchap::kSpsp1 || length == 0 || length > kAdminInCapsule) {
    return complete(cid, {kScInvalidField});
  }
  const bool was_authenticated = auth_->authenticated();
  const bool send = sqe[4] == 0x05;  // Send: the message came in the capsule
  if (send ? data.size() != length : (!data.empty() || sgl_len(sqe) != length)) {
    return complete(cid, {kScSglLengthInvalid});
  }
  dhchap::Bytes answer;
  if (send) {
    auth_->on_send(data);
  } else {
    answer = auth_->on_receive();
  }
  // Counted before the answer goes out: a host that has it sees the count.
  if (auth_->failed()) {
    state_.count(TargetState::Event::kAuthFailure);
    spdlog::warn("nvmf: authentication of queue {} failed: {}", qid_, auth_->failure());
  } else if (auth_->authenticated() && !was_authenticated) {
    state_.count(TargetState::Event::kAuthSuccess);
    spdlog::info("nvmf: queue {} of controller {} authenticated", qid_, ctrl_->cntlid);
  }
  Status st = send ? complete(cid, {kScSuccess})
                   : send_data_and_complete(cid, as_bytes_view(answer.data(), answer.size()),
                                            length, {kScSuccess});
  // The Failure1 (or the host's Failure2) ends the transaction and the queue.
  if (st.ok() && auth_->failed()) return Status::permission_denied("nvmf: " + auth_->failure());
  return st;
}

QueueConnection::Completion QueueConnection::get_features(const Sqe& sqe) {
  const uint8_t fid = dw(sqe, 10) & 0xFF;
  std::lock_guard lk(ctrl_->mu);
  switch (fid) {
    case 0x07: {
      const uint32_t n =
          (ctrl_->io_queues_granted ? ctrl_->io_queues_granted : state_.config().max_io_queues) - 1;
      return {kScSuccess, n << 16 | n};
    }
    case 0x0B:
      return {kScSuccess, ctrl_->async_event_config};
    case 0x0F:
      return {kScSuccess, ctrl_->kato_ms};
    default:
      return {kScInvalidField};
  }
}

QueueConnection::Completion QueueConnection::set_features(const Sqe& sqe) {
  const uint8_t fid = dw(sqe, 10) & 0xFF;
  const uint32_t v = dw(sqe, 11);
  std::lock_guard lk(ctrl_->mu);
  switch (fid) {
    case 0x07: {
      if (ctrl_->is_discovery()) return {kScInvalidField};
      const uint32_t nsq = (v & 0xFFFF) + 1, ncq = (v >> 16) + 1;
      if ((v & 0xFFFF) == 0xFFFF || (v >> 16) == 0xFFFF) return {kScInvalidField};
      const uint32_t n = std::min({nsq, ncq, state_.config().max_io_queues});
      ctrl_->io_queues_granted = uint16_t(n);
      return {kScSuccess, (n - 1) << 16 | (n - 1)};
    }
    case 0x0B:
      ctrl_->async_event_config = v;
      return {kScSuccess};
    case 0x0F:
      ctrl_->kato_ms = state_.clamp_kato(v);
      return {kScSuccess};
    default:
      return {kScInvalidField};
  }
}

Status QueueConnection::admin(const Sqe& sqe, CapsuleData data) {
  const uint16_t cid = cid_of(sqe);
  const uint8_t opc = sqe[0];
  const uint32_t nsid = dw(sqe, 1);
  const uint32_t len = sgl_type(sqe) == kSglTransport ? sgl_len(sqe) : 0;
  const Subsystem* sub = ctrl_->subsystem;
  switch (opc) {
    case 0x18:  // Keep Alive
      return complete(cid, {kScSuccess});
    case 0x0C:  // Async Event Request: held (no events to report) up to AERL + 1
      if (held_aers_.size() >= kMaxHeldAers) return complete(cid, {kScAerLimitExceeded});
      held_aers_.push_back(cid);
      return Status::ok_status();
    case 0x08: {  // Abort: only a held AER is ever outstanding long enough to abort
      const uint16_t sqid = dw(sqe, 10) & 0xFFFF, victim = uint16_t(dw(sqe, 10) >> 16);
      auto it = std::find(held_aers_.begin(), held_aers_.end(), victim);
      if (sqid != 0 || it == held_aers_.end()) return complete(cid, {kScSuccess, 1});
      held_aers_.erase(it);
      KVTIER_RETURN_IF_ERROR(complete(victim, {kScAbortRequested}));
      return complete(cid, {kScSuccess, 0});  // dw0 bit 0 clear: the command was aborted
    }
    case 0x09:
      return complete(cid, set_features(sqe));
    case 0x0A:
      return complete(cid, get_features(sqe));
    case 0x06: {  // Identify
      if (len == 0 || len > kIdentifySize) return complete(cid, {kScSglLengthInvalid});
      const uint8_t cns = dw(sqe, 10) & 0xFF;
      std::vector<uint8_t> page;
      if (cns == 0x01) {
        page = identify_controller(state_.config(), *ctrl_);
      } else if (sub && (cns == 0x00 || cns == 0x03)) {
        if (nsid == 0 || nsid > sub->config.namespaces.size()) {
          return complete(cid, {kScInvalidNamespace});
        }
        page = cns == 0 ? identify_namespace(*sub, nsid) : namespace_descriptors(*sub, nsid);
      } else if (sub && cns == 0x02) {
        if (nsid >= 0xFFFFFFFE) return complete(cid, {kScInvalidNamespace});
        page = active_namespace_list(*sub, nsid);
      } else {
        return complete(cid, {kScInvalidField});
      }
      return send_data_and_complete(cid, as_bytes_view(page.data(), page.size()), len,
                                    {kScSuccess});
    }
    case 0x02: {  // Get Log Page
      const uint8_t lid = dw(sqe, 10) & 0xFF;
      const uint64_t numd = ((uint64_t(dw(sqe, 11) & 0xFFFF) << 16) | (dw(sqe, 10) >> 16)) + 1;
      const uint64_t offset = dw(sqe, 12) | uint64_t(dw(sqe, 13)) << 32;
      if (numd * 4 != len || len > state_.config().max_transfer || offset % 4) {
        return complete(cid, {kScInvalidField});
      }
      std::vector<uint8_t> page;
      if (lid == 0x70 && !sub) {
        page = discovery_log(state_, ctrl_->hostnqn, state_.discovery_generation());
      } else if (sub && (lid == 0x01 || lid == 0x02 || lid == 0x03)) {
        page.assign(lid == 0x01 ? 64 : 512, 0);  // no errors, no health data, one slot
      } else {
        return complete(cid, {kScInvalidField});
      }
      if (offset > page.size()) return complete(cid, {kScInvalidField});
      const size_t n = std::min<size_t>(len, page.size() - offset);
      return send_data_and_complete(cid, as_bytes_view(page.data() + offset, n), len, {kScSuccess});
    }
    default:
      (void)data;
      return complete(cid, {kScInvalidOpcode});
  }
}

Status QueueConnection::read_or_write(blk::BlockDevice& dev, const Sqe& sqe, CapsuleData data,
                                      uint32_t nsid) {
  const uint16_t cid = cid_of(sqe);
  const uint8_t opc = sqe[0];
  const uint32_t bs = dev.block_size();
  const uint64_t blocks = dev.capacity() / bs;
  const uint64_t slba = dw(sqe, 10) | uint64_t(dw(sqe, 11)) << 32;
  const uint64_t nlb = (dw(sqe, 12) & 0xFFFF) + 1;
  if (slba >= blocks || nlb > blocks - slba) return complete(cid, {kScLbaOutOfRange});
  const uint64_t bytes = nlb * bs;
  if (opc == 0x08) {  // Write Zeroes: the host bounds it by MDTS too
    if (bytes > state_.config().max_transfer) return complete(cid, {kScInvalidField});
    if (!begin_io()) return complete(cid, {kScInternal});
    const uint32_t b = acquire_buffer(bytes);
    std::memset(bufs_[b]->data(), 0, bytes);
    submit_write(dev, cid, slba * bs, b, uint32_t(bytes));
    return Status::ok_status();
  }
  if (bytes > state_.config().max_transfer || sgl_len(sqe) != bytes) {
    return complete(cid, {kScSglLengthInvalid});
  }
  if (opc == 0x02) {
    if (sgl_type(sqe) != kSglTransport) return complete(cid, {kScSglTypeInvalid});
    if (!begin_io()) return complete(cid, {kScInternal});
    const uint32_t b = acquire_buffer(bytes);
    const MutableByteView buf = bufs_[b]->subview(0, bytes);
    dev.read(slba * bs, buf,
             [this, cid, b, buf](Status st) { finish_from_device(cid, std::move(st), b, buf); });
    return Status::ok_status();
  }
  if (!data.empty()) {  // in-capsule write
    if (!begin_io()) return complete(cid, {kScInternal});
    // The data is in a pooled buffer already (run_loop): the write takes it.
    uint32_t b = std::exchange(capsule_buf_, kNoBuffer);
    if (b == kNoBuffer) {
      b = acquire_buffer(bytes);
      std::memcpy(bufs_[b]->data(), data.data(), bytes);
    }
    submit_write(dev, cid, slba * bs, b, uint32_t(bytes));
    return Status::ok_status();
  }
  // R2T-driven write: ask for all of it; the host splits by MAXH2CDATA.
  // The buffer and the in-flight slot are held from now until the device
  // has written the data.
  if (!state_.reserve_r2t(bytes)) return complete(cid, {kScCommandInterrupted, 0, 0, true});
  if (!begin_io()) {
    state_.release_r2t(bytes);
    return complete(cid, {kScInternal});
  }
  uint16_t ttag = next_ttag_;
  while (pending_.count(ttag)) ++ttag;
  next_ttag_ = uint16_t(ttag + 1);
  PendingWrite w;
  w.cid = cid;
  w.nsid = nsid;
  w.offset = slba * bs;
  w.buf = acquire_buffer(bytes);
  w.length = uint32_t(bytes);
  w.deadline_ns = monotonic_ns() + int64_t(state_.config().r2t_timeout_ms) * 1'000'000;
  pending_.emplace(ttag, w);
  return send_r2t(cid, ttag, 0, uint32_t(bytes));
}

Status QueueConnection::deallocate(blk::BlockDevice& dev, const Sqe& sqe, CapsuleData data) {
  const uint16_t cid = cid_of(sqe);
  const uint32_t bs = dev.block_size();
  const uint64_t blocks = dev.capacity() / bs;
  const uint32_t nr = (dw(sqe, 10) & 0xFF) + 1;
  if (data.size() < nr * 16u) return complete(cid, {kScSglLengthInvalid});
  if (!(dw(sqe, 11) & 0x4)) return complete(cid, {kScSuccess});  // hints only
  // The trims block this thread: nothing it answered may wait meanwhile.
  stream_.push();
  for (uint32_t i = 0; i < nr; ++i) {
    const uint8_t* r = data.data() + 16 * i;
    const uint64_t nlb = get32(r + 4), slba = get64(r + 8);
    if (nlb == 0) continue;
    if (slba >= blocks || nlb > blocks - slba) return complete(cid, {kScLbaOutOfRange});
    if (!dev.trim_sync(slba * bs, nlb * bs).ok()) return complete(cid, {kScInternal});
  }
  return complete(cid, {kScSuccess});
}

Status QueueConnection::io(const Sqe& sqe, CapsuleData data) {
  const uint16_t cid = cid_of(sqe);
  const uint8_t opc = sqe[0];
  const uint32_t nsid = dw(sqe, 1);
  const Subsystem* sub = ctrl_->subsystem;
  if (!sub) return complete(cid, {kScInvalidOpcode});
  if (opc == 0x00 && nsid == 0xFFFFFFFF) {  // Flush of every namespace
    stream_.push();  // the flushes block this thread: send what is held first
    for (auto& d : sub->config.namespaces) {
      if (!d->flush_sync().ok()) return complete(cid, {kScInternal});
    }
    return complete(cid, {kScSuccess});
  }
  if (nsid == 0 || nsid > sub->config.namespaces.size()) {
    return complete(cid, {kScInvalidNamespace});
  }
  blk::BlockDevice& dev = *sub->config.namespaces[nsid - 1];
  switch (opc) {
    case 0x00: {
      if (!begin_io()) return complete(cid, {kScInternal});
      dev.flush([this, cid](Status st) { finish_from_device(cid, std::move(st), kNoBuffer, {}); });
      return Status::ok_status();
    }
    case 0x01:
    case 0x02:
    case 0x08:
      return read_or_write(dev, sqe, data, nsid);
    case 0x09:  // Dataset Management
      return deallocate(dev, sqe, data);
    default:
      return complete(cid, {kScInvalidOpcode});
  }
}

Status QueueConnection::receive_h2c(const PduLayout& l, const uint8_t* hdr) {
  const ByteView h = as_bytes_view(hdr, l.ch.hlen);
  auto d = decode_data_header(h);
  if (!d.ok()) return terminate(kFesInvalidHeaderField, 16, h, d.status());
  if (d->length != l.data_len) {
    return terminate(kFesInvalidHeaderField, 16, h,
                     Status::invalid_argument("nvme-tcp: H2CData length mismatch"));
  }
  if (l.data_len > state_.config().maxh2cdata) {
    return terminate(kFesDataLimitExceeded, 16, h,
                     Status::invalid_argument("nvme-tcp: H2CData above MAXH2CDATA"));
  }
  auto it = pending_.find(d->ttag);
  if (it == pending_.end() || it->second.cid != d->cccid) {
    return terminate(kFesInvalidHeaderField, 10, h,
                     Status::invalid_argument("nvme-tcp: H2CData for unknown TTAG"));
  }
  PendingWrite& w = it->second;
  if (d->offset != w.received || uint64_t(d->offset) + d->length > w.length) {
    return terminate(kFesDataOutOfRange, 12, h,
                     Status::invalid_argument("nvme-tcp: H2CData out of range"));
  }
  // Every bound is checked: the data goes straight into the write's buffer.
  std::byte* dst = bufs_[w.buf]->data() + d->offset;
  KVTIER_RETURN_IF_ERROR(stream_.read_exact(dst, d->length));
  bool ddgst_ok = true;
  if (l.has_ddgst) {
    uint8_t g[4];
    KVTIER_RETURN_IF_ERROR(stream_.read_exact(g, 4));
    ddgst_ok = get32(g) == digest(ByteView(dst, d->length));
  }
  w.received += d->length;
  if (!ddgst_ok) {
    const uint16_t cid = w.cid;
    state_.release_r2t(w.length);
    release_buffer(w.buf);
    pending_.erase(it);
    end_io();
    return complete(cid, {kScDataTransferError});
  }
  if (w.received < w.length) return Status::ok_status();
  const PendingWrite done = w;
  pending_.erase(it);
  state_.release_r2t(done.length);
  submit_write(*ctrl_->subsystem->config.namespaces[done.nsid - 1], done.cid, done.offset, done.buf,
               done.length);
  return Status::ok_status();
}

void QueueConnection::submit_write(blk::BlockDevice& dev, uint16_t cid, uint64_t offset,
                                   uint32_t buf, uint32_t length) {
  dev.write(offset, bufs_[buf]->view().subspan(0, length),
            [this, cid, buf](Status st) { finish_from_device(cid, std::move(st), buf, {}); });
}

uint32_t QueueConnection::acquire_buffer(size_t bytes) {
  std::lock_guard lk(io_mu_);
  // Buffers grow to the largest transfer they served (at least 128 KiB), so
  // a queue of small I/O does not hold max_transfer bytes per slot.
  const size_t want = std::max<size_t>(bytes, 128 << 10);
  if (free_bufs_.empty()) {
    bufs_.push_back(std::make_unique<AlignedBuffer>(want, kBufferAlignment));
    return uint32_t(bufs_.size() - 1);
  }
  const uint32_t i = free_bufs_.back();
  free_bufs_.pop_back();
  if (bufs_[i]->size() < bytes) *bufs_[i] = AlignedBuffer(want, kBufferAlignment);
  return i;
}

void QueueConnection::release_buffer(uint32_t index) {
  std::lock_guard lk(io_mu_);
  free_bufs_.push_back(index);
}

bool QueueConnection::begin_io() {
  std::lock_guard lk(io_mu_);
  // A host never has more commands outstanding than its SQ holds; one that
  // does gets an error rather than unbounded buffers.
  if (in_flight_ >= std::max<uint32_t>(sq_size_, 1)) return false;
  ++in_flight_;
  return true;
}

void QueueConnection::end_io() {
  std::lock_guard lk(io_mu_);
  --in_flight_;
  if (in_flight_ == 0) io_cv_.notify_all();
}

void QueueConnection::wait_idle() {
  std::unique_lock lk(io_mu_);
  io_cv_.wait(lk, [&] { return in_flight_ == 0; });
}

}  // namespace kvtier::nvmf
