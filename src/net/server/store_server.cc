#include "net/server/store_server.h"

#include "net/server/server_impl.h"

namespace kvtier::net {

bool token_equal(std::string_view offered, std::string_view expected) {
  // Hashing first makes the comparison independent of both lengths; the
  // digests are then compared in constant time.
  unsigned char a[EVP_MAX_MD_SIZE], b[EVP_MAX_MD_SIZE];
  unsigned int la = 0, lb = 0;
  if (EVP_Digest(offered.data(), offered.size(), a, &la, EVP_sha256(), nullptr) != 1 ||
      EVP_Digest(expected.data(), expected.size(), b, &lb, EVP_sha256(), nullptr) != 1 ||
      la != lb) {
    return false;
  }
  return CRYPTO_memcmp(a, b, la) == 0;
}

size_t StoreServer::Impl::active_count() const {
  std::lock_guard lk(mu);
  return active;
}

asio::awaitable<bool> StoreServer::Impl::tls_handshake(ServerConnection& c) {
  if (!c.sock.is_tls()) co_return true;
  std::error_code ec;
  co_await c.sock.async_handshake(asio::ssl::stream_base::server,
                                  asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    m->refused.at("tls")->add();
    spdlog::warn("store server: {}: TLS handshake failed: {}", c.peer, ec.message());
    co_return false;
  }
  c.cert_name = c.sock.peer_common_name();
  co_return true;
}

asio::awaitable<void> StoreServer::Impl::serve(std::shared_ptr<ServerConnection> c) {
  struct Done {
    Impl* impl;
    std::shared_ptr<ServerConnection> c;
    ~Done() { impl->finish(*c, false); }
  } done{this, c};
  std::weak_ptr<ServerConnection> weak = c;
  c->hello_timer.expires_after(std::chrono::milliseconds(cfg.hello_timeout_ms));
  c->hello_timer.async_wait([this, weak](std::error_code ec) {
    auto conn = weak.lock();
    if (ec || !conn || conn->hello_done) return;
    m->refused.at("hello_timeout")->add();
    spdlog::warn("store server: {} sent no Hello within {} ms; closing the connection", conn->peer,
                 cfg.hello_timeout_ms);
    conn->close();
  });
  if (!co_await tls_handshake(*c)) {
    c->close();
    co_return;
  }

  for (;;) {
    c->next_set();
    {
      // A big buffer is kept while big requests keep coming (no allocation
      // and page faults per batch), and given back when they stop.
      ServerConnection::BufferSet& set = c->set();
      if (set.buf.size() > std::max<size_t>(4ull * limits.max_object_bytes, 1u << 20) &&
          set.used < set.buf.size() / 4) {
        set.buf = AlignedBuffer();
      }
      set.used = 0;
    }
    std::error_code ec;
    if (c->hello_done) {
      // A client may think between requests, not forever: one request
      // (head and data) must arrive within the idle timeout.
      c->idle_timer.expires_after(std::chrono::milliseconds(cfg.idle_timeout_ms));
      c->idle_timer.async_wait([this, weak](std::error_code e) {
        auto conn = weak.lock();
        if (e || !conn) return;
        m->refused.at("idle_timeout")->add();
        spdlog::info("store server: {} idle for {} ms; closing", conn->peer, cfg.idle_timeout_ms);
        conn->close();
      });
    }
    Status st = co_await c->reader.read_head(c->sock, ec);
    if (st.ok() && c->reader.decoder().state() == FrameDecoder::State::kData) {
      // The descriptor is decoded and checked before any buffer is sized
      // for the data that follows it.
      st = check_before_data(*c);
      // Every data section goes into the connection's buffer (bounded by
      // the frame limits, checked with the header): the store copies it
      // into its RAM slot from there.
      if (st.ok()) {
        MutableByteView dst = c->data_buffer(c->reader.decoder().header().data_len);
        st = c->reader.set_data_destination(std::span<const MutableByteView>(&dst, 1));
      }
      if (st.ok()) st = co_await c->reader.read_data(c->sock, ec);
    }
    c->idle_timer.cancel();
    count_bytes_in(*c);
    if (ec) {
      spdlog::debug("store server: {} closed: {}", c->peer, ec.message());
      break;
    }
    if (!st.ok()) {
      co_await malformed(*c, st, c->reader.decoder().header().request_id);
      break;
    }
    Frame f = c->reader.decoder().take_frame();
    m->frames_in.add();
    const uint64_t t0 = now_ns();
    bool keep = co_await handle(*c, f);
    size_t op = op_index(f.header.type);
    m->requests[op]->add();
    m->latency[op]->record(now_ns() - t0);
    if (!keep) break;
  }
  // The last response (an Error frame before a close, say) goes out first.
  co_await wait_write(*c);
  c->close();
}

Status StoreServer::Impl::check_before_data(ServerConnection& c) const {
  const FrameDecoder& d = c.reader.decoder();
  auto msg = decode_message(d.header(), d.descriptor());
  if (!msg.ok()) return msg.status();
  if (const auto* p = std::get_if<PutRequest>(&*msg)) {
    if (p->length > limits.max_object_bytes) {
      return Status::invalid_argument(fmt::format("put of {} bytes exceeds max_object_bytes {}",
                                                  p->length, limits.max_object_bytes));
    }
    return check_ns(c, p->ns);
  }
  if (const auto* b = std::get_if<BatchPutRequest>(&*msg)) {
    if (b->items.size() > limits.max_batch) {
      return Status::invalid_argument(fmt::format("batch of {} items exceeds the server's {}",
                                                  b->items.size(), limits.max_batch));
    }
    return check_ns(c, b->ns);
  }
  return Status::ok_status();
}

void StoreServer::Impl::count_bytes_in(ServerConnection& c) {
  uint64_t total = c.reader.bytes_read();
  m->bytes_in.add(total - c.bytes_in_counted);
  c.bytes_in_counted = total;
}

asio::awaitable<void> StoreServer::Impl::refuse(std::shared_ptr<ServerConnection> c, Status why) {
  struct Done {
    Impl* impl;
    std::shared_ptr<ServerConnection> c;
    ~Done() { impl->finish(*c, true); }
  } done{this, c};
  // Plain TCP only: over TLS, listen() closes such a connection unanswered.
  co_await send_error(*c, 0, why);
  co_await wait_write(*c);
  std::error_code ec;
  c->sock.socket().shutdown(tcp::socket::shutdown_send, ec);
  c->hello_timer.expires_after(std::chrono::milliseconds(500));
  c->hello_timer.async_wait([c](std::error_code e) {
    if (!e) c->close();
  });
  std::array<std::byte, 512> sink;
  for (;;) {
    co_await c->sock.async_read_some(asio::buffer(sink),
                                     asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
  }
  c->close();
}

void StoreServer::Impl::finish(ServerConnection& c, bool refused) {
  {
    std::lock_guard lk(c.shm_mu);
    if (c.channel) c.channel->close();
  }
  // Pins end with their connection.
  std::unordered_map<uint16_t, std::vector<kv::Key128>> by_ns;
  for (const auto& p : c.pinned) by_ns[p.ns].push_back(p.key);
  for (auto& [ns, keys] : by_ns) (void)store->unpin(ns, keys);
  if (c.tenant) {
    tenants->release_pins(*c.tenant, c.pinned.size());
    for (uint16_t h : c.namespaces) tenants->release_namespace(*c.tenant, h);
    tenants->release_connection(*c.tenant);
  }
  // The connection's registrations: a namespace no one holds any more is
  // closed, and its handle reused once its blocks are gone.
  for (uint16_t h : c.namespaces) store->release_namespace(h);
  c.pinned.clear();
  std::lock_guard lk(mu);
  conns.erase(c.id);
  if (c.shm_nonce) shm_waiting.erase(*c.shm_nonce);
  if (!refused) {
    --active;
    m->active.set(static_cast<int64_t>(active));
  }
  if (c.pending_hello) {
    c.pending_hello = false;
    --pending_hello;
  }
  cv.notify_all();
}

asio::awaitable<void> StoreServer::Impl::listen() {
  for (;;) {
    tcp::socket sock(asio::make_strand(io));
    std::error_code ec;
    co_await acceptor.async_accept(sock, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) break;
      spdlog::warn("store server: accept failed: {}", ec.message());
      // Out of descriptors and the like: do not spin.
      asio::steady_timer t(acceptor.get_executor(), std::chrono::milliseconds(50));
      co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    sock.set_option(tcp::no_delay(true), ec);
    std::string peer = "?";
    auto ep = sock.remote_endpoint(ec);
    if (!ec) peer = fmt::format("{}:{}", ep.address().to_string(), ep.port());
    std::shared_ptr<ServerConnection> c;
    bool over = false;
    {
      std::lock_guard lk(mu);
      if (stopping) {
        sock.close(ec);
        m->refused.at("stopping")->add();
        continue;
      }
      c = std::make_shared<ServerConnection>(std::move(sock), next_id++);
      c->peer = peer;
      if (tls) c->sock.start_tls(*tls);
      // Past max_pending_hello, or with every slot taken, the oldest
      // connection still waiting for Hello makes room; its slot is on its
      // way out, so the new connection takes it.
      const bool full = active >= cfg.max_connections;
      const bool evicted =
          (full || pending_hello >= cfg.max_pending_hello) && evict_oldest_pending_locked();
      over = full && !evicted;
      if (over && tls) {
        // No TLS handshake for a connection that would only be refused.
        c->sock.close();
        m->connections.add();
        m->refused.at("max_connections")->add();
        continue;
      }
      if (!over) {
        ++active;
        m->active.set(static_cast<int64_t>(active));
        ++pending_hello;
        c->pending_hello = true;
      }
      conns[c->id] = c;
    }
    m->connections.add();
    if (over) {
      m->refused.at("max_connections")->add();
      spdlog::warn("store server: refusing {}: {} connections already (max_connections)", peer,
                   cfg.max_connections);
      asio::co_spawn(c->sock.get_executor(),
                     refuse(c, Status::unavailable(fmt::format(
                                   "server at its connection limit ({})", cfg.max_connections))),
                     asio::detached);
    } else {
      asio::co_spawn(c->sock.get_executor(), serve(c), asio::detached);
    }
  }
  std::lock_guard lk(mu);
  listening = false;
  cv.notify_all();
}

Status StoreServer::Impl::stop() {
  std::vector<std::shared_ptr<ServerConnection>> to_close;
  {
    std::lock_guard lk(mu);
    if (stopped) return stop_status;
    if (stopping) return Status::failed_precondition("stop already in progress");
    stopping = true;
    for (auto& [id, c] : conns) to_close.push_back(c);
  }
  http.reset();
  if (shm_thread.joinable()) {
    char b = 1;
    [[maybe_unused]] ssize_t n = ::write(shm_stop_pipe[1], &b, 1);
    shm_thread.join();
  }
  asio::post(acceptor.get_executor(), [this] {
    std::error_code ec;
    acceptor.close(ec);
  });
  for (auto& c : to_close) {
    asio::post(c->sock.get_executor(), [c] { c->close(); });
  }
  to_close.clear();
  {
    std::unique_lock lk(mu);
    // Store calls in progress finish first (bounded by the store's I/O timeout).
    cv.wait(lk, [&] { return conns.empty() && !listening; });
  }
  // Direct channels use the store: they end before it closes.
  std::vector<std::shared_ptr<ShmChannelServer>> chans;
  {
    std::lock_guard lk(mu);
    chans.swap(channels);
  }
  for (auto& ch : chans) ch->join();
  chans.clear();
  work.reset();
  io.stop();
  for (auto& t : threads) t.join();
  threads.clear();
  pool->join();
  Status st = store->close();
  if (!st.ok()) spdlog::error("store server: closing the store failed: {}", st.to_string());
  std::lock_guard lk(mu);
  stopped = true;
  stop_status = st;
  return st;
}

StoreServer::StoreServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StoreServer::~StoreServer() {
  if (impl_) (void)stop();
}

namespace {

// The store a server opens itself from its config. Shared RAM arenas go to
// direct-channel clients only; with tenants, arena 0 holds every tenant's
// blocks, so it is never shared, and each tenant that opts in gets its own.
Result<std::unique_ptr<kv::Store>> open_configured_store(const ServerConfig& config) {
  auto opts = make_store_options(config.store);
  if (!opts.ok()) return opts.status();
  const bool sharing =
      config.shm_enabled && config.shm_direct_channel && config.shm_share_ram_arena;
  opts->share_ram_arena = sharing && config.tenants.empty();
  for (const TenantConfig& t : config.tenants) {
    if (sharing && t.share_ram_arena) opts->private_arena_bytes.push_back(t.max_ram_bytes);
  }
  auto s = kv::Store::open(*opts);
  if (!s.ok()) return Status(s.status().code(), "opening the store: " + s.status().message());
  return std::move(*s);
}

}  // namespace

// Limits: announced in Hello and enforced on every frame.
Status StoreServer::Impl::set_limits() {
  const uint32_t max_object = store->options().max_object_bytes;
  if (max_object > kMaxDataBytes) {
    return Status::invalid_argument(
        fmt::format("max_object_bytes {} exceeds the protocol's {}", max_object, kMaxDataBytes));
  }
  uint64_t max_data = cfg.max_data_bytes;
  if (max_data == 0) {
    max_data = std::max<uint64_t>(16ull * max_object, 4u << 20);
  }
  max_data = std::clamp<uint64_t>(max_data, max_object, kMaxDataBytes);
  uint64_t max_desc = std::max<uint64_t>(
      {64u << 10, 6 + 16ull * cfg.max_match_keys + 16, 6 + 20ull * cfg.max_batch + 16});
  max_desc = std::min<uint64_t>(max_desc, kMaxDescriptorBytes);
  limits.max_object_bytes = max_object;
  limits.max_batch = cfg.max_batch;
  limits.max_match_keys = cfg.max_match_keys;
  limits.max_descriptor_bytes = static_cast<uint32_t>(max_desc);
  limits.max_data_bytes = static_cast<uint32_t>(max_data);
  frame_limits = {limits.max_descriptor_bytes, limits.max_data_bytes};
  return Status::ok_status();
}

// Store arena 1, 2, ... to each tenant that shares its RAM over a direct channel.
Status StoreServer::Impl::assign_tenant_arenas() {
  if (!(cfg.shm_enabled && cfg.shm_direct_channel && cfg.shm_share_ram_arena)) {
    return Status::ok_status();
  }
  uint16_t next_arena = 1;
  for (const TenantConfig& t : cfg.tenants) {
    if (!t.share_ram_arena) continue;
    if (next_arena >= store->ram_arena_count()) {
      return Status::invalid_argument(fmt::format(
          "tenant '{}' sets share_ram_arena but the store has no private RAM arena for it "
          "(StoreOptions::private_arena_bytes)",
          t.name));
    }
    tenant_arena[t.name] = next_arena++;
  }
  return Status::ok_status();
}

Status StoreServer::Impl::bind_listener() {
  std::error_code ec;
  auto addr = asio::ip::make_address(cfg.listen_address, ec);
  if (ec)
    return Status::invalid_argument(fmt::format("bad listen address '{}'", cfg.listen_address));
  tcp::endpoint ep(addr, cfg.listen_port);
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status::unavailable(fmt::format("cannot listen on {}:{}: {}", cfg.listen_address,
                                           cfg.listen_port, ec.message()));
  }
  bound_address = cfg.listen_address;
  bound_port = acceptor.local_endpoint().port();
  return Status::ok_status();
}

// /metrics, and /health, which says 503 once the server is stopping.
Status StoreServer::Impl::start_metrics_endpoint() {
  if (!cfg.metrics_enabled) return Status::ok_status();
  HttpEndpointOptions ho;
  ho.address = cfg.metrics_address;
  ho.port = cfg.metrics_port;
  auto endpoint = HttpEndpoint::start(ho, [this](const std::string& path) -> HttpResponse {
    if (path == "/metrics") {
      return {200, "text/plain; version=0.0.4; charset=utf-8", render_metrics()};
    }
    if (path == "/health") {
      bool is_stopping;
      {
        std::lock_guard lk(mu);
        is_stopping = stopping;
      }
      if (is_stopping) return {503, "text/plain", "stopping\n"};
      return {200, "text/plain", "ok\n"};
    }
    return {404, "text/plain", "not found (try /metrics or /health)\n"};
  });
  if (!endpoint.ok()) {
    return Status(endpoint.status().code(), "metrics endpoint: " + endpoint.status().message());
  }
  http = std::move(*endpoint);
  return Status::ok_status();
}

// The abstract Unix socket where clients on this host attach shared memory.
// Its name is random so that several servers on one host never collide;
// clients learn it from the ShmOffer response only. Failing to open it turns
// the path off, not the server.
Status StoreServer::Impl::start_shm_attach() {
  if (!cfg.shm_enabled) return Status::ok_status();
  auto tag = random_nonce();
  if (!tag.ok()) return tag.status();
  auto l = ShmListener::listen(fmt::format("kvtier-store-{}-{}", getpid(), tag->to_hex()));
  if (!l.ok()) {
    spdlog::warn("store server: shared-memory path off: {}", l.status().message());
  } else if (::pipe2(shm_stop_pipe, O_CLOEXEC) != 0) {
    spdlog::warn("store server: shared-memory path off: pipe failed");
  } else {
    shm_listener = std::move(*l);
    host_id = host_boot_id();
    shm_thread = std::thread([this] { shm_attach_loop(); });
  }
  return Status::ok_status();
}

Result<std::unique_ptr<StoreServer>> StoreServer::start(const ServerConfig& config,
                                                        std::unique_ptr<kv::Store> store) {
  KVTIER_RETURN_IF_ERROR(config.validate());
  auto impl = std::make_unique<Impl>();
  impl->cfg = config;
  if (!store) {
    auto opened = open_configured_store(config);
    if (!opened.ok()) return opened.status();
    store = std::move(*opened);
  }
  impl->store = std::move(store);
  Impl& I = *impl;
  KVTIER_RETURN_IF_ERROR(I.set_limits());
  I.m = std::make_unique<ServerMetrics>(I.store->metrics());
  I.tenants = std::make_unique<TenantRegistry>(I.cfg.tenants, I.store->metrics());
  KVTIER_RETURN_IF_ERROR(I.assign_tenant_arenas());
  if (config.tls) {
    auto ctx = make_server_tls_context(*config.tls);
    if (!ctx.ok()) return ctx.status();
    I.tls = std::move(*ctx);
  }
  I.setup_mirrors();
  KVTIER_RETURN_IF_ERROR(I.bind_listener());
  KVTIER_RETURN_IF_ERROR(I.start_metrics_endpoint());
  KVTIER_RETURN_IF_ERROR(I.start_shm_attach());

  I.pool.emplace(config.store_threads);
  I.work.emplace(I.io.get_executor());
  I.listening = true;
  asio::co_spawn(I.acceptor.get_executor(), I.listen(), asio::detached);
  for (unsigned i = 0; i < config.io_threads; ++i) {
    I.threads.emplace_back([&I] { I.io.run(); });
  }
  spdlog::info("store server: listening on {}:{} ({} I/O threads, {} store threads, {})",
               I.bound_address, I.bound_port, config.io_threads, config.store_threads,
               !config.tls                          ? "plain TCP"
               : config.tls->client_ca_file.empty() ? "TLS"
                                                    : "mutual TLS");
  return std::unique_ptr<StoreServer>(new StoreServer(std::move(impl)));
}

Status StoreServer::stop() { return impl_->stop(); }
std::string StoreServer::address() const { return impl_->bound_address; }
uint16_t StoreServer::port() const { return impl_->bound_port; }
uint16_t StoreServer::metrics_port() const { return impl_->http ? impl_->http->port() : 0; }
const ServerLimits& StoreServer::limits() const { return impl_->limits; }
size_t StoreServer::active_connections() const { return impl_->active_count(); }
kv::Store& StoreServer::store() { return *impl_->store; }
std::string StoreServer::render_metrics() { return impl_->render_metrics(); }

}  // namespace kvtier::net
