// StoreServer: what each request does. Hello (version, credentials,
// tenant), then every other message against the store, with the tenant's
// key salting, quotas and pins.
#include "net/server/server_impl.h"

namespace kvtier::net {

Status StoreServer::Impl::check_ns(const ServerConnection& c, uint16_t ns) const {
  for (uint16_t h : c.namespaces) {
    if (h == ns) return Status::ok_status();
  }
  return Status::invalid_argument(
      fmt::format("namespace handle {} was not registered on this connection", ns));
}

kv::Key128 StoreServer::Impl::store_key(const ServerConnection& c, uint16_t ns,
                                        const kv::Key128& key) {
  if (!c.tenant) return key;
  for (size_t i = 0; i < c.namespaces.size(); ++i) {
    if (c.namespaces[i] == ns) return tenant_key(c.ns_digests[i], key);
  }
  return key;  // unreachable: check_ns ran first
}

void StoreServer::Impl::store_keys(const ServerConnection& c, uint16_t ns,
                                   std::span<kv::Key128> keys) {
  if (!c.tenant) return;
  for (size_t i = 0; i < c.namespaces.size(); ++i) {
    if (c.namespaces[i] == ns) return tenant_keys(c.ns_digests[i], keys);
  }
}

Status StoreServer::Impl::track_pins(ServerConnection& c, uint16_t ns,
                                     std::span<const kv::Key128> keys, bool pin) {
  if (!pin) {
    uint64_t gone = 0;
    for (const auto& k : keys) gone += c.pinned.erase({ns, k});
    if (c.tenant) tenants->release_pins(*c.tenant, gone);
    return Status::ok_status();
  }
  std::vector<ServerConnection::PinnedKey> fresh;
  for (const auto& k : keys) {
    if (!c.pinned.count({ns, k})) fresh.push_back({ns, k});
  }
  if (c.tenant) KVTIER_RETURN_IF_ERROR(tenants->acquire_pins(*c.tenant, fresh.size()));
  c.pinned.insert(fresh.begin(), fresh.end());
  return Status::ok_status();
}

uint16_t StoreServer::Impl::arena_of(const TenantConfig* t) const {
  if (!t) return 0;
  auto it = tenant_arena.find(t->name);
  return it == tenant_arena.end() ? 0 : it->second;
}

PutOutcome StoreServer::Impl::quota_refusal() {
  return {kv::PutResult::Outcome::kRefused, kv::Tier::kNone, kv::RefuseReason::kQuota};
}

size_t StoreServer::Impl::quota_admits(ServerConnection& c, std::span<const size_t> sizes) {
  const TenantConfig* t = c.tenant;
  if (!t || (t->max_ram_bytes == 0 && t->max_disk_bytes == 0)) return sizes.size();
  const auto [ram, disk] = refresh_holdings(*t);
  return tenants->admit_bytes(*t, ram, disk, sizes, arena_of(c.tenant) != 0);
}

std::pair<uint64_t, uint64_t> StoreServer::Impl::refresh_holdings(const TenantConfig& t) {
  uint64_t ram = 0, disk = 0;
  for (const auto& [handle, digest] : tenants->holdings(t)) {
    if (store->namespace_digest(handle) != digest) {
      tenants->forget_holding(t, handle, false);  // the handle went to another namespace
      continue;
    }
    const kv::NamespaceUsage u = store->namespace_usage(handle);
    if (u.blocks == 0) tenants->forget_holding(t, handle, true);
    ram += u.ram_bytes;
    disk += u.disk_bytes;
  }
  return {ram, disk};
}

asio::awaitable<bool> StoreServer::Impl::handle_hello(ServerConnection& c, const Frame& f) {
  const FrameHeader& h = f.header;
  if (h.type != MessageType::kHelloRequest) {
    m->refused.at("no_hello")->add();
    spdlog::warn("store server: {} sent {} before Hello; closing the connection", c.peer,
                 message_type_name(h.type));
    co_await send_error(
        c, h.request_id,
        Status::failed_precondition("the first request on a connection must be a Hello"));
    co_return false;
  }
  auto req = decode_message_as<HelloRequest>(h, f.descriptor);
  if (!req.ok()) {
    co_await malformed(c, req.status(), h.request_id);
    co_return false;
  }
  auto version = negotiate_version(req->min_version, req->max_version);
  if (!version.ok()) {
    m->refused.at("version")->add();
    spdlog::warn("store server: {} (client '{}'): {}; closing the connection", c.peer,
                 printable(req->client_name), version.status().message());
    co_await send_error(c, h.request_id, version.status());
    co_return false;
  }
  // The token is never logged, whatever happens.
  if (tenants->multi_tenant()) {
    // A verified client certificate names its tenant; a token, if also
    // given, must name the same one.
    const TenantConfig* by_cert = tenants->by_certificate(c.cert_name);
    const TenantConfig* t =
        req->auth_token.empty() ? nullptr : tenants->authenticate(req->auth_token);
    if (by_cert && t && t != by_cert)
      t = nullptr;
    else if (by_cert)
      t = by_cert;
    if (!t) {
      m->refused.at("auth")->add();
      spdlog::warn("store server: {} (client '{}'): no tenant has that token; closing", c.peer,
                   printable(req->client_name));
      co_await send_error(c, h.request_id,
                          Status::rejected("authentication failed: wrong or missing auth token"));
      co_return false;
    }
    if (Status st = tenants->acquire_connection(*t); !st.ok()) {
      m->refused.at("tenant_quota")->add();
      co_await send_error(c, h.request_id, st);
      co_return false;
    }
    c.tenant = t;
  } else if (!cfg.auth_token.empty() && !token_equal(req->auth_token, cfg.auth_token)) {
    m->refused.at("auth")->add();
    spdlog::warn("store server: {} (client '{}'): authentication failed; closing the connection",
                 c.peer, printable(req->client_name));
    co_await send_error(c, h.request_id,
                        Status::rejected("authentication failed: wrong or missing auth token"));
    co_return false;
  }
  {
    // Evicted while its Hello was on the way: it is being closed.
    std::lock_guard lk(mu);
    if (c.evicted) co_return false;
    if (c.pending_hello) {
      c.pending_hello = false;
      --pending_hello;
    }
  }
  c.hello_done = true;
  c.hello_timer.cancel();
  HelloResponse resp;
  resp.version = *version;
  resp.server_name = cfg.server_name;
  resp.limits = limits;
  // The Hello response is a version-1 frame (c.version is still 1) whatever
  // was chosen; every later frame carries the chosen version.
  bool ok = co_await send(c, resp, h.request_id);
  c.version = *version;
  c.reader.reset(frame_limits, *version);
  spdlog::debug("store server: {} (client '{}') connected, protocol {}", c.peer,
                printable(req->client_name), *version);
  co_return ok;
}

asio::awaitable<bool> StoreServer::Impl::handle(ServerConnection& c, const Frame& f) {
  const FrameHeader& h = f.header;
  const uint64_t rid = h.request_id;
  if (!c.hello_done) co_return co_await handle_hello(c, f);
  auto msg = decode_message(h, f.descriptor);
  if (!msg.ok()) {
    co_await malformed(c, msg.status(), rid);
    co_return false;
  }
  const AlignedBuffer& in = c.set().buf;
  ByteView data = in.empty() ? ByteView{} : ByteView(in.data(), h.data_len);
  switch (h.type) {
    case MessageType::kRegisterNamespaceRequest:
      co_return co_await on_register_namespace(c, std::get<RegisterNamespaceRequest>(*msg), rid);
    case MessageType::kPutRequest:
      co_return co_await on_put(c, std::get<PutRequest>(*msg), rid, data);
    case MessageType::kGetRequest:
      co_return co_await on_get(c, std::get<GetRequest>(*msg), rid);
    case MessageType::kBatchPutRequest:
      co_return co_await on_batch_put(c, std::get<BatchPutRequest>(*msg), rid, data);
    case MessageType::kBatchGetRequest:
      co_return co_await on_batch_get(c, std::get<BatchGetRequest>(*msg), rid);
    case MessageType::kMatchPrefixRequest:
      co_return co_await on_match_prefix(c, std::get<MatchPrefixRequest>(*msg), rid);
    case MessageType::kRemoveRequest:
      co_return co_await on_remove(c, std::get<RemoveRequest>(*msg), rid);
    case MessageType::kPinRequest:
      co_return co_await on_pin(c, std::get<PinRequest>(*msg), rid);
    case MessageType::kUnpinRequest:
      co_return co_await on_unpin(c, std::get<UnpinRequest>(*msg), rid);
    case MessageType::kStatsRequest:
      co_return co_await on_stats(c, std::get<StatsRequest>(*msg), rid);
    case MessageType::kShmOfferRequest:
      co_return co_await on_shm_offer(c, std::get<ShmOfferRequest>(*msg), rid);
    case MessageType::kShmPutRequest:
      co_return co_await on_shm_put(c, std::get<ShmPutRequest>(*msg), rid);
    case MessageType::kShmGetRequest:
      co_return co_await on_shm_get(c, std::get<ShmGetRequest>(*msg), rid);
    case MessageType::kHelloRequest:
      co_return co_await send_error(
          c, rid, Status::failed_precondition("Hello was already done on this connection"));
    default:
      co_return co_await send_error(
          c, rid,
          Status::invalid_argument(fmt::format("{} is not a request", message_type_name(h.type))));
  }
}

asio::awaitable<bool> StoreServer::Impl::on_register_namespace(ServerConnection& c,
                                                               RegisterNamespaceRequest& req,
                                                               uint64_t rid) {
  kv::Store& s = *store;
  if (c.namespaces.size() >= kMaxNamespacesPerConnection) {
    co_return co_await send_error(
        c, rid,
        Status::out_of_space(
            fmt::format("at most {} namespaces per connection", kMaxNamespacesPerConnection)));
  }
  const kv::Namespace ns = c.tenant ? tenant_namespace(c.tenant->name, req.ns) : req.ns;
  if (c.tenant) refresh_holdings(*c.tenant);
  // On a store thread: with the table full, registering may wait for
  // puts in flight (bounded, kv/namespace_table.h).
  const uint16_t arena = arena_of(c.tenant);
  auto r =
      co_await run_in_pool(*pool, [&s, &ns, arena] { return s.register_namespace(ns, arena); });
  if (!r.ok()) co_return co_await send_error(c, rid, r.status());
  // The connection holds one registration of each namespace it
  // registered (released when it ends): a second one is given back.
  if (check_ns(c, *r).ok()) {
    s.release_namespace(*r);
  } else {
    if (c.tenant) {
      if (Status st = tenants->acquire_namespace(*c.tenant, *r, ns.digest()); !st.ok()) {
        s.release_namespace(*r);
        co_return co_await send_error(c, rid, st);
      }
    }
    std::lock_guard lk(c.shm_mu);
    c.namespaces.push_back(*r);
    c.ns_digests.push_back(ns.digest());
  }
  co_return co_await send(c, RegisterNamespaceResponse{*r}, rid);
}

asio::awaitable<bool> StoreServer::Impl::on_put(ServerConnection& c, PutRequest& req, uint64_t rid,
                                                ByteView data) {
  kv::Store& s = *store;
  if (Status st = check_ns(c, req.ns); !st.ok()) co_return co_await send_error(c, rid, st);
  req.key = store_key(c, req.ns, req.key);
  if (quota_admits(c, std::array<size_t, 1>{data.size()}) == 0) {
    co_return co_await send(c, PutResponse{quota_refusal()}, rid);
  }
  auto r = co_await run_in_pool(*pool, [&s, &req, data] { return s.put(req.ns, req.key, data); });
  if (!r.ok()) co_return co_await send_error(c, rid, r.status());
  co_return co_await send(c, PutResponse{PutOutcome::from(*r)}, rid);
}

asio::awaitable<bool> StoreServer::Impl::on_get(ServerConnection& c, GetRequest& req,
                                                uint64_t rid) {
  kv::Store& s = *store;
  if (Status st = check_ns(c, req.ns); !st.ok()) co_return co_await send_error(c, rid, st);
  req.key = store_key(c, req.ns, req.key);
  // A RAM hit is sent from its slot, leased until the write is done,
  // with the CRC the store keeps: no copy and no checksum pass here,
  // and no hop to a store thread (a lease is an index lookup).
  if (auto lease = s.lease_ram(req.ns, req.key); lease.ok() && *lease) {
    const kv::RamLease& l = **lease;
    if (l.length <= req.buffer_bytes) {
      GetResponse resp{GetOutcome{true, kv::Tier::kRam, kv::MissReason::kNone, l.length}};
      ByteView part(l.data, l.length);
      co_return co_await send(c, resp, rid, std::span<const ByteView>(&part, 1), l.crc, l.slot);
    }
    s.release_ram_lease(l.slot);  // too small a buffer: get() says so below
  }
  // No object is larger than max_object_bytes, so a larger client
  // buffer needs no more room here.
  MutableByteView out =
      c.data_buffer(std::min<uint32_t>(req.buffer_bytes, limits.max_object_bytes));
  // The store thread also checksums the block for the frame while it
  // is in cache, so the I/O thread only writes it.
  struct Copied {
    Result<kv::GetResult> r;
    uint32_t crc;
  };
  auto got = co_await run_in_pool(*pool, [&s, &req, out] {
    Copied c{s.get(req.ns, req.key, out), 0};
    if (c.r.ok() && c.r->hit) c.crc = crc32c(out.data(), c.r->length);
    return c;
  });
  if (!got.r.ok()) co_return co_await send_error(c, rid, got.r.status());
  GetResponse resp{GetOutcome::from(*got.r)};
  ByteView part(out.data(), resp.result.length);
  co_return co_await send(c, resp, rid, std::span<const ByteView>(&part, 1), got.crc);
}

asio::awaitable<bool> StoreServer::Impl::on_batch_put(ServerConnection& c, BatchPutRequest& req,
                                                      uint64_t rid, ByteView data) {
  kv::Store& s = *store;
  if (Status st = check_ns(c, req.ns); !st.ok()) co_return co_await send_error(c, rid, st);
  if (req.items.size() > limits.max_batch) {
    co_return co_await send_error(
        c, rid,
        Status::invalid_argument(fmt::format("batch of {} items exceeds the server's {}",
                                             req.items.size(), limits.max_batch)));
  }
  std::vector<kv::Key128> keys;
  std::vector<ByteView> parts;
  keys.reserve(req.items.size());
  parts.reserve(req.items.size());
  size_t off = 0;
  std::vector<size_t> sizes;
  for (const KeyLength& kl : req.items) {
    keys.push_back(store_key(c, req.ns, kl.key));
    parts.push_back(data.subspan(off, kl.length));
    sizes.push_back(kl.length);
    off += kl.length;
  }
  // Items past the tenant's byte quota are refused; the rest are put.
  const size_t admitted = quota_admits(c, sizes);
  keys.resize(admitted);
  parts.resize(admitted);
  auto r = co_await run_in_pool(
      *pool, [&s, &req, &keys, &parts] { return s.batch_put(req.ns, keys, parts); });
  if (!r.ok()) co_return co_await send_error(c, rid, r.status());
  BatchPutResponse resp;
  resp.results.reserve(req.items.size());
  for (const kv::PutResult& pr : *r) resp.results.push_back(PutOutcome::from(pr));
  resp.results.resize(req.items.size(), quota_refusal());
  co_return co_await send(c, resp, rid);
}

asio::awaitable<bool> StoreServer::Impl::on_batch_get(ServerConnection& c, BatchGetRequest& req,
                                                      uint64_t rid) {
  kv::Store& s = *store;
  if (Status st = check_ns(c, req.ns); !st.ok()) co_return co_await send_error(c, rid, st);
  if (req.items.size() > limits.max_batch) {
    co_return co_await send_error(
        c, rid,
        Status::invalid_argument(fmt::format("batch of {} items exceeds the server's {}",
                                             req.items.size(), limits.max_batch)));
  }
  uint64_t need = 0;
  for (const KeyLength& kl : req.items) {
    need += std::min<uint32_t>(kl.length, limits.max_object_bytes);
  }
  if (need > limits.max_data_bytes) {
    co_return co_await send_error(
        c, rid,
        Status::invalid_argument(
            fmt::format("batch buffers of {} bytes exceed the server's max_data_bytes {}; split it",
                        need, limits.max_data_bytes)));
  }
  MutableByteView area = c.data_buffer(need);
  std::vector<kv::BatchGetItem> items;
  items.reserve(req.items.size());
  size_t off = 0;
  for (const KeyLength& kl : req.items) {
    size_t len = std::min<uint32_t>(kl.length, limits.max_object_bytes);
    items.push_back({store_key(c, req.ns, kl.key), area.subspan(off, len)});
    off += len;
  }
  auto r = co_await run_in_pool(*pool, [&s, &req, &items] { return s.batch_get(req.ns, items); });
  if (!r.ok()) co_return co_await send_error(c, rid, r.status());
  BatchGetResponse resp;
  std::vector<ByteView> parts;
  resp.results.reserve(r->size());
  for (size_t i = 0; i < r->size(); ++i) {
    resp.results.push_back(GetOutcome::from((*r)[i]));
    if (resp.results.back().hit) {
      parts.push_back(ByteView(items[i].out.data(), resp.results.back().length));
    }
  }
  co_return co_await send(c, resp, rid, parts);
}

asio::awaitable<bool> StoreServer::Impl::on_match_prefix(ServerConnection& c,
                                                         MatchPrefixRequest& req, uint64_t rid) {
  kv::Store& s = *store;
  if (Status st = check_ns(c, req.ns); !st.ok()) co_return co_await send_error(c, rid, st);
  if (req.keys.size() > limits.max_match_keys) {
    co_return co_await send_error(
        c, rid,
        Status::invalid_argument(fmt::format("{} keys exceed the server's max_match_keys {}",
                                             req.keys.size(), limits.max_match_keys)));
  }
  store_keys(c, req.ns, req.keys);
  // match_prefix never touches the disk: run it here.
  auto r = s.match_prefix(req.ns, req.keys);
  if (!r.ok()) co_return co_await send_error(c, rid, r.status());
  co_return co_await send(c, MatchPrefixResponse::from(*r), rid);
}

asio::awaitable<bool> StoreServer::Impl::on_remove(ServerConnection& c, RemoveRequest& req,
                                                   uint64_t rid) {
  kv::Store& s = *store;
  if (Status st = check_ns(c, req.ns); !st.ok()) co_return co_await send_error(c, rid, st);
  req.key = store_key(c, req.ns, req.key);
  auto r = co_await run_in_pool(*pool, [&s, &req] { return s.remove(req.ns, req.key); });
  if (!r.ok()) co_return co_await send_error(c, rid, r.status());
  co_return co_await send(c, RemoveResponse{*r}, rid);
}

asio::awaitable<bool> StoreServer::Impl::on_pin(ServerConnection& c, PinRequest& req,
                                                uint64_t rid) {
  auto n = pin_or_unpin(c, req.ns, req.keys, req.ttl_ms);
  if (!n.ok()) co_return co_await send_error(c, rid, n.status());
  co_return co_await send(c, PinResponse{*n}, rid);
}

asio::awaitable<bool> StoreServer::Impl::on_unpin(ServerConnection& c, UnpinRequest& req,
                                                  uint64_t rid) {
  auto n = pin_or_unpin(c, req.ns, req.keys, std::nullopt);
  if (!n.ok()) co_return co_await send_error(c, rid, n.status());
  co_return co_await send(c, UnpinResponse{*n}, rid);
}

Result<uint32_t> StoreServer::Impl::pin_or_unpin(ServerConnection& c, uint16_t ns,
                                                 std::vector<kv::Key128>& keys,
                                                 std::optional<uint64_t> pin_ttl_ms) {
  KVTIER_RETURN_IF_ERROR(check_ns(c, ns));
  if (keys.size() > limits.max_match_keys) {
    return Status::invalid_argument(fmt::format("{} keys exceed the server's max_match_keys {}",
                                                keys.size(), limits.max_match_keys));
  }
  store_keys(c, ns, keys);
  KVTIER_RETURN_IF_ERROR(track_pins(c, ns, keys, pin_ttl_ms.has_value()));
  Result<size_t> r = pin_ttl_ms ? store->pin(ns, keys, *pin_ttl_ms) : store->unpin(ns, keys);
  if (!r.ok()) return r.status();
  return static_cast<uint32_t>(*r);
}

asio::awaitable<bool> StoreServer::Impl::on_stats(ServerConnection& c, StatsRequest& req,
                                                  uint64_t rid) {
  StatsResponse resp;
  std::string json;
  build_stats(req.format, &resp, &json);
  ByteView part(reinterpret_cast<const std::byte*>(json.data()), json.size());
  co_return co_await send(c, resp, rid, std::span<const ByteView>(&part, 1));
}

asio::awaitable<bool> StoreServer::Impl::on_shm_offer(ServerConnection& c, ShmOfferRequest& req,
                                                      uint64_t rid) {
  if (!shm_listener) {
    co_return co_await send_error(
        c, rid, Status::unavailable("the shared-memory path is disabled on this server"));
  }
  auto nonce = random_nonce();
  if (!nonce.ok()) co_return co_await send_error(c, rid, nonce.status());
  {
    std::lock_guard lk(mu);
    if (c.shm_nonce) shm_waiting.erase(*c.shm_nonce);
    c.shm_nonce = *nonce;
    if (auto it = conns.find(c.id); it != conns.end()) shm_waiting[*nonce] = it->second;
  }
  ShmOfferResponse resp;
  resp.socket_name = shm_listener->name();
  resp.host_id = host_id;
  resp.nonce = *nonce;
  resp.max_area_bytes = cfg.shm_max_area_bytes;
  co_return co_await send(c, resp, rid);
}

asio::awaitable<bool> StoreServer::Impl::on_shm_put(ServerConnection& c, ShmPutRequest& req,
                                                    uint64_t rid) {
  kv::Store& s = *store;
  if (Status st = check_ns(c, req.ns); !st.ok()) co_return co_await send_error(c, rid, st);
  req.key = store_key(c, req.ns, req.key);
  auto area = c.shm_area();
  if (!area) {
    co_return co_await send_error(c, rid,
                                  Status::failed_precondition("no shared-memory area attached"));
  }
  auto range = area->range(req.offset, req.length);
  if (!range) {
    co_return co_await send_error(
        c, rid, Status::invalid_argument("ShmPut range outside the shared-memory area"));
  }
  ByteView in = *range;
  if (quota_admits(c, std::array<size_t, 1>{in.size()}) == 0) {
    co_return co_await send(c, ShmPutResponse{quota_refusal()}, rid);
  }
  // `area` stays alive (mapped) until the store has copied the bytes.
  auto r = co_await run_in_pool(*pool, [&s, &req, in] { return s.put(req.ns, req.key, in); });
  if (!r.ok()) co_return co_await send_error(c, rid, r.status());
  m->shm_bytes.add(req.length);
  co_return co_await send(c, ShmPutResponse{PutOutcome::from(*r)}, rid);
}

asio::awaitable<bool> StoreServer::Impl::on_shm_get(ServerConnection& c, ShmGetRequest& req,
                                                    uint64_t rid) {
  kv::Store& s = *store;
  if (Status st = check_ns(c, req.ns); !st.ok()) co_return co_await send_error(c, rid, st);
  req.key = store_key(c, req.ns, req.key);
  auto area = c.shm_area();
  if (!area) {
    co_return co_await send_error(c, rid,
                                  Status::failed_precondition("no shared-memory area attached"));
  }
  auto range =
      area->range(req.offset, std::min<uint32_t>(req.buffer_bytes, limits.max_object_bytes));
  if (!range || range->empty()) {
    co_return co_await send_error(
        c, rid, Status::invalid_argument("ShmGet range outside the shared-memory area"));
  }
  MutableByteView out = *range;
  auto r = co_await run_in_pool(
      *pool, [&s, &req, out] { return s.get_into_shared(req.ns, req.key, out); });
  if (!r.ok()) co_return co_await send_error(c, rid, r.status());
  if (r->hit) m->shm_bytes.add(r->length);
  co_return co_await send(c, ShmGetResponse{GetOutcome::from(*r)}, rid);
}

}  // namespace kvtier::net
