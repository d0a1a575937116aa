#include "blockd/grpc_service.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_posix.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "blockd.grpc.pb.h"

namespace kvtier::blockd {

namespace {

grpc::Status to_grpc(const Status& st) {
  if (st.ok()) return grpc::Status::OK;
  grpc::StatusCode c = grpc::StatusCode::INTERNAL;
  switch (st.code()) {
    case StatusCode::kInvalidArgument:
      c = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case StatusCode::kNotFound:
      c = grpc::StatusCode::NOT_FOUND;
      break;
    case StatusCode::kAlreadyExists:
      c = grpc::StatusCode::ALREADY_EXISTS;
      break;
    case StatusCode::kFailedPrecondition:
    case StatusCode::kRejected:
      c = grpc::StatusCode::FAILED_PRECONDITION;
      break;
    case StatusCode::kUnavailable:
      c = grpc::StatusCode::UNAVAILABLE;
      break;
    case StatusCode::kOutOfSpace:
      c = grpc::StatusCode::RESOURCE_EXHAUSTED;
      break;
    case StatusCode::kTimeout:
      c = grpc::StatusCode::DEADLINE_EXCEEDED;
      break;
    case StatusCode::kCorruption:
      c = grpc::StatusCode::DATA_LOSS;
      break;
    case StatusCode::kPermissionDenied:
      c = grpc::StatusCode::PERMISSION_DENIED;
      break;
    default:
      break;
  }
  return grpc::Status(c, st.message());
}

template <typename T>
grpc::Status reply(Result<T> r, T* out) {
  if (!r.ok()) return to_grpc(r.status());
  *out = std::move(*r);
  return grpc::Status::OK;
}

class Service final : public v1::BlockDaemon::Service {
 public:
  Service(BlockDaemon& d, std::vector<std::string> allowed) : d_(d), allowed_(std::move(allowed)) {}

  grpc::Status CreateFile(grpc::ServerContext* ctx, const v1::CreateFileRequest* r,
                          v1::Volume* out) override {
    if (auto st = check(ctx); !st.ok()) return st;
    return reply(d_.create_file(*r), out);
  }
  grpc::Status CreateMem(grpc::ServerContext* ctx, const v1::CreateMemRequest* r,
                         v1::Volume* out) override {
    if (auto st = check(ctx); !st.ok()) return st;
    return reply(d_.create_mem(*r), out);
  }
  grpc::Status CreateRemote(grpc::ServerContext* ctx, const v1::CreateRemoteRequest* r,
                            v1::Volume* out) override {
    if (auto st = check(ctx); !st.ok()) return st;
    return reply(d_.create_remote(*r), out);
  }
  grpc::Status CreateArray(grpc::ServerContext* ctx, const v1::CreateArrayRequest* r,
                           v1::Volume* out) override {
    if (auto st = check(ctx); !st.ok()) return st;
    return reply(d_.create_array(*r), out);
  }
  grpc::Status CreatePartition(grpc::ServerContext* ctx, const v1::CreatePartitionRequest* r,
                               v1::Volume* out) override {
    if (auto st = check(ctx); !st.ok()) return st;
    return reply(d_.create_partition(*r), out);
  }
  grpc::Status Delete(grpc::ServerContext* ctx, const v1::VolumeRef* r, v1::Volume* out) override {
    if (auto st = check(ctx); !st.ok()) return st;
    return reply(d_.remove(r->name()), out);
  }
  grpc::Status ReplaceMember(grpc::ServerContext* ctx, const v1::ReplaceMemberRequest* r,
                             v1::Volume* out) override {
    if (auto st = check(ctx); !st.ok()) return st;
    return reply(d_.replace_member(*r), out);
  }
  grpc::Status FailMember(grpc::ServerContext* ctx, const v1::FailMemberRequest* r,
                          v1::Volume* out) override {
    if (auto st = check(ctx); !st.ok()) return st;
    return reply(d_.fail_member(*r), out);
  }
  grpc::Status SetQos(grpc::ServerContext* ctx, const v1::SetQosRequest* r,
                      v1::Volume* out) override {
    if (auto st = check(ctx); !st.ok()) return st;
    return reply(d_.set_qos(*r), out);
  }
  grpc::Status Show(grpc::ServerContext* ctx, const v1::VolumeRef* r, v1::Volume* out) override {
    if (auto st = check(ctx); !st.ok()) return st;
    return reply(d_.show(r->name()), out);
  }
  grpc::Status List(grpc::ServerContext* ctx, const v1::ListRequest*, v1::ListReply* out) override {
    if (auto st = check(ctx); !st.ok()) return st;
    *out = d_.list();
    return grpc::Status::OK;
  }
  grpc::Status Write(grpc::ServerContext* ctx, const v1::WriteRequest* r,
                     v1::WriteReply*) override {
    if (auto st = check(ctx); !st.ok()) return st;
    return to_grpc(d_.write(*r));
  }
  grpc::Status Read(grpc::ServerContext* ctx, const v1::ReadRequest* r,
                    v1::ReadReply* out) override {
    if (auto st = check(ctx); !st.ok()) return st;
    auto data = d_.read(*r);
    if (!data.ok()) return to_grpc(data.status());
    out->set_data(std::move(*data));
    return grpc::Status::OK;
  }

  grpc::Status CreateExport(grpc::ServerContext* ctx, const v1::CreateExportRequest* r,
                            v1::Export* out) override {
    if (auto st = check(ctx); !st.ok()) return st;
    return reply(d_.create_export(*r), out);
  }
  grpc::Status DeleteExport(grpc::ServerContext* ctx, const v1::ExportRef* r,
                            v1::Export* out) override {
    if (auto st = check(ctx); !st.ok()) return st;
    return reply(d_.delete_export(r->nqn()), out);
  }
  grpc::Status ListExports(grpc::ServerContext* ctx, const v1::ListRequest*,
                           v1::ExportList* out) override {
    if (auto st = check(ctx); !st.ok()) return st;
    *out = d_.list_exports();
    return grpc::Status::OK;
  }

 private:
  // Unix-socket callers were checked when they connected; TCP callers hold a
  // certificate of the configured CA (the transport refused everyone else)
  // and, with --allow-host, come from a listed host.
  grpc::Status check(grpc::ServerContext* ctx) const {
    const std::string peer = ctx->peer();
    const bool tcp = peer.rfind("ipv4:", 0) == 0 || peer.rfind("ipv6:", 0) == 0;
    if (!tcp) return grpc::Status::OK;
    if (!ctx->auth_context() || !ctx->auth_context()->IsPeerAuthenticated()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "a client certificate is required");
    }
    if (allowed_.empty()) return grpc::Status::OK;
    const std::string h = peer_host(peer);
    if (std::find(allowed_.begin(), allowed_.end(), h) != allowed_.end()) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        fmt::format("host {} is not allowed", h));
  }
  BlockDaemon& d_;
  const std::vector<std::string> allowed_;
};

}  // namespace

std::string peer_host(const std::string& peer) {
  std::string p = peer;
  if (p.rfind("ipv4:", 0) == 0) {
    p = p.substr(5);
    return p.substr(0, p.rfind(':'));
  }
  if (p.rfind("ipv6:", 0) == 0) {
    p = p.substr(5);
    if (!p.empty() && p[0] == '[') {
      const auto close = p.find(']');
      return close == std::string::npos ? p : p.substr(1, close - 1);
    }
    return p;
  }
  return p;  // unix:... and others as they are
}

bool peer_may_manage(const PeerCredentials& peer, int64_t daemon_uid, int64_t socket_uid,
                     int64_t socket_gid) {
  if (peer.uid < 0) return false;
  if (peer.uid == 0 || peer.uid == daemon_uid) return true;
  if (socket_uid >= 0 && peer.uid == socket_uid) return true;
  if (socket_gid < 0) return false;
  if (peer.gid == socket_gid) return true;
  return std::find(peer.groups.begin(), peer.groups.end(), socket_gid) != peer.groups.end();
}

namespace {

std::string errno_text() { return std::strerror(errno); }

Result<std::string> read_file(const std::string& path, const char* what) {
  std::ifstream f(path);
  if (!f) return Status::invalid_argument(fmt::format("{} '{}': cannot read", what, path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

PeerCredentials credentials_of(int fd) {
  PeerCredentials p;
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return p;
  p.uid = cred.uid;
  p.gid = cred.gid;
  gid_t groups[256];
  len = sizeof(groups);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) == 0) {
    for (socklen_t i = 0; i < len / sizeof(gid_t); ++i) p.groups.push_back(groups[i]);
  }
  return p;
}

// Binds `path` with the socket's final mode from the start (umask), so there
// is no moment at which anyone else could connect. A stale socket left by a
// killed daemon is replaced; anything else at that path is refused.
Result<int> bind_unix_socket(const ServerOptions& o) {
  const std::string& path = o.socket_path;
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return Status::invalid_argument(fmt::format("--socket '{}' is too long", path));
  }
  const auto dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty() && !std::filesystem::exists(dir, ec)) {
    std::filesystem::create_directories(dir, ec);
    if (ec)
      return Status::unavailable(fmt::format("cannot create '{}': {}", dir.string(), ec.message()));
    ::chmod(dir.c_str(), 0755);
  }
  struct stat sb {};
  if (::lstat(path.c_str(), &sb) == 0) {
    if (!S_ISSOCK(sb.st_mode)) {
      return Status::failed_precondition(
          fmt::format("--socket '{}' exists and is not a socket; refused", path));
    }
    ::unlink(path.c_str());
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::unavailable(fmt::format("socket: {}", errno_text()));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  const mode_t mode = o.socket_gid >= 0 ? 0660 : 0600;
  const mode_t old = ::umask(0777 & ~mode);
  const int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  const int bind_errno = errno;
  ::umask(old);
  if (rc != 0) {
    ::close(fd);
    return Status::unavailable(
        fmt::format("cannot bind '{}': {}", path, std::strerror(bind_errno)));
  }
  if ((o.socket_uid >= 0 || o.socket_gid >= 0) &&
      ::chown(path.c_str(), o.socket_uid >= 0 ? static_cast<uid_t>(o.socket_uid) : -1,
              o.socket_gid >= 0 ? static_cast<gid_t>(o.socket_gid) : -1) != 0) {
    const std::string err = errno_text();
    ::close(fd);
    return Status::unavailable(fmt::format("cannot chown '{}': {}", path, err));
  }
  if (::listen(fd, 64) != 0) {
    const std::string err = errno_text();
    ::close(fd);
    return Status::unavailable(fmt::format("cannot listen on '{}': {}", path, err));
  }
  return fd;
}

}  // namespace

struct BlockdServer::Impl {
  ServerOptions options;
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> server;
  int unix_fd = -1;
  std::thread acceptor;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> refused{0};

  // Each connection's credentials are checked before gRPC gets the socket.
  void accept_loop() {
    const int64_t daemon_uid = ::geteuid();
    while (!stopping.load()) {
      // gRPC polls the socket it is handed: it must be non-blocking.
      const int c = ::accept4(unix_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (stopping.load()) return;
        if (errno == EMFILE || errno == ENFILE) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let some close
          continue;
        }
        spdlog::error("blockd: accept on '{}': {}", options.socket_path, errno_text());
        return;
      }
      const PeerCredentials peer = credentials_of(c);
      if (!peer_may_manage(peer, daemon_uid, options.socket_uid, options.socket_gid)) {
        // Logged at first and then every 1,000th: a stranger opening
        // thousands of connections must not flood the log (all are counted
        // in kvtier_blockd_management_refused_total).
        const uint64_t n = refused.fetch_add(1) + 1;
        if (n <= 10 || n % 1000 == 0) {
          spdlog::warn(
              "blockd: refused management connection from uid {} gid {} on '{}' ({} so "
              "far)",
              peer.uid, peer.gid, options.socket_path, n);
        }
        ::close(c);
        continue;
      }
      grpc::AddInsecureChannelFromFd(server.get(), c);
    }
  }
};

Result<std::unique_ptr<BlockdServer>> BlockdServer::start(BlockDaemon& daemon,
                                                          const ServerOptions& o) {
  if (o.socket_path.empty() && o.tcp_listen.empty()) {
    return Status::invalid_argument("no management listener: give --socket or --tcp-listen");
  }
  auto s = std::unique_ptr<BlockdServer>(new BlockdServer());
  s->impl_ = std::make_unique<Impl>();
  s->impl_->options = o;
  s->impl_->service = std::make_unique<Service>(daemon, o.allowed_hosts);
  grpc::ServerBuilder b;
  int port = 0;
  if (!o.tcp_listen.empty()) {
    if (o.tls_cert_file.empty() || o.tls_key_file.empty() || o.tls_client_ca_file.empty()) {
      return Status::invalid_argument(
          "TCP management needs mutual TLS: --tls-cert, --tls-key and --tls-client-ca");
    }
    auto cert = read_file(o.tls_cert_file, "--tls-cert");
    if (!cert.ok()) return cert.status();
    auto key = read_file(o.tls_key_file, "--tls-key");
    if (!key.ok()) return key.status();
    auto ca = read_file(o.tls_client_ca_file, "--tls-client-ca");
    if (!ca.ok()) return ca.status();
    grpc::SslServerCredentialsOptions so(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    so.pem_root_certs = *ca;
    so.pem_key_cert_pairs.push_back({*key, *cert});
    b.AddListeningPort(o.tcp_listen, grpc::SslServerCredentials(so), &port);
  }
  b.RegisterService(s->impl_->service.get());
  // Bounded messages: 4 MiB of data plus framing.
  // A management connection left idle is closed (the CLI opens one per
  // command), so idle connections of allowed users cannot pile up for ever.
  b.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, 60 * 1000);
  b.SetMaxReceiveMessageSize(static_cast<int>(BlockDaemon::kMaxDataBytes + 4096));
  b.SetMaxSendMessageSize(static_cast<int>(BlockDaemon::kMaxDataBytes + 4096));
  s->impl_->server = b.BuildAndStart();
  if (!s->impl_->server || (!o.tcp_listen.empty() && port == 0)) {
    return Status::unavailable(fmt::format("cannot listen on {}", o.tcp_listen));
  }
  s->port_ = port;
  if (!o.socket_path.empty()) {
    auto fd = bind_unix_socket(o);
    if (!fd.ok()) return fd.status();
    s->impl_->unix_fd = *fd;
    s->impl_->acceptor = std::thread([impl = s->impl_.get()] { impl->accept_loop(); });
  }
  return s;
}

uint64_t BlockdServer::refused_connections() const { return impl_ ? impl_->refused.load() : 0; }

BlockdServer::~BlockdServer() { shutdown(); }

void BlockdServer::wait() {
  if (impl_ && impl_->server) impl_->server->Wait();
}

void BlockdServer::shutdown() {
  if (!impl_) return;
  if (!impl_->stopping.exchange(true) && impl_->unix_fd >= 0) {
    ::shutdown(impl_->unix_fd, SHUT_RDWR);  // wakes accept()
    if (impl_->acceptor.joinable()) impl_->acceptor.join();
    ::close(impl_->unix_fd);
    ::unlink(impl_->options.socket_path.c_str());
    impl_->unix_fd = -1;
  }
  if (impl_->server) impl_->server->Shutdown();
}

}  // namespace kvtier::blockd
