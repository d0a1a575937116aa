// StoreServer: the same-host shared-memory path's attach thread (a client's
// area and direct channel arrive over the abstract Unix socket) and the
// bound on connections that have not said Hello.
#include "net/server/server_impl.h"

namespace kvtier::net {

void StoreServer::Impl::shm_attach_loop() {
  struct Pending {
    int fd;
    uint64_t deadline_ns;
  };
  std::vector<Pending> pending;
  auto refuse_pending = [&](const Pending& p, const char* why) {
    shm_attach_answer(p.fd, false);
    m->shm_refused.add();
    spdlog::debug("store server: shared-memory attach refused: {}", why);
  };
  for (;;) {
    std::vector<pollfd> fds = {{shm_listener->fd(), POLLIN, 0}, {shm_stop_pipe[0], POLLIN, 0}};
    uint64_t next = UINT64_MAX;
    for (const Pending& p : pending) {
      fds.push_back({p.fd, POLLIN, 0});
      next = std::min(next, p.deadline_ns);
    }
    const uint64_t now = now_ns();
    const int wait_ms =
        next == UINT64_MAX ? -1 : static_cast<int>(next > now ? (next - now) / 1000000 + 1 : 0);
    if (::poll(fds.data(), fds.size(), wait_ms) < 0) {
      if (errno == EINTR) continue;
      for (const Pending& p : pending) ::close(p.fd);
      return;
    }
    if (fds[1].revents != 0) {
      for (const Pending& p : pending) ::close(p.fd);
      return;
    }
    // Readable (or closed) connections first, then the overdue ones.
    std::vector<Pending> still;
    const uint64_t t = now_ns();
    for (size_t i = 0; i < pending.size(); ++i) {
      if (fds[i + 2].revents != 0) {
        attach(ShmListener::receive(pending[i].fd));
      } else if (t >= pending[i].deadline_ns) {
        refuse_pending(pending[i], "no attach message in time");
      } else {
        still.push_back(pending[i]);
      }
    }
    pending = std::move(still);
    if (fds[0].revents & POLLIN) {
      for (;;) {
        const int c = shm_listener->accept_pending(kAttachTimeoutMs);
        if (c < 0) break;
        if (pending.size() >= kMaxPendingAttaches) {
          refuse_pending(pending.front(), "too many attaches waiting");
          pending.erase(pending.begin());
        }
        pending.push_back({c, now_ns() + uint64_t{kAttachTimeoutMs} * 1000000});
      }
    }
  }
}

void StoreServer::Impl::attach(Result<ShmListener::Received> got) {
  if (!got.ok()) {
    m->shm_refused.add();
    spdlog::warn("store server: shared-memory attach refused: {}", got.status().message());
    return;
  }
  std::shared_ptr<ServerConnection> conn;
  {
    std::lock_guard lk(mu);
    auto it = shm_waiting.find(got->msg.nonce);
    if (it != shm_waiting.end()) {
      conn = it->second.lock();
      shm_waiting.erase(it);  // a nonce is good for one attach
    }
  }
  if (!conn) {
    ::close(got->fd);
    shm_attach_answer(got->conn, false);
    m->shm_refused.add();
    spdlog::warn("store server: shared-memory attach with an unknown nonce refused");
    return;
  }
  auto area = ShmArea::map_received(got->fd, got->msg.area_bytes, cfg.shm_max_area_bytes);
  if (!area.ok()) {
    shm_attach_answer(got->conn, false);
    m->shm_refused.add();
    spdlog::warn("store server: {}: shared-memory area refused: {}", conn->peer,
                 area.status().message());
    return;
  }
  std::shared_ptr<ShmArea> mapped = std::move(*area);
  {
    std::lock_guard lk(conn->shm_mu);
    conn->shm = mapped;
  }
  m->shm_attached.add();
  if (got->msg.version == 1) {
    shm_attach_answer(got->conn, true);
    return;
  }
  open_direct_channel(conn, got->conn, got->msg, std::move(mapped));
}

void StoreServer::Impl::open_direct_channel(const std::shared_ptr<ServerConnection>& conn, int sock,
                                            const ShmAttachMessage& msg,
                                            std::shared_ptr<ShmArea> area) {
  std::vector<std::shared_ptr<ShmChannelServer>> done;
  bool room = false;
  {
    std::lock_guard lk(mu);
    auto finished = std::partition(channels.begin(), channels.end(),
                                   [](const auto& ch) { return !ch->finished(); });
    done.assign(std::make_move_iterator(finished), std::make_move_iterator(channels.end()));
    channels.erase(finished, channels.end());
    room = channels.size() < cfg.shm_max_channels;
  }
  done.clear();  // joins them, outside mu
  const bool keep = (msg.flags & kShmAttachWantChannel) != 0 && cfg.shm_direct_channel && room;
  // An arena shows every block in it: a single-tenant server shares its
  // one arena; a multi-tenant server gives a tenant that opted in its own
  // arena, which holds only that tenant's blocks, and other tenants none.
  const uint16_t arena_id = arena_of(conn->tenant);
  const bool arena_allowed = cfg.shm_share_ram_arena && (!conn->tenant || arena_id != 0);
  const int arena = keep && arena_allowed ? store->ram_arena_fd(arena_id) : -1;
  if (!shm_attach_grant(sock, keep, arena, arena >= 0 ? store->ram_arena_bytes(arena_id) : 0) ||
      !keep) {
    return;
  }
  ShmChannelContext ctx;
  ctx.store = store.get();
  ctx.area = std::move(area);
  ctx.lease_from_arena = arena >= 0;
  ctx.arena = arena_id;
  ctx.max_object_bytes = limits.max_object_bytes;
  ctx.max_match_keys = limits.max_match_keys;
  ctx.max_descriptor_bytes = limits.max_descriptor_bytes;
  // Channels together may lease at most half of the RAM tier's slots.
  ctx.server_leases = channel_leases;
  ctx.max_server_leases = std::max<uint64_t>(1, store->local_stats().ram_slots / 2);
  ctx.peer = conn->peer;
  // Weak: the connection holds its channel, not the other way round.
  ctx.check_ns = [this, weak = std::weak_ptr<ServerConnection>(conn)](uint16_t ns) {
    auto c = weak.lock();
    if (!c) return Status::failed_precondition("the channel's connection has ended");
    std::lock_guard lk(c->shm_mu);
    return check_ns(*c, ns);
  };
  ctx.map_keys = [weak = std::weak_ptr<ServerConnection>(conn)](uint16_t ns,
                                                                std::span<kv::Key128> keys) {
    auto c = weak.lock();
    if (!c) return;
    std::lock_guard lk(c->shm_mu);
    store_keys(*c, ns, keys);
  };
  ctx.count_request = [this](MessageType t, uint64_t ns) {
    const size_t i = op_index(t);
    m->requests[i]->add();
    m->latency[i]->record(ns);
  };
  ctx.count_bytes = [this](uint64_t n) { m->shm_bytes.add(n); };
  auto ch = ShmChannelServer::start(sock, std::move(ctx));
  {
    std::lock_guard lk(conn->shm_mu);
    conn->channel = ch;
  }
  std::lock_guard lk(mu);
  channels.push_back(ch);
  // The connection may have ended meanwhile; finish() then found no channel.
  if (conns.find(conn->id) == conns.end()) ch->close();
}

bool StoreServer::Impl::evict_oldest_pending_locked() {
  std::shared_ptr<ServerConnection> oldest;
  for (auto& [id, conn] : conns) {
    if (conn->pending_hello && (!oldest || id < oldest->id)) oldest = conn;
  }
  if (!oldest) return false;
  oldest->pending_hello = false;
  oldest->evicted = true;
  --pending_hello;
  m->refused.at("hello_evicted")->add();
  asio::post(oldest->sock.get_executor(), [oldest] { oldest->close(); });
  return true;
}

}  // namespace kvtier::net
