#include "net/client/remote_store.h"

#include "net/client/remote_store_impl.h"

namespace kvtier::net {

RemoteStore::RemoteStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RemoteStore::~RemoteStore() {
  for (auto& c : impl_->conns) c->shutdown();
  impl_->work.reset();
  for (auto& t : impl_->threads) t.join();
}

Result<std::unique_ptr<RemoteStore>> RemoteStore::open(const RemoteStoreOptions& options) {
  if (options.host.empty()) return Status::invalid_argument("RemoteStore: empty host");
  if (options.port == 0) return Status::invalid_argument("RemoteStore: port 0");
  if (options.connections == 0 || options.connections > 1024) {
    return Status::invalid_argument("RemoteStore: connections must be in [1, 1024]");
  }
  if (options.io_threads == 0 || options.io_threads > 64) {
    return Status::invalid_argument("RemoteStore: io_threads must be in [1, 64]");
  }
  if (options.call_timeout_ms == 0 || options.connect_timeout_ms == 0) {
    return Status::invalid_argument("RemoteStore: timeouts must be > 0");
  }
  if (options.auth_token.size() > kMaxStringBytes) {
    return Status::invalid_argument("RemoteStore: auth token too long");
  }
  auto impl = std::make_unique<Impl>();
  impl->shared.opts = options;
  if (options.tls.enabled()) {
    auto ctx = make_client_tls_context(options.tls);
    if (!ctx.ok()) return Status(ctx.status().code(), "RemoteStore: " + ctx.status().message());
    impl->shared.tls = std::move(*ctx);
  } else if (!options.tls.cert_file.empty() || !options.tls.key_file.empty()) {
    return Status::invalid_argument("RemoteStore: a TLS client certificate needs the CA file too");
  }
  if (impl->shared.opts.reconnect_min_ms == 0) impl->shared.opts.reconnect_min_ms = 1;
  impl->work.emplace(impl->io.get_executor());
  for (unsigned i = 0; i < options.connections; ++i) {
    impl->conns.push_back(std::make_shared<ClientConn>(impl->shared, impl->io, i));
  }
  for (auto& c : impl->conns) c->start();
  Impl* raw = impl.get();
  for (unsigned i = 0; i < options.io_threads; ++i) {
    impl->threads.emplace_back([raw] { raw->io.run(); });
  }
  return std::unique_ptr<RemoteStore>(new RemoteStore(std::move(impl)));
}

Status RemoteStore::wait_connected(uint32_t timeout_ms) {
  auto& s = impl_->shared;
  std::unique_lock lk(s.mu);
  if (s.up_cv.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return s.up_count > 0; })) {
    return Status::ok_status();
  }
  return s.last_error;
}

bool RemoteStore::connected() const {
  std::lock_guard lk(impl_->shared.mu);
  return impl_->shared.up_count > 0;
}

Status RemoteStore::last_error() const {
  std::lock_guard lk(impl_->shared.mu);
  return impl_->shared.last_error;
}

ServerLimits RemoteStore::server_limits() const { return impl_->shared.server_limits(); }

bool RemoteStore::shared_memory_active() const { return impl_->shared.shm_up.load() > 0; }

RemoteStoreClientStats RemoteStore::client_stats() const {
  const auto& s = impl_->shared;
  RemoteStoreClientStats r;
  r.calls = s.calls.load();
  r.unavailable = s.unavailable.load();
  r.timeouts = s.timeouts.load();
  r.broken = s.broken.load();
  r.sessions = s.sessions.load();
  r.connect_failures = s.connect_failures.load();
  r.shm_sessions = s.shm_sessions.load();
  r.shm_calls = s.shm_calls.load();
  r.shm_retired_slots = s.shm_retired.load();
  r.direct_channels = s.direct_channels.load();
  r.direct_gets = s.direct_gets.load();
  r.arena_reads = s.arena_reads.load();
  r.direct_matches = s.direct_matches.load();
  return r;
}

Result<uint16_t> RemoteStore::register_namespace(const kv::Namespace& ns) {
  KVTIER_RETURN_IF_ERROR(ns.validate());
  const kv::Key128 digest = ns.digest();
  {
    std::shared_lock lk(impl_->ns_mu);
    for (size_t i = 0; i < impl_->ns_digests.size(); ++i) {
      if (impl_->ns_digests[i] == digest) return static_cast<uint16_t>(i);
    }
  }
  // Let a reachable server judge it first, so that its refusal reaches the
  // caller and the table stays unchanged.
  auto t = impl_->pick();
  std::optional<uint16_t> server_handle;
  if (t) {
    Impl::Reply r = impl_->exchange(*t, RegisterNamespaceRequest{ns}, {}, {},
                                    MessageType::kRegisterNamespaceResponse, impl_->deadline());
    if (!r.status.ok()) return r.status;
    if (r.ok()) {
      auto resp = RegisterNamespaceResponse::decode(r.call->descriptor);
      if (resp.ok()) server_handle = resp->handle;
    }
  }
  uint16_t handle;
  {
    std::unique_lock lk(impl_->ns_mu);
    for (size_t i = 0; i < impl_->ns_digests.size(); ++i) {
      if (impl_->ns_digests[i] == digest) return static_cast<uint16_t>(i);
    }
    if (impl_->namespaces.size() >= 65535) {
      return Status::out_of_space("RemoteStore: too many namespaces");
    }
    handle = static_cast<uint16_t>(impl_->namespaces.size());
    impl_->namespaces.push_back(ns);
    impl_->ns_digests.push_back(digest);
  }
  if (t && server_handle) t->conn->set_server_ns(handle, *server_handle, t->gen);
  return handle;
}

Result<kv::PutResult> RemoteStore::put(uint16_t ns, const kv::Key128& key, ByteView data) {
  KVTIER_RETURN_IF_ERROR(impl_->check_ns(ns));
  if (key.is_zero()) return Status::invalid_argument("the all-zero key is reserved");
  if (data.empty()) return Status::invalid_argument("put of an empty object");
  const ServerLimits lim = server_limits();
  if (lim.max_object_bytes != 0 && data.size() > lim.max_object_bytes) {
    return Status::invalid_argument(fmt::format("object of {} bytes exceeds max_object_bytes {}",
                                                data.size(), lim.max_object_bytes));
  }
  if (data.size() > kMaxDataBytes) {
    return Status::invalid_argument(
        fmt::format("object of {} bytes exceeds the protocol's {}", data.size(), kMaxDataBytes));
  }
  Clock::time_point dl = impl_->deadline();
  Impl::Target t;
  Impl::Reply r = impl_->target(ns, dl, &t);
  if (!r.status.ok()) return r.status;
  if (r.error != CallError::kNone) return Impl::refused();
  if (auto via_shm = impl_->shm_put(t, key, data, dl)) return std::move(*via_shm);
  r = impl_->exchange(t, PutRequest{t.server_ns, key, static_cast<uint32_t>(data.size())},
                      std::span<const ByteView>(&data, 1), {}, MessageType::kPutResponse, dl);
  if (!r.status.ok()) return r.status;
  if (r.error != CallError::kNone) return Impl::refused();
  auto resp = PutResponse::decode(r.call->descriptor);
  if (!resp.ok()) return Impl::refused();
  return resp->result.to_result();
}

Result<kv::GetResult> RemoteStore::get(uint16_t ns, const kv::Key128& key, MutableByteView out) {
  KVTIER_RETURN_IF_ERROR(impl_->check_ns(ns));
  if (key.is_zero()) return Status::invalid_argument("the all-zero key is reserved");
  if (out.empty()) return Status::invalid_argument("get into an empty buffer");
  // No object exceeds the protocol's data limit, so a larger buffer is
  // announced as that limit.
  const uint32_t announce = static_cast<uint32_t>(std::min<size_t>(out.size(), kMaxDataBytes));
  MutableByteView dst = out.first(announce);
  Clock::time_point dl = impl_->deadline();
  Impl::Target t;
  Impl::Reply r = impl_->target(ns, dl, &t);
  if (!r.status.ok()) return r.status;
  kv::GetResult miss;
  miss.miss = Impl::miss_of(r.error);
  if (r.error != CallError::kNone) return miss;
  if (auto via_shm = impl_->shm_get(t, key, out, dl)) return std::move(*via_shm);
  r = impl_->exchange(t, GetRequest{t.server_ns, key, announce}, {},
                      std::span<const MutableByteView>(&dst, 1), MessageType::kGetResponse, dl);
  if (!r.status.ok()) return r.status;
  miss.miss = Impl::miss_of(r.error);
  if (r.error != CallError::kNone) return miss;
  auto resp = GetResponse::decode(r.call->descriptor);
  // A hit whose bytes did not land in `out` (the server broke the protocol)
  // is a miss, never wrong bytes.
  if (!resp.ok() || (resp->result.hit && !r.call->data_in.empty())) return miss;
  return resp->result.to_result();
}

Result<kv::MatchResult> RemoteStore::match_prefix(uint16_t ns, std::span<const kv::Key128> keys) {
  KVTIER_RETURN_IF_ERROR(impl_->check_ns(ns));
  const size_t chunk = std::max<uint32_t>(1, server_limits().max_match_keys);
  kv::MatchResult total;
  // Chunks in sequence: a chunk that does not match to its end ends the prefix.
  for (size_t i = 0; i < keys.size(); i += chunk) {
    auto part = keys.subspan(i, std::min(chunk, keys.size() - i));
    if (auto direct = impl_->channel_match(ns, part)) {
      if (!direct->ok()) return direct->status();
      impl_->shared.direct_matches.fetch_add(1, std::memory_order_relaxed);
      const kv::MatchResult& m = **direct;
      total.blocks += m.blocks;
      total.ram_blocks += m.ram_blocks;
      total.disk_blocks += m.disk_blocks;
      total.tiers.insert(total.tiers.end(), m.tiers.begin(), m.tiers.end());
      if (m.blocks < part.size()) break;
      continue;
    }
    auto r = impl_->request(
        ns,
        [&](uint16_t sns) {
          return Message(
              MatchPrefixRequest{sns, std::vector<kv::Key128>(part.begin(), part.end())});
        },
        {}, {}, MessageType::kMatchPrefixResponse);
    if (!r.status.ok()) return r.status;
    if (r.error != CallError::kNone) break;  // what matched so far is still a prefix
    auto resp = MatchPrefixResponse::decode(r.call->descriptor);
    if (!resp.ok() || resp->tiers.size() > part.size()) break;
    kv::MatchResult m = resp->to_result();
    total.blocks += m.blocks;
    total.ram_blocks += m.ram_blocks;
    total.disk_blocks += m.disk_blocks;
    total.tiers.insert(total.tiers.end(), m.tiers.begin(), m.tiers.end());
    if (m.blocks < part.size()) break;
  }
  return total;
}

Result<bool> RemoteStore::remove(uint16_t ns, const kv::Key128& key) {
  KVTIER_RETURN_IF_ERROR(impl_->check_ns(ns));
  if (key.is_zero()) return Status::invalid_argument("the all-zero key is reserved");
  auto r = impl_->request(
      ns,
      [&](uint16_t sns) {
        return Message(RemoveRequest{sns, key});
      },
      {}, {}, MessageType::kRemoveResponse);
  if (!r.status.ok()) return r.status;
  if (r.error != CallError::kNone) return false;
  auto resp = RemoveResponse::decode(r.call->descriptor);
  return resp.ok() && resp->removed;
}

namespace {
template <typename Impl, typename Make>
Result<size_t> pin_like(Impl& impl, uint16_t ns, std::span<const kv::Key128> keys, size_t chunk,
                        Make&& make, MessageType expect) {
  if (keys.empty()) return size_t{0};
  auto parts = chunks(keys.size(), chunk, UINT64_MAX, [](size_t) { return uint64_t{0}; });
  Status bad;
  auto replies = impl.request_pipelined(
      ns, parts.size(),
      [&](size_t p, uint16_t sns) {
        return make(sns, std::vector<kv::Key128>(keys.begin() + parts[p].first,
                                                 keys.begin() + parts[p].second));
      },
      [](size_t) { return std::span<const ByteView>(); },
      [](size_t) { return std::span<const MutableByteView>(); }, expect, &bad);
  if (!bad.ok()) return bad;
  size_t n = 0;
  for (const auto& r : replies) {
    if (!r.ok()) continue;
    if (expect == MessageType::kPinResponse) {
      auto d = PinResponse::decode(r.call->descriptor);
      if (d.ok()) n += d->pinned;
    } else {
      auto d = UnpinResponse::decode(r.call->descriptor);
      if (d.ok()) n += d->unpinned;
    }
  }
  return n;
}
}  // namespace

Result<size_t> RemoteStore::pin(uint16_t ns, std::span<const kv::Key128> keys, uint64_t ttl_ms) {
  KVTIER_RETURN_IF_ERROR(impl_->check_ns(ns));
  return pin_like(
      *impl_, ns, keys, std::max<uint32_t>(1, server_limits().max_match_keys),
      [&](uint16_t sns, std::vector<kv::Key128> k) {
        return Message(PinRequest{sns, ttl_ms, std::move(k)});
      },
      MessageType::kPinResponse);
}

Result<size_t> RemoteStore::unpin(uint16_t ns, std::span<const kv::Key128> keys) {
  KVTIER_RETURN_IF_ERROR(impl_->check_ns(ns));
  return pin_like(
      *impl_, ns, keys, std::max<uint32_t>(1, server_limits().max_match_keys),
      [&](uint16_t sns, std::vector<kv::Key128> k) {
        return Message(UnpinRequest{sns, std::move(k)});
      },
      MessageType::kUnpinResponse);
}

Result<std::vector<StatCounter>> RemoteStore::stat_counters() {
  auto c = impl_->stats_call(StatsFormat::kCounters);
  if (!c.ok()) return c.status();
  auto resp = StatsResponse::decode((*c)->descriptor);
  if (!resp.ok()) return resp.status();
  return std::move(resp->counters);
}

Result<kv::StoreStats> RemoteStore::stats() {
  auto c = stat_counters();
  if (!c.ok()) return c.status();
  return store_stats_from_counters(*c);
}

Result<std::string> RemoteStore::stats_json() {
  auto c = impl_->stats_call(StatsFormat::kJson);
  if (!c.ok()) return c.status();
  const auto& d = (*c)->data_in;
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

}  // namespace kvtier::net
