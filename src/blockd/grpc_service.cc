#include "blockd/grpc_service.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

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
  grpc::Status check(grpc::ServerContext* ctx) const {
    if (peer_allowed(ctx->peer(), allowed_)) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        fmt::format("host {} is not allowed", peer_host(ctx->peer())));
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

bool peer_allowed(const std::string& peer, const std::vector<std::string>& allowed_hosts) {
  if (peer.rfind("unix:", 0) == 0) return true;  // local socket: filesystem permissions apply
  const std::string h = peer_host(peer);
  if (h.rfind("127.", 0) == 0 || h == "::1" || h == "::ffff:127.0.0.1") return true;
  for (const auto& a : allowed_hosts) {
    if (a == h) return true;
  }
  return false;
}

struct BlockdServer::Impl {
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> server;
};

Result<std::unique_ptr<BlockdServer>> BlockdServer::start(BlockDaemon& daemon,
                                                          const ServerOptions& o) {
  auto s = std::unique_ptr<BlockdServer>(new BlockdServer());
  s->impl_ = std::make_unique<Impl>();
  s->impl_->service = std::make_unique<Service>(daemon, o.allowed_hosts);
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort(o.listen, grpc::InsecureServerCredentials(), &port);
  b.RegisterService(s->impl_->service.get());
  // Bounded messages: 4 MiB of data plus framing.
  b.SetMaxReceiveMessageSize(static_cast<int>(BlockDaemon::kMaxDataBytes + 4096));
  b.SetMaxSendMessageSize(static_cast<int>(BlockDaemon::kMaxDataBytes + 4096));
  s->impl_->server = b.BuildAndStart();
  if (!s->impl_->server || port == 0) {
    return Status::unavailable(fmt::format("cannot listen on {}", o.listen));
  }
  s->port_ = port;
  return s;
}

BlockdServer::~BlockdServer() { shutdown(); }

void BlockdServer::wait() {
  if (impl_ && impl_->server) impl_->server->Wait();
}

void BlockdServer::shutdown() {
  if (impl_ && impl_->server) impl_->server->Shutdown();
}

}  // namespace kvtier::blockd
