#include "net/shm/shm_area.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

namespace kvtier::net {

namespace {

constexpr unsigned kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW;
constexpr size_t kAttachV1Bytes = 24;  // nonce hi, nonce lo, area bytes (u64 LE each)
constexpr size_t kAttachV2Bytes = 32;  // ... then u32 flags, u32 zero
constexpr size_t kGrantBytes = 17;     // u8 0, u64 arena bytes, u32 grant flags, u32 zero
constexpr uint32_t kGrantChannel = 1u << 0;
constexpr uint32_t kGrantArena = 1u << 1;

Status errno_status(const std::string& what) {
  return Status::unavailable(fmt::format("{}: {}", what, std::strerror(errno)));
}

// Little-endian fields of the attach messages.
template <typename T>
void put_le(std::byte* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
template <typename T>
T get_le(const std::byte* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(p[i]) << (8 * i);
  return v;
}
void put_u64(std::byte* p, uint64_t v) { put_le(p, v); }
void put_u32(std::byte* p, uint32_t v) { put_le(p, v); }
uint64_t get_u64(const std::byte* p) { return get_le<uint64_t>(p); }
uint32_t get_u32(const std::byte* p) { return get_le<uint32_t>(p); }

// The fds of SCM_RIGHTS messages in `mh` (all of them, so none leaks).
std::vector<int> received_fds(msghdr& mh) {
  std::vector<int> fds;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int f;
      std::memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
      fds.push_back(f);
    }
  }
  return fds;
}

// recvmsg of up to `n` bytes with room for a few fds: `fds` gets every fd
// that came, `truncated` whether some did not fit.
ssize_t recv_with_fds(int s, std::byte* buf, size_t n, int flags, std::vector<int>* fds,
                      bool* truncated) {
  iovec iov{buf, n};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = sizeof control;
  ssize_t got = recvmsg(s, &mh, MSG_CMSG_CLOEXEC | flags);
  if (got < 0) mh.msg_controllen = 0;  // nothing was received
  *fds = received_fds(mh);
  *truncated = (mh.msg_flags & MSG_CTRUNC) != 0;
  return got;
}

// sendmsg of `bytes` with `fd` attached (unless -1).
bool send_with_fd(int s, const std::byte* bytes, size_t n, int fd) {
  iovec iov{const_cast<std::byte*>(bytes), n};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  if (fd >= 0) {
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    cmsghdr* cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &fd, sizeof(int));
  }
  return sendmsg(s, &mh, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
}

// An abstract socket address: a leading NUL, then the name (not NUL-terminated).
Result<std::pair<sockaddr_un, socklen_t>> abstract_address(const std::string& name) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (name.empty() || name.size() + 1 > sizeof(a.sun_path)) {
    return Status::invalid_argument("shared-memory socket name empty or too long");
  }
  a.sun_path[0] = '\0';
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  return std::make_pair(a,
                        static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size()));
}

void set_timeouts(int fd, uint32_t timeout_ms) {
  timeval tv{};
  tv.tv_sec = timeout_ms / 1000;
  tv.tv_usec = (timeout_ms % 1000) * 1000;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

}  // namespace

Result<std::shared_ptr<ShmArea>> ShmArea::create(size_t bytes) {
  if (bytes == 0) return Status::invalid_argument("shared-memory area of 0 bytes");
  int fd = memfd_create("kvtier-store-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return errno_status("memfd_create");
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    Status st = errno_status("ftruncate of the shared-memory area");
    close(fd);
    return st;
  }
  if (fcntl(fd, F_ADD_SEALS, kRequiredSeals | F_SEAL_SEAL) != 0) {
    Status st = errno_status("sealing the shared-memory area");
    close(fd);
    return st;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    Status st = errno_status("mmap of the shared-memory area");
    close(fd);
    return st;
  }
  return std::shared_ptr<ShmArea>(new ShmArea(fd, static_cast<std::byte*>(p), bytes));
}

Result<std::shared_ptr<ShmArea>> ShmArea::map_received(int fd, uint64_t announced_bytes,
                                                       uint64_t max_bytes) {
  auto fail = [fd](Status st) -> Result<std::shared_ptr<ShmArea>> {
    close(fd);
    return st;
  };
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (static_cast<unsigned>(seals) & kRequiredSeals) != kRequiredSeals) {
    return fail(
        Status::rejected("shared-memory fd is not a memfd sealed against shrinking and growing"));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) return fail(errno_status("fstat of a shared-memory fd"));
  if (static_cast<uint64_t>(st.st_size) != announced_bytes || announced_bytes == 0) {
    return fail(Status::invalid_argument(
        fmt::format("shared-memory area is {} bytes, {} announced", st.st_size, announced_bytes)));
  }
  if (announced_bytes > max_bytes) {
    return fail(Status::invalid_argument(fmt::format(
        "shared-memory area of {} bytes exceeds the limit {}", announced_bytes, max_bytes)));
  }
  void* p = mmap(nullptr, announced_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fail(errno_status("mmap of a received shared-memory area"));
  return std::shared_ptr<ShmArea>(
      new ShmArea(fd, static_cast<std::byte*>(p), static_cast<size_t>(announced_bytes)));
}

ShmArea::~ShmArea() {
  munmap(base_, size_);
  close(fd_);
}

std::optional<MutableByteView> ShmArea::range(uint64_t offset, uint64_t length) const {
  if (offset > size_ || length > size_ - offset) return std::nullopt;
  return MutableByteView(base_ + offset, static_cast<size_t>(length));
}

std::string host_boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

Result<kv::Key128> random_nonce() {
  unsigned char b[16];
  if (RAND_bytes(b, sizeof b) != 1) return Status::internal("RAND_bytes failed");
  kv::Key128 k;
  std::memcpy(&k.hi, b, 8);
  std::memcpy(&k.lo, b + 8, 8);
  return k;
}

Result<ShmAttachGrant> shm_attach_send(const std::string& name, const ShmAttachMessage& msg,
                                       int area_fd, uint32_t timeout_ms) {
  auto addr = abstract_address(name);
  if (!addr.ok()) return addr.status();
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return errno_status("socket(AF_UNIX)");
  set_timeouts(s, timeout_ms);
  auto fail = [&](Status st) -> Result<ShmAttachGrant> {
    close(s);
    return st;
  };
  if (connect(s, reinterpret_cast<const sockaddr*>(&addr->first), addr->second) != 0) {
    return fail(errno_status("connect to the store's shared-memory socket"));
  }
  std::byte payload[kAttachV2Bytes] = {};
  put_u64(payload, msg.nonce.hi);
  put_u64(payload + 8, msg.nonce.lo);
  put_u64(payload + 16, msg.area_bytes);
  put_u32(payload + 24, msg.flags);
  const size_t len = msg.version == 1 ? kAttachV1Bytes : kAttachV2Bytes;
  if (!send_with_fd(s, payload, len, area_fd)) {
    return fail(errno_status("sending the shared-memory area"));
  }
  // A refusal is one byte and a close; a version-2 grant is 17 bytes, the
  // arena's fd riding on them (so they are read with room for it).
  std::byte answer[kGrantBytes] = {};
  std::vector<int> fds;
  bool truncated = false;
  ssize_t n = recv_with_fds(s, answer, msg.version == 1 ? size_t{1} : kGrantBytes, MSG_WAITALL,
                            &fds, &truncated);
  auto fail_closing_fds = [&](Status st) {
    for (int f : fds) close(f);
    return fail(std::move(st));
  };
  if (n < 1) {
    return fail_closing_fds(n < 0
                                ? errno_status("waiting for the store to map the area")
                                : Status::unavailable("the store closed the shared-memory socket"));
  }
  if (answer[0] != std::byte{0}) {
    return fail_closing_fds(Status::rejected("the store refused the shared-memory area"));
  }
  ShmAttachGrant grant;
  if (msg.version == 1) {
    close(s);
    return grant;
  }
  const uint32_t flags = get_u32(answer + 9);
  if (n != static_cast<ssize_t>(kGrantBytes) || truncated ||
      fds.size() != ((flags & kGrantArena) != 0 ? 1u : 0u)) {
    return fail_closing_fds(Status::unavailable("malformed shared-memory grant"));
  }
  if ((flags & kGrantArena) != 0) {
    grant.arena = fds[0];
    grant.arena_bytes = get_u64(answer + 1);
  }
  if ((flags & kGrantChannel) != 0) {
    set_timeouts(s, 0);  // the channel bounds each call itself (poll)
    grant.channel = s;
  } else {
    close(s);
  }
  return grant;
}

Result<std::unique_ptr<ShmListener>> ShmListener::listen(const std::string& name) {
  auto addr = abstract_address(name);
  if (!addr.ok()) return addr.status();
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return errno_status("socket(AF_UNIX)");
  if (bind(s, reinterpret_cast<const sockaddr*>(&addr->first), addr->second) != 0 ||
      ::listen(s, 64) != 0) {
    Status st = errno_status("binding the shared-memory socket");
    close(s);
    return st;
  }
  return std::unique_ptr<ShmListener>(new ShmListener(s, name));
}

ShmListener::~ShmListener() { close(fd_); }

Result<ShmListener::Received> ShmListener::accept_one(uint32_t timeout_ms) {
  int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (c < 0) return errno_status("accept on the shared-memory socket");
  set_timeouts(c, timeout_ms);
  return receive(c);
}

int ShmListener::accept_pending(uint32_t timeout_ms) {
  // The listener blocks; only one thread accepts, so a connection poll sees
  // waiting is still there for accept.
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, 0) != 1 || (p.revents & POLLIN) == 0) return -1;
  const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (c < 0) return -1;
  set_timeouts(c, timeout_ms);  // the answer's send, bounded
  return c;
}

Result<ShmListener::Received> ShmListener::receive(int c) {
  // The client sends its message with one sendmsg: one recvmsg (not
  // MSG_WAITALL, whose length would have to be known) takes it whole.
  std::byte payload[kAttachV2Bytes + 1];
  // Every fd that came is collected, so none leaks whatever else is wrong.
  std::vector<int> fds;
  bool truncated = false;
  ssize_t n = recv_with_fds(c, payload, sizeof payload, 0, &fds, &truncated);
  auto refuse = [&](Status st) -> Result<Received> {
    for (int f : fds) close(f);
    shm_attach_answer(c, false);
    return st;
  };
  if (n != static_cast<ssize_t>(kAttachV1Bytes) && n != static_cast<ssize_t>(kAttachV2Bytes)) {
    return refuse(Status::invalid_argument(
        fmt::format("shared-memory attach message of {} bytes (24 or 32 expected)", n)));
  }
  if (truncated || fds.size() != 1) {
    return refuse(Status::invalid_argument("shared-memory attach message without exactly one fd"));
  }
  Received r;
  r.conn = c;
  r.fd = fds[0];
  r.msg.nonce.hi = get_u64(payload);
  r.msg.nonce.lo = get_u64(payload + 8);
  r.msg.area_bytes = get_u64(payload + 16);
  r.msg.version = n == static_cast<ssize_t>(kAttachV1Bytes) ? 1 : 2;
  if (r.msg.version == 2) {
    r.msg.flags = get_u32(payload + 24);
    if ((r.msg.flags & ~kShmAttachWantChannel) != 0 || get_u32(payload + 28) != 0) {
      return refuse(Status::invalid_argument("shared-memory attach with unknown flags"));
    }
  }
  return r;
}

bool shm_attach_grant(int conn, bool keep_channel, int arena_fd, uint64_t arena_bytes) {
  std::byte answer[kGrantBytes] = {};
  put_u64(answer + 1, arena_fd >= 0 ? arena_bytes : 0);
  put_u32(answer + 9, (keep_channel ? kGrantChannel : 0) | (arena_fd >= 0 ? kGrantArena : 0));
  const bool sent = send_with_fd(conn, answer, sizeof answer, arena_fd);
  if (!sent || !keep_channel) {
    close(conn);
    return sent;
  }
  set_timeouts(conn, 0);
  return true;
}

void shm_attach_answer(int conn, bool ok) {
  char b = ok ? 0 : 1;
  [[maybe_unused]] ssize_t n = send(conn, &b, 1, MSG_NOSIGNAL);
  close(conn);
}

}  // namespace kvtier::net
