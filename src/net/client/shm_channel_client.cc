#include "net/client/shm_channel_client.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include <spdlog/spdlog.h>

#include "common/block_copy.h"
#include "net/shm/shm_channel_io.h"
#include "net/wire/protocol.h"

namespace kvtier::net {

namespace {

constexpr int kSpinUs = 50;

// An Error answer as the Status it carries (the channel stays usable), or
// nullopt for any other frame.
std::optional<Status> error_answer(const Frame& f) {
  if (f.header.type != MessageType::kErrorResponse) return std::nullopt;
  auto e = ErrorResponse::decode(f.descriptor);
  if (!e.ok()) return Status::internal("undecodable Error answer on the direct channel");
  return e->to_status();
}

}  // namespace

struct ShmDirectChannel::State {
  explicit State(int fd) : reader(fd, FrameLimits{kMaxDescriptorBytes, 0}) {}
  std::mutex mu;  // one call at a time
  ChannelReader reader;
  uint64_t next_id = 1;
  std::atomic<bool> broken{false};
  std::vector<uint32_t> pending;  // leases done with, not yet released
  bool flush_armed = false;
  std::function<void()> arm_flush;
};

Result<std::unique_ptr<ShmDirectChannel>> ShmDirectChannel::open(
    int channel_fd, int arena_fd, uint64_t arena_bytes, std::atomic<uint64_t>* arena_reads) {
  const std::byte* arena = nullptr;
  if (arena_fd >= 0) {
    // Read-only: the server sealed the memfd against writable mappings.
    void* p = arena_bytes == 0 ? MAP_FAILED
                               : ::mmap(nullptr, arena_bytes, PROT_READ, MAP_SHARED, arena_fd, 0);
    ::close(arena_fd);
    if (p == MAP_FAILED) {
      ::close(channel_fd);
      return Status::unavailable(
          fmt::format("mapping the store's RAM arena of {} bytes failed", arena_bytes));
    }
    arena = static_cast<const std::byte*>(p);
  }
  return std::unique_ptr<ShmDirectChannel>(
      new ShmDirectChannel(channel_fd, arena, arena_bytes, arena_reads));
}

ShmDirectChannel::ShmDirectChannel(int fd, const std::byte* arena, uint64_t arena_bytes,
                                   std::atomic<uint64_t>* arena_reads)
    : fd_(fd),
      arena_(arena),
      arena_bytes_(arena_bytes),
      arena_reads_(arena_reads),
      st_(std::make_unique<State>(fd)) {}

ShmDirectChannel::~ShmDirectChannel() {
  ::close(fd_);
  if (arena_ != nullptr) ::munmap(const_cast<std::byte*>(arena_), arena_bytes_);
}

bool ShmDirectChannel::broken() const { return st_->broken.load(std::memory_order_relaxed); }

void ShmDirectChannel::set_flush_scheduler(std::function<void()> arm) {
  std::lock_guard lk(st_->mu);
  st_->arm_flush = std::move(arm);
}

void ShmDirectChannel::send_pending_releases() {
  if (st_->pending.empty() || broken()) return;
  // One-way: the next call's answer comes after it on the stream.
  Status st = channel_send(fd_, ShmReleaseRequest{std::move(st_->pending)}, st_->next_id++);
  st_->pending.clear();
  // Logged and the channel marked broken; the server frees the leases when
  // it sees the close.
  if (!st.ok()) static_cast<void>(give_up(st));
}

Status ShmDirectChannel::give_up(Status why) {
  spdlog::info("store client: direct channel given up: {}", why.to_string());
  st_->broken.store(true, std::memory_order_relaxed);
  return why;
}

std::optional<Result<kv::MatchResult>> ShmDirectChannel::match_prefix(
    uint16_t server_ns, std::span<const kv::Key128> keys,
    std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lk(st_->mu, std::try_to_lock);
  if (!lk.owns_lock() || broken()) return std::nullopt;
  send_pending_releases();
  auto f = exchange(MatchPrefixRequest{server_ns, {keys.begin(), keys.end()}}, deadline);
  if (!f.ok()) return Result<kv::MatchResult>(kv::MatchResult{});  // a miss, like TCP's
  if (auto err = error_answer(*f)) return Result<kv::MatchResult>(*err);
  auto resp = decode_message_as<MatchPrefixResponse>(f->header, f->descriptor);
  if (!resp.ok() || resp->tiers.size() > keys.size()) {
    static_cast<void>(give_up(Status::internal("bad MatchPrefix answer")));  // logged
    return Result<kv::MatchResult>(kv::MatchResult{});
  }
  return Result<kv::MatchResult>(resp->to_result());
}

bool ShmDirectChannel::flush_releases() {
  std::unique_lock lk(st_->mu, std::try_to_lock);
  if (!lk.owns_lock()) return true;  // a get is under way: look again later
  send_pending_releases();
  st_->flush_armed = false;
  return false;
}

Result<Frame> ShmDirectChannel::exchange(const Message& req,
                                         std::chrono::steady_clock::time_point deadline) {
  const uint64_t id = st_->next_id++;
  if (Status sent = channel_send(fd_, req, id); !sent.ok()) return give_up(sent);
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  // The server answers a RAM hit in microseconds: spin briefly rather than
  // sleep and be woken.
  auto f = st_->reader.read(static_cast<int>(std::max<int64_t>(0, left.count())), kSpinUs);
  if (!f.ok()) return give_up(f.status());
  if (f->header.request_id != id) return give_up(Status::internal("answer to another request"));
  return f;
}

std::optional<Result<kv::GetResult>> ShmDirectChannel::get(
    uint16_t server_ns, const kv::Key128& key, MutableByteView out, const AreaSlot& slot,
    std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lk(st_->mu, std::try_to_lock);
  if (!lk.owns_lock() || broken()) return std::nullopt;
  kv::GetResult miss;
  auto fail = [&](kv::MissReason why, const Status& st) {
    static_cast<void>(give_up(st));  // logged; the call answers a miss
    miss.miss = why;
    return Result<kv::GetResult>(miss);
  };
  const auto room = static_cast<uint32_t>(std::min<uint64_t>(out.size(), slot.room));
  ShmLeaseGetRequest req{server_ns, key, slot.offset, room, {}};
  req.release.swap(st_->pending);  // the server releases them first
  auto f = exchange(req, deadline);
  if (!f.ok()) {
    miss.miss = f.status().code() == StatusCode::kTimeout ? kv::MissReason::kTimeout
                                                          : kv::MissReason::kIoError;
    return Result<kv::GetResult>(miss);
  }
  if (auto err = error_answer(*f)) return Result<kv::GetResult>(*err);
  auto resp = decode_message_as<ShmLeaseGetResponse>(f->header, f->descriptor);
  if (!resp.ok()) return fail(kv::MissReason::kIoError, resp.status());
  const GetOutcome& r = resp->result;
  switch (resp->placement) {
    case ShmPlacement::kNone:
      break;
    case ShmPlacement::kArea:
      if (r.length > room) {
        return fail(kv::MissReason::kIoError, Status::internal("area hit larger than the room"));
      }
      copy_block(out.data(), slot.data, r.length);
      break;
    case ShmPlacement::kArena: {
      // Never trust the server's numbers with our memory.
      if (arena_ == nullptr || r.length > out.size() || resp->arena_offset > arena_bytes_ ||
          r.length > arena_bytes_ - resp->arena_offset) {
        return fail(kv::MissReason::kIoError, Status::internal("lease outside the RAM arena"));
      }
      copy_block(out.data(), arena_ + resp->arena_offset, r.length);
      if (arena_reads_ != nullptr) arena_reads_->fetch_add(1, std::memory_order_relaxed);
      // Released with the next get, or by a flush if none comes soon.
      st_->pending.push_back(resp->lease);
      if (st_->pending.size() >= kMaxShmReleases) {
        send_pending_releases();
      } else if (!st_->flush_armed && st_->arm_flush) {
        st_->flush_armed = true;
        st_->arm_flush();
      }
      break;
    }
  }
  return Result<kv::GetResult>(r.to_result());
}

}  // namespace kvtier::net
