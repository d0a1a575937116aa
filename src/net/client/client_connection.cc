// ClientConn: one pooled connection of a RemoteStore (client_connection.h).
#include "net/client/client_connection.h"

namespace kvtier::net {

void ClientConn::shutdown() {
  {
    std::lock_guard lk(mu_);
    closing_ = true;
  }
  asio::post(strand_, [self = shared_from_this()] {
    std::error_code ec;
    self->resolver_.cancel();
    self->backoff_timer_.cancel();
    self->deadline_.cancel();
    self->sock_.close();
  });
}

std::optional<uint64_t> ClientConn::up_generation() const {
  std::lock_guard lk(mu_);
  if (!up_ || closing_) return std::nullopt;
  return gen_;
}

uint16_t ClientConn::version() const {
  std::lock_guard lk(mu_);
  return version_;
}

std::shared_ptr<ClientShm> ClientConn::shm_session(uint64_t gen) const {
  std::lock_guard lk(mu_);
  if (gen != gen_ || !up_) return nullptr;
  return shm_;
}

std::optional<uint16_t> ClientConn::server_ns(uint16_t client_ns, uint64_t gen) const {
  std::lock_guard lk(mu_);
  if (gen != gen_ || client_ns >= ns_map_.size() || ns_map_[client_ns] < 0) return std::nullopt;
  return static_cast<uint16_t>(ns_map_[client_ns]);
}

void ClientConn::set_server_ns(uint16_t client_ns, uint16_t server_ns, uint64_t gen) {
  std::lock_guard lk(mu_);
  if (gen != gen_) return;
  if (ns_map_.size() <= client_ns) ns_map_.resize(client_ns + 1, -1);
  ns_map_[client_ns] = server_ns;
}

bool ClientConn::submit(const std::shared_ptr<Call>& c, uint64_t gen) {
  std::lock_guard lk(mu_);
  if (!up_ || closing_ || gen != gen_) return false;
  c->gen = gen;
  pending_[c->id] = c;
  c->writing = true;
  queue_.push_back(c);
  if (!writer_active_) {
    writer_active_ = true;
    // co_spawn only posts to the strand: nothing runs under this lock.
    asio::co_spawn(strand_, write_loop(shared_from_this()), asio::detached);
  }
  return true;
}

CallError ClientConn::wait(const std::shared_ptr<Call>& c, Clock::time_point deadline) {
  std::unique_lock lk(mu_);
  auto finished = [&] { return c->done && !c->writing && !c->reading; };
  if (c->cv.wait_until(lk, deadline, finished)) {
    return c->failure.ok() ? CallError::kNone : CallError::kBroken;
  }
  if (c->done && !c->reading) {
    // The response is in, so the server had the whole request: the write's
    // completion is on its way.
    c->cv.wait(lk, [&] { return !c->writing; });
    return c->failure.ok() ? CallError::kNone : CallError::kBroken;
  }
  // Out of time. Withdraw the call; if the connection may still touch the
  // caller's buffers, break the connection (that aborts its socket
  // operations at once) and wait until it lets go.
  pending_.erase(c->id);
  if (c->writing && !c->write_started) {
    c->cancelled = true;
    c->writing = false;
  }
  bool reset = c->writing || c->reading;
  // A peer that stopped answering altogether (a host gone without a reset,
  // a hung server) would cost every later call its full timeout: after a
  // few timeouts with no frame in between, reconnect instead (a dead host
  // then fails fast, at connect).
  if (++silent_timeouts_ >= kResetAfterSilentTimeouts && c->gen == gen_) {
    spdlog::warn(
        "store client: connection {} answered none of the last {} calls in time; "
        "reconnecting",
        index_, silent_timeouts_);
    silent_timeouts_ = 0;
    reset = true;
  }
  if (reset) {
    if (c->writing || c->reading) {
      spdlog::warn("store client: call {} timed out mid-transfer; resetting connection {}", c->id,
                   index_);
    }
    asio::post(strand_, [self = shared_from_this(), gen = c->gen] { self->abort_session(gen); });
    c->cv.wait(lk, [&] { return !c->writing && !c->reading; });
  }
  return CallError::kTimeout;
}

void ClientConn::abort_session(uint64_t gen) {
  {
    std::lock_guard lk(mu_);
    if (gen != gen_) return;
  }
  abort_socket();
}

bool ClientConn::closing() const {
  std::lock_guard lk(mu_);
  return closing_;
}

bool ClientConn::writer_busy() const {
  std::lock_guard lk(mu_);
  return writer_active_;
}

asio::awaitable<void> ClientConn::run(std::shared_ptr<ClientConn> self) {
  const auto& o = self->shared_.opts;
  uint32_t backoff = o.reconnect_min_ms;
  bool warned = false;
  while (!self->closing()) {
    Status st = co_await self->open_session();
    if (st.ok()) {
      warned = false;
      self->shared_.sessions.fetch_add(1, std::memory_order_relaxed);
      spdlog::info("store client: connection {} to {}:{} up", self->index_, o.host, o.port);
      const auto started = Clock::now();
      Status why = co_await self->read_loop();
      self->end_session(why);
      if (self->closing()) break;
      spdlog::warn("store client: connection {} to {}:{} lost: {}", self->index_, o.host, o.port,
                   why.message());
      self->shared_.record_error(why);
      if (Clock::now() - started >= std::chrono::seconds(1)) {
        backoff = o.reconnect_min_ms;
        continue;  // reconnect at once after a session that worked
      }
      // A session that died young (a server that accepts and drops) is
      // retried with backoff, like a failed connect.
    } else {
      self->abort_socket();
      if (self->closing()) break;
      self->shared_.connect_failures.fetch_add(1, std::memory_order_relaxed);
      self->shared_.record_error(st);
      if (!warned) {
        spdlog::debug("store client: connection {} to {}:{}: {} (retrying with backoff)",
                      self->index_, o.host, o.port, st.to_string());
        warned = true;
      }
    }
    self->backoff_timer_.expires_after(std::chrono::milliseconds(backoff));
    std::error_code ec;
    co_await self->backoff_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    backoff = std::min(backoff * 2, std::max(o.reconnect_max_ms, o.reconnect_min_ms));
  }
  self->abort_socket();
}

asio::awaitable<Status> ClientConn::open_session() {
  const auto& o = shared_.opts;
  // Shared with the timer's handler, which may run after this frame is gone.
  struct Attempt {
    bool expired = false;
    bool finished = false;
  };
  auto attempt = std::make_shared<Attempt>();
  deadline_.expires_after(std::chrono::milliseconds(o.connect_timeout_ms));
  deadline_.async_wait([self = shared_from_this(), attempt](std::error_code ec) {
    if (ec || attempt->finished) return;
    attempt->expired = true;
    self->resolver_.cancel();
    self->abort_socket();
  });
  Status st = co_await handshake();
  attempt->finished = true;  // on the strand, like the handler: no race
  deadline_.cancel();
  if (!st.ok() && attempt->expired) {
    st = Status::timeout(fmt::format("connect to {}:{}: no answer within {} ms", o.host, o.port,
                                     o.connect_timeout_ms));
  }
  co_return st;
}

asio::awaitable<Status> ClientConn::open_stream() {
  const auto& o = shared_.opts;
  std::error_code ec;
  auto endpoints = co_await resolver_.async_resolve(o.host, std::to_string(o.port),
                                                    asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return Status::unavailable(fmt::format("resolve {}: {}", o.host, ec.message()));
  // shutdown() may have closed the old socket while the resolver was
  // finishing; a new one must not outlive it.
  if (closing()) co_return Status::unavailable("client closing");
  // A writer still unwinding from the last session holds references into
  // the old stream (its TLS state above all): let it finish first.
  while (writer_busy()) {
    if (closing()) co_return Status::unavailable("client closing");
    backoff_timer_.expires_after(std::chrono::milliseconds(1));
    co_await backoff_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  sock_.reset(strand_);
  co_await asio::async_connect(sock_.socket(), endpoints,
                               asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    co_return Status::unavailable(
        fmt::format("connect to {}:{}: {}", o.host, o.port, ec.message()));
  }
  sock_.socket().set_option(tcp::no_delay(true), ec);
  if (shared_.tls) {
    sock_.start_tls(*shared_.tls);
    if (Status st = sock_.expect_server_name(o.host); !st.ok()) co_return st;
    co_await sock_.async_handshake(asio::ssl::stream_base::client,
                                   asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      co_return Status::unavailable(
          fmt::format("TLS handshake with {}:{}: {}", o.host, o.port, ec.message()));
    }
  }
  co_return Status::ok_status();
}

asio::awaitable<Result<HelloResponse>> ClientConn::exchange_hello() {
  const auto& o = shared_.opts;
  std::error_code ec;
  HelloRequest hello;
  hello.client_name = o.client_name.substr(0, kMaxNameBytes);
  hello.auth_token = o.auth_token;
  auto frame = encode_message_frame(hello, reserve_id(), {}, kProtocolVersionMin);
  if (!frame.ok()) co_return frame.status();
  co_await asio::async_write(sock_, asio::buffer(*frame),
                             asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return Status::unavailable("sending Hello: " + ec.message());

  reader_ = std::make_unique<FrameStreamReader>(FrameLimits{});
  Status st = co_await reader_->read_head(sock_, ec);
  if (st.ok() && reader_->decoder().state() == FrameDecoder::State::kData) {
    st = co_await reader_->read_data(sock_, ec);
  }
  if (ec) co_return Status::unavailable("waiting for Hello: " + ec.message());
  if (!st.ok()) co_return Status(st.code(), "Hello response: " + st.message());
  Frame f = reader_->decoder().take_frame();
  if (f.header.type == MessageType::kErrorResponse) {
    auto err = decode_message_as<ErrorResponse>(f.header, f.descriptor);
    if (!err.ok()) co_return err.status();
    co_return Status(err->code, "server refused the connection: " + err->message);
  }
  auto resp = decode_message_as<HelloResponse>(f.header, f.descriptor);
  if (!resp.ok()) co_return resp.status();
  if (resp->version < kProtocolVersionMin || resp->version > kProtocolVersionMax) {
    co_return Status::failed_precondition(
        fmt::format("server chose protocol version {}", resp->version));
  }
  co_return std::move(*resp);
}

asio::awaitable<Status> ClientConn::handshake() {
  const auto& o = shared_.opts;
  if (Status st = co_await open_stream(); !st.ok()) co_return st;
  auto resp = co_await exchange_hello();
  if (!resp.ok()) co_return resp.status();
  reader_->reset(FrameLimits{}, resp->version);
  std::shared_ptr<ClientShm> shm;
  if (o.shared_memory) {
    auto attached = co_await attach_shm(resp->version, resp->limits);
    if (!attached.ok()) co_return attached.status();
    shm = std::move(*attached);
  }
  {
    std::lock_guard lk(mu_);
    if (closing_) co_return Status::unavailable("client closing");
    up_ = true;
    ++gen_;
    silent_timeouts_ = 0;
    version_ = resp->version;
    ns_map_.clear();
    shm_ = shm;
  }
  if (shm) {
    shared_.shm_sessions.fetch_add(1, std::memory_order_relaxed);
    shared_.shm_up.fetch_add(1, std::memory_order_relaxed);
  }
  shared_.session_up(resp->limits);
  co_return Status::ok_status();
}

asio::awaitable<Result<std::shared_ptr<ClientShm>>> ClientConn::attach_shm(
    uint16_t version, const ServerLimits& limits) {
  const auto& o = shared_.opts;
  std::shared_ptr<ClientShm> none;
  std::error_code ec;
  auto frame = encode_message_frame(ShmOfferRequest{}, reserve_id(), {}, version);
  if (!frame.ok()) co_return frame.status();
  co_await asio::async_write(sock_, asio::buffer(*frame),
                             asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return Status::unavailable("sending ShmOffer: " + ec.message());
  Status st = co_await reader_->read_head(sock_, ec);
  if (st.ok() && reader_->decoder().state() == FrameDecoder::State::kData) {
    st = co_await reader_->read_data(sock_, ec);
  }
  if (ec) co_return Status::unavailable("waiting for the ShmOffer answer: " + ec.message());
  if (!st.ok()) co_return st;
  Frame f = reader_->decoder().take_frame();
  if (f.header.type == MessageType::kErrorResponse) {
    spdlog::debug("store client: connection {}: server declined shared memory", index_);
    co_return none;
  }
  auto offer = decode_message_as<ShmOfferResponse>(f.header, f.descriptor);
  if (!offer.ok()) co_return offer.status();
  const std::string here = host_boot_id();
  if (here.empty() || offer->host_id != here) co_return none;  // another host: TCP
  // Slots hold the largest object, page-aligned; as many as the server maps.
  const size_t slot =
      std::max<size_t>(4096, (size_t{limits.max_object_bytes} + 4095) & ~size_t{4095});
  size_t slots = std::max<unsigned>(1, o.shm_slots);
  if (offer->max_area_bytes < slot) co_return none;
  slots = std::min<size_t>(slots, offer->max_area_bytes / slot);
  auto area = ShmArea::create(slot * slots);
  if (!area.ok()) {
    spdlog::warn("store client: shared memory unavailable: {}", area.status().message());
    co_return none;
  }
  // Blocking, but on a local socket the server answers at once, and every
  // step is bounded by the connect timeout.
  ShmAttachMessage msg{offer->nonce, slot * slots};
  if (o.direct_channel) msg.flags |= kShmAttachWantChannel;
  auto grant = shm_attach_send(offer->socket_name, msg, (*area)->fd(), o.connect_timeout_ms);
  if (!grant.ok()) {
    spdlog::info("store client: connection {}: shared memory not attached ({}); using TCP", index_,
                 grant.status().message());
    co_return none;
  }
  std::shared_ptr<ShmDirectChannel> channel;
  if (grant->channel >= 0) {
    auto ch = ShmDirectChannel::open(grant->channel, grant->arena, grant->arena_bytes,
                                     &shared_.arena_reads);
    if (ch.ok()) {
      channel = std::move(*ch);
      channel->set_flush_scheduler(
          [weak_self = weak_from_this(), weak_ch = std::weak_ptr<ShmDirectChannel>(channel)] {
            if (auto self = weak_self.lock()) self->schedule_release_flush(weak_ch);
          });
      shared_.direct_channels.fetch_add(1, std::memory_order_relaxed);
    } else {
      spdlog::info("store client: connection {}: no direct channel: {}", index_,
                   ch.status().message());
    }
  } else if (grant->arena >= 0) {
    ::close(grant->arena);
  }
  co_return std::make_shared<ClientShm>(std::move(*area), slot, slots, std::move(channel));
}

void ClientConn::schedule_release_flush(std::weak_ptr<ShmDirectChannel> weak_ch) {
  asio::post(strand_, [self = shared_from_this(), weak_ch] {
    self->release_timer_.expires_after(kReleaseFlushDelay);
    self->release_timer_.async_wait([self, weak_ch](std::error_code ec) {
      auto ch = weak_ch.lock();
      if (ec || !ch) return;
      if (ch->flush_releases()) self->schedule_release_flush(weak_ch);
    });
  });
}

bool ClientConn::route(const Call& c, const FrameHeader& h, ByteView descriptor,
                       std::vector<MutableByteView>& parts) {
  if (h.type == MessageType::kGetResponse) {
    auto r = GetResponse::decode(descriptor);
    if (!r.ok() || !r->result.hit || c.outs.size() != 1 || r->result.length > c.outs[0].size()) {
      return false;
    }
    parts.push_back(c.outs[0].first(r->result.length));
    return true;
  }
  if (h.type == MessageType::kBatchGetResponse) {
    auto r = BatchGetResponse::decode(descriptor);
    if (!r.ok() || r->results.size() != c.outs.size()) return false;
    for (size_t i = 0; i < r->results.size(); ++i) {
      const GetOutcome& o = r->results[i];
      if (!o.hit) continue;
      if (o.length > c.outs[i].size()) return false;
      parts.push_back(c.outs[i].first(o.length));
    }
    return true;
  }
  return false;
}

void ClientConn::finish_call(const std::shared_ptr<Call>& c, Frame* f, Status failure) {
  std::lock_guard lk(mu_);
  if (f) {
    c->header = f->header;
    c->descriptor = std::move(f->descriptor);
    c->data_in = std::move(f->data);
  }
  c->failure = std::move(failure);
  c->done = true;
  c->reading = false;
  c->cv.notify_all();
}

asio::awaitable<Status> ClientConn::read_loop() {
  std::vector<MutableByteView> parts;
  for (;;) {
    std::error_code ec;
    Status st = co_await reader_->read_head(sock_, ec);
    if (ec) co_return Status::unavailable("connection closed: " + ec.message());
    if (!st.ok()) {
      spdlog::warn("store client: malformed frame from {}:{}: {}", shared_.opts.host,
                   shared_.opts.port, st.message());
      co_return st;
    }
    const FrameHeader h = reader_->decoder().header();
    std::shared_ptr<Call> call;
    {
      std::lock_guard lk(mu_);
      silent_timeouts_ = 0;
      auto it = pending_.find(h.request_id);
      if (it != pending_.end()) {
        call = it->second;
        pending_.erase(it);
        call->reading = true;
      }
    }
    if (reader_->decoder().state() == FrameDecoder::State::kData) {
      parts.clear();
      if (call && route(*call, h, reader_->decoder().descriptor(), parts)) {
        st = reader_->set_data_destination(parts);
      }
      if (st.ok()) st = co_await reader_->read_data(sock_, ec);
      if (ec || !st.ok()) {
        Status why = ec ? Status::unavailable("connection closed: " + ec.message()) : st;
        if (call) finish_call(call, nullptr, why);
        co_return why;
      }
    }
    Frame f = reader_->decoder().take_frame();
    if (call) finish_call(call, &f, Status::ok_status());
    // A response nobody waits for (its caller timed out) is dropped.
  }
}

asio::awaitable<void> ClientConn::write_loop(std::shared_ptr<ClientConn> self) {
  std::vector<std::shared_ptr<Call>> batch;
  std::vector<asio::const_buffer> bufs;
  for (;;) {
    batch.clear();
    {
      std::lock_guard lk(self->mu_);
      while (!self->queue_.empty() && batch.size() < 64) {
        auto c = std::move(self->queue_.front());
        self->queue_.pop_front();
        if (c->cancelled) continue;
        c->write_started = true;
        batch.push_back(std::move(c));
      }
      if (batch.empty()) {
        self->writer_active_ = false;
        co_return;
      }
    }
    bufs.clear();
    for (const auto& c : batch) {
      bufs.push_back(asio::buffer(c->prefix));
      for (ByteView d : c->data) {
        if (!d.empty()) bufs.push_back(asio::buffer(d.data(), d.size()));
      }
    }
    const uint64_t gen = batch.front()->gen;
    std::error_code ec;
    co_await asio::async_write(self->sock_, bufs, asio::redirect_error(asio::use_awaitable, ec));
    {
      std::lock_guard lk(self->mu_);
      for (const auto& c : batch) {
        c->writing = false;
        c->cv.notify_all();
      }
    }
    if (ec) {
      // The reader sees the broken socket and ends the session, which fails
      // every call still waiting.
      self->abort_session(gen);
    }
  }
}

void ClientConn::end_session(const Status& why) {
  bool was_up = false;
  {
    std::lock_guard lk(mu_);
    was_up = up_;
    up_ = false;
    if (shm_) shared_.shm_up.fetch_sub(1, std::memory_order_relaxed);
    shm_.reset();  // calls still holding it keep the mapping alive
    for (auto& [id, c] : pending_) {
      c->failure = why;
      c->done = true;
      c->cv.notify_all();
    }
    pending_.clear();
    for (auto& c : queue_) {
      if (!c->write_started) c->writing = false;
      c->cv.notify_all();
    }
    queue_.clear();
  }
  if (was_up) shared_.session_down();
  abort_socket();
}

}  // namespace kvtier::net
