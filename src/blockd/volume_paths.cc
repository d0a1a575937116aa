#include "blockd/volume_paths.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

namespace kvtier::blockd {

namespace {

// Closes a descriptor when it goes out of scope unless released.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() {
    const int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

std::string join(const std::vector<std::string>& parts, size_t from, size_t to) {
  std::string s;
  for (size_t i = from; i < to; ++i) s += "/" + parts[i];
  return s.empty() ? "/" : s;
}

Result<std::string> canonical(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) {
    return Status::invalid_argument(fmt::format("'{}': {}", path, std::strerror(errno)));
  }
  return std::string(buf);
}

// Whether `dir` (as components) is a prefix of `path`.
bool beneath(const std::vector<std::string>& dir, const std::vector<std::string>& path) {
  if (path.size() <= dir.size()) return false;
  for (size_t i = 0; i < dir.size(); ++i) {
    if (dir[i] != path[i]) return false;
  }
  return true;
}

Status open_error(const std::string& path, int err) {
  if (err == ELOOP) {
    return Status::permission_denied(
        fmt::format("'{}' is or passes through a symbolic link; volumes are never opened through "
                    "links",
                    path));
  }
  if (err == ENOENT) return Status::not_found(fmt::format("'{}': no such file", path));
  if (err == EINVAL) {
    return Status::failed_precondition(
        fmt::format("'{}': O_DIRECT not supported here (create the volume --buffered)", path));
  }
  if (err == EACCES || err == EPERM) {
    return Status::permission_denied(fmt::format("'{}': {}", path, std::strerror(err)));
  }
  return Status::io_error(fmt::format("'{}': {}", path, std::strerror(err)));
}

}  // namespace

Result<std::vector<std::string>> split_absolute_path(const std::string& path) {
  if (path.empty() || path[0] != '/') {
    return Status::invalid_argument(fmt::format("'{}' is not an absolute path", path));
  }
  if (path.size() >= PATH_MAX) return Status::invalid_argument("path too long");
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') ++i;
    const size_t j = path.find('/', i);
    const std::string c = path.substr(i, j == std::string::npos ? std::string::npos : j - i);
    i = j == std::string::npos ? path.size() : j;
    if (c.empty() || c == ".") continue;
    if (c == "..") {
      return Status::permission_denied(fmt::format("'{}' contains '..'; refused", path));
    }
    parts.push_back(c);
  }
  return parts;
}

bool is_loopback_address(const std::string& address) {
  in_addr a4{};
  if (inet_pton(AF_INET, address.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  in6_addr a6{};
  if (inet_pton(AF_INET6, address.c_str(), &a6) == 1) return IN6_IS_ADDR_LOOPBACK(&a6);
  return address == "localhost";
}

Result<VolumePaths> VolumePaths::create(VolumePolicy policy) {
  for (auto& d : policy.volume_dirs) {
    auto c = canonical(d);
    if (!c.ok()) return Status::invalid_argument("--volume-dir " + c.status().message());
    struct stat sb {};
    if (::stat(c->c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode)) {
      return Status::invalid_argument(fmt::format("--volume-dir '{}' is not a directory", d));
    }
    // Anyone who may write there may plant a link or a hard link to a file
    // they cannot read, and have the daemon open it for them.
    if ((sb.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
      return Status::invalid_argument(fmt::format(
          "--volume-dir '{}' is writable by group or others (mode {:o}); make it 0755 or "
          "tighter and owned by the daemon's user",
          d, sb.st_mode & 07777));
    }
    d = *c;
  }
  for (auto& d : policy.devices) {
    auto c = canonical(d);
    if (!c.ok()) return Status::invalid_argument("--device " + c.status().message());
    d = *c;
  }
  return VolumePaths(std::move(policy));
}

Result<OpenedVolumeFile> VolumePaths::open(const std::string& path, uint64_t create_size,
                                           bool direct) const {
  auto parts = split_absolute_path(path);
  if (!parts.ok()) return parts.status();
  const std::string clean = join(*parts, 0, parts->size());
  int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY;
  if (direct) flags |= O_DIRECT;

  for (const auto& dev : policy_.devices) {
    if (dev != clean) continue;
    Fd fd(::open(clean.c_str(), flags));
    if (fd.get() < 0) return open_error(clean, errno);
    struct stat sb {};
    if (::fstat(fd.get(), &sb) != 0) return open_error(clean, errno);
    if (!S_ISBLK(sb.st_mode) && !S_ISREG(sb.st_mode)) {
      return Status::permission_denied(
          fmt::format("'{}' is neither a block device nor a regular file", clean));
    }
    return OpenedVolumeFile{fd.release(), S_ISBLK(sb.st_mode)};
  }

  for (const auto& dir : policy_.volume_dirs) {
    auto dparts = split_absolute_path(dir);
    if (!dparts.ok() || !beneath(*dparts, *parts)) continue;
    // Walk down from the configured directory, never following a link.
    Fd at(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (at.get() < 0) return open_error(dir, errno);
    for (size_t i = dparts->size(); i + 1 < parts->size(); ++i) {
      const int next =
          ::openat(at.get(), (*parts)[i].c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
      if (next < 0) {
        int err = errno;
        struct stat lsb {};
        if (::fstatat(at.get(), (*parts)[i].c_str(), &lsb, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISLNK(lsb.st_mode)) {
          err = ELOOP;
        }
        return open_error(join(*parts, 0, i + 1), err);
      }
      at.reset(next);
    }
    const std::string& leaf = parts->back();
    Fd fd(::openat(at.get(), leaf.c_str(), flags));
    if (fd.get() < 0 && errno == ENOENT && create_size > 0) {
      // O_EXCL: a link planted between the two calls is not followed either.
      fd.reset(::openat(at.get(), leaf.c_str(), flags | O_CREAT | O_EXCL, 0600));
    }
    if (fd.get() < 0) return open_error(clean, errno);
    struct stat sb {};
    if (::fstat(fd.get(), &sb) != 0) return open_error(clean, errno);
    if (!S_ISREG(sb.st_mode)) {
      return Status::permission_denied(fmt::format(
          "'{}' is not a regular file (devices are opened only when listed with --device)", clean));
    }
    if (sb.st_nlink != 1) {
      return Status::permission_denied(fmt::format(
          "'{}' has {} hard links; a volume file must have exactly one", clean, sb.st_nlink));
    }
    return OpenedVolumeFile{fd.release(), false};
  }

  if (policy_.volume_dirs.empty() && policy_.devices.empty()) {
    return Status::permission_denied(
        fmt::format("'{}' refused: this daemon has no volume directory or device configured (start "
                    "kvtier-blockd with --volume-dir DIR or --device PATH)",
                    clean));
  }
  std::string allowed;
  for (const auto& d : policy_.volume_dirs) allowed += (allowed.empty() ? "" : ", ") + d + "/";
  for (const auto& d : policy_.devices) allowed += (allowed.empty() ? "" : ", ") + d;
  return Status::permission_denied(
      fmt::format("'{}' is not beneath a volume directory nor a configured device (allowed: {})",
                  clean, allowed));
}

Status VolumePaths::check_export(const std::string& address, bool allow_any_host) const {
  if (!is_loopback_address(address)) {
    bool listed = false;
    for (const auto& a : policy_.export_addresses) listed = listed || a == address;
    if (!listed) {
      return Status::permission_denied(fmt::format(
          "exports on '{}' are not allowed: only loopback unless kvtier-blockd is started with "
          "--export-address {}",
          address, address));
    }
  }
  if (allow_any_host && !policy_.allow_any_host_exports) {
    return Status::permission_denied(
        "allow_any_host is not allowed: list the host NQNs with --allow-host, or start "
        "kvtier-blockd with --allow-any-host-exports");
  }
  return Status::ok_status();
}

}  // namespace kvtier::blockd
