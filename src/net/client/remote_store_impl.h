// RemoteStore's inside, shared by its files (remote_store.cc,
// remote_store_batch.cc) and by nothing else.
#pragma once

#include <shared_mutex>

#include "net/client/client_connection.h"

namespace kvtier::net {

// Splits [0, n) into consecutive chunks of at most `max_items` items and at
// most `max_bytes` bytes (a single item may exceed it alone), by item sizes.
template <typename SizeOf>
std::vector<std::pair<size_t, size_t>> chunks(size_t n, uint64_t max_items, uint64_t max_bytes,
                                              SizeOf&& size_of) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    uint64_t bytes = 0;
    while (j < n && j - i < max_items) {
      uint64_t len = size_of(j);
      if (j > i && bytes + len > max_bytes) break;
      bytes += len;
      ++j;
    }
    out.emplace_back(i, j);
    i = j;
  }
  return out;
}

inline Status unreachable_status(CallError e, const Status& last) {
  switch (e) {
    case CallError::kTimeout:
      return Status::timeout("the store did not answer in time");
    case CallError::kBroken:
      return Status::unavailable("the connection to the store broke");
    default:
      return Status::unavailable("the store cannot be reached: " + last.message());
  }
}

struct RemoteStore::Impl {
  RemoteStoreShared shared;
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  std::vector<std::shared_ptr<ClientConn>> conns;
  std::atomic<uint64_t> rr{0};

  mutable std::shared_mutex ns_mu;
  std::vector<kv::Namespace> namespaces;  // by client handle
  std::vector<kv::Key128> ns_digests;

  // The outcome of one request.
  struct Reply {
    CallError error = CallError::kNone;
    Status status;  // an Error response from the server, or bad input found here
    std::shared_ptr<Call> call;
    bool ok() const { return error == CallError::kNone && status.ok(); }
  };

  // Where requests of one operation go: a connection's session, and the
  // handle its server gave the caller's namespace.
  struct Target {
    ClientConn* conn = nullptr;
    uint64_t gen = 0;
    uint16_t server_ns = 0;
  };

  const RemoteStoreOptions& opts() const { return shared.opts; }

  Clock::time_point deadline() const {
    return Clock::now() + std::chrono::milliseconds(opts().call_timeout_ms);
  }

  // Round robin over the connections that are up.
  std::optional<Target> pick() {
    size_t n = conns.size();
    size_t start = rr.fetch_add(1, std::memory_order_relaxed);
    for (size_t i = 0; i < n; ++i) {
      ClientConn* c = conns[(start + i) % n].get();
      if (auto gen = c->up_generation()) return Target{c, *gen, 0};
    }
    return std::nullopt;
  }

  Result<kv::Namespace> namespace_of(uint16_t handle) const {
    std::shared_lock lk(ns_mu);
    if (handle >= namespaces.size()) {
      return Status::invalid_argument(fmt::format("unknown namespace handle {}", handle));
    }
    return namespaces[handle];
  }

  void count(CallError e) {
    switch (e) {
      case CallError::kNone:
        break;
      case CallError::kUnavailable:
        shared.unavailable.fetch_add(1, std::memory_order_relaxed);
        break;
      case CallError::kTimeout:
        shared.timeouts.fetch_add(1, std::memory_order_relaxed);
        break;
      case CallError::kBroken:
        shared.broken.fetch_add(1, std::memory_order_relaxed);
        break;
    }
  }

  // Encodes `msg` and queues it on `t`'s session. A call that could not be
  // queued has `failure` set and `done` true.
  Result<std::shared_ptr<Call>> send(const Target& t, const Message& msg,
                                     std::span<const ByteView> data,
                                     std::span<const MutableByteView> outs) {
    auto c = std::make_shared<Call>();
    c->id = t.conn->reserve_id();
    Status st = encode_message_prefix(msg, c->id, data, c->prefix, t.conn->version());
    if (!st.ok()) return Status::invalid_argument(st.message());
    c->data.assign(data.begin(), data.end());
    c->outs.assign(outs.begin(), outs.end());
    if (!t.conn->submit(c, t.gen)) {
      c->done = true;
      c->failure = Status::unavailable("session gone");
    }
    return c;
  }

  // Waits for a call sent with send() and checks the response's type.
  Reply collect(const Target& t, const std::shared_ptr<Call>& c, MessageType expect,
                Clock::time_point dl) {
    Reply r;
    // A call that never got queued belongs to no connection: nothing to wait for.
    r.error = c->gen == 0 && c->done ? CallError::kUnavailable : t.conn->wait(c, dl);
    count(r.error);
    if (r.error != CallError::kNone) return r;
    if (c->header.type == MessageType::kErrorResponse) {
      auto e = decode_message_as<ErrorResponse>(c->header, c->descriptor);
      r.status = e.ok() ? e->to_status() : e.status();
      return r;
    }
    if (c->header.type != expect) {
      spdlog::warn("store client: server answered a request expecting {} with {}",
                   message_type_name(expect), message_type_name(c->header.type));
      r.error = CallError::kBroken;
      count(r.error);
      return r;
    }
    r.call = c;
    return r;
  }

  Reply exchange(const Target& t, const Message& msg, std::span<const ByteView> data,
                 std::span<const MutableByteView> outs, MessageType expect, Clock::time_point dl) {
    auto c = send(t, msg, data, outs);
    if (!c.ok()) return Reply{CallError::kNone, c.status(), nullptr};
    return collect(t, *c, expect, dl);
  }

  // Picks a connection and registers namespace `ns` on its session when that
  // was not done yet. A Reply that is not ok() says why there is no target.
  Reply target(uint16_t ns, Clock::time_point dl, Target* out) {
    shared.calls.fetch_add(1, std::memory_order_relaxed);
    auto t = pick();
    if (!t) {
      count(CallError::kUnavailable);
      return Reply{CallError::kUnavailable, {}, nullptr};
    }
    auto sns = t->conn->server_ns(ns, t->gen);
    if (!sns) {
      auto nsdef = namespace_of(ns);
      if (!nsdef.ok()) return Reply{CallError::kNone, nsdef.status(), nullptr};
      Reply reg = exchange(*t, RegisterNamespaceRequest{*nsdef}, {}, {},
                           MessageType::kRegisterNamespaceResponse, dl);
      if (!reg.ok()) return reg;
      auto resp = RegisterNamespaceResponse::decode(reg.call->descriptor);
      if (!resp.ok()) {
        count(CallError::kBroken);
        return Reply{CallError::kBroken, {}, nullptr};
      }
      t->conn->set_server_ns(ns, resp->handle, t->gen);
      sns = resp->handle;
    }
    t->server_ns = *sns;
    *out = *t;
    return Reply{};
  }

  // One request of namespace `ns`: the message `make(server_handle)` builds.
  template <typename Make>
  Reply request(uint16_t ns, Make&& make, std::span<const ByteView> data,
                std::span<const MutableByteView> outs, MessageType expect) {
    Clock::time_point dl = deadline();
    Target t;
    Reply r = target(ns, dl, &t);
    if (!r.ok()) return r;
    return exchange(t, make(t.server_ns), data, outs, expect, dl);
  }

  // Several requests of namespace `ns` pipelined on one connection: all are
  // sent, then all collected. `make(i, server_handle)`, `data_of(i)` and
  // `outs_of(i)` describe request i. The first bad-input Status (an encode
  // error here, or an Error response) is returned in `status`.
  template <typename Make, typename DataOf, typename OutsOf>
  std::vector<Reply> request_pipelined(uint16_t ns, size_t n, Make&& make, DataOf&& data_of,
                                       OutsOf&& outs_of, MessageType expect, Status* status) {
    std::vector<Reply> replies(n);
    Clock::time_point dl = deadline();
    Target t;
    Reply r = target(ns, dl, &t);
    if (!r.ok()) {
      if (!r.status.ok()) *status = r.status;
      for (auto& x : replies) x = r;
      return replies;
    }
    std::vector<std::shared_ptr<Call>> calls(n);
    for (size_t i = 0; i < n; ++i) {
      auto c = send(t, make(i, t.server_ns), data_of(i), outs_of(i));
      if (!c.ok()) {
        replies[i].status = c.status();
        continue;
      }
      calls[i] = std::move(*c);
    }
    for (size_t i = 0; i < n; ++i) {
      if (calls[i]) replies[i] = collect(t, calls[i], expect, dl);
      if (!replies[i].status.ok() && status->ok()) *status = replies[i].status;
    }
    return replies;
  }

  Status check_ns(uint16_t ns) const {
    std::shared_lock lk(ns_mu);
    if (ns >= namespaces.size()) {
      return Status::invalid_argument(fmt::format("unknown namespace handle {}", ns));
    }
    return Status::ok_status();
  }

  // A Stats request; it needs no namespace, any connection will do.
  Result<std::shared_ptr<Call>> stats_call(StatsFormat format) {
    shared.calls.fetch_add(1, std::memory_order_relaxed);
    Status last;
    {
      std::lock_guard lk(shared.mu);
      last = shared.last_error;
    }
    auto t = pick();
    if (!t) {
      count(CallError::kUnavailable);
      return unreachable_status(CallError::kUnavailable, last);
    }
    auto r = exchange(*t, StatsRequest{format}, {}, {}, MessageType::kStatsResponse, deadline());
    if (!r.status.ok()) return r.status;
    if (r.error != CallError::kNone) return unreachable_status(r.error, last);
    return r.call;
  }

  // ---- shared-memory path ----
  //
  // A put or get through `t`'s session area, or nullopt when that session
  // has none, no slot is free or the object does not fit a slot (the caller
  // then uses TCP). The slot is released once the response is in; a call
  // that failed without one retires its slot (the server may still write it).

  std::optional<Result<kv::PutResult>> shm_put(const Target& t, const kv::Key128& key,
                                               ByteView data, Clock::time_point dl) {
    auto shm = t.conn->shm_session(t.gen);
    if (!shm || data.size() > shm->slot_bytes()) return std::nullopt;
    auto slot = shm->acquire();
    if (!slot) return std::nullopt;
    copy_block(shm->slot_data(*slot), data.data(), data.size());
    Reply r = exchange(
        t, ShmPutRequest{t.server_ns, key, shm->offset(*slot), static_cast<uint32_t>(data.size())},
        {}, {}, MessageType::kShmPutResponse, dl);
    if (r.error != CallError::kNone) {
      shared.shm_retired.fetch_add(1, std::memory_order_relaxed);
      return Result<kv::PutResult>(refused());
    }
    shm->release(*slot);
    if (!r.status.ok()) return Result<kv::PutResult>(r.status);
    shared.shm_calls.fetch_add(1, std::memory_order_relaxed);
    auto resp = ShmPutResponse::decode(r.call->descriptor);
    if (!resp.ok()) return Result<kv::PutResult>(refused());
    return Result<kv::PutResult>(resp->result.to_result());
  }

  std::optional<Result<kv::GetResult>> shm_get(const Target& t, const kv::Key128& key,
                                               MutableByteView out, Clock::time_point dl) {
    auto shm = t.conn->shm_session(t.gen);
    if (!shm) return std::nullopt;
    auto slot = shm->acquire();
    if (!slot) return std::nullopt;
    // The slot holds the largest object the server takes, so it is all the
    // room a caller's buffer could need.
    const auto room = static_cast<uint32_t>(std::min(out.size(), shm->slot_bytes()));
    if (ShmDirectChannel* ch = shm->channel()) {
      auto direct =
          ch->get(t.server_ns, key, out, {shm->offset(*slot), shm->slot_data(*slot), room}, dl);
      if (direct) {
        if (ch->broken()) {
          // The server may still write the slot for the call that failed.
          shared.shm_retired.fetch_add(1, std::memory_order_relaxed);
        } else {
          shm->release(*slot);
          shared.shm_calls.fetch_add(1, std::memory_order_relaxed);
          shared.direct_gets.fetch_add(1, std::memory_order_relaxed);
        }
        return direct;
      }
    }
    Reply r = exchange(t, ShmGetRequest{t.server_ns, key, shm->offset(*slot), room}, {}, {},
                       MessageType::kShmGetResponse, dl);
    kv::GetResult miss;
    if (r.error != CallError::kNone) {
      shared.shm_retired.fetch_add(1, std::memory_order_relaxed);
      miss.miss = miss_of(r.error);
      return Result<kv::GetResult>(miss);
    }
    if (!r.status.ok()) {
      shm->release(*slot);
      return Result<kv::GetResult>(r.status);
    }
    auto resp = ShmGetResponse::decode(r.call->descriptor);
    miss.miss = kv::MissReason::kIoError;
    if (!resp.ok() || resp->result.length > room) {
      shm->release(*slot);
      return Result<kv::GetResult>(miss);  // the server broke the protocol: never wrong bytes
    }
    if (resp->result.hit) copy_block(out.data(), shm->slot_data(*slot), resp->result.length);
    shm->release(*slot);
    shared.shm_calls.fetch_add(1, std::memory_order_relaxed);
    return Result<kv::GetResult>(resp->result.to_result());
  }

  // Whether the session a request would use has a working direct channel.
  bool direct_channel_up() {
    auto up = pick();
    if (!up) return false;
    auto shm = up->conn->shm_session(up->gen);
    return shm && shm->channel() && !shm->channel()->broken();
  }

  // A match through the direct channel of the session a request would use,
  // or nullopt (no channel, or it is busy): then TCP.
  std::optional<Result<kv::MatchResult>> channel_match(uint16_t ns,
                                                       std::span<const kv::Key128> keys) {
    // Look first, so a client without a channel counts its call once.
    auto up = pick();
    if (!up) return std::nullopt;
    auto any = up->conn->shm_session(up->gen);
    if (!any || !any->channel() || any->channel()->broken()) return std::nullopt;
    Clock::time_point dl = deadline();
    Target t;
    if (!target(ns, dl, &t).ok()) return std::nullopt;
    auto shm = t.conn->shm_session(t.gen);
    if (!shm || !shm->channel()) return std::nullopt;
    return shm->channel()->match_prefix(t.server_ns, keys, dl);
  }

  static kv::MissReason miss_of(CallError e) {
    return e == CallError::kTimeout ? kv::MissReason::kTimeout : kv::MissReason::kIoError;
  }
  static kv::PutResult refused() {
    return {kv::PutResult::Outcome::kRefused, kv::Tier::kNone, kv::RefuseReason::kDiskError};
  }
};

}  // namespace kvtier::net
