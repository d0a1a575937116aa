#include "net/server/shm_channel_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>

#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "net/shm/shm_channel_io.h"

namespace kvtier::net {

std::shared_ptr<ShmChannelServer> ShmChannelServer::start(int fd, ShmChannelContext ctx) {
  std::shared_ptr<ShmChannelServer> ch(new ShmChannelServer(fd, std::move(ctx)));
  ch->thread_ = std::thread([raw = ch.get()] { raw->serve(); });
  return ch;
}

ShmChannelServer::~ShmChannelServer() {
  join();
  ::close(fd_);
}

void ShmChannelServer::close() { ::shutdown(fd_, SHUT_RDWR); }

void ShmChannelServer::join() {
  close();
  if (thread_.joinable()) thread_.join();
}

namespace {

// Waking a sleeping thread costs more than a short copy on a virtual machine
// (10-15 us per request, measured). A channel whose client came back within
// kHotGap of its last answer keeps polling for up to kSpin before it sleeps,
// so the next request finds it awake; at most a quarter of the cores (at
// least one) poll at once, so a crowd of busy clients cannot eat the CPU.
constexpr auto kHotGap = std::chrono::milliseconds(1);
constexpr int kSpinUs = 100;
std::atomic<int> g_spinning{0};

int max_spinners() {
  static const int n = std::max(1, static_cast<int>(std::thread::hardware_concurrency() / 4));
  return n;
}

}  // namespace

void ShmChannelServer::serve() {
  ChannelReader reader(fd_, FrameLimits{ctx_.max_descriptor_bytes, 0});
  auto answered = std::chrono::steady_clock::time_point{};
  bool hot = false;
  for (;;) {
    bool spinning = false;
    if (hot) {
      spinning = g_spinning.fetch_add(1, std::memory_order_relaxed) < max_spinners();
      if (!spinning) g_spinning.fetch_sub(1, std::memory_order_relaxed);
    }
    auto f = reader.read(-1, spinning ? kSpinUs : 0);
    if (spinning) g_spinning.fetch_sub(1, std::memory_order_relaxed);
    const auto now = std::chrono::steady_clock::now();
    hot = now - answered < kHotGap;
    if (!f.ok()) {
      if (f.status().code() != StatusCode::kUnavailable) {
        spdlog::warn("store server: {}: direct channel closed: {}", ctx_.peer,
                     f.status().to_string());
      }
      break;
    }
    if (!handle(*f)) break;
    answered = std::chrono::steady_clock::now();
  }
  release_all();
  // The fd stays open until the destructor, so close() never shuts down an
  // fd number reused by someone else.
  finished_.store(true, std::memory_order_release);
}

bool ShmChannelServer::handle(const Frame& f) {
  const uint64_t t0 = now_ns();
  const uint64_t rid = f.header.request_id;
  // Counted before the answer leaves, so a client that has it sees it counted.
  auto reply = [&](const Message& m) {
    ctx_.count_request(f.header.type, now_ns() - t0);
    return channel_send(fd_, m, rid).ok();
  };
  auto reply_error = [&](const Status& st) { return reply(ErrorResponse::from_status(st)); };
  switch (f.header.type) {
    case MessageType::kShmLeaseGetRequest: {
      auto req = ShmLeaseGetRequest::decode(f.descriptor);
      if (!req.ok()) break;  // malformed: the channel closes below
      auto resp = lease_get(*req);
      return resp.ok() ? reply(*resp) : reply_error(resp.status());
    }
    case MessageType::kMatchPrefixRequest: {
      auto req = MatchPrefixRequest::decode(f.descriptor);
      if (!req.ok()) break;
      if (Status st = ctx_.check_ns(req->ns); !st.ok()) return reply_error(st);
      if (req->keys.size() > ctx_.max_match_keys) {
        return reply_error(Status::invalid_argument(fmt::format(
            "match of {} keys exceeds the server's {}", req->keys.size(), ctx_.max_match_keys)));
      }
      if (ctx_.map_keys) ctx_.map_keys(req->ns, req->keys);
      auto m = ctx_.store->match_prefix(req->ns, req->keys);
      return m.ok() ? reply(MatchPrefixResponse::from(*m)) : reply_error(m.status());
    }
    case MessageType::kShmReleaseRequest: {
      auto req = ShmReleaseRequest::decode(f.descriptor);
      if (!req.ok()) break;
      for (uint32_t lease : req->leases) release(lease);
      ctx_.count_request(f.header.type, now_ns() - t0);
      return true;  // one-way: no response
    }
    default:
      return reply_error(Status::failed_precondition(
          fmt::format("{} is not served on the direct channel", message_type_name(f.header.type))));
  }
  spdlog::warn("store server: {}: malformed frame on the direct channel; closing it", ctx_.peer);
  return false;
}

Result<ShmLeaseGetResponse> ShmChannelServer::lease_get(const ShmLeaseGetRequest& request) {
  for (uint32_t lease : request.release) release(lease);
  KVTIER_RETURN_IF_ERROR(ctx_.check_ns(request.ns));
  ShmLeaseGetRequest req = request;
  if (ctx_.map_keys) ctx_.map_keys(req.ns, std::span<kv::Key128>(&req.key, 1));
  const uint32_t room = std::min(req.buffer_bytes, ctx_.max_object_bytes);
  auto range = ctx_.area->range(req.offset, room);
  if (!range || range->empty()) {
    return Status::invalid_argument("ShmLeaseGet range outside the shared-memory area");
  }
  ShmLeaseGetResponse resp;
  // A place among the server's leases, reserved before the lease is taken.
  bool reserved = false;
  if (ctx_.lease_from_arena && held_ < ctx_.max_leases) {
    reserved = !ctx_.server_leases || ctx_.server_leases->fetch_add(1) < ctx_.max_server_leases;
    if (!reserved) ctx_.server_leases->fetch_sub(1);
  }
  auto unreserve = [&] {
    if (reserved && ctx_.server_leases) ctx_.server_leases->fetch_sub(1);
    reserved = false;
  };
  if (reserved) {
    auto lease = ctx_.store->lease_ram(req.ns, req.key);
    if (!lease.ok()) {
      unreserve();
      return lease.status();
    }
    if (*lease && (*lease)->arena != ctx_.arena) {
      // In an arena this client has not mapped (the namespace was placed
      // elsewhere): copy it into the client's area instead.
      ctx_.store->release_ram_lease((*lease)->slot);
      *lease = std::nullopt;
    }
    if (!*lease) unreserve();
    if (*lease) {
      if ((*lease)->length > req.buffer_bytes) {
        ctx_.store->release_ram_lease((*lease)->slot);
        unreserve();
        return Status::invalid_argument(
            fmt::format("buffer of {} bytes is too small for block {} of {} bytes",
                        req.buffer_bytes, req.key.to_hex(), (*lease)->length));
      }
      ++leases_[(*lease)->slot];
      ++held_;
      resp.result.hit = true;
      resp.result.tier = kv::Tier::kRam;
      resp.result.length = (*lease)->length;
      resp.placement = ShmPlacement::kArena;
      resp.arena_offset = (*lease)->offset;
      resp.lease = (*lease)->slot;
      ctx_.count_bytes(resp.result.length);
      return resp;
    }
  }
  // Not in RAM (or no more leases for this client): the store copies the
  // block into the client's area, as ShmGet does.
  auto r = ctx_.store->get_into_shared(req.ns, req.key, *range);
  if (!r.ok()) return r.status();
  resp.result = GetOutcome::from(*r);
  if (r->hit) {
    resp.placement = ShmPlacement::kArea;
    ctx_.count_bytes(r->length);
  }
  return resp;
}

void ShmChannelServer::release(uint32_t lease) {
  auto it = leases_.find(lease);
  if (it == leases_.end()) {
    // Not ours (a buggy or hostile client): never touch another's lease.
    spdlog::debug("store server: {}: release of lease {} it does not hold", ctx_.peer, lease);
    return;
  }
  ctx_.store->release_ram_lease(it->first);
  if (ctx_.server_leases) ctx_.server_leases->fetch_sub(1);
  --held_;
  if (--it->second == 0) leases_.erase(it);
}

void ShmChannelServer::release_all() {
  for (auto& [slot, count] : leases_) {
    for (uint32_t i = 0; i < count; ++i) ctx_.store->release_ram_lease(slot);
  }
  if (ctx_.server_leases) ctx_.server_leases->fetch_sub(held_);
  leases_.clear();
  held_ = 0;
}

}  // namespace kvtier::net
